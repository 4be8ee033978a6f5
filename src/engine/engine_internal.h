/* engine_internal.h: the engine's state, struct engine, in three parts:
 *   f  (struct engine_fixed, engine_fixed.h): set before engine_create returns, never changed
 *      after; read by anyone without the lock;
 *   s  (struct engine_locked, below): guarded by engine.lock, every field, except where one
 *      says otherwise;
 *   the atomics at the end: read without the lock (each says who writes it).
 * Besides: the one thread that assembles a chunk reads its job's id, rois, use and
 * cached_already without the lock (struct chunk_job, jobs.h); a result's bytes are read
 * outside the lock through a reference taken under it (struct roi_result, results.h).
 * Only the state is here: what each part of the engine offers the others is in its own
 * header (jobs.h, results.h, compute.h, assemble.h, scratch.h, ahead.h, budget.h, stale.h,
 * progress.h), which a file includes when it calls it. */
#ifndef ROIFS_ENGINE_INTERNAL_H
#define ROIFS_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "../cache/cache.h"
#include "../idlru.h"
#include "../key.h"
#include "../map.h"
#include "engine_fixed.h"

enum roi_state { RS_IDLE, RS_QUEUED, RS_RUNNING, RS_DONE, RS_FAILED };
enum roi_prio { PRIO_NONE, PRIO_AHEAD, PRIO_DEMAND };

struct roi_slot {
    uint8_t state; /* enum roi_state */
    uint8_t prio;  /* enum roi_prio, while RS_QUEUED */
    bool stored;   /* RS_DONE: the result named key is in the store */
    bool flushing; /* its result is on its way to the store (results.c) */
    uint32_t pins; /* chunk jobs that will paste this ROI: its result stays in memory */
    /* RS_DONE: the key of its result; RS_QUEUED, RS_RUNNING: the key wanted (the input as it
     * was when it was asked for; the result is named by what its read actually saw) */
    struct key128 key;
    struct roi_result *result; /* RS_DONE and pinned: in memory, else NULL */
    int64_t failed_ns;         /* RS_FAILED: when it failed (CLOCK_MONOTONIC ns) */
};

struct roi_queue {
    uint32_t *buf;
    size_t cap, head, len;
};

#define ENGINE_VERIFY_AHEAD  64 /* cached chunks waiting to be checked ahead of their open */
#define ENGINE_VERIFY_WINDOW 16 /* how far ahead cached chunks are checked, at most */
#define ENGINE_MAX_ERRORS    100

struct engine_error {
    size_t roi;
    char *message;
};

/* A compute thread in a read of the input: the stop may interrupt it (engine_destroy), never
 * the processor's code, whose sleeps and polls a signal would cut short. */
struct engine_reader {
    pthread_t thread;
    struct engine_reader *next;
};

struct chunk_job;
struct unstored;
struct labels_counts;
struct stitch_state;

/* What engine.lock guards: the ROIs' states and queues, the chunk jobs, the counters, the
 * error ring, the eviction order, the stale chunks and the labels' state. */
struct engine_locked {
    /* ROIs (jobs.c, jobtable.c, compute.c, results.c) */
    struct roi_slot *rois; /* one per ROI of f.t */
    struct roi_queue demand, ahead;
    /* checks ahead (ahead.c, engine.c) */
    uint64_t verify[ENGINE_VERIFY_AHEAD]; /* ring of cached chunks to check ahead */
    size_t verify_head, verify_len;
    uint64_t verify_seen[ENGINE_VERIFY_AHEAD]; /* the last ones queued: not again */
    size_t verify_seen_next;
    /* chunk jobs (jobtable.c, jobs.c) */
    struct chunk_job *asm_head, *asm_tail; /* the assembly queue */
    struct map jobs;                       /* chunk id -> struct chunk_job * */
    /* Jobs ended so far: a job that ends has made its chunk, so a look at the cache taken
     * before a change of this count may be out of date (ahead.c). */
    uint64_t jobs_ended;
    size_t n_locked_elsewhere; /* jobs whose chunk lock another process holds */
    /* the threads */
    bool stopping;
    struct engine_reader *readers; /* compute threads reading the input now (compute.c) */
    /* counters (progress.c, status.c) */
    size_t n_running, n_done, n_failed;
    size_t n_computed; /* ROIs this engine computed */
    size_t n_reused;   /* ROIs taken from the result store instead of computed */
    size_t n_at_start; /* ROIs whose current result was stored when the engine started */
    size_t n_unused;   /* stored results no ROI's current key names, as far as known */
    size_t results_evicted;
    uint32_t made_min, made_max; /* when those were made (0: none) */
    uint64_t n_cached;
    struct engine_error errors[ENGINE_MAX_ERRORS]; /* ring, oldest at err_head */
    size_t nerrors, err_head;
    /* the cache (budget.c, results.c, changes.c) */
    bool collecting; /* a compaction for max_size is under way */
    bool budget_warned;
    struct unstored *unstored; /* results to store that no job holds (results.c) */
    /* [cache] max_size > 0: the cached chunks by last use (evict.h) */
    struct evict *evict;
    /* [input] watch (changes.c): chunks whose file is stale since an input change, until made
     * again; the reason the input may not be served any more */
    struct idlru stale;
    char *broken;
    /* [labels] (labels.c, stitch.c), made at first use */
    struct labels_counts *label_counts; /* ids = sequential */
    struct stitch_state *stitch;        /* stitch = iou */
};

struct engine {
    struct engine_fixed f;
    pthread_mutex_t lock;
    pthread_cond_t work_cv;   /* work queued, or stopping */
    pthread_cond_t done_cv;   /* a chunk job finished */
    pthread_cond_t poller_cv; /* a job started waiting for another process's chunk lock */
    struct engine_locked s;   /* under lock */
    /* The time a ROI takes to compute (ns, a moving average; 0 until one is done, and always
     * 0 unless readahead = auto): how deep readahead = auto reads ahead. Written by the
     * compute threads, read by ahead.c, without the lock: an estimate, a lost update is
     * harmless. */
    _Atomic uint64_t roi_ns;
    /* Written under the lock with s.stale and s.broken, read without it. */
    _Atomic size_t nstale;
    _Atomic bool is_broken;
};
_Static_assert(offsetof(struct engine, f) == 0, "engine_fixed() needs f first");

#endif
