/* dlpack-ref kernels: host allocation. 256-byte aligned blocks, advised as
   huge pages from 2 MiB on, freed with one free() (a few small ones kept
   for reuse); what an Array's host memory comes from. Every block keeps
   DLREF_HEAD bytes before its data, its owner's first (the core keeps the
   block's C reference count there).

   Part of the C kernels, included through src/dlref_kernels.h. */

#ifndef DLREF_ALLOC_H
#define DLREF_ALLOC_H

#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#if !defined(_WIN32)
#include <sys/mman.h>
#endif

#define DLREF_HUGE_THRESHOLD ((size_t)2 << 20)
#define DLREF_ALIGN 256
/* From this size on a block is a fresh mapping (below). */
#define DLREF_FRESH_MAPPING ((size_t)32 << 20)
/* Bytes before the data: the block's owner's first, then the word that
   holds the block's small-block class (0: none) and, last, the word that
   holds the block's own address (32-byte aligned, as the data). */
#define DLREF_HEAD 32
#define DLREF_HEAD_OWNER (DLREF_HEAD - 2 * sizeof(void*))

#if defined(_WIN32)
#include <malloc.h>
static void* dlref_aligned_alloc(size_t n) {
    char* q = (char*)_aligned_offset_malloc(n + DLREF_HEAD, DLREF_ALIGN, DLREF_HEAD);
    return q == NULL ? NULL : q + DLREF_HEAD;
}
static void dlref_aligned_free(void* p) { if (p != NULL) _aligned_free((char*)p - DLREF_HEAD); }
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
   one, so one free serves both, and its small-block class in the word
   before that. */
/* Small blocks freed here are kept, a few of each class of
   DLREF_SMALL_STEP bytes, for the next allocation of their class, as
   NumPy keeps its small data blocks: malloc serves a 1 KiB block with the
   room to align it past its per-thread cache, at about a quarter of a
   small copy's cost. Lock-free and safe without the GIL: a slot is taken by
   exchanging it with NULL and filled by a compare-and-swap from NULL. At
   most DLREF_SMALL_SLOTS blocks of each class are kept (about 160 KiB in all). */
#define DLREF_SMALL_STEP 256
#define DLREF_SMALL_CLASSES 16
#define DLREF_SMALL_SLOTS 4
static void* dlref_small_blocks[DLREF_SMALL_CLASSES][DLREF_SMALL_SLOTS];

static void* dlref_small_take(size_t cls) {
    int i;
    for (i = 0; i < DLREF_SMALL_SLOTS; ++i) {
        void* raw = __atomic_exchange_n(&dlref_small_blocks[cls - 1][i], NULL, __ATOMIC_ACQUIRE);
        if (raw != NULL) return raw;
    }
    return malloc(cls * DLREF_SMALL_STEP + DLREF_HEAD + DLREF_ALIGN);
}

static void dlref_small_give(size_t cls, void* raw) {
    int i;
    for (i = 0; i < DLREF_SMALL_SLOTS; ++i) {
        void* empty = NULL;
        if (__atomic_compare_exchange_n(&dlref_small_blocks[cls - 1][i], &empty, raw, 0, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED))
            return;
    }
    free(raw);
}

static void* dlref_aligned_alloc(size_t n) {
    void* raw = NULL;
    char* p;
    size_t cls = 0;
    if (n > SIZE_MAX - 2 * DLREF_ALIGN - DLREF_HEAD) return NULL;
    if (n <= (size_t)DLREF_SMALL_STEP * DLREF_SMALL_CLASSES) {
        cls = n == 0 ? 1 : (n + DLREF_SMALL_STEP - 1) / DLREF_SMALL_STEP;
        raw = dlref_small_take(cls);
        if (raw == NULL) return NULL;
        p = (char*)(((uintptr_t)raw + DLREF_HEAD + DLREF_ALIGN - 1) & ~(uintptr_t)(DLREF_ALIGN - 1));
    } else if (n >= DLREF_FRESH_MAPPING) {
        if (posix_memalign(&raw, DLREF_HUGE_THRESHOLD, n + DLREF_ALIGN) != 0) return NULL;
#if defined(MADV_HUGEPAGE)
        madvise(raw, (n + DLREF_ALIGN) & ~(size_t)4095, MADV_HUGEPAGE);
#endif
        p = (char*)raw + DLREF_ALIGN;
    } else {
        raw = malloc(n + DLREF_HEAD + DLREF_ALIGN);
        if (raw == NULL) return NULL;
        p = (char*)(((uintptr_t)raw + DLREF_HEAD + DLREF_ALIGN - 1) & ~(uintptr_t)(DLREF_ALIGN - 1));
#if defined(MADV_HUGEPAGE)
        if (n >= DLREF_HUGE_THRESHOLD) {
            uintptr_t first = ((uintptr_t)raw + 4095) & ~(uintptr_t)4095;
            uintptr_t end = ((uintptr_t)raw + n + DLREF_HEAD + DLREF_ALIGN) & ~(uintptr_t)4095;
            madvise((void*)first, end - first, MADV_HUGEPAGE);
        }
#endif
    }
    ((void**)p)[-1] = raw;
    ((size_t*)p)[-2] = cls;
    return p;
}
static void dlref_aligned_free(void* p) {
    if (p == NULL) return;
    if (((size_t*)p)[-2]) dlref_small_give(((size_t*)p)[-2], ((void**)p)[-1]);
    else free(((void**)p)[-1]);
}
#endif

#endif /* DLREF_ALLOC_H */
