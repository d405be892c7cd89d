/* dlpack-ref kernels: the bits of the small float types. Rounding to odd,
   float16, bfloat16, float8_e8m0fnu and the float8/6/4 codes from float32
   (or float64) bits and back, by bit operations only, and the decoded value
   of every minifloat code.

   Part of the C kernels, included through src/dlref_kernels.h. */

#ifndef DLREF_FLOAT_BITS_H
#define DLREF_FLOAT_BITS_H

#include <stdint.h>
#include <string.h>
#include <math.h>
#include "dlref_types.h"

/* The minifloat table, indexed by DLPack code - 7: exponent bits, mantissa
   bits, bias and special-value style. The Python side reads it through
   the core's _minifloat_params (dlpack_ref._format.MINIFLOATS).
     ieee:   all-ones exponent holds inf (mantissa 0) and NaN
     fn:     no inf; NaN is every exponent and mantissa bit set
     fnuz:   no inf, no negative zero; NaN is the bit pattern of -0
     finite: no inf, no NaN
     e8m0:   unsigned powers of two, 0xFF is NaN */
enum { DLREF_IEEE, DLREF_FN, DLREF_FNUZ, DLREF_FINITE, DLREF_E8M0 };
typedef struct { const char* name; int exp_bits, man_bits, bias, style; } dlref_minifloat;
static const dlref_minifloat dlref_minifloats[11] = {
    {"float8_e3m4", 3, 4, 3, DLREF_IEEE},
    {"float8_e4m3", 4, 3, 7, DLREF_IEEE},
    {"float8_e4m3b11fnuz", 4, 3, 11, DLREF_FNUZ},
    {"float8_e4m3fn", 4, 3, 7, DLREF_FN},
    {"float8_e4m3fnuz", 4, 3, 8, DLREF_FNUZ},
    {"float8_e5m2", 5, 2, 15, DLREF_IEEE},
    {"float8_e5m2fnuz", 5, 2, 16, DLREF_FNUZ},
    {"float8_e8m0fnu", 8, 0, 127, DLREF_E8M0},
    {"float6_e2m3fn", 2, 3, 1, DLREF_FINITE},
    {"float6_e3m2fn", 3, 2, 3, DLREF_FINITE},
    {"float4_e2m1fn", 2, 1, 1, DLREF_FINITE},
};
static const char* const dlref_style_names[5] = {"ieee", "fn", "fnuz", "finite", "e8m0"};

static inline uint32_t dlref_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float dlref_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint64_t dlref_f64_bits(double f) { uint64_t u; memcpy(&u, &f, 8); return u; }
static inline double dlref_bits_f64(uint64_t u) { double f; memcpy(&f, &u, 8); return f; }

/* Rounding to odd: truncate, then set the lowest bit when anything was
   cut off. A value rounded to odd with two or more bits beyond a narrower
   format's significand, then rounded to nearest even into that format,
   comes out as the value rounded once: rounding to odd never lands on a
   tie of the narrower format or moves across one, so the second rounding
   sees whether the value was below, on or above each tie. float32 (24
   bits) serves every format of 22 bits or fewer: bfloat16, float16, every
   float8, float6 and float4, and the halfway rule of float8_e8m0fnu (its
   1.5 * 2**e thresholds have an even last bit in float32). Overflow stays
   overflow (a value beyond FLT_MAX gives FLT_MAX, beyond every narrow
   format's range) and the float32 subnormals are still 16 bits finer than
   bfloat16's. NaN stays NaN with its sign. */
static inline float dlref_f32_odd_from_f64(double x) {
    float r = (float)x;
    uint32_t u = dlref_f32_bits(r);
    /* Inexact with an even last bit: the other neighbour of x, one step
       of the magnitude toward x, is odd. (GCC 12 vectorizes no form of
       this tried: the bit casts between float and uint32 stop it.) */
    uint32_t step = ((double)r != x) & (x == x) & ~u & 1u;
    uint32_t down = fabs((double)r) > fabs(x);
    return dlref_bits_f32(u + step - 2u * (step & down));
}

/* A uint64 as a double rounded to odd: from 2**53 on, the bits below 2**11
   folded into bit 11, which leaves at most 53 significant bits (exact as a
   double) and at least 43, rounded to odd (enough for float32 and every
   narrower format, above). */
