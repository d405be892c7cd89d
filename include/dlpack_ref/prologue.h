/* SPDX-License-Identifier: Apache-2.0 */
/* SPDX-FileCopyrightText: dlpack-ref developers */
/*
 * dlpack_ref.h -- the vendorable DLPack protocol of dlpack-ref, in C.
 *
 * C99 and valid C++17. Every function is `static inline`: a library copies
 * this file beside dlpack.h and dlpack_ref_tables.h (the dtype and device
 * tables, generated from dlpack-ref's one Python table when dlpack-ref is
 * built; dlpack_ref.get_include() ships all three) and includes it after
 * Python.h, in as many translation units as it likes. Nothing links against
 * dlpack-ref's compiled module, so the library needs no dlpack-ref at build
 * or run time. Header-only rather than a single-file library with an
 * implementation section: an implementation section needs exactly one
 * translation unit to define a macro, which Cython modules (which include
 * the header from generated C) cannot arrange, and inline functions let the
 * compiler fold the checks into the caller's hot path.
 *
 * dlpack-ref's own core calls these very functions (through the Cython
 * declarations in dlpack_ref_api.pxd), so a library that vendors them gets
 * exactly the reference's rules, not a copy: this file is the one place each
 * rule below is written (docs/vendoring.md).
 *
 * Conventions: a function that can fail returns -1 (or NULL) with a Python
 * exception set, and needs the GIL (or, free-threaded, an attached thread
 * state); deleters and capsule destructors need neither.
 */

#include <Python.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dlpack.h"
#include "dlpack_ref_tables.h"
#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
#endif
