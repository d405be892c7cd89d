/* A simulated CUDA driver (libcuda.so.1) for the tests: the real
 * cuda.bindings resolves its entry points through cuGetProcAddress_v2.
 *
 * Device, managed and pinned memory are host memory (fresh allocations are
 * filled with POISON). Every stream keeps a queue of its work, and the queue
 * runs only when CUDA's rules force it: cuStreamSynchronize,
 * cuEventSynchronize, cuCtxSynchronize, and a copy into pageable host memory
 * (which returns only once it is complete). Ordering between streams is only
 * what CUDA promises: cuStreamWaitEvent, and the legacy default stream's
 * implicit synchronization with the blocking streams of its context. So a
 * missing event record or stream wait shows up as stale bytes.
 *
 * Rules that a careless caller breaks are refused with the driver's error
 * and recorded as violations that the tests read (cudasim_violations):
 * a default stream with no current context, a destroyed stream or event, an
 * event recorded on a stream of another context, memory types of 2-D copies
 * that do not match the pointer, pitches above the device limit, copies out
 * of an allocation's bounds, pending work that runs after its memory was
 * freed, a pop from an empty context stack.
 *
 * Each device has a default memory pool (cuDeviceGetDefaultMemPool,
 * cuMemPoolGet/SetAttribute): cuMemAllocAsync reuses blocks freed by
 * cuMemFreeAsync in stream order, a free poisons its block when it runs,
 * work that runs after the free of the memory it was enqueued for is a
 * violation, and memory above the release threshold goes back at a
 * synchronization. CUDASIM_MEMORY_POOLS=0 (or cudasim_set_memory_pools)
 * makes devices report no pool support. Counters per entry point
 * (cudasim_counter) let tests count allocations.
 *
 * No CUDA header is needed: the few types are declared here. Built by
 * tests/support/cudasim.py.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext;
typedef void *CUstream;
typedef void *CUevent;
typedef void *CUmemoryPool;

enum {
    CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1, CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3, CUDA_ERROR_NO_DEVICE = 100, CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201, CUDA_ERROR_INVALID_HANDLE = 400, CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600, CUDA_ERROR_ILLEGAL_ADDRESS = 700, CUDA_ERROR_NOT_SUPPORTED = 801,
};

enum { MEM_HOST = 1, MEM_DEVICE = 2, MEM_ARRAY = 3, MEM_UNIFIED = 4 };  /* CUmemorytype */
enum { KIND_DEVICE = 1, KIND_MANAGED = 2, KIND_PINNED = 3 };           /* allocations */

#define POISON 0xA5
#define MAX_DEVICES 8
#define MAX_PITCH 2147483647ULL   /* CU_DEVICE_ATTRIBUTE_MAX_PITCH */
#define TOTAL_MEM (16ULL << 30)

typedef struct CUDA_MEMCPY2D_st {
    size_t srcXInBytes, srcY;
    int srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    void *srcArray;
    size_t srcPitch;
    size_t dstXInBytes, dstY;
    int dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    void *dstArray;
    size_t dstPitch;
    size_t WidthInBytes, Height;
} CUDA_MEMCPY2D;

/* --- state ------------------------------------------------------------ */

struct stream;

typedef struct {
    int device;
    struct stream *legacy;
} Context;

enum { OP_COPY, OP_COPY2D, OP_MEMSET, OP_WAIT, OP_FREE };

typedef struct {
    int type;
    char *dst;
    const char *src;
    size_t n, dpitch, spitch, height;
    unsigned char value;
    char *snapshot;          /* pageable source copied at enqueue */
    struct stream *wait_on;  /* OP_WAIT */
    size_t wait_seq;
    const char *call;
    struct alloc *dst_alloc, *src_alloc;  /* driver memory the op touches, */
    unsigned dst_gen, src_gen;            /* as allocated when it was enqueued */
} Op;

enum { STREAM_USER = 0, STREAM_LEGACY = 1, STREAM_PER_THREAD = 2 };

typedef struct stream {
    Context *ctx;
    int kind, blocking, alive;
    Op *ops;
    size_t n, cap, done;
} Stream;

typedef struct {
    Context *ctx;
    int alive, recorded;
    Stream *stream;
    size_t seq;
} Event;

typedef struct alloc {
    char *ptr;
    size_t size;
    int kind, device, live;
    /* Memory of a pool (cuMemAllocAsync): cap is the block's real size;
     * gen counts its allocations; freed_gen is the last generation whose
     * cuMemFreeAsync has run; free_pending: a free is enqueued. */
    int pooled, free_pending;
    size_t cap;
    unsigned gen, freed_gen;
} Alloc;

/* A device's default memory pool: blocks freed by cuMemFreeAsync wait here
 * for reuse, in stream order. */
typedef struct {
    Alloc *alloc;
    struct stream *freed_on;
    size_t free_seq;   /* the free has run once freed_on->done >= free_seq */
    unsigned gen;
} PoolBlock;

typedef struct {
    int device;
    unsigned long long release_threshold;
    int follow_events, opportunistic, internal_deps;
    PoolBlock *blocks;
    size_t n, cap;
} MemPool;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialized, device_count = 2;
static Context contexts[MAX_DEVICES];
static int retained[MAX_DEVICES];
static MemPool mempools[MAX_DEVICES];
static int memory_pools_supported = 1;   /* CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED */

#define VEC(T, name) static T **name; static size_t name##_n, name##_cap;
VEC(Stream, streams)
VEC(Event, events)
VEC(Alloc, allocs)
#define PUSH(name, item) do { \
    if (name##_n == name##_cap) { name##_cap = name##_cap ? 2 * name##_cap : 64; \
        name = realloc(name, name##_cap * sizeof *name); } \
    name[name##_n++] = (item); } while (0)

static __thread Context *ctx_stack[64];
static __thread int ctx_depth;
static __thread Stream *per_thread[MAX_DEVICES];

static char *violation_log;
static size_t violation_len, violation_count;

/* counters readable through cudasim_counter */
static long n_alloc, n_free, n_events_created, n_events_destroyed, n_ctx_sync,
    n_stream_sync, n_event_sync, n_waits, n_records, n_copies, n_retains;
/* per entry point: cuMemAlloc, cuMemFree, cuMemHostAlloc/cuMemAllocHost,
 * cuMemFreeHost, cuMemAllocAsync, cuMemFreeAsync; pool blocks reused, made
 * (the pool grew) and released back to the system (above the threshold) */
static long n_mem_alloc, n_mem_free, n_host_alloc, n_host_free, n_alloc_async, n_free_async,
    n_pool_reuse, n_pool_grow, n_pool_release;

static void violation(const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if (k > (int)sizeof line - 2) k = sizeof line - 2;
    line[k++] = '\n';
    violation_log = realloc(violation_log, violation_len + k + 1);
    memcpy(violation_log + violation_len, line, k);
    violation_len += k;
    violation_log[violation_len] = 0;
    violation_count++;
}

#define ENTER(name) \
    pthread_mutex_lock(&lock); \
    const char *call_name = name; (void)call_name; \
    if (!initialized) { pthread_mutex_unlock(&lock); return CUDA_ERROR_NOT_INITIALIZED; }
#define RETURN(r) do { CUresult r_ = (r); pthread_mutex_unlock(&lock); return r_; } while (0)
#define FAIL(r, ...) do { violation(__VA_ARGS__); RETURN(r); } while (0)

static Context *current(void) { return ctx_depth ? ctx_stack[ctx_depth - 1] : NULL; }

static Context *find_context(CUcontext h) {
    for (int i = 0; i < device_count; i++)
        if (h == (CUcontext)&contexts[i]) return &contexts[i];
    return NULL;
}

static Stream *new_stream(Context *ctx, int kind, int blocking) {
    Stream *s = calloc(1, sizeof *s);
    s->ctx = ctx;
    s->kind = kind;
    s->blocking = blocking;
    s->alive = 1;
    PUSH(streams, s);
    return s;
}

static int is_stream(void *h) {
    for (size_t i = 0; i < streams_n; i++) if ((void *)streams[i] == h) return 1;
    return 0;
}

/* The stream a handle names: 0 and 1 (CU_STREAM_LEGACY) the legacy stream
 * of the current context, 2 (CU_STREAM_PER_THREAD) the calling thread's
 * per-thread stream of the current context; a handle is looked up (never
 * dereferenced blindly). NULL with *err set when it is refused. */
static Stream *resolve(CUstream h, const char *call, CUresult *err) {
    uintptr_t v = (uintptr_t)h;
    if (v <= 2) {
        Context *c = current();
        if (!c) {
            violation("%s: default stream %lu used with no current context", call, (unsigned long)v);
            *err = CUDA_ERROR_INVALID_CONTEXT;
            return NULL;
        }
        if (v < 2) return c->legacy;
        int d = c->device;
        if (!per_thread[d]) per_thread[d] = new_stream(c, STREAM_PER_THREAD, 1);
        return per_thread[d];
    }
    if (!is_stream(h)) {
        violation("%s: %p is not a stream", call, h);
        *err = CUDA_ERROR_INVALID_HANDLE;
        return NULL;
    }
    Stream *s = h;
    if (!s->alive) {
        violation("%s: stream %p was destroyed", call, h);
        *err = CUDA_ERROR_INVALID_HANDLE;
        return NULL;
    }
    return s;
}

static Event *find_event(CUevent h, const char *call, CUresult *err) {
    for (size_t i = 0; i < events_n; i++) {
        if ((void *)events[i] != h) continue;
        if (!events[i]->alive) {
            violation("%s: event %p was destroyed", call, h);
            *err = CUDA_ERROR_INVALID_HANDLE;
            return NULL;
        }
        return events[i];
    }
    violation("%s: %p is not an event", call, h);
    *err = CUDA_ERROR_INVALID_HANDLE;
    return NULL;
}

/* The allocation holding [p, p+n): a live one first, else a freed one
 * (returned with ->live == 0); NULL for memory the driver did not allocate
 * (pageable host memory). */
static Alloc *find_alloc(const void *p, size_t n) {
    const char *c = p;
    Alloc *freed = NULL;
    for (size_t i = allocs_n; i-- > 0;) {
        Alloc *a = allocs[i];
        if (c >= a->ptr && c < a->ptr + (a->size ? a->size : 1)) {
            if (a->live) {
                (void)n;
                return a;
            }
            if (!freed) freed = a;
        }
    }
    return freed;
}

/* --- queues ---------------------------------------------------------- */

static Alloc *find_alloc(const void *p, size_t n);
static void release_pools(void);

static void push_op(Stream *s, Op op) {
    if (op.type == OP_COPY || op.type == OP_COPY2D || op.type == OP_MEMSET) {
        Alloc *d = find_alloc(op.dst, 1), *r = op.src ? find_alloc(op.src, 1) : NULL;
        if (d && d->live) { op.dst_alloc = d; op.dst_gen = d->gen; }
        if (r && r->live && !op.snapshot) { op.src_alloc = r; op.src_gen = r->gen; }
        if ((d && d->live && d->free_pending) || (r && r->live && r->free_pending && !op.snapshot))
            violation("%s: enqueued on memory %p whose cuMemFreeAsync is already enqueued", op.call,
                      (void *)(d && d->free_pending ? op.dst : op.src));
    }
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 16;
        s->ops = realloc(s->ops, s->cap * sizeof *s->ops);
    }
    s->ops[s->n++] = op;
}

static void push_wait(Stream *s, Stream *on, size_t seq) {
    if (on == s || on->done >= seq) return;
    Op w = {0};
    w.type = OP_WAIT;
    w.wait_on = on;
    w.wait_seq = seq;
    push_op(s, w);
}

/* Enqueue work with the implicit ordering of the legacy default stream: it
 * waits for the blocking streams of its context, and they wait for it. */
static void enqueue(Stream *s, Op op) {
    if (s->kind == STREAM_LEGACY) {
        for (size_t i = 0; i < streams_n; i++) {
            Stream *t = streams[i];
            if (t != s && t->ctx == s->ctx && t->blocking) push_wait(s, t, t->n);
        }
    } else if (s->blocking) {
        push_wait(s, s->ctx->legacy, s->ctx->legacy->n);
    }
    push_op(s, op);
}

/* Work on pool memory whose free (of the generation it was enqueued for)
 * has run is a use after free, even when the block was allocated again. */
static int check_generation(const Alloc *a, unsigned gen, const char *p, const char *what, const Op *op) {
    if (a && a->pooled && a->freed_gen >= gen) {
        violation("%s: pending work ran after cuMemFreeAsync of its %s memory %p", op->call, what, (void *)p);
        return 0;
    }
    return 1;
}

static int check_live(const char *p, size_t n, const char *what, const Op *op) {
    if (!n) return 1;
    if (!check_generation(what[0] == 'd' ? op->dst_alloc : op->src_alloc,
                          what[0] == 'd' ? op->dst_gen : op->src_gen, p, what, op))
        return 0;
    Alloc *a = find_alloc(p, n);
    if (a && !a->live) {
        violation("%s: pending work ran after cuMemFree of its %s memory %p", op->call, what, (void *)p);
        return 0;
    }
    return 1;
}

static void run(Stream *s, size_t upto);

static void execute(Op *op) {
    switch (op->type) {
    case OP_WAIT:
        run(op->wait_on, op->wait_seq);
        break;
    case OP_COPY: {
        const char *src = op->snapshot ? op->snapshot : op->src;
        if (check_live(op->dst, op->n, "destination", op) && (op->snapshot || check_live(op->src, op->n, "source", op)))
            memmove(op->dst, src, op->n);
        break;
    }
    case OP_COPY2D: {
        const char *src = op->snapshot ? op->snapshot : op->src;
        size_t spitch = op->snapshot ? op->n : op->spitch;
        if (!check_live(op->dst, op->n, "destination", op) || (!op->snapshot && !check_live(op->src, op->n, "source", op)))
            break;
        for (size_t r = 0; r < op->height; r++) memmove(op->dst + r * op->dpitch, src + r * spitch, op->n);
        break;
    }
    case OP_MEMSET:
        if (check_live(op->dst, op->n, "destination", op)) memset(op->dst, op->value, op->n);
        break;
    case OP_FREE: {
        if (op->dst_alloc) {            /* pool memory: poisoned, reusable in stream order */
            Alloc *a = op->dst_alloc;
            if (a->freed_gen < op->dst_gen) a->freed_gen = op->dst_gen;
            if (a->gen == op->dst_gen) a->live = 0;
            memset(a->ptr, POISON, a->cap);
            break;
        }
        Alloc *a = find_alloc(op->dst, 1);
        if (a && a->live && a->ptr == op->dst) {
            a->live = 0;
            free(a->ptr);
            n_free++;
        }
        break;
    }
    }
    free(op->snapshot);
    op->snapshot = NULL;
}

static void run(Stream *s, size_t upto) {
    if (upto > s->n) upto = s->n;
    while (s->done < upto) {
        Op *op = &s->ops[s->done];
        execute(op);
        s->done++;
    }
}

static void run_context(Context *c) {
    for (size_t i = 0; i < streams_n; i++)
        if (streams[i]->ctx == c) run(streams[i], streams[i]->n);
}

/* --- entry points ---------------------------------------------------- */

static CUresult simInit(unsigned int flags) {
    pthread_mutex_lock(&lock);
    if (flags) { pthread_mutex_unlock(&lock); return CUDA_ERROR_INVALID_VALUE; }
    if (!initialized) {
        const char *env = getenv("CUDASIM_DEVICES");
        if (env) device_count = atoi(env);
        if (device_count < 0) device_count = 0;
        if (device_count > MAX_DEVICES) device_count = MAX_DEVICES;
        const char *pools = getenv("CUDASIM_MEMORY_POOLS");
        if (pools) memory_pools_supported = atoi(pools) != 0;
        for (int i = 0; i < device_count; i++) {
            mempools[i].device = i;
            mempools[i].follow_events = mempools[i].opportunistic = mempools[i].internal_deps = 1;
        }
        for (int i = 0; i < device_count; i++) {
            contexts[i].device = i;
            contexts[i].legacy = new_stream(&contexts[i], STREAM_LEGACY, 0);
        }
        initialized = 1;
    }
    CUresult r = device_count ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
    pthread_mutex_unlock(&lock);
    return r;
}

static CUresult simDriverGetVersion(int *v) {
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    *v = 13000;
    return CUDA_SUCCESS;
}

static CUresult simDeviceGetCount(int *count) {
    ENTER("cuDeviceGetCount");
    *count = device_count;
    RETURN(CUDA_SUCCESS);
}

static CUresult simDeviceGet(CUdevice *dev, int ordinal) {
    ENTER("cuDeviceGet");
    if (ordinal < 0 || ordinal >= device_count) RETURN(CUDA_ERROR_INVALID_DEVICE);
    *dev = ordinal;
    RETURN(CUDA_SUCCESS);
}

static CUresult simDeviceGetName(char *name, int len, CUdevice dev) {
    ENTER("cuDeviceGetName");
    if (dev < 0 || dev >= device_count) RETURN(CUDA_ERROR_INVALID_DEVICE);
    snprintf(name, len, "dlpack-ref simulated GPU %d", dev);
    RETURN(CUDA_SUCCESS);
}

static CUresult simDeviceTotalMem(size_t *bytes, CUdevice dev) {
    ENTER("cuDeviceTotalMem");
    if (dev < 0 || dev >= device_count) RETURN(CUDA_ERROR_INVALID_DEVICE);
    *bytes = TOTAL_MEM;
    RETURN(CUDA_SUCCESS);
}

static CUresult simDeviceGetAttribute(int *value, int attr, CUdevice dev) {
    ENTER("cuDeviceGetAttribute");
    if (dev < 0 || dev >= device_count) RETURN(CUDA_ERROR_INVALID_DEVICE);
    switch (attr) {
    case 11: *value = (int)MAX_PITCH; break;        /* MAX_PITCH */
    case 16: *value = 132; break;                   /* MULTIPROCESSOR_COUNT */
    case 75: *value = 9; break;                     /* COMPUTE_CAPABILITY_MAJOR */
    case 76: *value = 0; break;                     /* COMPUTE_CAPABILITY_MINOR */
    case 1: *value = 1024; break;                   /* MAX_THREADS_PER_BLOCK */
    case 14: *value = 1; break;                     /* GPU_OVERLAP */
    case 41: *value = 1; break;                     /* UNIFIED_ADDRESSING */
    case 83: *value = 1; break;                     /* MANAGED_MEMORY */
    case 89: *value = 1; break;                     /* CONCURRENT_MANAGED_ACCESS */
    case 115: *value = memory_pools_supported; break; /* MEMORY_POOLS_SUPPORTED */
    default: *value = 0;
    }
    RETURN(CUDA_SUCCESS);
}

static CUresult simDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer) {
    ENTER("cuDeviceCanAccessPeer");
    if (dev < 0 || dev >= device_count || peer < 0 || peer >= device_count) RETURN(CUDA_ERROR_INVALID_DEVICE);
    *can = dev != peer;
    RETURN(CUDA_SUCCESS);
}

static CUresult simDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
    ENTER("cuDevicePrimaryCtxRetain");
    if (dev < 0 || dev >= device_count) RETURN(CUDA_ERROR_INVALID_DEVICE);
    retained[dev]++;
    n_retains++;
    *pctx = &contexts[dev];
    RETURN(CUDA_SUCCESS);
}

