/* dlpack-ref kernels: host allocation, strided copies, dtype conversions and
   Python-value intake/output, all in C with no Python object per element
   except where the values themselves are Python objects (sequences, tolist).

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
   - to bool: nonzero (NaN is nonzero); complex to real: the real part.

   This header is included once, into the core's translation unit. */

#ifndef DLREF_KERNELS_H
#define DLREF_KERNELS_H

#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <stdlib.h>
#include <math.h>
#include "dlref_pool.h"
#if !defined(_WIN32)
#include <sys/mman.h>
#endif

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("O3")
#endif

#define DLREF_MAX_NDIM 64
#define DLREF_BLOCK 256

/* --- host allocation ------------------------------------------------------ */

#define DLREF_HUGE_THRESHOLD ((size_t)2 << 20)

#if defined(_WIN32)
#include <malloc.h>
static void* dlref_aligned_alloc(size_t n) { return _aligned_malloc(n ? n : 1, 256); }
static void dlref_aligned_free(void* p) { _aligned_free(p); }
#else
/* 256-byte aligned. From 32 MiB on (glibc's largest dynamic mmap
   threshold: every block that size is a fresh mapping, whose pages fault on
   first touch), the block is 2 MiB aligned and advised as transparent huge
   pages: one fault per 2 MiB instead of per 4 KiB where the kernel runs THP
   in madvise mode. Below that, blocks come from malloc with room to align
   them, so glibc recycles the heap memory of a freed block of the same size
   with no page faults at all (a 2 MiB-aligned request is mapped anew every
   time: its freed chunk is smaller than the next request, which measured
   1.5x NumPy's copy time at 16 MiB); from 2 MiB on they are advised too, as
   NumPy does. posix_memalign also costs about ten times a malloc for small
   blocks. The block's own address is kept in the word before the aligned
   one, so one free serves both. */
#define DLREF_ALIGN 256
#define DLREF_FRESH_MAPPING ((size_t)32 << 20)
static void* dlref_aligned_alloc(size_t n) {
    void* raw = NULL;
    char* p;
    if (n > SIZE_MAX - 2 * DLREF_ALIGN) return NULL;
    if (n >= DLREF_FRESH_MAPPING) {
        if (posix_memalign(&raw, DLREF_HUGE_THRESHOLD, n + DLREF_ALIGN) != 0) return NULL;
#if defined(MADV_HUGEPAGE)
        madvise(raw, (n + DLREF_ALIGN) & ~(size_t)4095, MADV_HUGEPAGE);
#endif
        p = (char*)raw + DLREF_ALIGN;
    } else {
        raw = malloc(n + DLREF_ALIGN);
        if (raw == NULL) return NULL;
        p = (char*)(((uintptr_t)raw + DLREF_ALIGN) & ~(uintptr_t)(DLREF_ALIGN - 1));
#if defined(MADV_HUGEPAGE)
        if (n >= DLREF_HUGE_THRESHOLD) {
            uintptr_t first = ((uintptr_t)raw + 4095) & ~(uintptr_t)4095;
            uintptr_t end = ((uintptr_t)raw + n + DLREF_ALIGN) & ~(uintptr_t)4095;
            madvise((void*)first, end - first, MADV_HUGEPAGE);
        }
#endif
    }
    ((void**)p)[-1] = raw;
    return p;
}
static void dlref_aligned_free(void* p) { if (p != NULL) free(((void**)p)[-1]); }
#endif

/* --- dimension coalescing -------------------------------------------------- */

/* Drop size-1 dimensions and merge neighbours that are contiguous with each
   other in both arrays. Returns the new ndim (0: one element), or -1 when
   the arrays are empty or ndim is beyond DLREF_MAX_NDIM. */
static int dlref_coalesce(int ndim, const int64_t* shape, const int64_t* s1, const int64_t* s2,
                          int64_t* oshape, int64_t* o1, int64_t* o2) {
    int d, k = 0;
    if (ndim < 0 || ndim > DLREF_MAX_NDIM) return -1;
    for (d = 0; d < ndim; ++d) if (shape[d] == 0) return -1;
    for (d = 0; d < ndim; ++d) {
        if (shape[d] == 1) continue;
        if (k > 0 && o1[k - 1] == s1[d] * shape[d] && o2[k - 1] == s2[d] * shape[d]) {
            oshape[k - 1] *= shape[d];
            o1[k - 1] = s1[d];
            o2[k - 1] = s2[d];
            continue;
        }
        oshape[k] = shape[d]; o1[k] = s1[d]; o2[k] = s2[d];
        ++k;
    }
    return k;
}

/* Turn around every dimension but the last that the source walks
   backwards, moving both base pointers to that dimension's other end, so
   that the source is read at rising addresses: the prefetcher follows
   forward streams, and reading rows backwards made a[::-1].copy() about
   1.4x slower than a forward copy. The last dimension keeps its direction:
   a reversed run has its own vectorized loop. Byte strides only (not the
   element strides of packed sub-byte data). */
static void dlref_read_forward(int k, const int64_t* sh, int64_t* s1, int64_t* s2, char** p1, const char** p2) {
    int d;
    for (d = 0; d < k - 1; ++d) {
        if (s2[d] >= 0) continue;
        *p1 += (sh[d] - 1) * s1[d]; *p2 += (sh[d] - 1) * s2[d];
        s1[d] = -s1[d]; s2[d] = -s2[d];
    }
}

