/* engine.c: the engine's face (see engine.h): chunk opens, checked against the keys of what
 * the chunk is made of and handed to a job when not current (jobs.c); the compute pool that
 * runs ROIs (compute.c), assemblies (jobs.c) and checks ahead (ahead.c); creation, with what
 * the cache already holds, and destruction. One mutex guards the ROI and chunk states
 * (engine_internal.h says what is read without it); computation, I/O and callbacks run
 * outside it. */
#include "engine_internal.h"
#include "ahead.h"
#include "budget.h"
#include "turns.h"
#include "compute.h"
#include "jobs.h"
#include "progress.h"
#include "results.h"
#include "stale.h"
#include "labels.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../cache/cache.h"

/* ---- opening a chunk ---- */

/* Serves fd of a current chunk. */
static void serve_cached(struct engine *e, uint64_t id, int fd, bool replaced, engine_chunk_cb cb,
                         void *ctx)
{
    /* e->s.evict itself is set at creation; the order of use it holds, and the stale chunks,
     * are guarded by the lock (nstale is atomic: a hint read without it) */
    if (e->s.evict || e->nstale) { /* before the reader hears of it: its next open may evict */
        pthread_mutex_lock(&e->lock);
        if (e->s.evict)
            evict_touch(e->s.evict, id);
        if (e->nstale && engine_stale_take(e, id))
            e->s.n_cached++; /* current again */
        pthread_mutex_unlock(&e->lock);
    }
    /* A version replaced by another thread meanwhile may still be in the kernel's cache. */
    cb(ctx, 0, fd, replaced ? ENGINE_REPLACED | ENGINE_COMPUTED : 0);
    engine_read_ahead(e, id);
}

/* cb(ctx, ...) is told when job ends (lock held); the open began at `began`. */
static void add_waiter(struct chunk_job *job, engine_chunk_cb cb, void *ctx, int64_t began)
{
    struct waiter *w = xmalloc(sizeof *w);
    w->cb = cb;
    w->ctx = ctx;
    w->began = began;
    w->next = job->waiters;
    job->waiters = w;
}

/* engine_open_chunk of an open that began at `began` (CLOCK_MONOTONIC ns): a ROI that failed
 * since (while this open looked at the keys, which is slow for input written under 2 s ago:
 * it is hashed again at every look) answers it with EIO; only a failure older than the open
 * is tried again (engine_failure_stands). */
static void open_chunk(struct engine *e, uint64_t id, engine_chunk_cb cb, void *ctx, int64_t began)
{
    if (e->is_broken) { /* the input's metadata changed under the mount (changes.c) */
        cb(ctx, -EIO, -1, 0);
        return;
    }
    /* A job for the chunk exists (read-ahead made it, or another reader's open): its waiters
     * get what it makes, whatever this open would find, so neither the keys (most of an
     * open's cost with small ROIs) nor the cache are looked at. */
    pthread_mutex_lock(&e->lock);
    struct chunk_job *running = e->s.stopping ? NULL : engine_job_find(e, id);
    if (running) {
        engine_job_promote(e, running);
        add_waiter(running, cb, ctx, began);
        pthread_mutex_unlock(&e->lock);
        engine_read_ahead(e, id);
        return;
    }
    /* a ROI of the chunk failed since this open began, or within retry_after: EIO at once,
     * without a look at the keys */
    bool stands = !e->s.stopping && engine_chunk_failure_stands(e, id, NULL, began);
    pthread_mutex_unlock(&e->lock);
    if (stands) {
        cb(ctx, -EIO, -1, 0);
        return;
    }
    struct chunk_keys keys;
    engine_chunk_keys_now(e->f.t, id, NULL, &keys);
    bool replaced = false;
    for (int attempt = 0;; attempt++) {
        int fd = -1;
        enum cache_chunk_state st = cache_chunk_open_current(e->f.c, id, keys.chunk, &fd, NULL);
        if (st == CHUNK_CURRENT) {
            chunk_keys_free(&keys);
            serve_cached(e, id, fd, replaced, cb, ctx);
            return;
        }
        replaced = replaced || st != CHUNK_ABSENT;
        store_refresh(cache_store(e->f.c)); /* results other processes made meanwhile */
        pthread_mutex_lock(&e->lock);
        if (e->s.stopping) {
            pthread_mutex_unlock(&e->lock);
            chunk_keys_free(&keys);
            cb(ctx, -EIO, -1, 0);
            return;
        }
        struct chunk_job *job = engine_job_find(e, id);
        if (!job && attempt == 0 && cache_chunk_exists(e->f.c, id)) {
            /* made (or replaced) by another thread between our look and the lock */
            pthread_mutex_unlock(&e->lock);
            continue;
        }
        if (!job && engine_chunk_failure_stands(e, id, &keys, began)) {
            pthread_mutex_unlock(&e->lock);
            chunk_keys_free(&keys);
            cb(ctx, -EIO, -1, 0);
            return;
        }
        if (!job) {
            job = engine_job_create(e, id, true, replaced, &keys, began);
        } else {
            engine_job_promote(e, job);
        }
        add_waiter(job, cb, ctx, began);
        pthread_mutex_unlock(&e->lock);
        chunk_keys_free(&keys);
        engine_read_ahead(e, id);
        return;
    }
}