static CUresult simDevicePrimaryCtxRelease(CUdevice dev) {
    ENTER("cuDevicePrimaryCtxRelease");
    if (dev < 0 || dev >= device_count) RETURN(CUDA_ERROR_INVALID_DEVICE);
    if (retained[dev] <= 0) FAIL(CUDA_ERROR_INVALID_CONTEXT, "cuDevicePrimaryCtxRelease: device %d not retained", dev);
    retained[dev]--;
    RETURN(CUDA_SUCCESS);
}

static CUresult simCtxGetCurrent(CUcontext *pctx) {
    ENTER("cuCtxGetCurrent");
    *pctx = current();
    RETURN(CUDA_SUCCESS);
}

static CUresult simCtxSetCurrent(CUcontext h) {
    ENTER("cuCtxSetCurrent");
    if (!h) {
        if (ctx_depth) ctx_depth--;
        RETURN(CUDA_SUCCESS);
    }
    Context *c = find_context(h);
    if (!c) FAIL(CUDA_ERROR_INVALID_CONTEXT, "cuCtxSetCurrent: %p is not a context", h);
    if (!retained[c->device]) FAIL(CUDA_ERROR_INVALID_CONTEXT, "cuCtxSetCurrent: primary context %d not retained", c->device);
    if (ctx_depth) ctx_stack[ctx_depth - 1] = c; else ctx_stack[ctx_depth++] = c;
    RETURN(CUDA_SUCCESS);
}