/* Advance an odometer over dims [0, last) of `shape`; offsets in bytes. */
static inline void dlref_next(int last, int64_t* index, const int64_t* shape,
                              const int64_t* s1, const int64_t* s2, int64_t* off1, int64_t* off2) {
    int d;
    for (d = last - 1; d >= 0; --d) {
        if (++index[d] < shape[d]) { *off1 += s1[d]; *off2 += s2[d]; return; }
        *off1 -= s1[d] * (shape[d] - 1); *off2 -= s2[d] * (shape[d] - 1);
        index[d] = 0;
    }
}

/* --- same-dtype strided copy ----------------------------------------------- */

/* Fixed-size moves; a dense destination (the usual copy) gets its own
   loop, which the compiler unrolls. */
#define DLREF_MOVE_RUN(T) do {                                                  \
        char* dp = d; const char* sp = s; int64_t i;                            \
        if (ds == (int64_t)sizeof(T) && ss == -(int64_t)sizeof(T)) {           \
            /* A reversed run: a constant stride the compiler vectorizes. */    \
            for (i = 0; i < n; ++i) { T v; memcpy(&v, sp - i * (int64_t)sizeof(T), sizeof(T)); memcpy(dp + i * sizeof(T), &v, sizeof(T)); } \
            break;                                                              \
        }                                                                       \
        if (ds == (int64_t)sizeof(T)) {                                         \
            for (i = 0; i < n; ++i) { T v; memcpy(&v, sp + i * ss, sizeof(T)); memcpy(dp + i * sizeof(T), &v, sizeof(T)); } \
            break;                                                              \
        }                                                                       \
        for (i = 0; i < n; ++i) { T v; memcpy(&v, sp, sizeof(T)); memcpy(dp, &v, sizeof(T)); \
                                  dp += ds; sp += ss; }                         \
    } while (0)

typedef struct { uint64_t a, b; } dlref_u128;

static void dlref_move_run(char* d, int64_t ds, const char* s, int64_t ss, int64_t n, size_t itemsize) {
    if (ds == (int64_t)itemsize && ss == (int64_t)itemsize) { memcpy(d, s, (size_t)n * itemsize); return; }
    switch (itemsize) {
    case 1: DLREF_MOVE_RUN(uint8_t); return;
    case 2: DLREF_MOVE_RUN(uint16_t); return;
    case 4: DLREF_MOVE_RUN(uint32_t); return;
    case 8: DLREF_MOVE_RUN(uint64_t); return;
    case 16: DLREF_MOVE_RUN(dlref_u128); return;
    default: {
        int64_t i;
        for (i = 0; i < n; ++i) memcpy(d + i * ds, s + i * ss, itemsize);
    }
    }
}

#if defined(__SSE2__) || defined(_M_X64) || defined(_M_AMD64)
#include <emmintrin.h>
/* Transposes in registers (SSE2, part of every x86-64 CPU; integer moves,
   so the bits pass unchanged): a 4x4 block of 4-byte items, or 2x2 of
   8-byte ones. Destination row i (at d + i * dr) gets source column i: the
   items i of the source runs at s, s + sc, ... */
static inline void dlref_transpose_4x4_32(char* d, int64_t dr, const char* s, int64_t sc) {
    __m128i a = _mm_loadu_si128((const __m128i*)s), b = _mm_loadu_si128((const __m128i*)(s + sc));
    __m128i c = _mm_loadu_si128((const __m128i*)(s + 2 * sc)), e = _mm_loadu_si128((const __m128i*)(s + 3 * sc));
    __m128i ab_lo = _mm_unpacklo_epi32(a, b), ce_lo = _mm_unpacklo_epi32(c, e);
    __m128i ab_hi = _mm_unpackhi_epi32(a, b), ce_hi = _mm_unpackhi_epi32(c, e);
    _mm_storeu_si128((__m128i*)d, _mm_unpacklo_epi64(ab_lo, ce_lo));
    _mm_storeu_si128((__m128i*)(d + dr), _mm_unpackhi_epi64(ab_lo, ce_lo));
    _mm_storeu_si128((__m128i*)(d + 2 * dr), _mm_unpacklo_epi64(ab_hi, ce_hi));
    _mm_storeu_si128((__m128i*)(d + 3 * dr), _mm_unpackhi_epi64(ab_hi, ce_hi));
}
static inline void dlref_transpose_2x2_64(char* d, int64_t dr, const char* s, int64_t sc) {
    __m128i a = _mm_loadu_si128((const __m128i*)s), b = _mm_loadu_si128((const __m128i*)(s + sc));
    _mm_storeu_si128((__m128i*)d, _mm_unpacklo_epi64(a, b));
    _mm_storeu_si128((__m128i*)(d + dr), _mm_unpackhi_epi64(a, b));
}
/* A reversed run of n 4- or 8-byte items (d[i] = s[-i]) that reads the
   source at rising addresses and writes the destination with
   non-temporal stores (then the caller's _mm_sfence): for copies too large
   to stay in cache, where it is about 2x faster than the cached reversed
   loop (DLREF_STREAM_BYTES). */
static void dlref_reverse_run_stream(char* d, const char* s, int64_t n, size_t itemsize) {
    const char* lo = s - (n - 1) * (int64_t)itemsize;   /* the source's first item in memory */
    char* hi = d + (n - 1) * (int64_t)itemsize;           /* where it goes */
    const int64_t per = 16 / (int64_t)itemsize;
    int64_t j = 0;
    /* Items one by one until the next block of the destination is aligned. */
    for (; j < n && ((uintptr_t)(hi - (j + per - 1) * (int64_t)itemsize) & 15) != 0; ++j)
        memcpy(hi - j * (int64_t)itemsize, lo + j * (int64_t)itemsize, itemsize);
    for (; j + per <= n; j += per) {
        __m128i v = _mm_loadu_si128((const __m128i*)(lo + j * (int64_t)itemsize));
        v = itemsize == 4 ? _mm_shuffle_epi32(v, 0x1B) : _mm_shuffle_epi32(v, 0x4E);
        _mm_stream_si128((__m128i*)(hi - (j + per - 1) * (int64_t)itemsize), v);
    }
    for (; j < n; ++j) memcpy(hi - j * (int64_t)itemsize, lo + j * (int64_t)itemsize, itemsize);
}
/* memcpy with non-temporal stores (then the caller's _mm_sfence): a part
   of a split copy is a smaller memcpy than the whole, which the C library
   then does through the cache; 64 MiB move 1.3x faster this way. */
