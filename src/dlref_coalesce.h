/* dlpack-ref kernels: dimension coalescing. Two arrays of one shape (a
   copy's destination and source) described by as few dimensions as
   possible, read forward, and walked by an odometer; every host copy and
   conversion, and the CUDA layer's plan of driver copies, start here.

   Part of the C kernels, included through src/dlref_kernels.h. */

#ifndef DLREF_COALESCE_H
#define DLREF_COALESCE_H

#include <stdint.h>

#define DLREF_MAX_NDIM 64

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

#endif /* DLREF_COALESCE_H */
