/* dlpack-ref kernels: the pair loops. One loop for every pair of native C
   types (macros write the 121 of them), the same dense loops compiled for
   AVX2 and AVX-512 and chosen once by cpuid, and the bit-exact loops between
   float32 and float16 or bfloat16.

   Part of the C kernels, included through src/dlref_kernels.h. */

#ifndef DLREF_PAIRS_H
#define DLREF_PAIRS_H

#include <stdint.h>
#include <string.h>
#include "dlref_types.h"
#include "dlref_float_bits.h"

#define DLREF_NATIVE_TYPES(X) \
    X(BOOL, uint8_t) X(I8, int8_t) X(I16, int16_t) X(I32, int32_t) X(I64, int64_t) \
    X(U8, uint8_t) X(U16, uint16_t) X(U32, uint32_t) X(U64, uint64_t) X(F32, float) X(F64, double)

/* A value of the source type made into the destination type by the rules above. */
#define DLREF_CAST_TO_BOOL(x) ((uint8_t)((x) != 0))
#define DLREF_F2I(T, LO, HI, x) ((x) != (x) ? (T)0 : (x) <= (double)(LO) ? (T)(LO) : (x) >= (double)(HI) ? (T)(HI) : (T)(x))

static inline uint8_t dlref_cv_BOOL(double x) { return DLREF_CAST_TO_BOOL(x); }
#define DLREF_FLOAT_TO(T, LO, HI) static inline T dlref_f2i_##T(double x) { return DLREF_F2I(T, LO, HI, x); }
DLREF_FLOAT_TO(int8_t, INT8_MIN, INT8_MAX)
DLREF_FLOAT_TO(int16_t, INT16_MIN, INT16_MAX)
DLREF_FLOAT_TO(int32_t, INT32_MIN, INT32_MAX)
DLREF_FLOAT_TO(int64_t, INT64_MIN, INT64_MAX)
DLREF_FLOAT_TO(uint8_t, 0, UINT8_MAX)
DLREF_FLOAT_TO(uint16_t, 0, UINT16_MAX)
DLREF_FLOAT_TO(uint32_t, 0, UINT32_MAX)
DLREF_FLOAT_TO(uint64_t, 0, UINT64_MAX)

/* kind: 0 bool, 1 integer, 2 float */
#define DLREF_KIND_BOOL 0
#define DLREF_KIND_I8 1
#define DLREF_KIND_I16 1
#define DLREF_KIND_I32 1
#define DLREF_KIND_I64 1
#define DLREF_KIND_U8 1
#define DLREF_KIND_U16 1
#define DLREF_KIND_U32 1
#define DLREF_KIND_U64 1
#define DLREF_KIND_F32 2
#define DLREF_KIND_F64 2

#define DLREF_CONVERT_VALUE(SN, ST, DN, DT, v)                                         \
    (DLREF_KIND_##DN == 0 ? (DT)((v) != 0) :                                          \
     DLREF_KIND_##SN == 0 ? (DT)((v) != 0) :                                          \
     (DLREF_KIND_##SN == 2 && DLREF_KIND_##DN == 1) ? (DT)dlref_f2i_##DT##_or((double)(v)) : \
     (DT)(v))

/* dlref_f2i_<T>_or: the saturating cast, named after the C type. */
#define dlref_f2i_uint8_t_or dlref_f2i_uint8_t
#define dlref_f2i_int8_t_or dlref_f2i_int8_t
#define dlref_f2i_int16_t_or dlref_f2i_int16_t
#define dlref_f2i_int32_t_or dlref_f2i_int32_t
#define dlref_f2i_int64_t_or dlref_f2i_int64_t
#define dlref_f2i_uint16_t_or dlref_f2i_uint16_t
#define dlref_f2i_uint32_t_or dlref_f2i_uint32_t
#define dlref_f2i_uint64_t_or dlref_f2i_uint64_t
static inline float dlref_f2i_float_or(double x) { return (float)x; }
static inline double dlref_f2i_double_or(double x) { return x; }

typedef void (*dlref_run_fn)(char* d, int64_t ds, const char* s, int64_t ss, int64_t n);

#define DLREF_PAIR(SN, ST, DN, DT)                                                   \
    static void dlref_run_##SN##_##DN(char* d, int64_t ds, const char* s, int64_t ss, int64_t n) { \
        int64_t i;                                                                   \
        if (ds == (int64_t)sizeof(DT) && ss == (int64_t)sizeof(ST)) {                \
            DT* dp = (DT*)d; const ST* sp = (const ST*)s;                            \
            for (i = 0; i < n; ++i) dp[i] = DLREF_CONVERT_VALUE(SN, ST, DN, DT, sp[i]); \
            return;                                                                  \
        }                                                                            \
        for (i = 0; i < n; ++i) {                                                    \
            ST v; DT w; memcpy(&v, s + i * ss, sizeof(ST));                          \
            w = DLREF_CONVERT_VALUE(SN, ST, DN, DT, v);                              \
            memcpy(d + i * ds, &w, sizeof(DT));                                      \
        }                                                                            \
    }