static void dlref_copy_stream(char* d, const char* s, int64_t n) {
    int64_t i = 0, head = (int64_t)((16 - ((uintptr_t)d & 15)) & 15);
    if (head > n) head = n;
    memcpy(d, s, (size_t)head);
    for (i = head; i + 64 <= n; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i*)(s + i)), b = _mm_loadu_si128((const __m128i*)(s + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i*)(s + i + 32)), e = _mm_loadu_si128((const __m128i*)(s + i + 48));
        _mm_stream_si128((__m128i*)(d + i), a); _mm_stream_si128((__m128i*)(d + i + 16), b);
        _mm_stream_si128((__m128i*)(d + i + 32), c); _mm_stream_si128((__m128i*)(d + i + 48), e);
    }
    memcpy(d + i, s + i, (size_t)(n - i));
}
#define DLREF_HAVE_SSE2 1
#endif

/* A copy whose destination is this large or larger writes its dense and
   reversed runs with non-temporal stores: source and destination no
   longer fit in the last-level cache together, and stores that skip it
   run faster (on a 32 MiB L3: a[:, ::-1].copy() of 2048x2048 float32 in
   0.45 ms against 0.94 ms; 64 MiB dense in 2.5 ms against 3.3 ms), while
   at 8 MiB they are 1.15x slower. */
#define DLREF_STREAM_BYTES ((int64_t)16 << 20)

/* A tile-by-tile copy of the last two dimensions, for a source read across
   its fast axis (a transpose): both sides stay in cache within a tile.
   Dense 4- and 8-byte items (the destination's rows and the source's
   columns both unit-stride) go through register transposes, 2.2x faster
   than item by item on a 2048x2048 float32 transpose; the rest of a tile,
   and other items, move one at a time. */
static void dlref_blocked_2d(char* d, const int64_t* dsr, const char* s, const int64_t* ssr,
                             const int64_t* shape2, size_t itemsize) {
    const int64_t tile = itemsize >= 8 ? 16 : 32;
    int64_t r0, c0, r, c;
#ifdef DLREF_HAVE_SSE2
    const int64_t m = itemsize == 4 ? 4 : 2;
    if ((itemsize == 4 || itemsize == 8) && dsr[1] == (int64_t)itemsize && ssr[0] == (int64_t)itemsize) {
        for (r0 = 0; r0 < shape2[0]; r0 += tile) {
            int64_t r1 = r0 + tile < shape2[0] ? r0 + tile : shape2[0], rm = r0 + (r1 - r0) / m * m;
            for (c0 = 0; c0 < shape2[1]; c0 += tile) {
                int64_t c1 = c0 + tile < shape2[1] ? c0 + tile : shape2[1], cm = c0 + (c1 - c0) / m * m;
                for (r = r0; r < rm; r += m) {
                    for (c = c0; c < cm; c += m) {
                        if (m == 4) dlref_transpose_4x4_32(d + r * dsr[0] + c * dsr[1], dsr[0], s + r * ssr[0] + c * ssr[1], ssr[1]);
                        else dlref_transpose_2x2_64(d + r * dsr[0] + c * dsr[1], dsr[0], s + r * ssr[0] + c * ssr[1], ssr[1]);
                    }
                }
                /* The tile's last columns (rows r0..rm), then its last rows. */
                if (cm < c1)
                    for (r = r0; r < rm; ++r)
                        dlref_move_run(d + r * dsr[0] + cm * dsr[1], dsr[1], s + r * ssr[0] + cm * ssr[1], ssr[1],
                                       c1 - cm, itemsize);
                for (r = rm; r < r1; ++r)
                    dlref_move_run(d + r * dsr[0] + c0 * dsr[1], dsr[1], s + r * ssr[0] + c0 * ssr[1], ssr[1],
                                   c1 - c0, itemsize);
            }
        }
        return;
    }
#endif
    for (r0 = 0; r0 < shape2[0]; r0 += tile) {
        int64_t r1 = r0 + tile < shape2[0] ? r0 + tile : shape2[0];
        for (c0 = 0; c0 < shape2[1]; c0 += tile) {
            int64_t c1 = c0 + tile < shape2[1] ? c0 + tile : shape2[1];
            for (r = r0; r < r1; ++r) {
                (void)c;
                dlref_move_run(d + r * dsr[0] + c0 * dsr[1], dsr[1], s + r * ssr[0] + c0 * ssr[1], ssr[1],
                               c1 - c0, itemsize);
            }
        }
    }
}

/* The copy of a coalesced array (dlref_coalesce; k >= 1) from byte offsets
   doff and soff on: dense inner runs are one memcpy each; other runs move
   fixed-size items; a transposed pair of inner dimensions is tiled. */
