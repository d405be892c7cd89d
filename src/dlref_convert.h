/* dlpack-ref kernels: dtype conversions. A run of elements goes through
   its pair loop when both types are native or one is float32, else in
   blocks through double (the two-stage conversion); an n-d conversion is
   coalesced and shared out over the worker pool as a copy is.

   Rounding rules (docs/semantics.md, "Conversions"):
   - every conversion to a narrower float is one rounding of the source's
     exact value, to nearest with ties to even (ml_dtypes, CPython's struct
     'e'): float16 from the float32 or float64 bits directly (as NumPy);
     bfloat16 and the float8/6/4 types from float32, where a wider source
     (float64, a 32- or 64-bit integer, a Python int) first becomes a
     float32 rounded to odd, which a second rounding leaves exact
     (dlref_f32_odd_from_f64); an int64 or uint64 into float32 or complex64
     is rounded once by the C cast or through a double rounded to odd;
     NaN keeps its sign;
   - overflow: inf where the type has one, else NaN (fn, fnuz), else the
     largest finite value of that sign (float6, float4: no NaN either; NaN
     into them is an error, reported by a nonzero return);
   - float8_e8m0fnu: from float32, the nearest power of two by value,
     halfway (1.5 * 2**e) rounding up, values below 2**-127 giving 2**-127
     (code 0); 0, negatives, inf and NaN give 0xFF (NaN);
   - float to integer: truncation toward zero; NaN gives 0 and values out of
     range saturate (C leaves these undefined; NumPy's results depend on the
     CPU);
   - integer to integer: modulo 2**bits (two's complement), as NumPy;
   - to bool: nonzero (NaN is nonzero); complex to real: the real part;
   - bcomplex32 (two bfloat16) is each part as bfloat16: to complex64 by the
     bits (exact, NaN payloads kept), from anything each part rounded once
     as a bfloat16 is.

   Part of the C kernels, included through src/dlref_kernels.h. */

#ifndef DLREF_CONVERT_H
#define DLREF_CONVERT_H

#include <stdint.h>
#include <string.h>
#include <math.h>
#include "dlref_coalesce.h"
#include "dlref_split.h"
#include "dlref_types.h"
#include "dlref_float_bits.h"
#include "dlref_pairs.h"

/* Elements converted per block through the double buffers. */
#define DLREF_BLOCK 256

/* Codes of `bits` width packed little bit-endian (first element in the
   lowest bits of the first byte), from element `first` on, one per byte. */
static void dlref_unpack_codes(uint8_t* out, const uint8_t* packed, int64_t first, int64_t n, int bits) {
    int64_t i, bit = first * bits;
    unsigned mask = (1u << bits) - 1u;
    for (i = 0; i < n; ++i, bit += bits) {
        unsigned lo = packed[bit >> 3];
        unsigned hi = ((bit & 7) + bits > 8) ? packed[(bit >> 3) + 1] : 0;
        out[i] = (uint8_t)(((lo | (hi << 8)) >> (bit & 7)) & mask);
    }
}

/* Load n elements of type t (stride ss bytes) as doubles; `im` (may be NULL)
   gets imaginary parts (0 for real types). Sub-byte codes arrive one per byte.
   `odd`: the store narrows the doubles further, so an int64 or uint64 beyond
   2**53 is rounded to odd, not to nearest (which would be a first rounding). */
