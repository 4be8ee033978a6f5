/* jobs.h: chunk jobs: the table of jobs, ROI outcomes and answers to waiters (jobtable.c),
 * creation, scheduling, ROI requests, assembly and the poller (jobs.c). */
#ifndef ROIFS_ENGINE_JOBS_H
#define ROIFS_ENGINE_JOBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../key.h"
#include "engine.h"

struct engine;
struct roi_result;

struct waiter {
    engine_chunk_cb cb;
    void *ctx;
    int64_t began; /* when its open began (CLOCK_MONOTONIC ns): failures since stand for it */
    struct waiter *next;
};

/* A job's `began` for read-ahead: every failure stands for it (only a reader's open retries). */
#define ENGINE_BEGAN_NEVER_RETRY INT64_MIN

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
    int64_t began;         /* when the open that made it began (engine_failure_stands) */
    struct waiter *waiters;
    struct chunk_job *qnext; /* assembly queue */
};

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
/* Calls back every waiter in the list (outside the lock): with err 0, each gets a descriptor
 * of the chunk file fd (a dup, the last one fd itself; fd is closed when nobody waits), else
 * err (fd unused, -1). */
void engine_notify(struct engine *e, struct waiter *w, int fd, int err, int flags);

/* Creates the job for chunk id (not current, no job yet), owning keys; schedules its ROIs
 * once the chunk's lock is ours (lock held). replaced: the caller found a version that is not
 * current; else it found none, and one that is there once the lock is ours was made by
 * another process since: served when current (checked by the poller, outside the lock).
 * began: when the open that asks for it began (ENGINE_BEGAN_NEVER_RETRY for read-ahead); a
 * ROI whose failure stands for it (engine_failure_stands) is not asked for again: the job
 * fails, and its waiters are opened again, each by its own start. */
struct chunk_job *engine_job_create(struct engine *e, uint64_t id, bool demanded, bool replaced,
                                    struct chunk_keys *keys, int64_t began);
/* A reader waits for the job now: its ROIs move to the demand queue (lock held). */
void engine_job_promote(struct engine *e, struct chunk_job *job);
/* Nobody waits for the job any more (its last waiter withdrew, engine_withdraw_chunk): it is
 * demanded no longer, and when none of the ROIs it waits for has started it is dropped, those
 * that no other job needs going back to not asked for (lock held; job may be freed). */
void engine_job_unwanted(struct engine *e, struct chunk_job *job);
/* True when a ROI of the chunk in row `row` of the ROI index failed: only a reader's open
 * retries it (lock held). */
bool engine_has_failed_roi(struct engine *e, size_t row);
/* engine_failure_stands for some ROI of chunk id whose result, with keys (when not NULL: the
 * chunk's keys now), is not in the store either (lock held). */
bool engine_chunk_failure_stands(struct engine *e, uint64_t id, const struct chunk_keys *keys,
                                 int64_t began);
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

#endif
