/* dlpack-ref worker pool: runs one job split into parts on several threads,
   for the host copies and conversions of src/dlref_kernels.h.

   Rules (docs/guarantees.md, "Threads"):
   - no thread exists until the first job with more than one part: importing
     the core starts none; the workers are then created once and kept, idle
     on a condition variable between jobs;
   - one job at a time: a caller that finds the pool busy (another thread of
     a free-threaded interpreter, or a copy started from inside a job) runs
     its whole job on its own thread, so callers never wait on each other
     and a job can never wait on itself;
   - parts are taken from a shared counter by the caller and the workers
     alike, whoever is free, so a worker slow to get a core costs little;
   - the caller returns only when every part is done:
     no worker is left running a part after the call, whatever happens to
     the calling thread's Python state (a pending KeyboardInterrupt raises
     after the copy, in the caller);
   - workers block every signal, so a signal goes to a thread that runs
     Python's handler;
   - fork(): the prepare handler takes the job lock (a fork waits for a job
     in flight to finish, so no part is copied half done into the child) and
     the child, where no worker exists, re-creates its locks and starts new
     workers at its first parallel job;
   - a part cannot fail: the job checks everything before it is split, and
     each part adds its count of refused values to the job's total.
   Without POSIX threads (Windows) every job runs on the calling thread.

   This header is included once, into the core's translation unit. */

#ifndef DLREF_POOL_H
#define DLREF_POOL_H

#include <stdint.h>
#include <stdlib.h>

/* The most threads set_num_threads and DLPACK_REF_NUM_THREADS accept. */
#define DLREF_POOL_MAX_THREADS 256

/* fn(job, part, parts) does part `part` of `parts` of a job. */
typedef void (*dlref_pool_fn)(void* job, int part, int parts);

/* The thread count setting: 0 until the core resolves it (from
   DLPACK_REF_NUM_THREADS or the cores available, _capi.pxi). Atomic: a
   free-threaded interpreter may set it while another thread copies. */
static int dlref_pool_size = 0;

#if defined(__GNUC__) || defined(__clang__)
static inline int dlref_pool_get_size(void) { return __atomic_load_n(&dlref_pool_size, __ATOMIC_RELAXED); }
static inline void dlref_pool_set_size(int n) { __atomic_store_n(&dlref_pool_size, n, __ATOMIC_RELAXED); }
static inline void dlref_atomic_add(int64_t* total, int64_t n) { __atomic_add_fetch(total, n, __ATOMIC_RELAXED); }
#else
static inline int dlref_pool_get_size(void) { return dlref_pool_size; }
static inline void dlref_pool_set_size(int n) { dlref_pool_size = n; }
static inline void dlref_atomic_add(int64_t* total, int64_t n) { *total += n; }  /* serial only (below) */
#endif

#if !defined(_WIN32) && !defined(__GNUC__) && !defined(__clang__)
#define DLREF_POOL_SERIAL 1  /* no atomics known here: every job on the calling thread */
#endif

#if defined(_WIN32) || defined(DLREF_POOL_SERIAL)

static int dlref_pool_available_cores(void) { return 1; }
static int dlref_pool_run(dlref_pool_fn fn, void* job, int parts, int threads) {
    (void)parts; (void)threads;
    fn(job, 0, 1);
    return 1;
}
static int dlref_pool_workers_started(void) { return 0; }

#else

#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <sched.h>
#endif

/* Held by the caller for the whole of a job; taken by try-lock only. */
static pthread_mutex_t dlref_pool_job_lock = PTHREAD_MUTEX_INITIALIZER;
/* Guards the fields below; workers wait on dlref_pool_work with it. */
static pthread_mutex_t dlref_pool_state = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t dlref_pool_work = PTHREAD_COND_INITIALIZER;
static pthread_cond_t dlref_pool_done = PTHREAD_COND_INITIALIZER;
static int dlref_pool_workers = 0;          /* started, numbered 1.. */
static unsigned long dlref_pool_generation = 0;  /* one more per job */
static dlref_pool_fn dlref_pool_job_fn = NULL;
static void* dlref_pool_job_arg = NULL;
static int dlref_pool_job_parts = 0;        /* 0: no job open to join */
static int dlref_pool_job_helpers = 0;      /* workers asked to join it */
static int dlref_pool_active = 0;           /* workers inside the job */
static int dlref_pool_next = 0;             /* next part to take (atomic) */
static int dlref_pool_atfork_registered = 0;
/* The generation each worker was started at: the job it must wait for is
   the next one, even when it first runs after that job was posted. */