static void dlref_load(int t, const char* s, int64_t ss, int64_t n, double* re, double* im, int odd) {
    int64_t i;
#define DLREF_LOAD(T) for (i = 0; i < n; ++i) { T v; memcpy(&v, s + i * ss, sizeof(T)); re[i] = (double)v; } break
#define DLREF_LOAD_ODD(T, F) for (i = 0; i < n; ++i) { T v; memcpy(&v, s + i * ss, sizeof(T)); re[i] = odd ? F(v) : (double)v; } break
    switch (t) {
    case DLREF_T_BOOL: for (i = 0; i < n; ++i) re[i] = s[i * ss] != 0; break;
    case DLREF_T_I8: DLREF_LOAD(int8_t);
    case DLREF_T_I16: DLREF_LOAD(int16_t);
    case DLREF_T_I32: DLREF_LOAD(int32_t);
    case DLREF_T_I64: DLREF_LOAD_ODD(int64_t, dlref_f64_odd_from_i64);
    case DLREF_T_U8: DLREF_LOAD(uint8_t);
    case DLREF_T_U16: DLREF_LOAD(uint16_t);
    case DLREF_T_U32: DLREF_LOAD(uint32_t);
    case DLREF_T_U64: DLREF_LOAD_ODD(uint64_t, dlref_f64_odd_from_u64);
    case DLREF_T_F32: DLREF_LOAD(float);
    case DLREF_T_F64: DLREF_LOAD(double);
    case DLREF_T_F16: for (i = 0; i < n; ++i) { uint16_t v; memcpy(&v, s + i * ss, 2); re[i] = dlref_f64_from_f16(v); } break;
    case DLREF_T_BF16: for (i = 0; i < n; ++i) { uint16_t v; memcpy(&v, s + i * ss, 2); re[i] = (double)dlref_bits_f32((uint32_t)v << 16); } break;
    case DLREF_T_C64:
        for (i = 0; i < n; ++i) { float v[2]; memcpy(v, s + i * ss, 8); re[i] = v[0]; if (im) im[i] = v[1]; }
        return;
    case DLREF_T_C128:
        for (i = 0; i < n; ++i) { double v[2]; memcpy(v, s + i * ss, 16); re[i] = v[0]; if (im) im[i] = v[1]; }
        return;
    case DLREF_T_BC32:
        for (i = 0; i < n; ++i) {
            uint16_t v[2]; memcpy(v, s + i * ss, 4);
            re[i] = (double)dlref_bits_f32((uint32_t)v[0] << 16);
            if (im) im[i] = (double)dlref_bits_f32((uint32_t)v[1] << 16);
        }
        return;
    default: {
        const uint32_t* table = dlref_mini_table[t - DLREF_T_MINI];
        for (i = 0; i < n; ++i) re[i] = (double)dlref_bits_f32(table[(uint8_t)s[i * ss]]);
    }
    }
#undef DLREF_LOAD
#undef DLREF_LOAD_ODD
    if (im) for (i = 0; i < n; ++i) im[i] = 0.0;
}

/* Store n doubles (and imaginary parts for complex types) as type t, each
   rounded once (through a float32 rounded to odd for bfloat16 and the
   minifloats).
   Returns the number of NaNs that a type without NaN refused (those
   elements are left unwritten). */