static void dlref_copy_coalesced(char* dst, const int64_t* ds, const char* src, const int64_t* ss,
                                 const int64_t* sh, int k, size_t itemsize, int64_t doff, int64_t soff,
                                 int stream) {
    int64_t index[DLREF_MAX_NDIM];
    int64_t rows = 1;
    int d, inner, blocked;
    /* Tile when the source's fastest axis is the destination's second-last. */
    blocked = k >= 2 && (ss[k - 1] != (int64_t)itemsize) && (ss[k - 2] == (int64_t)itemsize || ss[k - 2] == -(int64_t)itemsize)
              && sh[k - 1] >= 8 && sh[k - 2] >= 8;
    inner = blocked ? k - 2 : k - 1;
    for (d = 0; d < inner; ++d) { index[d] = 0; rows *= sh[d]; }
#ifdef DLREF_HAVE_SSE2
    if (stream && !blocked && ds[inner] == (int64_t)itemsize
            && (ss[inner] == (int64_t)itemsize || (ss[inner] == -(int64_t)itemsize && (itemsize == 4 || itemsize == 8)))) {
        while (rows-- > 0) {
            if (ss[inner] > 0) dlref_copy_stream(dst + doff, src + soff, sh[inner] * (int64_t)itemsize);
            else dlref_reverse_run_stream(dst + doff, src + soff, sh[inner], itemsize);
            dlref_next(inner, index, sh, ds, ss, &doff, &soff);
        }
        /* Non-temporal stores are weakly ordered: fence them before the
           pool's release tells another thread that the part is done. */
        _mm_sfence();
        return;
    }
#endif
    (void)stream;
    while (rows-- > 0) {
        if (blocked)
            dlref_blocked_2d(dst + doff, ds + inner, src + soff, ss + inner, sh + inner, itemsize);
        else
            dlref_move_run(dst + doff, ds[inner], src + soff, ss[inner], sh[inner], itemsize);
        dlref_next(inner, index, sh, ds, ss, &doff, &soff);
    }
}

/* --- splitting a copy or conversion over the pool ---------------------------- */

/* Each part of a parallel job moves at least this many bytes (read plus
   written); a smaller job runs on one thread. Measured, not guessed:
   benchmarks/pool_threshold.py, docs/benchmarks.md ("Worker pool
   threshold"). dlref_pool_grain can be changed for that sweep and for the
   tests that split small arrays (the core's _set_pool_grain). */
#define DLREF_POOL_GRAIN ((int64_t)256 << 10)
static int64_t dlref_pool_grain = DLREF_POOL_GRAIN;

/* Parts for a job of `bytes` bytes moved with `threads` threads: four a
   thread (parts go to whichever thread is free, so more parts than threads
   even out a core that is slow or busy), none below the grain. */
#define DLREF_PARTS_PER_THREAD 4
static int dlref_parts_for(int64_t bytes, int threads) {
    int64_t grain = dlref_pool_grain > 0 ? dlref_pool_grain : 1;
    int64_t parts = bytes / grain;
    int64_t most = (int64_t)(threads < DLREF_POOL_MAX_THREADS ? threads : DLREF_POOL_MAX_THREADS) * DLREF_PARTS_PER_THREAD;
    return threads <= 1 || parts < 2 ? 1 : parts < most ? (int)parts : (int)most;
}

/* A piece of a coalesced array: its dims [first, k), dim `first` cut to
   `extent`, from offsets doff and soff on. */
typedef struct { int first; int64_t extent, doff, soff; } dlref_piece;

/* [lo, hi): part `part` of `parts` equal ranges of 0..n. */
static void dlref_part_range(int64_t n, int part, int parts, int64_t* lo, int64_t* hi) {
    int64_t q = n / parts, r = n % parts;
    *lo = q * part + (part < r ? part : r);
    *hi = *lo + q + (part < r ? 1 : 0);
}

/* Part `part` of `parts` of a coalesced array (k >= 1), as at most three
   pieces (returns how many): a range of dim 0, or, when dim 0 is too short
   to share out evenly, a range of the index over dims 0 and 1 (a partial
   row, whole rows, a partial row). */
static int dlref_split(int k, const int64_t* sh, const int64_t* ds, const int64_t* ss, int part, int parts,
                       dlref_piece* out) {
    int64_t lo, hi, i0, j0, i1, j1;
    int n = 0;
    if (k == 1 || sh[0] >= 4 * (int64_t)parts) {
        dlref_part_range(sh[0], part, parts, &lo, &hi);
        if (hi > lo) { out[0].first = 0; out[0].extent = hi - lo; out[0].doff = lo * ds[0]; out[0].soff = lo * ss[0]; n = 1; }
        return n;
    }
    dlref_part_range(sh[0] * sh[1], part, parts, &lo, &hi);
    i0 = lo / sh[1]; j0 = lo % sh[1]; i1 = hi / sh[1]; j1 = hi % sh[1];
#define DLREF_PIECE(FIRST, EXTENT, I, J) do { out[n].first = (FIRST); out[n].extent = (EXTENT);         \
        out[n].doff = (I) * ds[0] + (J) * ds[1]; out[n].soff = (I) * ss[0] + (J) * ss[1]; ++n; } while (0)
    if (i0 == i1) {
        if (j1 > j0) DLREF_PIECE(1, j1 - j0, i0, j0);
        return n;
    }
    if (j0 > 0) { DLREF_PIECE(1, sh[1] - j0, i0, j0); ++i0; }
    if (i1 > i0) DLREF_PIECE(0, i1 - i0, i0, 0);
    if (j1 > 0) DLREF_PIECE(1, j1, i1, 0);
#undef DLREF_PIECE
    return n;
}