static unsigned long dlref_pool_born[DLREF_POOL_MAX_THREADS + 1];

/* Parts are taken one at a time from a shared counter by whoever is free,
   the caller included: on a loaded machine, where a worker may wait long
   for a core, the caller takes the parts it would have done and the job
   costs about what it costs on one thread. */
static void dlref_pool_take_parts(dlref_pool_fn fn, void* job, int parts) {
    int part;
    while ((part = __atomic_fetch_add(&dlref_pool_next, 1, __ATOMIC_RELAXED)) < parts) fn(job, part, parts);
}

/* The cores this process may run on (its affinity mask, as PyTorch counts
   them), not every core of the machine. */
static int dlref_pool_available_cores(void) {
    long n;
#if defined(__linux__) && defined(CPU_COUNT)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        int c = CPU_COUNT(&set);
        if (c > 0) return c < DLREF_POOL_MAX_THREADS ? c : DLREF_POOL_MAX_THREADS;
    }
#endif
    n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) return 1;
    return n < DLREF_POOL_MAX_THREADS ? (int)n : DLREF_POOL_MAX_THREADS;
}

static int dlref_pool_workers_started(void) {
    int n;
    pthread_mutex_lock(&dlref_pool_state);
    n = dlref_pool_workers;
    pthread_mutex_unlock(&dlref_pool_state);
    return n;
}

/* How long a worker keeps polling for the next job, and the caller for the
   last part, before sleeping on a condition: waking a sleeping thread costs
   about as much as a 1 MiB copy on one thread, and copies come in bursts
   (benchmarks/pool_threshold.py measured the split with and without it). */
#define DLREF_POOL_SPIN_NS 200000

static inline void dlref_pool_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static inline int64_t dlref_pool_now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Poll while `busy` holds (an expression of atomic loads; no lock held) or
   until the spin time is over. */
#define DLREF_POOL_SPIN_WHILE(busy) do {                                        \
        int64_t dlref_end_ = dlref_pool_now_ns() + DLREF_POOL_SPIN_NS;          \
        int dlref_i_;                                                           \
        for (;;) {                                                              \
            for (dlref_i_ = 0; dlref_i_ < 64 && (busy); ++dlref_i_) dlref_pool_relax(); \
            if (!(busy) || dlref_pool_now_ns() > dlref_end_) break;             \
        }                                                                       \
    } while (0)

static void* dlref_pool_worker(void* arg) {
    int index = (int)(intptr_t)arg;
    unsigned long seen;
    pthread_mutex_lock(&dlref_pool_state);
    seen = dlref_pool_born[index];
    for (;;) {
        dlref_pool_fn fn;
        void* job;
        int parts;
        if (dlref_pool_generation == seen) {
            /* Poll a while without the lock, so that the caller of the next
               job of a burst posts it without waking anyone. */
            pthread_mutex_unlock(&dlref_pool_state);
            DLREF_POOL_SPIN_WHILE(__atomic_load_n(&dlref_pool_generation, __ATOMIC_ACQUIRE) == seen);
            pthread_mutex_lock(&dlref_pool_state);
        }
        while (dlref_pool_generation == seen) pthread_cond_wait(&dlref_pool_work, &dlref_pool_state);
        seen = dlref_pool_generation;
        /* Join only a job still open (its caller has not finished it) that
           asked for this worker. */
        if (dlref_pool_job_parts == 0 || index > dlref_pool_job_helpers) continue;
        fn = dlref_pool_job_fn; job = dlref_pool_job_arg; parts = dlref_pool_job_parts;
        __atomic_add_fetch(&dlref_pool_active, 1, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&dlref_pool_state);
        dlref_pool_take_parts(fn, job, parts);
        pthread_mutex_lock(&dlref_pool_state);
        if (__atomic_sub_fetch(&dlref_pool_active, 1, __ATOMIC_RELEASE) == 0) pthread_cond_signal(&dlref_pool_done);
    }
    return NULL;
}