static inline double dlref_f64_odd_from_u64(uint64_t u) {
    uint64_t folded = (u & ~(uint64_t)0x7FF) | ((uint64_t)((u & 0x7FF) != 0) << 11);
    return (double)(u >> 53 ? folded : u);
}
static inline double dlref_f64_odd_from_i64(int64_t v) {
    double m = dlref_f64_odd_from_u64(v < 0 ? 0 - (uint64_t)v : (uint64_t)v);
    return v < 0 ? -m : m;
}

/* Round sig * 2**(e - p) (sig < 2**(p+1)) to a magnitude code of a binary
   format with `m` mantissa bits and bias `bias`, to nearest, ties to even.
   The code can exceed the format's largest; the caller decides overflow. */
static inline uint64_t dlref_round_mag(uint64_t sig, int p, int e, int m, int bias) {
    int te = e + bias, shift;
    uint64_t q, rem, half, mag;
    shift = te >= 1 ? p - m : p - m + 1 - te;
    if (shift >= p + 2) return 0;
    q = sig >> shift;
    rem = sig & ((1ULL << shift) - 1);
    half = 1ULL << (shift - 1);
    mag = te >= 1 ? ((uint64_t)te << m) + q - (1ULL << m) : q;
    if (rem > half || (rem == half && (q & 1))) mag++;
    return mag;
}

/* float16 from float32 / float64 bits, as NumPy (NaN keeps its payload's top bits). */
static inline uint16_t dlref_f16_from_f32(float f) {
    uint32_t u = dlref_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t ef = (u >> 23) & 0xFF, man = u & 0x7FFFFF;
    uint64_t mag;
    if (ef == 0xFF) {
        if (man == 0) return sign | 0x7C00;
        {
            uint16_t r = (uint16_t)(0x7C00 + (man >> 13));
            if (r == 0x7C00) r++;
            return sign | r;
        }
    }
    if (ef == 0) mag = dlref_round_mag(man, 23, -126, 10, 15);
    else mag = dlref_round_mag(man | 0x800000, 23, (int)ef - 127, 10, 15);
    if (mag >= 0x7C00) return sign | 0x7C00;
    return sign | (uint16_t)mag;
}

static inline uint16_t dlref_f16_from_f64(double f) {
    uint64_t u = dlref_f64_bits(f);
    uint16_t sign = (uint16_t)((u >> 48) & 0x8000);
    uint32_t ef = (uint32_t)((u >> 52) & 0x7FF);
    uint64_t man = u & 0xFFFFFFFFFFFFFULL, mag;
    if (ef == 0x7FF) {
        if (man == 0) return sign | 0x7C00;
        {
            uint16_t r = (uint16_t)(0x7C00 + (man >> 42));
            if (r == 0x7C00) r++;
            return sign | r;
        }
    }
    if (ef == 0) return sign;
    mag = dlref_round_mag(man | (1ULL << 52), 52, (int)ef - 1023, 10, 15);
    if (mag >= 0x7C00) return sign | 0x7C00;
    return sign | (uint16_t)mag;
}

static inline uint32_t dlref_f32_from_f16_bits(uint16_t h) {
    uint32_t sign = ((uint32_t)h & 0x8000) << 16, e = (h >> 10) & 0x1F, m = h & 0x3FF;
    if (e == 0x1F) return sign | 0x7F800000 | (m << 13);
    if (e == 0) {
        if (m == 0) return sign;
        e = 1;
        while (!(m & 0x400)) { m <<= 1; e--; }
        m &= 0x3FF;
        return sign | ((e + 112) << 23) | (m << 13);
    }
    return sign | ((e + 112) << 23) | (m << 13);
}

static inline double dlref_f64_from_f16(uint16_t h) {
    /* Bit-built (no float operation), so a signaling NaN's payload stays as NumPy keeps it. */
    uint64_t sign = ((uint64_t)h & 0x8000) << 48, e = (h >> 10) & 0x1F, m = h & 0x3FF;
    if (e == 0x1F) return dlref_bits_f64(sign | 0x7FF0000000000000ULL | (m << 42));
    if (e == 0) return (double)dlref_bits_f32(dlref_f32_from_f16_bits(h));
    return dlref_bits_f64(sign | ((e + 1008) << 52) | (m << 42));
}