/* A copy or conversion of a coalesced array, shared out by dlref_pool_run. */
typedef struct {
    char* dst;
    const char* src;
    const int64_t *sh, *ds, *ss;
    int k;
    size_t itemsize;          /* copies */
    int stream;               /* copies: DLREF_STREAM_BYTES or more */
    int dt, st, src_bits;     /* conversions */
    int64_t refused;          /* the sum over the parts (atomic adds) */
} dlref_split_job;

typedef void (*dlref_piece_fn)(dlref_split_job* job, const int64_t* sh, int k, const int64_t* ds,
                               const int64_t* ss, int64_t doff, int64_t soff);

/* Run `piece` on each piece of part `part` (dims [first, k), the cut extent
   in a copy of the shape). */
static void dlref_run_pieces(dlref_split_job* job, int part, int parts, dlref_piece_fn piece) {
    dlref_piece pieces[3];
    int64_t sh[DLREF_MAX_NDIM];
    int i, n = dlref_split(job->k, job->sh, job->ds, job->ss, part, parts, pieces);
    for (i = 0; i < n; ++i) {
        int first = pieces[i].first, k = job->k - first;
        memcpy(sh, job->sh + first, (size_t)k * sizeof(int64_t));
        sh[0] = pieces[i].extent;
        piece(job, sh, k, job->ds + first, job->ss + first, pieces[i].doff, pieces[i].soff);
    }
}

static void dlref_copy_piece(dlref_split_job* job, const int64_t* sh, int k, const int64_t* ds,
                             const int64_t* ss, int64_t doff, int64_t soff) {
    dlref_copy_coalesced(job->dst, ds, job->src, ss, sh, k, job->itemsize, doff, soff, job->stream);
}

static void dlref_copy_part(void* job, int part, int parts) {
    dlref_run_pieces((dlref_split_job*)job, part, parts, dlref_copy_piece);
}

/* Copy an n-d strided array of `itemsize`-byte elements into another (byte
   strides, same shape). Contiguous dimensions are merged first, so a dense
   copy is one memcpy (split into byte ranges over the pool). At most
   `threads` threads (1: this one only) share it, and only from
   2 * dlref_pool_grain bytes moved on. Returns -1 (nothing done) when ndim
   exceeds DLREF_MAX_NDIM. */
static int dlref_strided_copy(char* dst, const int64_t* dst_strides, const char* src,
                              const int64_t* src_strides, const int64_t* shape, int ndim, size_t itemsize,
                              int threads) {
    int64_t sh[DLREF_MAX_NDIM], ds[DLREF_MAX_NDIM], ss[DLREF_MAX_NDIM];
    int64_t count = 1;
    int k, d, parts, stream;
    if (ndim > DLREF_MAX_NDIM || ndim < 0) return -1;
    k = dlref_coalesce(ndim, shape, dst_strides, src_strides, sh, ds, ss);
    if (k < 0) return 0;
    if (k == 0) { memcpy(dst, src, itemsize); return 0; }
    dlref_read_forward(k, sh, ds, ss, &dst, &src);
    for (d = 0; d < k; ++d) count *= sh[d];
    parts = threads > 1 ? dlref_parts_for(count * (int64_t)itemsize * 2, threads) : 1;
    stream = count * (int64_t)itemsize >= DLREF_STREAM_BYTES;
    if (parts <= 1) {
        dlref_copy_coalesced(dst, ds, src, ss, sh, k, itemsize, 0, 0, stream);
    } else {
        dlref_split_job job;
        job.dst = dst; job.src = src; job.sh = sh; job.ds = ds; job.ss = ss; job.k = k; job.itemsize = itemsize;
        job.stream = stream;
        dlref_pool_run(dlref_copy_part, &job, parts, threads);
    }
    return 0;
}

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

/* --- type ids -------------------------------------------------------------- */

enum {
    DLREF_T_BOOL, DLREF_T_I8, DLREF_T_I16, DLREF_T_I32, DLREF_T_I64,
    DLREF_T_U8, DLREF_T_U16, DLREF_T_U32, DLREF_T_U64, DLREF_T_F32, DLREF_T_F64,
    DLREF_N_NATIVE,
    DLREF_T_F16 = DLREF_N_NATIVE, DLREF_T_BF16, DLREF_T_C64, DLREF_T_C128,
    DLREF_T_MINI, /* + minifloat index (DLPack code - 7) */
    DLREF_T_F4X2 = DLREF_T_MINI + 11,
    DLREF_N_TYPES
};

/* Bytes an item of each type takes (float4_e2m1fn_x2: one byte, two values). */
static const int8_t dlref_type_bytes[DLREF_N_TYPES] = {1, 1, 2, 4, 8, 1, 2, 4, 8, 4, 8, 2, 2, 8, 16,
                                                       1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};

/* The minifloat table, indexed by DLPack code - 7: exponent bits, mantissa
   bits, bias and special-value style. The Python side reads it through
   dlref_minifloat_params (dlpack_ref._format.MINIFLOATS).
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
    default:
        if (code >= 7 && code <= 17) return DLREF_T_MINI + code - 7;
        return -1;
    }
}

static inline int dlref_is_int_tid(int t) { return t >= DLREF_T_BOOL && t <= DLREF_T_U64; }
static inline int dlref_is_complex_tid(int t) { return t == DLREF_T_C64 || t == DLREF_T_C128; }

/* --- float bit helpers ----------------------------------------------------- */

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