static CUresult simCtxPushCurrent(CUcontext h) {
    ENTER("cuCtxPushCurrent");
    Context *c = find_context(h);
    if (!c) FAIL(CUDA_ERROR_INVALID_CONTEXT, "cuCtxPushCurrent: %p is not a context", h);
    if (!retained[c->device]) FAIL(CUDA_ERROR_INVALID_CONTEXT, "cuCtxPushCurrent: primary context %d not retained", c->device);
    if (ctx_depth == 64) FAIL(CUDA_ERROR_INVALID_VALUE, "cuCtxPushCurrent: context stack overflow");
    ctx_stack[ctx_depth++] = c;
    RETURN(CUDA_SUCCESS);
}

static CUresult simCtxPopCurrent(CUcontext *pctx) {
    ENTER("cuCtxPopCurrent");
    if (!ctx_depth) FAIL(CUDA_ERROR_INVALID_CONTEXT, "cuCtxPopCurrent: no current context");
    Context *c = ctx_stack[--ctx_depth];
    if (pctx) *pctx = c;
    RETURN(CUDA_SUCCESS);
}

static CUresult simCtxGetDevice(CUdevice *dev) {
    ENTER("cuCtxGetDevice");
    Context *c = current();
    if (!c) FAIL(CUDA_ERROR_INVALID_CONTEXT, "cuCtxGetDevice: no current context");
    *dev = c->device;
    RETURN(CUDA_SUCCESS);
}

static CUresult simCtxSynchronize(void) {
    ENTER("cuCtxSynchronize");
    Context *c = current();
    if (!c) FAIL(CUDA_ERROR_INVALID_CONTEXT, "cuCtxSynchronize: no current context");
    n_ctx_sync++;
    run_context(c);
    release_pools();
    RETURN(CUDA_SUCCESS);
}

static CUresult simCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
    ENTER("cuCtxEnablePeerAccess");
    (void)flags;
    if (!current() || !find_context(peer)) RETURN(CUDA_ERROR_INVALID_CONTEXT);
    RETURN(CUDA_SUCCESS);
}

/* memory */

