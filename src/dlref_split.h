/* dlpack-ref kernels: splitting a copy or conversion over the worker pool
   (src/dlref_pool.h). A coalesced array is cut into parts of at least the
   measured grain, each part into at most three pieces of whole or partial
   rows; the pool runs one function on every piece.

   Part of the C kernels, included through src/dlref_kernels.h. */

#ifndef DLREF_SPLIT_H
#define DLREF_SPLIT_H

#include <stdint.h>
#include <string.h>
#include "dlref_pool.h"
#include "dlref_coalesce.h"

/* Each part of a parallel job moves at least this many bytes (read plus
   written); a smaller job runs on one thread. Measured, not guessed:
   benchmarks/pool_threshold.py, docs/benchmarks.md ("Worker pool
   threshold"). dlref_pool_grain can be changed for that sweep and for the
   tests that split small arrays (the core's _set_pool_grain). */
#define DLREF_POOL_GRAIN ((int64_t)128 << 10)
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

#endif /* DLREF_SPLIT_H */