static void dlref_kernels_init(void) {
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

/* --- native pair loops ----------------------------------------------------- */

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

/* --- two-stage conversion through double ---------------------------------- */

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
    dlref_kernels_init();
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

/* --- Python values in and out (nested sequences, scalars, tolist) ----------- */
#ifdef Py_PYTHON_H

/* DLREF_KIND_OTHER: some leaf is not a Python scalar (a NumPy scalar, a 0-d
   array, an object with __index__ or __float__); the caller reads the
   leaves again one by one (_array.pxi, _other_leaves). */
enum { DLREF_KIND_NONE, DLREF_KIND_OF_BOOL, DLREF_KIND_OF_INT, DLREF_KIND_OF_FLOAT, DLREF_KIND_OF_COMPLEX,
       DLREF_KIND_OTHER };

/* Subclasses of int, float and complex count as those: the ones that carry
   a dtype (np.float64, np.complex128) have exactly the default one. */
static int dlref_leaf_kind(PyObject* o) {
    if (PyBool_Check(o)) return DLREF_KIND_OF_BOOL;
    if (PyLong_Check(o)) return DLREF_KIND_OF_INT;
    if (PyFloat_Check(o)) return DLREF_KIND_OF_FLOAT;
    if (PyComplex_Check(o)) return DLREF_KIND_OF_COMPLEX;
    return DLREF_KIND_OTHER;
}

/* The kind of a leaf that is no Python scalar and carries no dtype: an
   integer (__index__), a real (__float__) or a complex (__complex__) of
   another library; -1 with TypeError for anything else. */
static int dlref_other_leaf_kind(PyObject* o) {
    if (!PyUnicode_Check(o) && !PyBytes_Check(o) && !PyObject_HasAttrString(o, "__len__")) {
        if (PyIndex_Check(o)) return DLREF_KIND_OF_INT;
        if (Py_TYPE(o)->tp_as_number && Py_TYPE(o)->tp_as_number->nb_float) return DLREF_KIND_OF_FLOAT;
        if (PyObject_HasAttrString(o, "__complex__")) return DLREF_KIND_OF_COMPLEX;
    }
    PyErr_Format(PyExc_TypeError,
                 "asarray cannot read a %.100s: expected a DLPack object, a buffer, a Python scalar "
                 "or a nested sequence", Py_TYPE(o)->tp_name);
    return -1;
}

/* Shape of a nested list/tuple, read along first elements. -1 with
   ValueError when deeper than DLREF_MAX_NDIM (which a sequence containing
   itself always is). */
static int dlref_seq_shape(PyObject* obj, int64_t* shape) {
    int nd = 0;
    PyObject* o = obj;
    while (PyList_Check(o) || PyTuple_Check(o)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
        if (nd == DLREF_MAX_NDIM) {
            PyErr_Format(PyExc_ValueError,
                         "nested sequence is more than %d levels deep (the most dimensions an Array "
                         "has); does a list contain itself?", DLREF_MAX_NDIM);
            return -1;
        }
        shape[nd++] = n;
        if (n == 0) break;
        o = PySequence_Fast_GET_ITEM(o, 0);
    }
    return nd;
}

/* Check that every sub-sequence has the shape found, and the widest kind of
   the leaves (bool < int < float < complex). */
static int dlref_seq_check(PyObject* o, int depth, int ndim, const int64_t* shape, int* kind) {
    Py_ssize_t i, n;
    if (depth == ndim) {
        int k;
        if (PyList_Check(o) || PyTuple_Check(o)) {
            PyErr_Format(PyExc_ValueError,
                         "ragged nested sequence: a sequence at depth %d, where the first elements "
                         "have a scalar", depth);
            return -1;
        }
        k = dlref_leaf_kind(o);
        if (k < 0) return -1;
        if (k > *kind) *kind = k;
        return 0;
    }
    if (!(PyList_Check(o) || PyTuple_Check(o))) {
        PyErr_Format(PyExc_ValueError,
                     "ragged nested sequence: a %.100s at depth %d, where the first elements have a "
                     "sequence of length %lld", Py_TYPE(o)->tp_name, depth, (long long)shape[depth]);
        return -1;
    }
    n = PySequence_Fast_GET_SIZE(o);
    if (n != shape[depth]) {
        /* The sub-shapes as the first elements give them, and with this length. */
        PyObject* expected = PyTuple_New(ndim - depth);
        PyObject* found = PyTuple_New(ndim - depth);
        int d;
        if (expected && found) {
            for (d = depth; d < ndim; ++d) {
                PyTuple_SET_ITEM(expected, d - depth, PyLong_FromLongLong(shape[d]));
                PyTuple_SET_ITEM(found, d - depth, PyLong_FromLongLong(d == depth ? (int64_t)n : shape[d]));
            }
            PyErr_Format(PyExc_ValueError, "ragged nested sequence: sub-shapes %R and %R differ (at depth %d)",
                         expected, found, depth);
        }
        Py_XDECREF(expected);
        Py_XDECREF(found);
        return -1;
    }
    for (i = 0; i < n; ++i)
        if (dlref_seq_check(PySequence_Fast_GET_ITEM(o, i), depth + 1, ndim, shape, kind) < 0) return -1;
    return 0;
}

typedef struct {
    char* data;          /* destination, C-contiguous */
    int tid;
    const char* name;    /* dtype name for messages */
    int64_t count;       /* leaves written */
    int64_t flushed;     /* leaves already stored from the buffer */
    int nbuf;
    double re[DLREF_BLOCK], im[DLREF_BLOCK];
} dlref_filler;

static int64_t dlref_leaf_offset(const dlref_filler* f, int64_t leaf) {
    if (f->tid < DLREF_N_NATIVE) return leaf * dlref_type_bytes[f->tid];
    if (f->tid == DLREF_T_F16 || f->tid == DLREF_T_BF16) return leaf * 2;
    if (f->tid == DLREF_T_C64) return leaf * 8;
    if (f->tid == DLREF_T_C128) return leaf * 16;
    if (f->tid == DLREF_T_F4X2) return leaf / 2;
    return leaf;
}

static int dlref_filler_flush(dlref_filler* f) {
    int64_t refused;
    if (!f->nbuf) return 0;
    refused = dlref_store(f->tid, f->data + dlref_leaf_offset(f, f->flushed),
                          f->tid == DLREF_T_C64 ? 8 : f->tid == DLREF_T_C128 ? 16 :
                          (f->tid == DLREF_T_F16 || f->tid == DLREF_T_BF16) ? 2 :
                          f->tid == DLREF_T_F32 ? 4 : f->tid == DLREF_T_F64 ? 8 : 1,
                          f->nbuf, f->re, dlref_is_complex_tid(f->tid) ? f->im : NULL);
    f->flushed += f->nbuf;
    f->nbuf = 0;
    if (refused) { PyErr_Format(PyExc_ValueError, "%s has no NaN", f->name); return -1; }
    return 0;
}

static int dlref_fill_int(dlref_filler* f, PyObject* o) {
    int overflow = 0;
    long long v = 0;
    unsigned long long u = 0;
    int t = f->tid, is_unsigned = t >= DLREF_T_U8 && t <= DLREF_T_U64;
    static const int bits[DLREF_N_NATIVE] = {8, 8, 16, 32, 64, 8, 16, 32, 64, 0, 0};
    char* d = f->data + dlref_leaf_offset(f, f->count);
    if (PyFloat_Check(o) || PyComplex_Check(o) || (!PyLong_Check(o) && !PyIndex_Check(o))) {
        PyErr_Format(PyExc_TypeError, "cannot store %R in an integer Array (%s) without losing it", o, f->name);
        return -1;
    }
    if (PyLong_Check(o)) { Py_INCREF(o); } else { o = PyNumber_Index(o); if (!o) return -1; }
    v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred()) { Py_DECREF(o); return -1; }
    if (overflow > 0 && t == DLREF_T_U64) {
        u = PyLong_AsUnsignedLongLong(o);
        if (u == (unsigned long long)-1 && PyErr_Occurred()) { PyErr_Clear(); }
        else { overflow = 0; v = 0; }
    } else {
        u = (unsigned long long)v;
    }
    {
        int b = bits[t];
        long long lo = is_unsigned ? 0 : (b == 64 ? INT64_MIN : -(1LL << (b - 1)));
        unsigned long long hi = is_unsigned ? (b == 64 ? UINT64_MAX : (1ULL << b) - 1) : (1ULL << (b - 1)) - 1;
        int bad = overflow != 0 || (is_unsigned ? (v < 0 || u > hi) : (v < lo || v > (long long)hi));
        if (bad) {
            if (is_unsigned)
                PyErr_Format(PyExc_OverflowError, "%S is out of range for %s [0, %llu]", o, f->name, hi);
            else
                PyErr_Format(PyExc_OverflowError, "%S is out of range for %s [%lld, %lld]", o, f->name, lo, (long long)hi);
            Py_DECREF(o);
            return -1;
        }
    }
    Py_DECREF(o);
    switch (t) {
    case DLREF_T_I8: case DLREF_T_U8: *(uint8_t*)d = (uint8_t)u; break;
    case DLREF_T_I16: case DLREF_T_U16: { uint16_t w = (uint16_t)u; memcpy(d, &w, 2); break; }
    case DLREF_T_I32: case DLREF_T_U32: { uint32_t w = (uint32_t)u; memcpy(d, &w, 4); break; }
    default: { uint64_t w = (uint64_t)u; memcpy(d, &w, 8); break; }
    }
    return 0;
}