static inline uint16_t dlref_bf16_from_f32(float f) {
    uint32_t u = dlref_f32_bits(f);
    if ((u & 0x7FFFFFFF) > 0x7F800000) return (uint16_t)((u >> 16) & 0x8000) | 0x7FC0;
    return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

static inline uint32_t dlref_e8m0_from_f32(float f) {
    uint32_t u = dlref_f32_bits(f), exponent;
    if (!(f > 0) || u >= 0x7F800000) return 0xFF;
    exponent = (u >> 23) & 0xFF;
    /* Below 2**-126 the float32 is subnormal (no implied bit): the nearest
       of 2**-127 (code 0, the smallest) and 2**-126 (code 1) by value. */
    if (exponent == 0) return (u & 0x7FFFFF) >= 0x600000;
    if (u & 0x400000) exponent++;
    return exponent > 0xFF ? 0xFF : exponent;
}

/* Minifloat code from float32; 0x100 marks a NaN into a type without one. */
static inline uint32_t dlref_mini_from_f32(float f, int E, int M, int bias, int style) {
    uint32_t u = dlref_f32_bits(f);
    uint32_t sign = (u >> 31) << (E + M);
    uint32_t ef = (u >> 23) & 0xFF, man = u & 0x7FFFFF;
    uint64_t mag, top;
    if (style == DLREF_E8M0) return dlref_e8m0_from_f32(f);
    if (ef == 0xFF) {
        if (man) {  /* NaN */
            switch (style) {
            case DLREF_IEEE: return sign | (((1u << E) - 1) << M) | (1u << (M - 1));
            case DLREF_FN: return sign | ((1u << (E + M)) - 1);
            case DLREF_FNUZ: return 1u << (E + M);
            default: return 0x100;
            }
        }
        mag = (uint64_t)1 << 40;  /* infinity: overflow */
    } else if (ef == 0) {
        mag = dlref_round_mag(man, 23, -126, M, bias);
    } else {
        mag = dlref_round_mag(man | 0x800000, 23, (int)ef - 127, M, bias);
    }
    switch (style) {
    case DLREF_IEEE:
        top = (((uint64_t)1 << E) - 1) << M;
        if (mag >= top) mag = top;
        break;
    case DLREF_FN:
        top = ((uint64_t)1 << (E + M)) - 1;
        if (mag >= top) return sign | (uint32_t)top;
        break;
    case DLREF_FNUZ:
        top = ((uint64_t)1 << (E + M)) - 1;
        if (mag > top) return 1u << (E + M);
        if (mag == 0) return 0;
        break;
    default:
        top = ((uint64_t)1 << (E + M)) - 1;
        if (mag > top) mag = top;
    }
    return sign | (uint32_t)mag;
}

/* Decoded values of every minifloat code, as float32 bits (exact). */
static uint32_t dlref_mini_table[11][256];
static int dlref_mini_ready = 0;

static float dlref_mini_decode_slow(uint32_t code, const dlref_minifloat* p) {
    int E = p->exp_bits, M = p->man_bits, total = 1 + E + M;
    int negative, exp, man;
    float mag;
    if (p->style == DLREF_E8M0) return code == 0xFF ? NAN : ldexpf(1.0f, (int)code - p->bias);
    negative = (code >> (total - 1)) & 1;
    exp = (code >> M) & ((1 << E) - 1);
    man = code & ((1 << M) - 1);
    if (p->style == DLREF_FNUZ && code == (1u << (total - 1))) return -NAN;  /* the -0 pattern, as ml_dtypes */
    if (p->style == DLREF_IEEE && exp == (1 << E) - 1)
        return man ? (negative ? -NAN : NAN) : (negative ? -INFINITY : INFINITY);
    if (p->style == DLREF_FN && exp == (1 << E) - 1 && man == (1 << M) - 1) return negative ? -NAN : NAN;
    if (exp == 0) mag = ldexpf((float)man, 1 - p->bias - M);
    else mag = ldexpf((float)((1 << M) + man), exp - p->bias - M);
    return negative ? -mag : mag;
}

static void dlref_mini_table_init(void) {
    int t, c;
    if (dlref_mini_ready) return;
    for (t = 0; t < 11; ++t) {
        const dlref_minifloat* p = &dlref_minifloats[t];
        int n = p->style == DLREF_E8M0 ? 256 : 1 << (1 + p->exp_bits + p->man_bits);
        for (c = 0; c < 256; ++c)
            dlref_mini_table[t][c] = dlref_f32_bits(dlref_mini_decode_slow((uint32_t)(c % n), p));
    }
    dlref_mini_ready = 1;
}

#endif /* DLREF_FLOAT_BITS_H */