static CUresult alloc(void **out, size_t size, int kind, const char *call) {
    Context *c = current();
    if (!c) {
        violation("%s: no current context", call);
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (!size) return CUDA_ERROR_INVALID_VALUE;
    char *p = aligned_alloc(256, (size + 255) & ~(size_t)255);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    memset(p, POISON, size);
    Alloc *a = calloc(1, sizeof *a);
    a->ptr = p;
    a->size = size;
    a->kind = kind;
    a->device = c->device;
    a->live = 1;
    PUSH(allocs, a);
    n_alloc++;
    *out = p;
    return CUDA_SUCCESS;
}

static CUresult simMemAlloc(CUdeviceptr *p, size_t size) {
    ENTER("cuMemAlloc");
    CUresult r = alloc((void **)p, size, KIND_DEVICE, call_name);
    if (!r) n_mem_alloc++;
    RETURN(r);
}

static CUresult simMemAllocManaged(CUdeviceptr *p, size_t size, unsigned int flags) {
    ENTER("cuMemAllocManaged");
    if (flags != 1 && flags != 2) FAIL(CUDA_ERROR_INVALID_VALUE, "cuMemAllocManaged: flags %u", flags);
    RETURN(alloc((void **)p, size, KIND_MANAGED, call_name));
}

static CUresult simMemHostAlloc(void **p, size_t size, unsigned int flags) {
    ENTER("cuMemHostAlloc");
    (void)flags;
    CUresult r = alloc(p, size, KIND_PINNED, call_name);
    if (!r) n_host_alloc++;
    RETURN(r);
}

static CUresult simMemAllocHost(void **p, size_t size) {
    ENTER("cuMemAllocHost");
    CUresult r = alloc(p, size, KIND_PINNED, call_name);
    if (!r) n_host_alloc++;
    RETURN(r);
}

/* cuMemFree "may" synchronize (cuda.h): here it does not, so pending work on
 * freed memory is reported when it runs. */
static CUresult free_alloc(void *p, int host, const char *call) {
    Alloc *a = find_alloc(p, 1);
    if (!a || !a->live || a->ptr != p) {
        violation("%s: %p is not the start of a live allocation", call, p);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (host != (a->kind == KIND_PINNED)) {
        violation("%s: %p was allocated as %s memory", call, p, a->kind == KIND_PINNED ? "pinned host" : "device");
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (a->pooled) {
        violation("%s: %p belongs to a memory pool (cuMemAllocAsync): free it with cuMemFreeAsync", call, p);
        return CUDA_ERROR_INVALID_VALUE;
    }
    a->live = 0;
    if (host) n_host_free++; else n_mem_free++;
    /* The bytes stay allocated (poisoned) so late work is detected, not a crash. */
    memset(a->ptr, POISON, a->size);
    n_free++;
    return CUDA_SUCCESS;
}

static CUresult simMemFree(CUdeviceptr p) {
    ENTER("cuMemFree");
    RETURN(free_alloc((void *)(uintptr_t)p, 0, call_name));
}

static CUresult simMemFreeHost(void *p) {
    ENTER("cuMemFreeHost");
    RETURN(free_alloc(p, 1, call_name));
}

/* Stream-ordered allocation from the device's default pool, with the reuse
 * rules of CUDA's pools: a block freed on the allocating stream is reused
 * in that stream's order; one freed on another stream is reused when its
 * free has already run (REUSE_ALLOW_OPPORTUNISTIC) or, with
 * REUSE_ALLOW_INTERNAL_DEPENDENCIES, after a wait the allocation inserts
 * on the freeing stream. A free's block is poisoned when the free runs;
 * work enqueued for the old allocation that runs later is a violation.
 * Blocks are not split: a block is reused for a request it fits (at most
 * twice the request). */
static CUresult simMemAllocAsync(CUdeviceptr *p, size_t size, CUstream h) {
    ENTER("cuMemAllocAsync");
    CUresult err;
    Stream *s = resolve(h, call_name, &err);
    if (!s) RETURN(err);
    if (!memory_pools_supported)
        FAIL(CUDA_ERROR_NOT_SUPPORTED, "cuMemAllocAsync: device %d reports no memory pool support", s->ctx->device);
    if (!size) RETURN(CUDA_ERROR_INVALID_VALUE);
    MemPool *pool = &mempools[s->ctx->device];
    Alloc *a = NULL;
    for (size_t i = 0; i < pool->n && !a; i++) {
        PoolBlock *b = &pool->blocks[i];
        if (b->alloc->cap < size || b->alloc->cap > 2 * size) continue;
        int done = b->freed_on->done >= b->free_seq;
        if (b->freed_on == s || (done && pool->opportunistic)) {
            a = b->alloc;
        } else if (pool->internal_deps) {
            push_wait(s, b->freed_on, b->free_seq);
            a = b->alloc;
        } else {
            continue;
        }
        pool->blocks[i] = pool->blocks[--pool->n];
    }
    if (a) {
        n_pool_reuse++;
    } else {
        Context *c = current();
        int pushed = 0;
        if (c != s->ctx) { ctx_stack[ctx_depth++] = s->ctx; pushed = 1; }
        void *fresh;
        CUresult r = alloc(&fresh, size, KIND_DEVICE, call_name);
        if (pushed) ctx_depth--;
        if (r) RETURN(r);
        a = find_alloc(fresh, 1);
        a->pooled = 1;
        a->cap = size;
        n_pool_grow++;
    }
    a->live = 1;
    a->free_pending = 0;
    a->size = size;
    a->gen++;
    /* The allocation is stream work: other streams use it after an event. */
    Op mark = {0};
    mark.type = OP_WAIT;
    mark.wait_on = s;
    enqueue(s, mark);
    n_alloc_async++;
    *p = (CUdeviceptr)(uintptr_t)a->ptr;
    RETURN(CUDA_SUCCESS);
}

static CUresult simMemFreeAsync(CUdeviceptr p, CUstream h) {
    ENTER("cuMemFreeAsync");
    CUresult err;
    Stream *s = resolve(h, call_name, &err);
    if (!s) RETURN(err);
    Alloc *a = find_alloc((void *)(uintptr_t)p, 1);
    if (!a || !a->live || a->free_pending || a->ptr != (char *)(uintptr_t)p || a->kind != KIND_DEVICE)
        FAIL(CUDA_ERROR_INVALID_VALUE, "cuMemFreeAsync: %p is not a live device allocation", (void *)(uintptr_t)p);
    Op op = {0};
    op.type = OP_FREE;
    op.dst = a->ptr;
    op.call = call_name;
    if (a->pooled) {
        op.dst_alloc = a;
        op.dst_gen = a->gen;
        a->free_pending = 1;
    }
    enqueue(s, op);
    n_free_async++;
    if (a->pooled) {
        MemPool *pool = &mempools[a->device];
        if (pool->n == pool->cap) {
            pool->cap = pool->cap ? 2 * pool->cap : 16;
            pool->blocks = realloc(pool->blocks, pool->cap * sizeof *pool->blocks);
        }
        PoolBlock b = {a, s, s->n, a->gen};
        pool->blocks[pool->n++] = b;
    }
    RETURN(CUDA_SUCCESS);
}

/* At a synchronization, a pool holding more freed (and completed) memory
 * than its release threshold gives it back to the system. */
static void release_pools(void) {
    for (int d = 0; d < device_count; d++) {
        MemPool *pool = &mempools[d];
        unsigned long long held = 0;
        for (size_t i = 0; i < pool->n; i++) held += pool->blocks[i].alloc->cap;
        for (size_t i = 0; i < pool->n && held > pool->release_threshold;) {
            PoolBlock *b = &pool->blocks[i];
            if (b->freed_on->done < b->free_seq) { i++; continue; }
            Alloc *a = b->alloc;
            held -= a->cap;
            a->pooled = 2;          /* released: never handed out again */
            for (size_t k = 0; k < allocs_n; k++)
                if (allocs[k] == a) { allocs[k] = allocs[--allocs_n]; break; }
            free(a->ptr);
            a->ptr = NULL;
            n_pool_release++;
            pool->blocks[i] = pool->blocks[--pool->n];
        }
    }
}

static MemPool *find_pool(CUmemoryPool h, const char *call, CUresult *err) {
    for (int i = 0; i < device_count; i++)
        if (h == (CUmemoryPool)&mempools[i]) return &mempools[i];
    violation("%s: %p is not a memory pool", call, h);
    *err = CUDA_ERROR_INVALID_VALUE;
    return NULL;
}

static CUresult simDeviceGetDefaultMemPool(CUmemoryPool *out, CUdevice dev) {
    ENTER("cuDeviceGetDefaultMemPool");
    if (dev < 0 || dev >= device_count) RETURN(CUDA_ERROR_INVALID_DEVICE);
    if (!memory_pools_supported)
        FAIL(CUDA_ERROR_NOT_SUPPORTED, "cuDeviceGetDefaultMemPool: device %d reports no memory pool support", dev);
    *out = &mempools[dev];
    RETURN(CUDA_SUCCESS);
}

/* CUmemPool_attribute: 1-3 reuse flags (int), 4 release threshold,
 * 5 reserved and 7 used memory (cuuint64_t, 5 and 7 read-only). */
/* The pool an attribute call names, and its value pointer, checked. */
#define ENTER_POOL(name) \
    ENTER(name); \
    CUresult err; \
    MemPool *pool = find_pool(h, call_name, &err); \
    if (!pool) RETURN(err); \
    if (!value) RETURN(CUDA_ERROR_INVALID_VALUE);

static int *pool_flag(MemPool *pool, int attr) {
    if (attr == 1) return &pool->follow_events;
    if (attr == 2) return &pool->opportunistic;
    if (attr == 3) return &pool->internal_deps;
    return NULL;
}

static CUresult simMemPoolSetAttribute(CUmemoryPool h, int attr, void *value) {
    ENTER_POOL("cuMemPoolSetAttribute");
    int *flag = pool_flag(pool, attr);
    if (flag) *flag = *(int *)value != 0;
    else if (attr == 4) pool->release_threshold = *(unsigned long long *)value;
    else FAIL(CUDA_ERROR_INVALID_VALUE, "cuMemPoolSetAttribute: attribute %d cannot be set here", attr);
    RETURN(CUDA_SUCCESS);
}

static CUresult simMemPoolGetAttribute(CUmemoryPool h, int attr, void *value) {
    ENTER_POOL("cuMemPoolGetAttribute");
    unsigned long long reserved = 0, used = 0;
    for (size_t i = 0; i < allocs_n; i++) {
        Alloc *a = allocs[i];
        if (a->pooled != 1 || a->device != pool->device) continue;
        reserved += a->cap;
        if (a->live && !a->free_pending) used += a->cap;
    }
    int *flag = pool_flag(pool, attr);
    if (flag) *(int *)value = *flag;
    else if (attr == 4) *(unsigned long long *)value = pool->release_threshold;
    else if (attr == 5) *(unsigned long long *)value = reserved;
    else if (attr == 7) *(unsigned long long *)value = used;
    else RETURN(CUDA_ERROR_INVALID_VALUE);
    RETURN(CUDA_SUCCESS);
}

static CUresult simMemGetInfo(size_t *free_bytes, size_t *total) {
    ENTER("cuMemGetInfo");
    Context *c = current();
    if (!c) FAIL(CUDA_ERROR_INVALID_CONTEXT, "cuMemGetInfo: no current context");
    size_t used = 0;
    for (size_t i = 0; i < allocs_n; i++)
        if (allocs[i]->live && allocs[i]->kind != KIND_PINNED && allocs[i]->device == c->device) used += allocs[i]->size;
    *free_bytes = TOTAL_MEM - used;
    *total = TOTAL_MEM;
    RETURN(CUDA_SUCCESS);
}

/* Bounds of [p, p+n) against the allocation it starts in. */
static int in_bounds(const void *p, size_t n, const char *call, const char *what) {
    Alloc *a = find_alloc(p, n);
    if (!a) return 1;
    if (!a->live) {
        violation("%s: %s %p was freed", call, what, p);
        return 0;
    }
    if ((const char *)p + n > a->ptr + a->size) {
        violation("%s: %s [%p, +%zu) runs past its allocation of %zu bytes", call, what, p, n, a->size);
        return 0;
    }
    return 1;
}

/* A copy into pageable host memory returns once it is complete; a copy
 * from pageable host memory reads it at the call (staging). */
static CUresult copy(Stream *s, char *dst, const char *src, size_t n, const char *call) {
    if (!in_bounds(dst, n, call, "destination") || !in_bounds(src, n, call, "source"))
        return CUDA_ERROR_INVALID_VALUE;
    Op op = {0};
    op.type = OP_COPY;
    op.dst = dst;
    op.src = src;
    op.n = n;
    op.call = call;
    if (!find_alloc(src, n)) {
        op.snapshot = malloc(n ? n : 1);
        memcpy(op.snapshot, src, n);
    }
    enqueue(s, op);
    n_copies++;
    if (!find_alloc(dst, n)) run(s, s->n);
    return CUDA_SUCCESS;
}

static CUresult simMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h) {
    ENTER("cuMemcpyAsync");
    CUresult err;
    Stream *s = resolve(h, call_name, &err);
    if (!s) RETURN(err);
    RETURN(copy(s, (char *)(uintptr_t)dst, (const char *)(uintptr_t)src, n, call_name));
}

static CUresult simMemcpyPeerAsync(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n, CUstream h) {
    ENTER("cuMemcpyPeerAsync");
    if (!find_context(dctx) || !find_context(sctx)) FAIL(CUDA_ERROR_INVALID_CONTEXT, "cuMemcpyPeerAsync: bad context");
    CUresult err;
    Stream *s = resolve(h, call_name, &err);
    if (!s) RETURN(err);
    RETURN(copy(s, (char *)(uintptr_t)dst, (const char *)(uintptr_t)src, n, call_name));
}

/* Synchronous copy: on the legacy stream, complete on return. */
static CUresult simMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
    ENTER("cuMemcpy");
    Context *c = current();
    if (!c) FAIL(CUDA_ERROR_INVALID_CONTEXT, "cuMemcpy: no current context");
    CUresult r = copy(c->legacy, (char *)(uintptr_t)dst, (const char *)(uintptr_t)src, n, call_name);
    run(c->legacy, c->legacy->n);
    RETURN(r);
}

static const char *memtype_ptr(int type, const void *host, CUdeviceptr dev, const char *side, const char *call, CUresult *err) {
    const char *p = type == MEM_HOST ? host : (const char *)(uintptr_t)dev;
    Alloc *a = find_alloc(p, 1);
    if (type == MEM_HOST) {
        if (a && a->kind == KIND_DEVICE) {
            violation("%s: %s memory type HOST for device memory %p", call, side, (void *)p);
            *err = CUDA_ERROR_INVALID_VALUE;
            return NULL;
        }
    } else if (type == MEM_DEVICE || type == MEM_UNIFIED) {
        if (!a) {
            violation("%s: %s memory type %s for pageable host memory %p", call, side,
                      type == MEM_DEVICE ? "DEVICE" : "UNIFIED", (void *)p);
            *err = CUDA_ERROR_INVALID_VALUE;
            return NULL;
        }
    } else {
        violation("%s: %s memory type %d is not supported here", call, side, type);
        *err = CUDA_ERROR_INVALID_VALUE;
        return NULL;
    }
    return p;
}

static CUresult simMemcpy2DAsync(const CUDA_MEMCPY2D *p, CUstream h) {
    ENTER("cuMemcpy2DAsync");
    CUresult err;
    Stream *s = resolve(h, call_name, &err);
    if (!s) RETURN(err);
    if (p->srcPitch > MAX_PITCH || p->dstPitch > MAX_PITCH)
        FAIL(CUDA_ERROR_INVALID_VALUE, "cuMemcpy2DAsync: pitch %zu/%zu above the device limit %llu",
             p->srcPitch, p->dstPitch, MAX_PITCH);
    if (p->WidthInBytes > p->srcPitch || p->WidthInBytes > p->dstPitch)
        FAIL(CUDA_ERROR_INVALID_VALUE, "cuMemcpy2DAsync: width %zu above a pitch (%zu, %zu)",
             p->WidthInBytes, p->srcPitch, p->dstPitch);
    const char *src = memtype_ptr(p->srcMemoryType, p->srcHost, p->srcDevice, "source", call_name, &err);
    if (!src) RETURN(err);
    char *dst = (char *)memtype_ptr(p->dstMemoryType, p->dstHost, p->dstDevice, "destination", call_name, &err);
    if (!dst) RETURN(err);
    src += p->srcY * p->srcPitch + p->srcXInBytes;
    dst += p->dstY * p->dstPitch + p->dstXInBytes;
    size_t w = p->WidthInBytes, hgt = p->Height;
    if (!hgt || !w) RETURN(CUDA_SUCCESS);
    size_t sspan = (hgt - 1) * p->srcPitch + w, dspan = (hgt - 1) * p->dstPitch + w;
    if (!in_bounds(src, sspan, call_name, "source") || !in_bounds(dst, dspan, call_name, "destination"))
        RETURN(CUDA_ERROR_INVALID_VALUE);
    Op op = {0};
    op.type = OP_COPY2D;
    op.dst = dst;
    op.src = src;
    op.n = w;
    op.height = hgt;
    op.dpitch = p->dstPitch;
    op.spitch = p->srcPitch;
    op.call = call_name;
    if (!find_alloc(src, 1)) {
        op.snapshot = malloc(w * hgt);
        for (size_t r = 0; r < hgt; r++) memcpy(op.snapshot + r * w, src + r * p->srcPitch, w);
    }
    enqueue(s, op);
    n_copies++;
    if (!find_alloc(dst, 1)) run(s, s->n);
    RETURN(CUDA_SUCCESS);
}

static CUresult simMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream h) {
    ENTER("cuMemsetD8Async");
    CUresult err;
    Stream *s = resolve(h, call_name, &err);
    if (!s) RETURN(err);
    char *p = (char *)(uintptr_t)dst;
    if (!find_alloc(p, n)) FAIL(CUDA_ERROR_INVALID_VALUE, "cuMemsetD8Async: %p is not driver memory", (void *)p);
    if (!in_bounds(p, n, call_name, "destination")) RETURN(CUDA_ERROR_INVALID_VALUE);
    Op op = {0};
    op.type = OP_MEMSET;
    op.dst = p;
    op.n = n;
    op.value = v;
    op.call = call_name;
    enqueue(s, op);
    RETURN(CUDA_SUCCESS);
}