void engine_open_chunk(struct engine *e, uint64_t id, engine_chunk_cb cb, void *ctx)
{
    open_chunk(e, id, cb, ctx, clock_ns(CLOCK_MONOTONIC));
}

bool engine_withdraw_chunk(struct engine *e, uint64_t id, engine_chunk_cb cb, void *ctx)
{
    pthread_mutex_lock(&e->lock);
    struct chunk_job *job = engine_job_find(e, id);
    struct waiter **p = job ? &job->waiters : NULL;
    while (p && *p && !((*p)->cb == cb && (*p)->ctx == ctx))
        p = &(*p)->next;
    struct waiter *w = p ? *p : NULL;
    if (w) {
        *p = w->next;
        free(w);
        if (!job->waiters && job->demanded)
            engine_job_unwanted(e, job);
    }
    pthread_mutex_unlock(&e->lock);
    return w != NULL;
}

void engine_chunk_size(struct engine *e, uint64_t id, uint64_t *size, bool *known, int64_t *made_ns)
{
    bool fixed = e->f.t->chunk_fixed_size >= 0;
    if (made_ns)
        *made_ns = 0;
    if (fixed && !made_ns) {
        *size = (uint64_t)e->f.t->chunk_fixed_size;
        *known = true;
        return;
    }
    int64_t mtime_ns;
    bool stale = false;
    if (e->nstale) { /* made from input that changed since: its size is not known */
        pthread_mutex_lock(&e->lock);
        stale = engine_is_stale(e, id);
        pthread_mutex_unlock(&e->lock);
    }
    bool cached = !stale && cache_chunk_stat(e->f.c, id, size, &mtime_ns, NULL) == 0;
    if (cached && made_ns)
        *made_ns = mtime_ns;
    *known = fixed || cached;
    if (fixed)
        *size = (uint64_t)e->f.t->chunk_fixed_size;
    else if (!cached)
        *size = 0;
}

static void *worker_main(void *arg)
{
    struct engine *e = arg;
    struct turns *turns = e->f.opts.turns;
    bool turn = false; /* this thread holds one of the shared turns */
    pthread_mutex_lock(&e->lock);
    for (;;) {
        if (e->s.asm_head) {
            struct chunk_job *job = e->s.asm_head;
            e->s.asm_head = job->qnext;
            if (!e->s.asm_head)
                e->s.asm_tail = NULL;
            uint64_t id = job->id;
            pthread_mutex_unlock(&e->lock);
            struct waiter *again = engine_run_assembly(e, job);
            while (again) { /* came to a failed job: an attempt of their own, unless the
                             * failure came after their open began */
                struct waiter *next = again->next;
                open_chunk(e, id, again->cb, again->ctx, again->began);
                free(again);
                again = next;
            }
            pthread_mutex_lock(&e->lock);
            continue;
        }
        if (e->s.stopping)
            break;
        uint32_t r;
        if (turns && !turn && e->s.demand.len + e->s.ahead.len > 0) { /* a turn first */
            pthread_mutex_unlock(&e->lock);
            turns_take(turns, e->f.opts.turn_client);
            pthread_mutex_lock(&e->lock);
            turn = true;
            continue;
        }
        if (engine_pop_roi(e, &r)) {
            struct key128 want = e->s.rois[r].key;
            e->s.rois[r].state = RS_RUNNING;
            e->s.n_running++;
            uint32_t batch[PROC_BATCH_MAX];
            size_t n = engine_roi_batchable(e, r) ? engine_pop_batch(e, r, batch) : 1;
            pthread_mutex_unlock(&e->lock);
            if (n > 1)
                engine_run_rois(e, batch, n);
            else
                engine_run_roi(e, r, want);
            if (turn)
                turns_give(turns);
            turn = false;
            pthread_mutex_lock(&e->lock);
            continue;
        }
        if (turn) { /* the queue held only ROIs taken meanwhile */
            pthread_mutex_unlock(&e->lock);
            turns_give(turns);
            turn = false;
            pthread_mutex_lock(&e->lock);
            continue;
        }
        if (e->s.verify_len) {
            uint64_t id = e->s.verify[e->s.verify_head];
            e->s.verify_head = (e->s.verify_head + 1) % ENGINE_VERIFY_AHEAD;
            e->s.verify_len--;
            pthread_mutex_unlock(&e->lock);
            engine_verify_ahead(e, id);
            pthread_mutex_lock(&e->lock);
            continue;
        }
        pthread_cond_wait(&e->work_cv, &e->lock);
    }
    pthread_mutex_unlock(&e->lock);
    if (turn)
        turns_give(turns);
    return NULL;
}

