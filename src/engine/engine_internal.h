/* engine_internal.h: the engine's state, shared by engine.c (chunk opens, the pool,
 * creation), jobs.c (chunk jobs, ROI states and outcomes), ahead.c (readahead), compute.c
 * (ROIs), assemble.c (chunk assembly), results.c, status.c and progress.c.
 * Locking: engine.lock guards every field that changes after engine_create (ROI slots, jobs,
 * queues, counters, the error ring, the eviction order), except where a field says otherwise.
 * Unlocked readers: anyone may read e->t, e->c and e->opts (set at creation, never changed);
 * the one thread that assembles a chunk reads its job's id, rois, use and cached_already
 * without the lock (see struct chunk_job); a result's bytes are read outside the lock through
 * a reference taken under it (struct roi_result). */
#ifndef ROIFS_ENGINE_INTERNAL_H
#define ROIFS_ENGINE_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "../idlru.h"
#include "../key.h"
#include "../map.h"
#include "engine.h"
#include "evict.h"

enum roi_state { RS_IDLE, RS_QUEUED, RS_RUNNING, RS_DONE, RS_FAILED };
enum roi_prio { PRIO_NONE, PRIO_AHEAD, PRIO_DEMAND };

/* A ROI's result (its box, without the halo) in memory, shared by the slot and assemblies
 * that paste it; freed by the last reference. key, len, crc and data never change once
 * published, so a holder of a reference reads them without the lock. */
struct roi_result {
    _Atomic int refs;
    struct key128 key; /* what it was made from: never changed after */
    size_t len;
    uint32_t crc; /* crc32c of data */
    /* aligned as malloc's: processors (a plugin too) may write their output into it */
    _Alignas(max_align_t) unsigned char data[];
};

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
};

struct waiter {
    engine_chunk_cb cb;
    void *ctx;
    struct waiter *next;
};

/* One chunk being made. Written under the lock; but from the moment it is queued for
 * assembly (pending == 0, asm_enqueue) until its assembly has finished, only the assembling
 * thread touches id, rois, use, cached_already and fd, so it reads them unlocked: use[i] is
 * written (engine_roi_finish, job_retry_roi) only while waits[i] is set, i.e. while the job is
 * not queued. */