static void dlref_pool_prepare_fork(void) {
    pthread_mutex_lock(&dlref_pool_job_lock);
    pthread_mutex_lock(&dlref_pool_state);
}
static void dlref_pool_parent_after_fork(void) {
    pthread_mutex_unlock(&dlref_pool_state);
    pthread_mutex_unlock(&dlref_pool_job_lock);
}
/* The child has only the forking thread, which holds both locks (taken in
   prepare): its workers do not exist there. Fresh locks and conditions
   (the old conditions may record waiters that are gone), no workers: the
   next parallel job starts new ones. */
static void dlref_pool_child_after_fork(void) {
    pthread_mutex_init(&dlref_pool_job_lock, NULL);
    pthread_mutex_init(&dlref_pool_state, NULL);
    pthread_cond_init(&dlref_pool_work, NULL);
    pthread_cond_init(&dlref_pool_done, NULL);
    dlref_pool_workers = 0;
    dlref_pool_active = 0;
    dlref_pool_job_parts = 0;
}

/* Start workers up to `wanted` (called with the job lock held, so no job is
   in flight). Returns how many exist: fewer when the system refuses a
   thread, and the job then has fewer parts. */
static int dlref_pool_grow(int wanted) {
    sigset_t all, old;
    int have;
    if (!dlref_pool_atfork_registered) {
        if (pthread_atfork(dlref_pool_prepare_fork, dlref_pool_parent_after_fork, dlref_pool_child_after_fork) != 0)
            return 0;
        dlref_pool_atfork_registered = 1;
    }
    have = dlref_pool_workers_started();
    if (have >= wanted) return have;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    while (have < wanted) {
        pthread_t t;
        pthread_attr_t attr;
        int ok;
        dlref_pool_born[have + 1] = dlref_pool_generation;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        /* The worker numbers itself from the count at its creation. */
        ok = pthread_create(&t, &attr, dlref_pool_worker, (void*)(intptr_t)(have + 1)) == 0;
        pthread_attr_destroy(&attr);
        if (!ok) break;
        pthread_mutex_lock(&dlref_pool_state);
        have = ++dlref_pool_workers;
        pthread_mutex_unlock(&dlref_pool_state);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return have;
}

/* Run fn over `parts` parts with at most `threads` threads, this one
   included, and return when all are done. Returns the number of parts: 1
   (fn(job, 0, 1) did all of it) when parts or threads are 1, the pool is
   busy or no worker starts. */
static int dlref_pool_run(dlref_pool_fn fn, void* job, int parts, int threads) {
    int helpers = threads - 1;
    if (helpers > parts - 1) helpers = parts - 1;
    if (helpers > DLREF_POOL_MAX_THREADS - 1) helpers = DLREF_POOL_MAX_THREADS - 1;
    if (helpers < 1 || pthread_mutex_trylock(&dlref_pool_job_lock) != 0) {
        fn(job, 0, 1);
        return 1;
    }
    {
        int workers = dlref_pool_grow(helpers);
        if (workers < helpers) helpers = workers;
    }
    if (helpers < 1) {
        pthread_mutex_unlock(&dlref_pool_job_lock);
        fn(job, 0, 1);
        return 1;
    }
    pthread_mutex_lock(&dlref_pool_state);
    dlref_pool_job_fn = fn;
    dlref_pool_job_arg = job;
    dlref_pool_job_parts = parts;
    dlref_pool_job_helpers = helpers;
    __atomic_store_n(&dlref_pool_next, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&dlref_pool_generation, dlref_pool_generation + 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&dlref_pool_work);
    pthread_mutex_unlock(&dlref_pool_state);
    dlref_pool_take_parts(fn, job, parts);
    /* Every part is taken: close the job to late workers, then wait for
       those still finishing theirs. */
    pthread_mutex_lock(&dlref_pool_state);
    dlref_pool_job_parts = 0;
    if (dlref_pool_active > 0) {
        /* The last parts are short: poll for them before sleeping. */
        pthread_mutex_unlock(&dlref_pool_state);
        DLREF_POOL_SPIN_WHILE(__atomic_load_n(&dlref_pool_active, __ATOMIC_ACQUIRE) != 0);
        pthread_mutex_lock(&dlref_pool_state);
    }
    while (dlref_pool_active > 0) pthread_cond_wait(&dlref_pool_done, &dlref_pool_state);
    pthread_mutex_unlock(&dlref_pool_state);
    pthread_mutex_unlock(&dlref_pool_job_lock);
    return parts;
}

#endif /* _WIN32 || DLREF_POOL_SERIAL */

#endif /* DLREF_POOL_H */