static int64_t dlref_store(int t, char* d, int64_t ds, int64_t n, const double* re, const double* im) {
    int64_t i, refused = 0;
#define DLREF_STORE(T, EXPR) for (i = 0; i < n; ++i) { T w = (EXPR); memcpy(d + i * ds, &w, sizeof(T)); } break
    switch (t) {
    case DLREF_T_BOOL: for (i = 0; i < n; ++i) d[i * ds] = (char)(re[i] != 0 || (im && im[i] != 0)); break;
    case DLREF_T_I8: DLREF_STORE(int8_t, dlref_f2i_int8_t(re[i]));
    case DLREF_T_I16: DLREF_STORE(int16_t, dlref_f2i_int16_t(re[i]));
    case DLREF_T_I32: DLREF_STORE(int32_t, dlref_f2i_int32_t(re[i]));
    case DLREF_T_I64: DLREF_STORE(int64_t, dlref_f2i_int64_t(re[i]));
    case DLREF_T_U8: DLREF_STORE(uint8_t, dlref_f2i_uint8_t(re[i]));
    case DLREF_T_U16: DLREF_STORE(uint16_t, dlref_f2i_uint16_t(re[i]));
    case DLREF_T_U32: DLREF_STORE(uint32_t, dlref_f2i_uint32_t(re[i]));
    case DLREF_T_U64: DLREF_STORE(uint64_t, dlref_f2i_uint64_t(re[i]));
    case DLREF_T_F32: DLREF_STORE(float, (float)re[i]);
    case DLREF_T_F64: DLREF_STORE(double, re[i]);
    case DLREF_T_F16: DLREF_STORE(uint16_t, dlref_f16_from_f64(re[i]));
    case DLREF_T_BF16: DLREF_STORE(uint16_t, dlref_bf16_from_f32(dlref_f32_odd_from_f64(re[i])));
    case DLREF_T_C64:
        for (i = 0; i < n; ++i) { float w[2]; w[0] = (float)re[i]; w[1] = im ? (float)im[i] : 0.0f; memcpy(d + i * ds, w, 8); }
        break;
    case DLREF_T_C128:
        for (i = 0; i < n; ++i) { double w[2]; w[0] = re[i]; w[1] = im ? im[i] : 0.0; memcpy(d + i * ds, w, 16); }
        break;
    case DLREF_T_BC32:
        for (i = 0; i < n; ++i) {
            uint16_t w[2];
            w[0] = dlref_bf16_from_f32(dlref_f32_odd_from_f64(re[i]));
            w[1] = dlref_bf16_from_f32(dlref_f32_odd_from_f64(im ? im[i] : 0.0));
            memcpy(d + i * ds, w, 4);
        }
        break;
    case DLREF_T_F4X2:
        /* Two values (the lanes) per byte, first in the low nibble. */
        for (i = 0; i + 1 < n; i += 2)
            d[(i / 2) * ds] = (char)(dlref_mini_from_f32(dlref_f32_odd_from_f64(re[i]), 2, 1, 1, DLREF_FINITE)
                                     | dlref_mini_from_f32(dlref_f32_odd_from_f64(re[i + 1]), 2, 1, 1, DLREF_FINITE) << 4);
        for (i = 0; i < n; ++i) refused += re[i] != re[i];
        break;
    default: {
        const dlref_minifloat* p = &dlref_minifloats[t - DLREF_T_MINI];
        const int E = p->exp_bits, M = p->man_bits, bias = p->bias, style = p->style;
        for (i = 0; i < n; ++i) {
            uint32_t c = dlref_mini_from_f32(dlref_f32_odd_from_f64(re[i]), E, M, bias, style);
            if (c == 0x100) { refused++; continue; }
            d[i * ds] = (char)c;
        }
    }
    }
#undef DLREF_STORE
    return refused;
}

/* Minifloat encoding from float32 without the double detour, one loop per
   type so the format's constants fold into the rounding. */
#define DLREF_MINI_RUN(IDX)                                                             \
    static int64_t dlref_run_F32_MINI##IDX(char* d, int64_t ds, const char* s, int64_t ss, int64_t n) { \
        int64_t i, refused = 0;                                                         \
        for (i = 0; i < n; ++i) {                                                       \
            float v; uint32_t c; memcpy(&v, s + i * ss, 4);                             \
            c = dlref_mini_from_f32(v, dlref_minifloats[IDX].exp_bits, dlref_minifloats[IDX].man_bits, \
                                    dlref_minifloats[IDX].bias, dlref_minifloats[IDX].style); \
            if (c == 0x100) { refused++; continue; }                                    \
            d[i * ds] = (char)c;                                                        \
        }                                                                               \
        return refused;                                                                 \
    }
DLREF_MINI_RUN(0) DLREF_MINI_RUN(1) DLREF_MINI_RUN(2) DLREF_MINI_RUN(3) DLREF_MINI_RUN(4)
DLREF_MINI_RUN(5) DLREF_MINI_RUN(6) DLREF_MINI_RUN(7) DLREF_MINI_RUN(8) DLREF_MINI_RUN(9) DLREF_MINI_RUN(10)
typedef int64_t (*dlref_checked_run_fn)(char* d, int64_t ds, const char* s, int64_t ss, int64_t n);
static const dlref_checked_run_fn dlref_f32_to_mini[11] = {
    dlref_run_F32_MINI0, dlref_run_F32_MINI1, dlref_run_F32_MINI2, dlref_run_F32_MINI3,
    dlref_run_F32_MINI4, dlref_run_F32_MINI5, dlref_run_F32_MINI6, dlref_run_F32_MINI7,
    dlref_run_F32_MINI8, dlref_run_F32_MINI9, dlref_run_F32_MINI10,
};