/* streams */

static CUresult simStreamCreate(CUstream *out, unsigned int flags) {
    ENTER("cuStreamCreate");
    Context *c = current();
    if (!c) FAIL(CUDA_ERROR_INVALID_CONTEXT, "cuStreamCreate: no current context");
    if (flags > 1) RETURN(CUDA_ERROR_INVALID_VALUE);
    *out = new_stream(c, STREAM_USER, !(flags & 1));
    RETURN(CUDA_SUCCESS);
}

static CUresult simStreamCreateWithPriority(CUstream *out, unsigned int flags, int priority) {
    (void)priority;
    return simStreamCreate(out, flags);
}

/* Work already enqueued still runs when something waits for it. */
static CUresult simStreamDestroy(CUstream h) {
    ENTER("cuStreamDestroy");
    if ((uintptr_t)h <= 2) FAIL(CUDA_ERROR_INVALID_HANDLE, "cuStreamDestroy: a default stream");
    CUresult err;
    Stream *s = resolve(h, call_name, &err);
    if (!s) RETURN(err);
    s->alive = 0;
    RETURN(CUDA_SUCCESS);
}

static CUresult simStreamSynchronize(CUstream h) {
    ENTER("cuStreamSynchronize");
    CUresult err;
    Stream *s = resolve(h, call_name, &err);
    if (!s) RETURN(err);
    n_stream_sync++;
    run(s, s->n);
    release_pools();
    RETURN(CUDA_SUCCESS);
}