/* A Python int as a double for a destination narrower than float64: rounded
   to odd (dlref_f32_odd_from_f64), so that the store's rounding is the only
   one. PyLong_AsDouble, to nearest, would be a first rounding of an int
   beyond 2**53 (NumPy's list intake rounds twice there; its int64 array
   casts do not). An int beyond the double range is OverflowError, as for
   float64. */
static int dlref_long_as_odd_double(PyObject* o, double* out) {
    int overflow = 0, above, below;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    double d;
    PyObject* back;
    if (v == -1 && PyErr_Occurred()) return -1;
    if (!overflow) { *out = dlref_f64_odd_from_i64(v); return 0; }
    d = PyLong_AsDouble(o);
    if (d == -1.0 && PyErr_Occurred()) return -1;
    *out = d;
    /* Nearest with an odd last bit is already the odd neighbour (exact or not). */
    if (dlref_f64_bits(d) & 1) return 0;
    back = PyLong_FromDouble(d);
    if (!back) return -1;
    above = PyObject_RichCompareBool(o, back, Py_GT);
    below = above ? 0 : PyObject_RichCompareBool(o, back, Py_LT);
    Py_DECREF(back);
    if (above < 0 || below < 0) return -1;
    if (above) *out = nextafter(d, INFINITY);
    else if (below) *out = nextafter(d, -INFINITY);
    return 0;
}