/* ---- creation ---- */

struct chunk_scan {
    struct engine *e;
    int err; /* the first chunk file that could not be looked at */
};

static void scan_cached_chunk(void *ctx, uint64_t id)
{
    struct chunk_scan *cs = ctx;
    struct engine *e = cs->e;
    if (!task_chunk_present(e->f.t, id))
        return;
    e->s.n_cached++;
    uint64_t size, ino;
    int64_t mtime_ns;
    if (!e->s.evict)
        return;
    int r = cache_chunk_stat(e->f.c, id, &size, &mtime_ns, &ino);
    if (r == 0)
        evict_found(e->s.evict, id, size, mtime_ns, ino);
    else if (r != -ENOENT && cs->err == 0) /* ENOENT: removed since it was listed */
        cs->err = r;
}

/* The ROIs whose result, made from the input as it is now, is stored count as done; live
 * (when not NULL) gets the key of every ROI. */
static void scan_stored_results(struct engine *e, struct keyset *live)
{
    struct store *st = cache_store(e->f.c);
    struct store_stats ss;
    store_get_stats(st, &ss);
    if (ss.results == 0)
        return; /* nothing to look for: no stat of the input */
    struct zarr_sigmemo *memo = zarr_sigmemo_new();
    for (size_t r = 0; r < e->f.t->rois.n; r++) {
        struct key128 k =
            engine_roi_key(e->f.t, (uint32_t)r, engine_roi_sig_now(e->f.t, (uint32_t)r, memo));
        struct store_info info;
        if (live) {
            keyset_add(live, k);
            engine_labels_live(e->f.t, k, live);
        }
        if (store_lookup(st, k, &info)) {
            e->s.rois[r] = (struct roi_slot){.state = RS_DONE, .stored = true, .key = k};
            e->s.n_done++;
            e->s.n_reused++;
            engine_note_made(e, info.made);
        }
    }
    if (live)
        engine_labels_live_mapping(e->f.t, memo, live);
    e->s.n_at_start = e->s.n_done;
    e->s.n_unused = ss.results > e->s.n_done ? ss.results - e->s.n_done : 0;
    zarr_sigmemo_free(memo);
}

/* What a previous mount (or another process) already finished: the chunk files (which,
 * with max_size, are also put in their order of use and trimmed) and the stored results.
 * A cache whose chunk files cannot be listed is an error: counting nothing would under-count
 * what max_size bounds. */
static int scan_cache(struct engine *e, struct errbuf *err)
{
    struct chunk_scan cs = {.e = e};
    int r = cache_chunk_each(e->f.c, scan_cached_chunk, &cs);
    if (r == 0)
        r = cs.err;
    if (r < 0)
        return err_set(err, r, "%s/chunks: cannot list the cached chunks: %s", cache_path(e->f.c),
                       strerror(-r));
    struct keyset *live = e->s.evict ? keyset_new(e->f.t->rois.n) : NULL;
    scan_stored_results(e, live);
    if (e->s.evict) /* unused results first, then the least recently used chunks */
        engine_budget_start(e, live);
    keyset_free(live);
    return 0;
}

static int start_threads(struct engine *e, struct errbuf *err)
{
    int rc = pthread_create(&e->f.poller_thread, NULL, engine_poller_main, e);
    if (rc != 0)
        return err_set(err, -rc, "cannot start a thread: %s", strerror(rc));
    e->f.poller_started = true;
    e->f.threads = xcalloc((size_t)e->f.opts.threads, sizeof *e->f.threads);
    for (int i = 0; i < e->f.opts.threads; i++) {
        if ((rc = pthread_create(&e->f.threads[i], NULL, worker_main, e)) != 0)
            return err_set(err, -rc, "cannot start compute threads: %s", strerror(rc));
        e->f.nthreads = i + 1;
    }
    return 0;
}