static CUresult simStreamQuery(CUstream h) {
    ENTER("cuStreamQuery");
    CUresult err;
    Stream *s = resolve(h, call_name, &err);
    if (!s) RETURN(err);
    RETURN(s->done == s->n ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY);
}

static CUresult simStreamGetCtx(CUstream h, CUcontext *pctx) {
    ENTER("cuStreamGetCtx");
    CUresult err;
    Stream *s = resolve(h, call_name, &err);
    if (!s) RETURN(err);
    *pctx = s->ctx;
    RETURN(CUDA_SUCCESS);
}

static CUresult simStreamGetFlags(CUstream h, unsigned int *flags) {
    ENTER("cuStreamGetFlags");
    CUresult err;
    Stream *s = resolve(h, call_name, &err);
    if (!s) RETURN(err);
    *flags = s->blocking ? 0 : 1;
    RETURN(CUDA_SUCCESS);
}

static CUresult simStreamWaitEvent(CUstream h, CUevent e, unsigned int flags) {
    ENTER("cuStreamWaitEvent");
    (void)flags;
    CUresult err;
    Stream *s = resolve(h, call_name, &err);
    if (!s) RETURN(err);
    Event *ev = find_event(e, call_name, &err);
    if (!ev) RETURN(err);
    n_waits++;
    if (ev->recorded) {
        Op w = {0};
        w.type = OP_WAIT;
        w.wait_on = ev->stream;
        w.wait_seq = ev->seq;
        enqueue(s, w);
    }
    RETURN(CUDA_SUCCESS);
}

/* events */

static CUresult simEventCreate(CUevent *out, unsigned int flags) {
    ENTER("cuEventCreate");
    (void)flags;
    Context *c = current();
    if (!c) FAIL(CUDA_ERROR_INVALID_CONTEXT, "cuEventCreate: no current context");
    Event *e = calloc(1, sizeof *e);
    e->ctx = c;
    e->alive = 1;
    PUSH(events, e);
    n_events_created++;
    *out = e;
    RETURN(CUDA_SUCCESS);
}

static CUresult simEventRecord(CUevent e, CUstream h) {
    ENTER("cuEventRecord");
    CUresult err;
    Event *ev = find_event(e, call_name, &err);
    if (!ev) RETURN(err);
    Stream *s = resolve(h, call_name, &err);
    if (!s) RETURN(err);
    if (s->ctx != ev->ctx)
        FAIL(CUDA_ERROR_INVALID_HANDLE, "cuEventRecord: event of device %d recorded on a stream of device %d",
             ev->ctx->device, s->ctx->device);
    /* The record is work on the stream: on the legacy stream it follows the
     * blocking streams, on a blocking stream it follows the legacy one. */
    if (s->kind == STREAM_LEGACY || s->blocking) {
        Op nothing = {0};
        nothing.type = OP_WAIT;
        nothing.wait_on = s;
        nothing.wait_seq = 0;
        enqueue(s, nothing);
    }
    ev->recorded = 1;
    ev->stream = s;
    ev->seq = s->n;
    n_records++;
    RETURN(CUDA_SUCCESS);
}

static CUresult simEventSynchronize(CUevent e) {
    ENTER("cuEventSynchronize");
    CUresult err;
    Event *ev = find_event(e, call_name, &err);
    if (!ev) RETURN(err);
    n_event_sync++;
    if (ev->recorded) run(ev->stream, ev->seq);
    release_pools();
    RETURN(CUDA_SUCCESS);
}

static CUresult simEventQuery(CUevent e) {
    ENTER("cuEventQuery");
    CUresult err;
    Event *ev = find_event(e, call_name, &err);
    if (!ev) RETURN(err);
    RETURN(!ev->recorded || ev->stream->done >= ev->seq ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY);
}

static CUresult simEventDestroy(CUevent e) {
    ENTER("cuEventDestroy");
    CUresult err;
    Event *ev = find_event(e, call_name, &err);
    if (!ev) RETURN(err);
    ev->alive = 0;
    n_events_destroyed++;
    RETURN(CUDA_SUCCESS);
}

static CUresult simPointerGetAttribute(void *data, int attr, CUdeviceptr ptr) {
    ENTER("cuPointerGetAttribute");
    Alloc *a = find_alloc((void *)(uintptr_t)ptr, 1);
    if (!a || !a->live) RETURN(CUDA_ERROR_INVALID_VALUE);
    switch (attr) {
    case 1: *(CUcontext *)data = &contexts[a->device]; break;                       /* CONTEXT */
    case 2: *(int *)data = a->kind == KIND_PINNED ? MEM_HOST : MEM_DEVICE; break;   /* MEMORY_TYPE */
    case 3: case 4: *(void **)data = (void *)(uintptr_t)ptr; break;                 /* DEVICE/HOST_POINTER */
    case 8: *(int *)data = a->kind == KIND_MANAGED; break;                          /* IS_MANAGED */
    case 9: *(int *)data = a->device; break;                                        /* DEVICE_ORDINAL */
    default: RETURN(CUDA_ERROR_INVALID_VALUE);
    }
    RETURN(CUDA_SUCCESS);
}

static const char *error_name(CUresult r) {
    switch (r) {
    case CUDA_SUCCESS: return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED";
    case CUDA_ERROR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
    case CUDA_ERROR_INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE";
    case CUDA_ERROR_INVALID_CONTEXT: return "CUDA_ERROR_INVALID_CONTEXT";
    case CUDA_ERROR_INVALID_HANDLE: return "CUDA_ERROR_INVALID_HANDLE";
    case CUDA_ERROR_NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
    case CUDA_ERROR_NOT_READY: return "CUDA_ERROR_NOT_READY";
    default: return NULL;
    }
}