/* float32 bits of a small float (float16, bfloat16, a minifloat code), by
   bit operations only: a hardware conversion would quiet signaling NaNs,
   which NumPy and ml_dtypes pass through. */
static inline uint32_t dlref_small_f32_bits(int t, const char* p) {
    uint16_t v;
    if (t == DLREF_T_F16) { memcpy(&v, p, 2); return dlref_f32_from_f16_bits(v); }
    if (t == DLREF_T_BF16) { memcpy(&v, p, 2); return (uint32_t)v << 16; }
    return dlref_mini_table[t - DLREF_T_MINI][(uint8_t)*p];
}

/* Small float to float16 or complex64 through float32 bits. */
static void dlref_run_SMALL_F16_C64(int st, int dt, char* d, int64_t ds, const char* s, int64_t ss, int64_t n) {
    int64_t i;
    for (i = 0; i < n; ++i) {
        uint32_t u = dlref_small_f32_bits(st, s + i * ss);
        if (dt == DLREF_T_F16) {
            /* ml_dtypes gives bfloat16 NaNs the canonical float16 NaN. */
            uint16_t w = (st == DLREF_T_BF16 && (u & 0x7FFFFFFF) > 0x7F800000)
                ? (uint16_t)(((u >> 16) & 0x8000) | 0x7E00) : dlref_f16_from_f32(dlref_bits_f32(u));
            memcpy(d + i * ds, &w, 2);
        }
        else { uint32_t w[2]; w[0] = u; w[1] = 0; memcpy(d + i * ds, w, 8); }
    }
}

/* bcomplex32 to complex64 by the bits: each bfloat16 is the high half of
   its float32 (no hardware conversion, which would quiet signaling NaNs). */
static void dlref_run_BC32_C64(char* d, int64_t ds, const char* s, int64_t ss, int64_t n) {
    int64_t i;
    for (i = 0; i < n; ++i) {
        uint16_t v[2]; uint32_t w[2];
        memcpy(v, s + i * ss, 4);
        w[0] = (uint32_t)v[0] << 16; w[1] = (uint32_t)v[1] << 16;
        memcpy(d + i * ds, w, 8);
    }
}

static void dlref_run_MINI_F32(int t, char* d, int64_t ds, const char* s, int64_t ss, int64_t n) {
    const uint32_t* table = dlref_mini_table[t - DLREF_T_MINI];
    int64_t i;
    for (i = 0; i < n; ++i) memcpy(d + i * ds, &table[(uint8_t)s[i * ss]], 4);
}

/* n elements of native type st as float32 rounded to odd (exact where the
   type fits in float32). */
static void dlref_load_f32_odd(int st, float* f, const char* s, int64_t ss, int64_t n) {
    int64_t i;
#define DLREF_LOAD_F32_ODD(T, F) for (i = 0; i < n; ++i) { T v; memcpy(&v, s + i * ss, sizeof(T)); f[i] = dlref_f32_odd_from_f64(F(v)); } return
    switch (st) {
    case DLREF_T_F64: DLREF_LOAD_F32_ODD(double, (double));
    case DLREF_T_I32: DLREF_LOAD_F32_ODD(int32_t, (double));
    case DLREF_T_U32: DLREF_LOAD_F32_ODD(uint32_t, (double));
    case DLREF_T_I64: DLREF_LOAD_F32_ODD(int64_t, dlref_f64_odd_from_i64);
    case DLREF_T_U64: DLREF_LOAD_F32_ODD(uint64_t, dlref_f64_odd_from_u64);
    default: dlref_native_runs[st][DLREF_T_F32]((char*)f, 4, s, ss, n);
    }
#undef DLREF_LOAD_F32_ODD
}

