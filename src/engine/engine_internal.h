/* engine_internal.h: the engine's state, shared by engine.c (scheduling, compute, assembly)
 * and status.c (the status document). Everything here is guarded by engine.lock. */
#ifndef ROIFS_ENGINE_INTERNAL_H
#define ROIFS_ENGINE_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>

#include "engine.h"

enum roi_state { RS_IDLE, RS_QUEUED, RS_RUNNING, RS_DONE, RS_FAILED };
enum roi_prio { PRIO_NONE, PRIO_AHEAD, PRIO_DEMAND };

struct roi_slot {
    uint8_t state;      /* enum roi_state */
    uint8_t prio;       /* enum roi_prio, while RS_QUEUED */
    bool on_disk;       /* result stored in the cache's rois/ */
    uint64_t remaining; /* chunks this ROI touches that are not cached yet */
    void *result;       /* ROI-box result in memory (single-chunk ROIs), or NULL */
};

struct waiter {
    engine_chunk_cb cb;
    void *ctx;
    struct waiter *next;
};

struct chunk_job {
    uint64_t id;
    int64_t k;      /* index among touched chunks, -1 for a chunk no ROI touches */
    size_t pending; /* ROIs of the chunk not done yet */
    bool demanded;
    bool remote;         /* another process holds the chunk's lock: wait for it */
    bool cached_already; /* found cached once locked: nothing to assemble */
    int lock;            /* the chunk's cache lock, or -1 */
    bool replaced;       /* a stale cached version was removed before this job */
    int attempts;        /* assemblies redone because a stored ROI result vanished */
    struct waiter *waiters;
    struct chunk_job *hnext; /* hash chain */
    struct chunk_job *qnext; /* assembly queue */
};

struct roi_queue {
    uint32_t *buf;
    size_t cap, head, len;
};

#define ENGINE_JOB_BUCKETS 4096
#define ENGINE_MAX_ERRORS  100

struct engine_error {
    size_t roi;
    char *message;
};

struct engine {
    struct task *t;
    struct cache *c;
    pthread_mutex_t lock;
    pthread_cond_t work_cv;   /* work queued, or stopping */
    pthread_cond_t done_cv;   /* a chunk job finished */
    pthread_cond_t remote_cv; /* a job started waiting for another process */
    pthread_t remote_thread;
    bool remote_started;
    size_t nremote;
    struct roi_slot *rois;
    struct roi_queue demand, ahead;
    struct chunk_job *asm_head, *asm_tail;
    struct chunk_job *jobs[ENGINE_JOB_BUCKETS];
    size_t njobs;
    pthread_t *threads;
    int nthreads;
    bool stopping;
    double started; /* now_monotonic() at engine_create */
    size_t n_running, n_done, n_failed;
    uint64_t n_cached;
    struct engine_error errors[ENGINE_MAX_ERRORS]; /* ring, oldest at err_head */
    size_t nerrors, err_head;
    /* [output] ome, level 0: the engines and caches of levels 1.. (pyramid.c) */
    struct engine *sub[TASK_MAX_LEVELS];
    /* [cache] max_size > 0: the cached chunks by last use (evict.c) */
    struct evict *evict;
    struct cache *sub_cache[TASK_MAX_LEVELS];
};

/* evict.c: least-recently-used order and total size of the cached chunks this process
 * computed or found at mount, for [cache] max_size. Callers hold the engine's lock. */
struct evict *evict_new(uint64_t max_size);
void evict_free(struct evict *ev);
/* Adds (or updates) chunk id of size bytes as the most recently used. */
void evict_add(struct evict *ev, uint64_t id, uint64_t size);
void evict_touch(struct evict *ev, uint64_t id);
void evict_remove(struct evict *ev, uint64_t id);
/* Takes out the least recently used chunks, never keep, until the total is at most max_size;
 * returns how many, their ids in *ids (malloc'd, or NULL). */
size_t evict_victims(struct evict *ev, uint64_t keep, uint64_t **ids);
void evict_stats(const struct evict *ev, uint64_t *usage, uint64_t *max_size, uint64_t *evicted);
/* At mount: notes a chunk found in the cache; then evict_settle orders them (older files less
 * recently used) and returns, like evict_victims, those to remove now. */
void evict_found(struct evict *ev, uint64_t id, uint64_t size, int64_t mtime_ns);
size_t evict_settle(struct evict *ev, uint64_t **victims);

/* assemble.c */
/* Signature of the input ROI r reads (its read region). */
uint64_t engine_roi_sig(struct engine *e, uint32_t r);
/* Bytes of ROI r's result (its box, without the halo). */
size_t engine_roi_box_nbytes(const struct task *t, size_t r);
/* Builds and encodes chunk job->id from its ROIs' results (in memory or stored), over the
 * fill value or the input. On -ENOENT, *bad_roi names a ROI whose stored result vanished. */
int engine_assemble(struct engine *e, const struct chunk_job *job, void **out, size_t *out_len,
                    uint32_t *bad_roi, struct errbuf *err);

int pyramid_engines_create(struct engine *e, struct errbuf *err);
void pyramid_engines_destroy(struct engine *e);
json_t *pyramid_status(struct engine *e);

#endif