static int dlref_fill_leaf(dlref_filler* f, PyObject* o) {
    int t = f->tid;
    if (t == DLREF_T_BOOL) {
        int b = PyObject_IsTrue(o);
        if (b < 0) return -1;
        f->data[f->count++] = (char)b;
        return 0;
    }
    if (t <= DLREF_T_U64) {
        if (PyBool_Check(o)) { PyObject* as_int = PyLong_FromLong(o == Py_True); int r = dlref_fill_int(f, as_int); Py_DECREF(as_int); if (r < 0) return r; }
        else if (dlref_fill_int(f, o) < 0) return -1;
        f->count++;
        return 0;
    }
    {
        double re, im = 0.0;
        if (PyFloat_CheckExact(o)) re = PyFloat_AS_DOUBLE(o);
        else if (PyLong_Check(o) && (t == DLREF_T_F64 || t == DLREF_T_C128)) {
            re = PyLong_AsDouble(o); if (re == -1.0 && PyErr_Occurred()) return -1;
        }
        else if (PyLong_Check(o)) { if (dlref_long_as_odd_double(o, &re) < 0) return -1; }
        else if (PyComplex_Check(o)) {
            if (!dlref_is_complex_tid(t)) {
                PyErr_Format(PyExc_TypeError, "cannot store complex %R in a real Array (%s)", o, f->name);
                return -1;
            }
            re = PyComplex_RealAsDouble(o); im = PyComplex_ImagAsDouble(o);
        } else if (dlref_is_complex_tid(t) && !PyFloat_Check(o) && !PyIndex_Check(o)) {
            Py_complex c = PyComplex_AsCComplex(o);
            if (c.real == -1.0 && PyErr_Occurred()) return -1;
            re = c.real; im = c.imag;
        } else {
            re = PyFloat_AsDouble(o);
            if (re == -1.0 && PyErr_Occurred()) return -1;
        }
        f->re[f->nbuf] = re; f->im[f->nbuf] = im;
        f->nbuf++; f->count++;
        if (f->nbuf == DLREF_BLOCK) return dlref_filler_flush(f);
        return 0;
    }
}

static int dlref_seq_fill_rec(dlref_filler* f, PyObject* o, int depth, int ndim) {
    Py_ssize_t i, n;
    if (depth == ndim) return dlref_fill_leaf(f, o);
    n = PySequence_Fast_GET_SIZE(o);
    for (i = 0; i < n; ++i)
        if (dlref_seq_fill_rec(f, PySequence_Fast_GET_ITEM(o, i), depth + 1, ndim) < 0) return -1;
    return 0;
}

/* Write the leaves of a checked nested sequence (or a scalar, ndim 0) into
   `data` (C order, sub-byte types one code per byte, float4_e2m1fn_x2 two
   leaves per byte) as type `tid`. */
static int dlref_seq_fill(PyObject* obj, int ndim, char* data, int tid, const char* name) {
    dlref_filler f;
    dlref_kernels_init();
    f.data = data; f.tid = tid; f.name = name; f.count = 0; f.flushed = 0; f.nbuf = 0;
    if (dlref_seq_fill_rec(&f, obj, 0, ndim) < 0) return -1;
    return dlref_filler_flush(&f);
}

/* One element as a Python scalar (a (low, high) tuple for float4_e2m1fn_x2). */
static PyObject* dlref_element_object(int t, const char* p) {
    double re, im = 0.0;
    switch (t) {
    case DLREF_T_BOOL: return PyBool_FromLong(*p != 0);
    case DLREF_T_I8: return PyLong_FromLong(*(const int8_t*)p);
    case DLREF_T_U8: return PyLong_FromLong(*(const uint8_t*)p);
    case DLREF_T_I16: { int16_t v; memcpy(&v, p, 2); return PyLong_FromLong(v); }
    case DLREF_T_U16: { uint16_t v; memcpy(&v, p, 2); return PyLong_FromLong(v); }
    case DLREF_T_I32: { int32_t v; memcpy(&v, p, 4); return PyLong_FromLong(v); }
    case DLREF_T_U32: { uint32_t v; memcpy(&v, p, 4); return PyLong_FromUnsignedLong(v); }
    case DLREF_T_I64: { int64_t v; memcpy(&v, p, 8); return PyLong_FromLongLong(v); }
    case DLREF_T_U64: { uint64_t v; memcpy(&v, p, 8); return PyLong_FromUnsignedLongLong(v); }
    case DLREF_T_F4X2: {
        const uint32_t* table = dlref_mini_table[DLREF_T_F4X2 - 1 - DLREF_T_MINI];
        uint8_t b = (uint8_t)*p;
        return Py_BuildValue("(dd)", (double)dlref_bits_f32(table[b & 0xF]), (double)dlref_bits_f32(table[b >> 4]));
    }
    default:
        dlref_load(t, p, 0, 1, &re, &im, 0);
        if (dlref_is_complex_tid(t)) return PyComplex_FromDoubles(re, im);
        return PyFloat_FromDouble(re);
    }
}

static PyObject* dlref_tolist_rec(const char* p, const int64_t* strides, const int64_t* shape,
                                  int depth, int ndim, int t) {
    Py_ssize_t i, n;
    PyObject* list;
    if (depth == ndim) return dlref_element_object(t, p);
    n = (Py_ssize_t)shape[depth];
    list = PyList_New(n);
    if (!list) return NULL;
    for (i = 0; i < n; ++i) {
        PyObject* item = dlref_tolist_rec(p + i * strides[depth], strides, shape, depth + 1, ndim, t);
        if (!item) { Py_DECREF(list); return NULL; }
        PyList_SET_ITEM(list, i, item);
    }
    return list;
}

/* Nested lists of Python scalars of a host array (byte strides); a scalar
   for ndim 0. Packed sub-byte data (bits < 8) is C-contiguous and unpacked
   first into `scratch` (one byte per element). */
static PyObject* dlref_tolist(const char* data, const int64_t* strides, const int64_t* shape, int ndim, int t) {
    dlref_kernels_init();
    return dlref_tolist_rec(data, strides, shape, 0, ndim, t);
}

#endif /* Py_PYTHON_H */

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

#endif /* DLREF_KERNELS_H */
