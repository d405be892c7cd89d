/* dlpack-ref kernels: the ordered include list of the C kernels, one file a
   concept. Host allocation, strided copies, every dtype conversion and
   Python-value intake/output, all in C with no Python object per element
   except where the values themselves are Python objects (sequences,
   tolist). The core declares what it calls in src/_capi.pxi.

   The kernels are compiled with -O3 (GCC), whatever the build's level: the
   loops are written for the vectorizer. This header is included once, into
   the core's translation unit; each file below includes what it needs, so
   the order is the order of reading. */

#ifndef DLREF_KERNELS_H
#define DLREF_KERNELS_H

#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <stdlib.h>
#include <math.h>
#if !defined(_WIN32)
#include <sys/mman.h>
#endif
/* The worker pool: threads that share one job's parts (the build's level). */
#include "dlref_pool.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("O3")
#endif

/* Host allocation: 256-byte aligned blocks, huge pages for large ones. */
#include "dlref_alloc.h"
/* Dimension coalescing: the fewest dimensions two arrays of one shape need. */
#include "dlref_coalesce.h"
/* Splitting a copy or conversion over the worker pool: parts and pieces. */
#include "dlref_split.h"
/* The same-dtype strided copy: memcpy runs, SSE2 transposes, streaming stores. */
#include "dlref_copy.h"
/* Type ids: the DLPack data types the kernels hold, and their item sizes. */
#include "dlref_types.h"
/* The bits of the small float types: rounding to odd, float16, bfloat16, float8/6/4. */
#include "dlref_float_bits.h"
/* The pair loops: every pair of native types, AVX2/AVX-512 dense loops, F16C. */
#include "dlref_pairs.h"
/* Dtype conversions: pair loops or two stages through double, over the pool. */
#include "dlref_convert.h"
/* Python values in and out: nested sequences, scalars, tolist. */
#include "dlref_values.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

#endif /* DLREF_KERNELS_H */
