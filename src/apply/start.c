/* start.c: `roifs apply` once its cache is open (apply.h): the journal at the start (begin,
 * resume after reconciling what a kill left, or already done), the input's marker, and the
 * plan, with the check that what is left can be finished from the original input; and what
 * clean asks of an unfinished application. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../engine/engine.h"
#include "../cache/cache.h"
#include "../nd.h"
#include "internal.h"

/* A journal's message (it starts with "journal"), placed in the cache. */
static int journal_error(const struct apply *a, const struct errbuf *e, struct errbuf *err)
{
    return err_set(err, -EIO, "%s/apply/%s", cache_path(a->c), e->msg);
}

/* ---- the journal at the start ---- */

static bool same_identity(const struct zarr_file_identity *x, const struct zarr_file_identity *y)
{
    return x->exists == y->exists && x->size == y->size && x->mtime_ns == y->mtime_ns &&
           x->ino == y->ino;
}

/* Length and crc32c of input file key: 0 or -errno. */
static int file_crc(int dirfd, const char *key, uint64_t *len, uint32_t *crc)
{
    int fd = openat(dirfd, key, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    char buf[1 << 16];
    uint32_t c = 0;
    uint64_t n = 0;
    ssize_t got;
    while ((got = read(fd, buf, sizeof buf)) > 0) {
        c = zarr_crc32c(c, buf, (size_t)got);
        n += (uint64_t)got;
    }
    int r = got < 0 ? -errno : 0;
    close(fd);
    *len = n;
    *crc = c;
    return r;
}

/* After a kill: every input file is either as it was when the application began, or (after
 * its intent record) the replacement the journal names. Notes the replacements whose record
 * the kill cut off. */
static int reconcile(struct apply *a, struct errbuf *err)
{
    struct journal *j = &a->j;
    for (uint64_t sid = 0; sid < j->nstorage; sid++) {
        if (j->state[sid] == JC_REPLACED)
            continue;
        struct zarr_file_identity now;
        zarr_input_storage_identity(a->t->reader, sid, &now);
        if (same_identity(&now, &j->origin[sid]))
            continue; /* not renamed yet (a temporary file beside it is written again) */
        char key[ROIFS_MAX_DIM * 24 + 4];
        zarr_input_storage_key(a->t->reader, sid, key, sizeof key);
        uint64_t len = 0;
        uint32_t crc = 0;
        struct errbuf e = {{0}};
        if (j->state[sid] == JC_INTENT && now.exists && file_crc(a->infd, key, &len, &crc) == 0 &&
            len == j->intent_len[sid] && crc == j->intent_crc[sid]) {
            if (journal_replaced(j, sid, &e) < 0)
                return journal_error(a, &e, err);
            continue; /* the kill came between the rename and its record */
        }
        return err_set(err, -EIO,
                       "%s/%s: changed by something other than this apply since it began; the "
                       "application cannot be finished from the original input (restore the "
                       "file as it was, then run the same command again)",
                       a->input_path, key);
    }
    return 0;
}

static int begin(struct apply *a, struct errbuf *err)
{
    uint64_t n = zarr_input_nstorage(a->t->reader);
    struct zarr_file_identity *ids = xmalloc((n ? n : 1) * sizeof *ids);
    for (uint64_t sid = 0; sid < n; sid++)
        zarr_input_storage_identity(a->t->reader, sid, &ids[sid]);
    struct errbuf e = {{0}};
    int r = journal_begin(&a->j, a->t->fingerprint, ids, n, &e);
    free(ids);
    if (r < 0)
        return journal_error(a, &e, err);
    apply_fault_point("begun"); /* nothing replaced, no marker: a retry from anywhere begins */
    return 0;
}

/* Before the first replacement: the input names this application and its cache. */
static int mark_input(struct apply *a, struct errbuf *err)
{
    struct apply_marker *m = &a->marker;
    if (m->present)
        return 0; /* check_marker: this job's, and the journal's application */
    memcpy(m->job, a->job, sizeof m->job);
    m->gen = a->j.gen;
    m->started = a->j.started;
    m->cache = path_absolute(cache_path(a->c));
    m->config = path_absolute(a->config);
    struct errbuf e = {{0}};
    if (apply_marker_write(a->infd, m, &e) < 0)
        return err_set(err, -EIO, "%s/%s", a->input_path, e.msg);
    m->present = true;
    apply_fault_point("marker");
    return 0;
}

/* Begins, resumes (0), or finds nothing to do (*done). */
static int start_journal(struct apply *a, bool again, bool *done, struct errbuf *err)
{
    struct errbuf e = {{0}};
    struct journal *j = &a->j;
    int r;
    if (journal_open(cache_path(a->c), j, &e) < 0)
        return journal_error(a, &e, err);
    if (a->marker.present && (!j->begun || j->gen != a->marker.gen))
        return err_set(err, -EIO, "%s/apply/journal: no longer the application %s/%s records",
                       cache_path(a->c), a->input_path, APPLY_MARKER);
    if (a->marker.present && j->finished && (r = apply_unmark(a, err)) < 0)
        return r; /* a kill came after the journal's end, before the marker went */
    bool same = j->begun && j->fingerprint == a->t->fingerprint;
    if (!j->begun || (j->finished && again))
        return begin(a, err);
    if (j->finished) {
        char when[64] = "?";
        time_t ft = (time_t)j->finished_at;
        struct tm tm;
        if (localtime_r(&ft, &tm))
            strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
        if (!same)
            return apply_refuse(
                a, err, "input", "path",
                "%s already holds the result of another version of this "
                "configuration (applied %s); `roifs apply --again` applies this one "
                "over it",
                a->input_path, when);
        a->note("roifs: apply: %s already holds this result (applied %s); nothing changed "
                "(`roifs apply --again` applies it once more)",
                a->input_path, when);
        *done = true;
        return 0;
    }
    if (again)
        return apply_refuse(
            a, err, "input", "path",
            "an application to %s is unfinished (%llu of its chunk files replaced); "
            "run `roifs apply` without --again to finish it first",
            a->input_path, (unsigned long long)j->nreplaced);
    if (!same)
        return apply_refuse(a, err, "input", "path",
                            "an application of another version of this configuration to %s is "
                            "unfinished; restore that version and run apply to finish it",
                            a->input_path);
    if (j->nstorage != zarr_input_nstorage(a->t->reader))
        return err_set(err, -EIO, "%s/apply/journal: does not describe %s", cache_path(a->c),
                       a->input_path);
    if ((r = reconcile(a, err)) < 0)
        return r;
    a->note("roifs: apply: resuming: %llu chunk files of %s were replaced already",
            (unsigned long long)j->nreplaced, a->input_path);
    return 0;
}

/* ---- the plan ---- */

/* Pins the input to its original identities, finds the stored results, builds the plan and
 * checks that it can finish. */
static int prepare(struct apply *a, struct errbuf *err)
{
    struct task *t = a->t;
    struct journal *j = &a->j;
    zarr_input_pin_identities(t->reader, j->origin); /* every key: from the original input */
    struct store *s = cache_store(a->c);
    store_refresh(s);
    size_t nr = t->rois.n;
    struct key128 *keys = xmalloc((nr ? nr : 1) * sizeof *keys);
    a->stored = xcalloc(nr ? nr : 1, sizeof *a->stored);
    struct zarr_sigmemo *memo = zarr_sigmemo_new();
    for (size_t r = 0; r < nr; r++) {
        keys[r] = engine_roi_key(t, (uint32_t)r, engine_roi_sig_now(t, (uint32_t)r, memo));
        a->stored[r] = store_lookup(s, keys[r], NULL);
    }
    uint8_t *replaced = xcalloc(t->nchunks ? t->nchunks : 1, 1);
    for (uint64_t id = 0; id < t->nchunks && id < j->nstorage; id++)
        replaced[id] = j->state[id] == JC_REPLACED;
    plan_build(&a->plan, t, replaced, keys, a->stored);
    free(replaced);
    free(keys);
    int rc = 0;
    for (size_t k = 0; k < a->plan.norder && rc == 0; k++) {
        uint64_t id = a->plan.order[k];
        if (!plan_needs_assembled(&a->plan, id, a->stored))
            continue;
        struct chunk_keys ck;
        engine_chunk_keys_now(t, id, memo, &ck);
        int fd = -1;
        if (cache_chunk_open_current(a->c, id, ck.chunk, &fd, NULL) == CHUNK_CURRENT)
            close(fd);
        else {
            rc = err_set(err, -EIO,
                         "apply: chunk %llu cannot be finished: results it needs are gone from "
                         "%s and the input files they read were replaced already",
                         (unsigned long long)id, cache_path(a->c));
        }
        chunk_keys_free(&ck);
    }
    zarr_sigmemo_free(memo);
    if (rc)
        return rc;
    a->ready = xmalloc((t->nchunks ? t->nchunks : 1) * sizeof *a->ready);
    a->results_dir = path_join(cache_path(a->c), "results");
    a->array_bytes = nd_prod(t->in_meta->shape, t->in_meta->ndim) * t->in_meta->dtype.size;
    /* Packs of about one chunk's results, so that dropping used results mostly unlinks whole
     * packs instead of copying what is kept; and a look at what can go after each chunk's
     * worth of new results. */
    uint64_t cn = t->chunk_nbytes;
    store_pack_limit = cn < (16u << 10) ? (16u << 10) : cn > (1u << 30) ? (1u << 30) : cn;
    a->slack = a->array_bytes / 64 > cn ? a->array_bytes / 64 : cn;
    a->store_after_compaction = 0;
    return 0;
}

int apply_begin(struct apply *a, struct cache *c, bool again, bool *done, struct errbuf *err)
{
    a->c = c;
    *done = false;
    int r = start_journal(a, again, done, err);
    if (r == 0 && !*done)
        r = mark_input(a, err);
    if (r == 0 && !*done)
        r = prepare(a, err);
    return r;
}

/* A kill between the journal's end and the removal of the input's marker left the marker;
 * clean is about to delete the journal that says it is stale, so it goes first (under the
 * input's lock: an apply running keeps it). */
static void drop_finished_marker(const struct task *t, uint64_t gen)
{
    int fd = open(t->ome.array_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return;
    struct apply_marker m;
    struct errbuf err = {{0}};
    memset(&m, 0, sizeof m);
    if (flock(fd, LOCK_EX | LOCK_NB) == 0 && apply_marker_read(fd, &m, &err) == 0 && m.present) {
        char *mine = path_absolute(t->cache_dir);
        if (strcmp(mine, m.cache) == 0 && m.gen == gen && apply_marker_remove(fd, &err) < 0)
            fprintf(stderr, "roifs: %s/%s\n", t->ome.array_path, err.msg);
        free(mine);
    }
    apply_marker_free(&m);
    close(fd); /* drops the lock */
}

/* The journal is read, never changed. */
int apply_refuse_unfinished(const struct task *t, struct errbuf *err)
{
    struct journal_summary s;
    int r = journal_peek(t->cache_dir, &s);
    if (r < 0)
        return err_set(err, -EINVAL,
                       "%s/apply/journal: %s; not cleaning (remove %s/apply to give up the "
                       "application it records)",
                       t->cache_dir, r == -EBADMSG ? "damaged" : strerror(-r), t->cache_dir);
    if (s.begun && s.finished)
        drop_finished_marker(t, s.gen);
    if (!s.begun || s.finished)
        return 0;
    return err_set(err, -EINVAL,
                   "%s: an unfinished `roifs apply` (%" PRIu64 " of %" PRIu64
                   " input files replaced) needs this cache to finish without applying a ROI "
                   "twice; finish it with `roifs apply %s` first (or remove %s/apply and %s/%s "
                   "to give it up)",
                   t->cache_dir, s.replaced, s.total, t->cfg.path, t->cache_dir, t->ome.array_path,
                   APPLY_MARKER);
}