int engine_create(struct task *t, struct cache *c, const struct engine_opts *o, struct engine **out,
                  struct errbuf *err)
{
    struct engine *e = xcalloc(1, sizeof *e);
    e->f.t = t;
    e->f.c = c;
    e->f.opts = *o;
    if (e->f.opts.threads < 1)
        e->f.opts.threads = 1;
    e->f.started = now_monotonic();
    e->f.started_at = (int64_t)time(NULL);
    pthread_mutex_init(&e->lock, NULL);
    map_init(&e->s.jobs, sizeof(struct chunk_job *), 0);
    pthread_cond_init(&e->work_cv, NULL);
    pthread_cond_init(&e->done_cv, NULL);
    pthread_cond_init(&e->poller_cv, NULL);
    e->s.rois = xcalloc(t->rois.n ? t->rois.n : 1, sizeof *e->s.rois);
    idlru_init(&e->s.stale);
    cache_adopt(c); /* this process serves the cache (maybe forked from the one that opened it) */
    if (o->max_size > 0)
        e->s.evict = evict_new(o->max_size);
    int rc = scan_cache(e, err);
    if (rc == 0)
        rc = start_threads(e, err);
    if (rc < 0) {
        engine_destroy(e);
        return rc;
    }
    *out = e;
    return 0;
}

/* ---- destruction ---- */

/* A compute thread may be blocked in a read of the input when the engine stops: typically
 * the open of a chunk of another roifs mount (a chained mount) that is still computing it.
 * A signal makes the kernel send that file system a FUSE_INTERRUPT, which roifs answers at
 * once (open.c), so the read ends with EINTR instead of holding the stop for the whole
 * computation upstream. Only threads inside an input read are signalled (the processor's
 * own sleeps and polls must not be cut short), and SA_RESTART restarts whatever can be. */
#define ENGINE_WAKE_SIGNAL   SIGURG
#define ENGINE_WAKE_EVERY_NS 50000000

static void wake_handler(int sig)
{
    (void)sig;
}

static void install_wake_handler(void)
{
    struct sigaction sa = {.sa_handler = wake_handler, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaction(ENGINE_WAKE_SIGNAL, &sa, NULL);
}

/* Joins compute thread th, signalling the threads that read the input (engine->readers) again
 * and again until it ends: th may wait for another one's read (a chunk of the input that only
 * one thread loads), and a signal sent just before a thread blocks is lost. */
static void join_waking(struct engine *e, pthread_t th)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, install_wake_handler);
    for (;;) {
        pthread_mutex_lock(&e->lock);
        for (struct engine_reader *r = e->s.readers; r; r = r->next)
            pthread_kill(r->thread, ENGINE_WAKE_SIGNAL);
        pthread_mutex_unlock(&e->lock);
        struct timespec until = deadline_in(CLOCK_REALTIME, ts_from_ns(ENGINE_WAKE_EVERY_NS));
        if (pthread_timedjoin_np(th, NULL, &until) != ETIMEDOUT)
            return;
    }
}

void engine_destroy(struct engine *e)
{
    pthread_mutex_lock(&e->lock);
    e->s.stopping = true;
    pthread_cond_broadcast(&e->work_cv);
    pthread_cond_broadcast(&e->poller_cv);
    pthread_mutex_unlock(&e->lock);
    proc_shutdown(e->f.t->proc);
    for (int i = 0; i < e->f.nthreads; i++)
        join_waking(e, e->f.threads[i]);
    if (e->f.poller_started)
        pthread_join(e->f.poller_thread, NULL);
    free(e->f.threads);
    size_t it;
    void *v;
    while (it = 0, map_next(&e->s.jobs, &it, NULL, &v)) /* each job out, the first left */
        engine_notify(e, engine_job_remove(e, *(struct chunk_job **)v), -1, -EIO, 0);
    map_destroy(&e->s.jobs);
    engine_flush_unstored(e); /* finished results survive the unmount */
    for (size_t r = 0; r < e->f.t->rois.n; r++)
        roi_result_unref(e->s.rois[r].result);
    for (size_t i = 0; i < e->s.nerrors; i++)
        free(e->s.errors[i].message);
    free(e->s.rois);
    engine_labels_free(e);
    evict_free(e->s.evict);
    engine_stale_free(e);
    free(e->s.broken);
    free(e->s.demand.buf);
    free(e->s.ahead.buf);
    pthread_mutex_destroy(&e->lock);
    pthread_cond_destroy(&e->work_cv);
    pthread_cond_destroy(&e->done_cv);
    pthread_cond_destroy(&e->poller_cv);
    free(e);
}