struct chunk_job {
    uint64_t id;
    int64_t row;          /* its row in the ROI index (roi_index_find), -1 when no ROI touches it */
    const uint32_t *rois; /* the ROIs touching it (roi_index_rois) */
    size_t nrois;
    struct chunk_keys want; /* the keys as the input was at the open */
    struct key128 *use;     /* the key of each ROI's result to paste */
    uint8_t *waits;         /* 1 while the job waits for that ROI */
    uint8_t *recheck;       /* 1: made from other input than the job saw (written as use) */
    size_t pending;         /* ROIs waited for */
    bool scheduled;         /* its ROIs are pinned and asked for */
    bool demanded;
    bool locked_elsewhere; /* another process holds (or held: lock >= 0) the chunk's lock: the
                              poller waits for it */
    bool cached_already;   /* found current once locked: nothing to assemble (fd is it) */
    bool failed;           /* a ROI failed: its waiters had EIO; held until the rest is stored */
    int fd;                /* cached_already: the current chunk file, else -1 */
    int lock;              /* the chunk's cache lock, or -1 */
    bool replaced;         /* a cached version that was not current is being replaced */
    int attempts;          /* assemblies redone because a stored result vanished */
    struct waiter *waiters;
    struct chunk_job *qnext; /* assembly queue */
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

struct engine {
    struct task *t;
    struct cache *c;
    struct engine_opts opts;
    pthread_mutex_t lock;
    pthread_cond_t work_cv;   /* work queued, or stopping */
    pthread_cond_t done_cv;   /* a chunk job finished */
    pthread_cond_t poller_cv; /* a job started waiting for another process's chunk lock */
    pthread_t poller_thread;  /* polls the locks other processes hold (poller_main) */
    bool poller_started;
    size_t n_locked_elsewhere; /* jobs whose chunk lock another process holds */
    struct roi_slot *rois;
    struct roi_queue demand, ahead;
    uint64_t verify[ENGINE_VERIFY_AHEAD]; /* ring of cached chunks to check ahead */
    size_t verify_head, verify_len;
    uint64_t verify_seen[ENGINE_VERIFY_AHEAD]; /* the last ones queued: not again */
    size_t verify_seen_next;
    struct chunk_job *asm_head, *asm_tail;
    struct map jobs; /* chunk id -> struct chunk_job * */
    /* Jobs ended so far: a job that ends has made its chunk, so a look at the cache taken
     * before a change of this count may be out of date (ahead.c). */
    uint64_t jobs_ended;
    /* The time a ROI takes to compute (ns, a moving average; 0 until one is done, and always
     * 0 unless readahead = auto): how deep readahead = auto reads ahead. Written by the
     * compute threads, read by ahead.c, without the lock: an estimate, a lost update is
     * harmless. */
    _Atomic uint64_t roi_ns;
    pthread_t *threads;
    int nthreads;
    bool stopping;
    struct engine_reader *readers; /* compute threads reading the input now (compute.c) */
    double started;                /* now_monotonic() at engine_create */
    int64_t started_at;            /* the same, seconds since the epoch (the status's "started") */
    size_t n_running, n_done, n_failed;
    size_t n_computed; /* ROIs this engine computed */
    size_t n_reused;   /* ROIs taken from the result store instead of computed */
    size_t n_at_start; /* ROIs whose current result was stored when the engine started */
    size_t n_unused;   /* stored results no ROI's current key names, as far as known */
    size_t results_evicted;
    bool collecting; /* a compaction for max_size is under way */
    bool budget_warned;
    uint32_t made_min, made_max; /* when those were made (0: none) */
    uint64_t n_cached;
    struct unstored *unstored; /* results to store that no job holds (results.c) */
    struct engine_error errors[ENGINE_MAX_ERRORS]; /* ring, oldest at err_head */
    size_t nerrors, err_head;
    /* [cache] max_size > 0: the cached chunks by last use (evict.h) */
    struct evict *evict;
    /* [input] watch (changes.c): chunks whose file is stale since an input change, until made
     * again; the reason the input may not be served any more */
    struct idlru stale;
    _Atomic size_t nstale;
    char *broken;
    _Atomic bool is_broken;
    struct labels_counts *label_counts; /* [labels] ids = sequential (labels.c) */
    struct stitch_state *stitch;        /* [labels] stitch = iou (stitch.c) */
};

/* changes.c (lock held): takes chunk id out of the stale ones; true when its file was taken
 * out of n_cached then (to count again once it is current). */
bool engine_stale_take(struct engine *e, uint64_t id);
bool engine_is_stale(struct engine *e, uint64_t id);
void engine_stale_free(struct engine *e);

/* ---- budget.c: [cache] max_size over chunk files and results (no lock held) ---- */

struct keyset;
/* At the start, after the scans: unused results first (live: the keys of every ROI now), then
 * the least recently used chunks, until the cache is within the limit. */
void engine_budget_start(struct engine *e, struct keyset *live);
/* After chunk keep was written: the same, never evicting keep. */
void engine_budget_check(struct engine *e, uint64_t keep);

/* ---- assemble.c: assembly (no engine lock but to take a result's reference) ---- */

/* Builds and encodes chunk job->id from the results named job->use (in memory or stored),
 * over the fill value or the input; *key gets the key of what it was made of. *out is
 * malloc'd, or (*hold not NULL) the bytes of a result, which roi_result_unref(*hold) lets go.
 * On -ENOENT, *bad names the index (in job->rois) of a result that is missing or damaged. */
int engine_assemble(struct engine *e, const struct chunk_job *job, void **out, size_t *out_len,
                    struct roi_result **hold, struct key128 *key, size_t *bad, struct errbuf *err);

/* ---- scratch.c: buffers kept per compute thread ---- */

enum scratch_slot { SCRATCH_IN, SCRATCH_OUT, SCRATCH_CHUNK, SCRATCH_READ, SCRATCH_NSLOTS };
/* This thread's buffer of at least n bytes for slot (contents undefined), or a fresh one when
 * the slot is in use already; give it back with engine_scratch_put (which frees what is not
 * the thread's, and what is too large to keep). */
void *engine_scratch_get(enum scratch_slot slot, size_t n);
void engine_scratch_put(enum scratch_slot slot, void *p);

/* ---- results.c: results in memory and their way to the store ---- */

struct roi_result *roi_result_new(struct key128 key, size_t len);
void roi_result_unref(struct roi_result *res);
/* Lets go of ROI r's in-memory result once no job will paste it: dropped when stored, else
 * queued for engine_flush_unstored (lock held). */
void slot_settle(struct engine *e, uint32_t r);
/* Forgets done ROI r's result (of another key, or missing from the store) (lock held). */
void slot_forget(struct engine *e, uint32_t r);
/* Stores the job's results that are not stored yet, in one write (takes the lock). */
void engine_store_job_results(struct engine *e, const struct chunk_job *job);
/* Stores what slot_settle queued (takes the lock). */
void engine_flush_unstored(struct engine *e);
/* Bytes of ROI r's result values (its box, without the halo). */
size_t engine_roi_box_nbytes(const struct task *t, size_t r);
/* Bytes of ROI r's result: its values, and for a masked ROI its selection after them (one
 * byte per element, 1 where the mask is its label: the pixels it writes). */
size_t engine_roi_result_nbytes(const struct task *t, size_t r);
/* True when ROI r may run in a batch (engine_run_rois): the processor takes batches, the ROI
 * lies in one chunk (no result lock) and is small (PROC_BATCH_BYTES). */
bool engine_roi_batchable(const struct engine *e, uint32_t r);

/* ---- compute.c: ROIs on the pool (no engine lock) ---- */
/* Computes ROI r (asked for as key want), stores its result and publishes it. */
void engine_run_roi(struct engine *e, uint32_t r, struct key128 want);
/* The same, computing it even when its result is stored (labels.c: a lost strip record). */
void engine_run_roi_fresh(struct engine *e, uint32_t r, struct key128 want);
/* Computes n batchable ROIs in one processor call and publishes each. */
void engine_run_rois(struct engine *e, const uint32_t *rs, size_t n);
/* Makes sure ROI s's result named *k is done (computing it on this thread, under its result
 * lock, when nobody else is; fresh: even when it is stored), for results that others depend
 * on ([labels]: id counts, strip records). On 0, *k names the result done, which is of newer
 * input than *k named when the input changed since *k was taken (or by being read: a chunk
 * of another roifs mount). 0, -EIO (it failed) or -ECANCELED (stopping), with err. */
int engine_roi_ensure(struct engine *e, uint32_t s, struct key128 *k, bool fresh,
                      struct errbuf *err);

/* ---- jobtable.c: the table of chunk jobs, ROI outcomes, answers ---- */

/* The job of chunk id, or NULL (lock held). */
struct chunk_job *engine_job_find(struct engine *e, uint64_t id);
/* Puts job in the table (lock held; none there for its chunk). */
void engine_job_add(struct engine *e, struct chunk_job *job);
/* Where ROI r is in job's list, or job->nrois. */
size_t engine_job_index_of(const struct chunk_job *job, uint32_t r);
/* Unlinks job from the table, releases its lock and pins, frees it and returns its waiters
 * (lock held). */
struct waiter *engine_job_remove(struct engine *e, struct chunk_job *job);
/* Queues job for assembly (lock held). */
void engine_asm_enqueue(struct engine *e, struct chunk_job *job);
void engine_record_error(struct engine *e, size_t roi, const char *msg);
/* Publishes ROI r's outcome (takes the lock): ok with its result (the slot takes the
 * reference), or failed with errmsg, which fails every chunk job waiting for it. */
void engine_roi_finish(struct engine *e, uint32_t r, struct roi_result *res, bool stored,
                       bool reused, const char *errmsg);
/* Calls back every waiter in the list (outside the lock): with err 0, each gets a descriptor
 * of the chunk file fd (a dup, the last one fd itself; fd is closed when nobody waits), else
 * err (fd unused, -1). */
void engine_notify(struct engine *e, struct waiter *w, int fd, int err, int flags);

/* ---- jobs.c: chunk jobs, ROI requests, assembly ---- */

/* Creates the job for chunk id (not current, no job yet), owning keys; schedules its ROIs
 * once the chunk's lock is ours (lock held). replaced: the caller found a version that is not
 * current; else it found none, and one that is there once the lock is ours was made by
 * another process since: served when current (checked by the poller, outside the lock). */
struct chunk_job *engine_job_create(struct engine *e, uint64_t id, bool demanded, bool replaced,
                                    struct chunk_keys *keys);
/* A reader waits for the job now: its ROIs move to the demand queue (lock held). */
void engine_job_promote(struct engine *e, struct chunk_job *job);
/* True when a ROI of the chunk in row `row` of the ROI index failed: only a reader's open
 * retries it (lock held). */
bool engine_has_failed_roi(struct engine *e, size_t row);
/* The next queued ROI to compute, demanded ones first (lock held). */
bool engine_pop_roi(struct engine *e, uint32_t *r);
/* ROI r (popped, marked running) and more queued batchable ROIs after it, marked running
 * too, into batch (PROC_BATCH_MAX): at most this thread's share of the queue. Their count.
 * Called with the lock held. */
size_t engine_pop_batch(struct engine *e, uint32_t r, uint32_t *batch);
/* Assembles a job taken off the assembly queue, writes its chunk and answers its waiters
 * (no lock held). A job one of whose ROIs failed (its waiters had EIO) is stored and let go
 * instead: returned are the waiters that came since, which the caller opens again. */
struct waiter *engine_run_assembly(struct engine *e, struct chunk_job *job);
/* The thread that polls the chunk locks other processes hold. */
void *engine_poller_main(void *arg);

/* progress.c: notes that a result made at made (seconds since the epoch) was there at the
 * start (lock held, or before the threads start). */
void engine_note_made(struct engine *e, uint32_t made);

/* ---- ahead.c ---- */

/* After an open of chunk id: readahead and checks ahead (takes the lock). */
void engine_read_ahead(struct engine *e, uint64_t id);
/* For tests (NULL otherwise): called by engine_read_ahead for chunk id after its look at the
 * cache found id not made, before the lock under which it creates id's job. */
extern void (*engine_read_ahead_hook)(struct engine *e, uint64_t id);
/* Checks cached chunk id as an open would; makes it now when it is not current. */
void engine_verify_ahead(struct engine *e, uint64_t id);

#endif
