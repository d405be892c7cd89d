/* dlpack-ref kernels: type ids. Every DLPack data type the kernels hold,
   numbered so that the native C types come first (the pair loops index
   tables by them), and its item size.

   Part of the C kernels, included through src/dlref_kernels.h. */

#ifndef DLREF_TYPES_H
#define DLREF_TYPES_H

#include <stdint.h>

enum {
    DLREF_T_BOOL, DLREF_T_I8, DLREF_T_I16, DLREF_T_I32, DLREF_T_I64,
    DLREF_T_U8, DLREF_T_U16, DLREF_T_U32, DLREF_T_U64, DLREF_T_F32, DLREF_T_F64,
    DLREF_N_NATIVE,
    DLREF_T_F16 = DLREF_N_NATIVE, DLREF_T_BF16, DLREF_T_C64, DLREF_T_C128,
    DLREF_T_MINI, /* + minifloat index (DLPack code - 7) */
    DLREF_T_F4X2 = DLREF_T_MINI + 11,
    DLREF_T_BC32,  /* bcomplex32: two bfloat16, real then imaginary */
    DLREF_N_TYPES
};

/* Bytes an item of each type takes (float4_e2m1fn_x2: one byte, two values). */
static const int8_t dlref_type_bytes[DLREF_N_TYPES] = {1, 1, 2, 4, 8, 1, 2, 4, 8, 4, 8, 2, 2, 8, 16,
                                                       1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 4};

/* The type id of a DLDataType the core accepts, -1 otherwise. */
static int dlref_type_id(int code, int bits, int lanes) {
    if (lanes == 2) return (code == 17 && bits == 4) ? DLREF_T_F4X2 : -1;
    if (lanes != 1) return -1;
    switch (code) {
    case 6: return bits == 8 ? DLREF_T_BOOL : -1;
    case 0: return bits == 8 ? DLREF_T_I8 : bits == 16 ? DLREF_T_I16 : bits == 32 ? DLREF_T_I32 : bits == 64 ? DLREF_T_I64 : -1;
    case 1: return bits == 8 ? DLREF_T_U8 : bits == 16 ? DLREF_T_U16 : bits == 32 ? DLREF_T_U32 : bits == 64 ? DLREF_T_U64 : -1;
    case 2: return bits == 16 ? DLREF_T_F16 : bits == 32 ? DLREF_T_F32 : bits == 64 ? DLREF_T_F64 : -1;
    case 4: return bits == 16 ? DLREF_T_BF16 : -1;
    case 5: return bits == 64 ? DLREF_T_C64 : bits == 128 ? DLREF_T_C128 : -1;
    case 18: return bits == 32 ? DLREF_T_BC32 : -1;
    default:
        if (code >= 7 && code <= 17) return DLREF_T_MINI + code - 7;
        return -1;
    }
}

static inline int dlref_is_complex_tid(int t) { return t == DLREF_T_C64 || t == DLREF_T_C128 || t == DLREF_T_BC32; }

#endif /* DLREF_TYPES_H */