static CUresult simGetErrorName(CUresult r, const char **out) {
    *out = error_name(r);
    return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult simGetErrorString(CUresult r, const char **out) {
    *out = error_name(r);
    return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* --- cuGetProcAddress ------------------------------------------------ */

typedef struct { const char *name; void *fn; int max_version; } Entry;

/* max_version: the entry point's ABI changed at that CUDA version (a _v2
 * with other parameters); requests at or above it are not found. */
static const Entry entries[] = {
    {"cuInit", (void *)simInit, 0},
    {"cuDriverGetVersion", (void *)simDriverGetVersion, 0},
    {"cuDeviceGetCount", (void *)simDeviceGetCount, 0},
    {"cuDeviceGet", (void *)simDeviceGet, 0},
    {"cuDeviceGetName", (void *)simDeviceGetName, 0},
    {"cuDeviceTotalMem", (void *)simDeviceTotalMem, 0},
    {"cuDeviceGetAttribute", (void *)simDeviceGetAttribute, 0},
    {"cuDeviceCanAccessPeer", (void *)simDeviceCanAccessPeer, 0},
    {"cuDevicePrimaryCtxRetain", (void *)simDevicePrimaryCtxRetain, 0},
    {"cuDevicePrimaryCtxRelease", (void *)simDevicePrimaryCtxRelease, 0},
    {"cuCtxGetCurrent", (void *)simCtxGetCurrent, 0},
    {"cuCtxSetCurrent", (void *)simCtxSetCurrent, 0},
    {"cuCtxPushCurrent", (void *)simCtxPushCurrent, 0},
    {"cuCtxPopCurrent", (void *)simCtxPopCurrent, 0},
    {"cuCtxGetDevice", (void *)simCtxGetDevice, 13000},
    {"cuCtxSynchronize", (void *)simCtxSynchronize, 13000},
    {"cuCtxEnablePeerAccess", (void *)simCtxEnablePeerAccess, 0},
    {"cuMemAlloc", (void *)simMemAlloc, 0},
    {"cuMemAllocManaged", (void *)simMemAllocManaged, 0},
    {"cuMemHostAlloc", (void *)simMemHostAlloc, 0},
    {"cuMemAllocHost", (void *)simMemAllocHost, 0},
    {"cuMemFree", (void *)simMemFree, 0},
    {"cuMemFreeHost", (void *)simMemFreeHost, 0},
    {"cuMemAllocAsync", (void *)simMemAllocAsync, 0},
    {"cuMemFreeAsync", (void *)simMemFreeAsync, 0},
    {"cuMemGetInfo", (void *)simMemGetInfo, 0},
    {"cuDeviceGetDefaultMemPool", (void *)simDeviceGetDefaultMemPool, 0},
    {"cuMemPoolSetAttribute", (void *)simMemPoolSetAttribute, 0},
    {"cuMemPoolGetAttribute", (void *)simMemPoolGetAttribute, 0},
    {"cuMemcpy", (void *)simMemcpy, 0},
    {"cuMemcpyAsync", (void *)simMemcpyAsync, 0},
    {"cuMemcpyPeerAsync", (void *)simMemcpyPeerAsync, 0},
    {"cuMemcpy2DAsync", (void *)simMemcpy2DAsync, 0},
    {"cuMemsetD8Async", (void *)simMemsetD8Async, 0},
    {"cuStreamCreate", (void *)simStreamCreate, 0},
    {"cuStreamCreateWithPriority", (void *)simStreamCreateWithPriority, 0},
    {"cuStreamDestroy", (void *)simStreamDestroy, 0},
    {"cuStreamSynchronize", (void *)simStreamSynchronize, 0},
    {"cuStreamQuery", (void *)simStreamQuery, 0},
    {"cuStreamGetCtx", (void *)simStreamGetCtx, 12050},
    {"cuStreamGetFlags", (void *)simStreamGetFlags, 0},
    {"cuStreamWaitEvent", (void *)simStreamWaitEvent, 0},
    {"cuEventCreate", (void *)simEventCreate, 0},
    {"cuEventRecord", (void *)simEventRecord, 0},
    {"cuEventSynchronize", (void *)simEventSynchronize, 0},
    {"cuEventQuery", (void *)simEventQuery, 0},
    {"cuEventDestroy", (void *)simEventDestroy, 0},
    {"cuPointerGetAttribute", (void *)simPointerGetAttribute, 0},
    {"cuGetErrorName", (void *)simGetErrorName, 0},
    {"cuGetErrorString", (void *)simGetErrorString, 0},
};

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags, int *status) {
    (void)flags;
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof entries / sizeof *entries; i++) {
        if (strcmp(entries[i].name, symbol) || (entries[i].max_version && version >= entries[i].max_version))
            continue;
        *pfn = entries[i].fn;
        if (status) *status = 0;          /* CU_GET_PROC_ADDRESS_SUCCESS */
        return CUDA_SUCCESS;
    }
    *pfn = NULL;
    if (status) *status = 1;              /* CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND */
    return CUDA_ERROR_NOT_FOUND;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, unsigned long long flags) {
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}

CUresult cuInit(unsigned int flags) { return simInit(flags); }
CUresult cuDriverGetVersion(int *v) { return simDriverGetVersion(v); }
CUresult cuGetErrorName(CUresult r, const char **s) { return simGetErrorName(r, s); }
CUresult cuGetErrorString(CUresult r, const char **s) { return simGetErrorString(r, s); }

/* --- what the tests read --------------------------------------------- */

const char *cudasim_violations(void) { return violation_log ? violation_log : ""; }

long cudasim_violation_count(void) { return (long)violation_count; }

void cudasim_clear_violations(void) {
    pthread_mutex_lock(&lock);
    violation_len = violation_count = 0;
    if (violation_log) violation_log[0] = 0;
    pthread_mutex_unlock(&lock);
}

/* Work enqueued and not yet run, on every stream. */
long cudasim_pending(void) {
    pthread_mutex_lock(&lock);
    long n = 0;
    for (size_t i = 0; i < streams_n; i++) n += (long)(streams[i]->n - streams[i]->done);
    pthread_mutex_unlock(&lock);
    return n;
}

/* Run everything (what a device reset would finish): for test teardown. */
void cudasim_drain(void) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < device_count; i++) run_context(&contexts[i]);
    pthread_mutex_unlock(&lock);
}

long cudasim_live_events(void) { return n_events_created - n_events_destroyed; }

long cudasim_counter(const char *name) {
    static const struct { const char *name; long *value; } table[] = {
        {"alloc", &n_alloc}, {"free", &n_free}, {"events_created", &n_events_created},
        {"events_destroyed", &n_events_destroyed}, {"ctx_sync", &n_ctx_sync},
        {"stream_sync", &n_stream_sync}, {"event_sync", &n_event_sync}, {"waits", &n_waits},
        {"records", &n_records}, {"copies", &n_copies}, {"retains", &n_retains},
        {"mem_alloc", &n_mem_alloc}, {"mem_free", &n_mem_free}, {"host_alloc", &n_host_alloc},
        {"host_free", &n_host_free}, {"alloc_async", &n_alloc_async}, {"free_async", &n_free_async},
        {"pool_reuse", &n_pool_reuse}, {"pool_grow", &n_pool_grow}, {"pool_release", &n_pool_release},
    };
    for (size_t i = 0; i < sizeof table / sizeof *table; i++)
        if (!strcmp(table[i].name, name)) return *table[i].value;
    return -1;
}

/* Primary contexts retained (and not released) on a device. */
int cudasim_retained(int device) { return device >= 0 && device < MAX_DEVICES ? retained[device] : -1; }

/* Whether devices report memory pool support (CUDASIM_MEMORY_POOLS=0 at
 * start, or this call) : the fallback when they do not. */
void cudasim_set_memory_pools(int supported) {
    pthread_mutex_lock(&lock);
    memory_pools_supported = supported != 0;
    pthread_mutex_unlock(&lock);
}