/* One run of n elements from type st to type dt. */
static int64_t dlref_convert_run(int dt, char* d, int64_t ds, int st, const char* s, int64_t ss, int64_t n) {
    double re[DLREF_BLOCK], im[DLREF_BLOCK];
    int64_t done, refused = 0;
    int complex_out = dlref_is_complex_tid(dt) || dt == DLREF_T_BOOL;
    if (st < DLREF_N_NATIVE && dt < DLREF_N_NATIVE) {
        const dlref_dense_fn (*dense)[DLREF_N_NATIVE];
        if (ds == dlref_type_bytes[dt] && ss == dlref_type_bytes[st] && (dense = dlref_dense_runs()) != NULL)
            dense[st][dt](d, s, n);
        else
            dlref_native_runs[st][dt](d, ds, s, ss, n);
        return 0;
    }
    if (st == DLREF_T_F32) {
        if (dt == DLREF_T_F16) { dlref_run_F32_F16(d, ds, s, ss, n); return 0; }
        if (dt == DLREF_T_BF16) { dlref_run_F32_BF16(d, ds, s, ss, n); return 0; }
        if (dt >= DLREF_T_MINI && dt < DLREF_T_F4X2) return dlref_f32_to_mini[dt - DLREF_T_MINI](d, ds, s, ss, n);
    }
    if (dt == DLREF_T_F32) {
        if (st == DLREF_T_F16) { dlref_run_F16_F32(d, ds, s, ss, n); return 0; }
        if (st == DLREF_T_BF16) { dlref_run_BF16_F32(d, ds, s, ss, n); return 0; }
        if (st >= DLREF_T_MINI && st < DLREF_T_F4X2) { dlref_run_MINI_F32(st, d, ds, s, ss, n); return 0; }
    }
    if (st < DLREF_N_NATIVE && (dt == DLREF_T_BF16 || (dt >= DLREF_T_MINI && dt < DLREF_T_F4X2))) {
        /* Through float32: exact from bool and 8- and 16-bit integers, rounded
           to odd from the wider types, so the float32 loop rounds once. */
        float f[DLREF_BLOCK];
        for (done = 0; done < n; done += DLREF_BLOCK) {
            int64_t m = n - done < DLREF_BLOCK ? n - done : DLREF_BLOCK;
            dlref_load_f32_odd(st, f, s + done * ss, ss, m);
            refused += dlref_convert_run(dt, d + done * ds, ds, DLREF_T_F32, (const char*)f, 4, m);
        }
        return refused;
    }
    if (st == DLREF_T_BC32 && dt == DLREF_T_C64) {
        dlref_run_BC32_C64(d, ds, s, ss, n);
        return 0;
    }
    if ((st == DLREF_T_BF16 || (st >= DLREF_T_MINI && st < DLREF_T_F4X2) || (st == DLREF_T_F16 && dt == DLREF_T_C64))
            && (dt == DLREF_T_F16 || dt == DLREF_T_C64)) {
        dlref_run_SMALL_F16_C64(st, dt, d, ds, s, ss, n);
        return 0;
    }
    for (done = 0; done < n; done += DLREF_BLOCK) {
        int64_t m = n - done < DLREF_BLOCK ? n - done : DLREF_BLOCK;
        dlref_load(st, s + done * ss, ss, m, re, complex_out ? im : NULL, dt != DLREF_T_F64 && dt != DLREF_T_C128);
        refused += dlref_store(dt, d + done * ds, ds, m, re, complex_out ? im : NULL);
    }
    return refused;
}

/* The conversion of a coalesced array (k >= 1) from offsets doff (bytes)
   and soff (bytes; elements for packed sub-byte data, src_bits < 8) on.
   Returns the number of NaNs refused by a type without NaN. */