/* M(SN, ST, DN, DT) for every native destination type, in type-id order. */
#define DLREF_EACH_DEST(M, SN, ST) \
    M(SN, ST, BOOL, uint8_t) M(SN, ST, I8, int8_t) M(SN, ST, I16, int16_t) M(SN, ST, I32, int32_t) \
    M(SN, ST, I64, int64_t) M(SN, ST, U8, uint8_t) M(SN, ST, U16, uint16_t) M(SN, ST, U32, uint32_t) \
    M(SN, ST, U64, uint64_t) M(SN, ST, F32, float) M(SN, ST, F64, double)

#define DLREF_PAIRS_FROM(SN, ST) DLREF_EACH_DEST(DLREF_PAIR, SN, ST)
DLREF_NATIVE_TYPES(DLREF_PAIRS_FROM)

#define DLREF_RUN_NAME(SN, ST, DN, DT) dlref_run_##SN##_##DN,
#define DLREF_ROW_ENTRY(SN, ST) { DLREF_EACH_DEST(DLREF_RUN_NAME, SN, ST) },
static const dlref_run_fn dlref_native_runs[DLREF_N_NATIVE][DLREF_N_NATIVE] = {
    DLREF_NATIVE_TYPES(DLREF_ROW_ENTRY)
};

/* What the CPU and the OS support beyond SSE2, probed once by cpuid (not
   __builtin_cpu_supports: clang before 16 knows no "f16c" feature string).
   AVX, F16C and AVX2 need YMM state saved (OSXSAVE, leaf 1 ecx bit 27, and
   XCR0 bits 1-2): F16C is leaf 1 ecx bit 29 with AVX (bit 28); AVX2 is leaf
   7 ebx bit 5; AVX-512 F, DQ, BW and VL are ebx bits 16, 17, 30 and 31, with
   opmask and ZMM state saved too (XCR0 bits 5-7). Racing first calls under
   free threading all write the same answer. */
#define DLREF_ISA_F16C 1
#define DLREF_ISA_AVX2 2
#define DLREF_ISA_AVX512 4
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <cpuid.h>
static int dlref_cpu_isa(void) {
    static int known = -1;
    if (known < 0) {
        unsigned a, b, c, d, lo = 0, hi = 0;
        const unsigned avx512 = (1u << 16) | (1u << 17) | (1u << 30) | (1u << 31);
        int isa = 0;
        if (__get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 27)) && (c & (1u << 28))) {
            __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
            if ((lo & 6u) == 6u) {
                if (c & (1u << 29)) isa |= DLREF_ISA_F16C;
                if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
                    if (b & (1u << 5)) isa |= DLREF_ISA_AVX2;
                    if ((b & avx512) == avx512 && (lo & 0xE6u) == 0xE6u) isa |= DLREF_ISA_AVX512;
                }
            }
        }
        (void)hi;
        known = isa;
    }
    return known;
}
#else
static int dlref_cpu_isa(void) { return 0; }
#endif

/* The dense loop of every native pair again, compiled for AVX2 and for
   AVX-512 (the compiler vectorizes each) and chosen once by cpuid: the
   baseline build has SSE2 only, and NumPy's casts run on the widest vectors
   the CPU has (float64 to float32 of 1e6 items: 0.18 ms on SSE2, 0.14 ms on
   AVX-512). */
typedef void (*dlref_dense_fn)(char* d, const char* s, int64_t n);
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define DLREF_DENSE_PAIR(ISA, TARGET, SN, ST, DN, DT)                                      \
    __attribute__((target(TARGET))) static void dlref_dense_##ISA##_##SN##_##DN(char* d, const char* s, int64_t n) { \
        DT* dp = (DT*)d; const ST* sp = (const ST*)s; int64_t i;                           \
        for (i = 0; i < n; ++i) dp[i] = DLREF_CONVERT_VALUE(SN, ST, DN, DT, sp[i]);        \
    }
#define DLREF_DENSE_PAIR_AVX2(SN, ST, DN, DT) DLREF_DENSE_PAIR(avx2, "avx2", SN, ST, DN, DT)
#define DLREF_DENSE_PAIR_AVX512(SN, ST, DN, DT) \
    DLREF_DENSE_PAIR(avx512, "avx512f,avx512bw,avx512dq,avx512vl", SN, ST, DN, DT)
