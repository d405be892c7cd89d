/* dlpack-ref kernels: the same-dtype strided copy. Dense runs are one
   memcpy, other runs move fixed-size items, a transposed pair of inner
   dimensions is tiled through SSE2 register transposes, and a copy too
   large for the cache writes with non-temporal stores; large copies are
   shared out over the worker pool.

   Part of the C kernels, included through src/dlref_kernels.h. */

#ifndef DLREF_COPY_H
#define DLREF_COPY_H

#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include "dlref_alloc.h"
#include "dlref_coalesce.h"
#include "dlref_split.h"

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
   at 8 MiB they are 1.15x slower. Not into memory just mapped (a new
   destination of DLREF_FRESH_MAPPING bytes or more): the kernel zeroes each
   page as the copy first touches it, through the cache, and streaming
   stores over those cached zeros cost more than plain ones (a 64 MiB copy
   into a new Array, one thread: 9.2 ms streamed, 5.9 ms cached; 1 GiB on two
   threads: 113 ms against 58 ms). */
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
   2 * dlref_pool_grain bytes moved on. `fresh`: the destination was just
   allocated (dlref_aligned_alloc), so from DLREF_FRESH_MAPPING bytes on its
   pages are new (no streaming stores, above). Returns -1 (nothing done) when
   ndim exceeds DLREF_MAX_NDIM. */
static int dlref_strided_copy(char* dst, const int64_t* dst_strides, const char* src,
                              const int64_t* src_strides, const int64_t* shape, int ndim, size_t itemsize,
                              int threads, int fresh) {
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
    stream = count * (int64_t)itemsize >= DLREF_STREAM_BYTES
             && !(fresh && count * (int64_t)itemsize >= (int64_t)DLREF_FRESH_MAPPING);
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

#endif /* DLREF_COPY_H */