static int64_t dlref_convert_coalesced(char* dst, const int64_t* ds, int dt, const char* src, const int64_t* ss,
                                       int st, int src_bits, const int64_t* sh, int k, int64_t doff, int64_t soff) {
    int64_t index[DLREF_MAX_NDIM];
    int64_t rows = 1, refused = 0;
    int d, inner = k - 1;
    for (d = 0; d < inner; ++d) { index[d] = 0; rows *= sh[d]; }
    while (rows-- > 0) {
        if (src_bits < 8) {
            uint8_t codes[DLREF_BLOCK];
            int64_t done;
            for (done = 0; done < sh[inner]; done += DLREF_BLOCK) {
                int64_t m = sh[inner] - done < DLREF_BLOCK ? sh[inner] - done : DLREF_BLOCK;
                dlref_unpack_codes(codes, (const uint8_t*)src, soff + done * ss[inner], m, src_bits);
                refused += dlref_convert_run(dt, dst + doff + done * ds[inner], ds[inner], st, (const char*)codes, 1, m);
            }
        } else {
            refused += dlref_convert_run(dt, dst + doff, ds[inner], st, src + soff, ss[inner], sh[inner]);
        }
        dlref_next(inner, index, sh, ds, ss, &doff, &soff);
    }
    return refused;
}

static void dlref_convert_piece(dlref_split_job* job, const int64_t* sh, int k, const int64_t* ds,
                                const int64_t* ss, int64_t doff, int64_t soff) {
    int64_t refused = dlref_convert_coalesced(job->dst, ds, job->dt, job->src, ss, job->st, job->src_bits,
                                              sh, k, doff, soff);
    if (refused) dlref_atomic_add(&job->refused, refused);
}

static void dlref_convert_part(void* job, int part, int parts) {
    dlref_run_pieces((dlref_split_job*)job, part, parts, dlref_convert_piece);
}

/* Convert an n-d strided array of type `st` into one of type `dt` (same
   shape, byte strides). `src_bits` < 8 says the source is packed sub-byte
   data, C-contiguous (its strides are then unused). At most `threads`
   threads share it, as dlref_strided_copy. Returns the number of NaNs
   refused by a type without NaN (the sum over the parts: the same as on
   one thread), or -1 for an unsupported pair or ndim. */
static int64_t dlref_convert(char* dst, const int64_t* dst_strides, int dt, const char* src,
                             const int64_t* src_strides, int st, int src_bits, const int64_t* shape, int ndim,
                             int threads) {
    int64_t sh[DLREF_MAX_NDIM], ds[DLREF_MAX_NDIM], ss[DLREF_MAX_NDIM];
    int64_t virt[DLREF_MAX_NDIM];
    int64_t stride = 1, count = 1;
    int k, d, parts;
    if (ndim > DLREF_MAX_NDIM || ndim < 0 || dt < 0 || st < 0 || dt == DLREF_T_F4X2 || st == DLREF_T_F4X2) return -1;
    dlref_mini_table_init();
    if (src_bits < 8) {
        /* Element strides of the C-order source; offsets then count elements. */
        for (d = ndim - 1; d >= 0; --d) { virt[d] = stride; stride *= shape[d] ? shape[d] : 1; }
        src_strides = virt;
    }
    k = dlref_coalesce(ndim, shape, dst_strides, src_strides, sh, ds, ss);
    if (k < 0) return 0;
    if (k == 0) { sh[0] = 1; ds[0] = 0; ss[0] = 0; k = 1; }
    if (src_bits >= 8) dlref_read_forward(k, sh, ds, ss, &dst, &src);
    for (d = 0; d < k; ++d) count *= sh[d];
    parts = threads > 1 ? dlref_parts_for(count * (dlref_type_bytes[dt] + dlref_type_bytes[st]), threads) : 1;
    if (parts <= 1) return dlref_convert_coalesced(dst, ds, dt, src, ss, st, src_bits, sh, k, 0, 0);
    {
        dlref_split_job job;
        job.dst = dst; job.src = src; job.sh = sh; job.ds = ds; job.ss = ss; job.k = k;
        job.dt = dt; job.st = st; job.src_bits = src_bits; job.refused = 0;
        dlref_pool_run(dlref_convert_part, &job, parts, threads);
        return job.refused;
    }
}

#endif /* DLREF_CONVERT_H */