#define DLREF_DENSE_AVX2(SN, ST) DLREF_EACH_DEST(DLREF_DENSE_PAIR_AVX2, SN, ST)
#define DLREF_DENSE_AVX512(SN, ST) DLREF_EACH_DEST(DLREF_DENSE_PAIR_AVX512, SN, ST)
DLREF_NATIVE_TYPES(DLREF_DENSE_AVX2)
DLREF_NATIVE_TYPES(DLREF_DENSE_AVX512)
#define DLREF_DENSE_NAME_AVX2(SN, ST, DN, DT) dlref_dense_avx2_##SN##_##DN,
#define DLREF_DENSE_NAME_AVX512(SN, ST, DN, DT) dlref_dense_avx512_##SN##_##DN,
#define DLREF_DENSE_ROW_AVX2(SN, ST) { DLREF_EACH_DEST(DLREF_DENSE_NAME_AVX2, SN, ST) },
#define DLREF_DENSE_ROW_AVX512(SN, ST) { DLREF_EACH_DEST(DLREF_DENSE_NAME_AVX512, SN, ST) },
static const dlref_dense_fn dlref_dense_avx2[DLREF_N_NATIVE][DLREF_N_NATIVE] = {
    DLREF_NATIVE_TYPES(DLREF_DENSE_ROW_AVX2)
};
static const dlref_dense_fn dlref_dense_avx512[DLREF_N_NATIVE][DLREF_N_NATIVE] = {
    DLREF_NATIVE_TYPES(DLREF_DENSE_ROW_AVX512)
};
static int dlref_wide_dense = 1;   /* 0: the baseline loops (the core's _set_wide_dense, for tests) */
/* The widest table the CPU and the OS support, NULL for SSE2 only. */
static const dlref_dense_fn (*dlref_dense_runs(void))[DLREF_N_NATIVE] {
    int isa = dlref_wide_dense ? dlref_cpu_isa() : 0;
    return (isa & DLREF_ISA_AVX512) ? dlref_dense_avx512 : (isa & DLREF_ISA_AVX2) ? dlref_dense_avx2 : NULL;
}
#else
static int dlref_wide_dense = 0;
static const dlref_dense_fn (*dlref_dense_runs(void))[DLREF_N_NATIVE] { return NULL; }
#endif

/* Bit-exact pairs with the small float types (no detour through double). */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
/* The F16C instruction rounds float32 to float16 exactly as the code below
   (to nearest even, overflow to inf), eight at a time; it quiets signaling
   NaNs, which the software path keeps (NumPy does either, by CPU). */
__attribute__((target("f16c,avx")))
static int64_t dlref_f16c_run(uint16_t* d, const float* s, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i*)(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
    return i;
}
#else
static int64_t dlref_f16c_run(uint16_t* d, const float* s, int64_t n) { (void)d; (void)s; (void)n; return 0; }
#endif

static void dlref_run_F32_F16(char* d, int64_t ds, const char* s, int64_t ss, int64_t n) {
    int64_t i;
    if (ds == 2 && ss == 4 && (dlref_cpu_isa() & DLREF_ISA_F16C)) {
        int64_t done = dlref_f16c_run((uint16_t*)d, (const float*)s, n);
        d += 2 * done; s += 4 * done; n -= done;
    }
    for (i = 0; i < n; ++i) { float v; uint16_t w; memcpy(&v, s + i * ss, 4); w = dlref_f16_from_f32(v); memcpy(d + i * ds, &w, 2); }
}
static void dlref_run_F16_F32(char* d, int64_t ds, const char* s, int64_t ss, int64_t n) {
    int64_t i;
    for (i = 0; i < n; ++i) { uint16_t v; uint32_t w; memcpy(&v, s + i * ss, 2); w = dlref_f32_from_f16_bits(v); memcpy(d + i * ds, &w, 4); }
}
static void dlref_run_F32_BF16(char* d, int64_t ds, const char* s, int64_t ss, int64_t n) {
    int64_t i;
    if (ds == 2 && ss == 4 && ((uintptr_t)s & 3) == 0 && ((uintptr_t)d & 1) == 0) {
        /* The same rounding without a branch, so the loop vectorizes. */
        const uint32_t* sp = (const uint32_t*)s;
        uint16_t* dp = (uint16_t*)d;
        for (i = 0; i < n; ++i) {
            uint32_t u = sp[i];
            uint16_t rounded = (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
            uint16_t nan = (uint16_t)(((u >> 16) & 0x8000) | 0x7FC0);
            dp[i] = (u & 0x7FFFFFFF) > 0x7F800000 ? nan : rounded;
        }
        return;
    }
    for (i = 0; i < n; ++i) { float v; uint16_t w; memcpy(&v, s + i * ss, 4); w = dlref_bf16_from_f32(v); memcpy(d + i * ds, &w, 2); }
}
static void dlref_run_BF16_F32(char* d, int64_t ds, const char* s, int64_t ss, int64_t n) {
    int64_t i;
    for (i = 0; i < n; ++i) { uint16_t v; uint32_t w; memcpy(&v, s + i * ss, 2); w = (uint32_t)v << 16; memcpy(d + i * ds, &w, 4); }
}

#endif /* DLREF_PAIRS_H */
