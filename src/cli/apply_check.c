/* apply_check.c: what `roifs apply` settles before computing anything: the refusals of
 * docs/operations.md (Writing the result in place; exit 2), the lock that keeps a second apply of
 * the same input out, the journal (begin, resume, or already done) and the plan, with the check
 * that what is left can be finished from the original input. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../engine/engine.h"
#include "../engine/store.h"
#include "../nd.h"
#include "apply_internal.h"

/* Prints "roifs: CONFIG[:LINE]: [section] key: ..." (line: the key's, when the file sets it;
 * key NULL: none) and returns EXIT_USAGE. */
static int refuse(const struct apply *a, const char *section, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int refuse(const struct apply *a, const char *section, const char *key, const char *fmt, ...)
{
    int line = key ? config_line(&a->t->cfg, section, key) : 0;
    fprintf(stderr, "roifs: %s", a->config);
    if (line > 0)
        fprintf(stderr, ":%d", line);
    if (key)
        fprintf(stderr, ": [%s] %s", section, key);
    fputs(": ", stderr);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return EXIT_USAGE;
}

static void dims_text(const uint64_t *v, int n, char *buf, size_t len)
{
    size_t off = 0;
    buf[0] = '\0';
    for (int d = 0; d < n && off < len; d++)
        off += (size_t)snprintf(buf + off, len - off, "%s%llu", d ? "," : "",
                                (unsigned long long)v[d]);
}

static char *meta_text(const struct zarr_meta *m)
{
    return m->format == 3 ? zarr_meta_emit_v3(m, NULL, NULL) : zarr_meta_emit_v2(m);
}

/* The output must be the input's array, byte for byte in its encoding. */
static int check_layout(const struct apply *a)
{
    const struct zarr_meta *in = a->t->in_meta, *out = &a->t->out;
    char x[256], y[256];
    if (in->ndim != out->ndim || memcmp(in->shape, out->shape, sizeof(uint64_t) * in->ndim)) {
        dims_text(in->shape, in->ndim, x, sizeof x);
        dims_text(out->shape, out->ndim, y, sizeof y);
        return refuse(a, "input", "channel",
                      "the output's shape (%s) is not the input's (%s): apply writes the "
                      "result over the input",
                      y, x);
    }
    if (in->dtype.kind != out->dtype.kind || in->dtype.size != out->dtype.size ||
        in->dtype.big_endian != out->dtype.big_endian) {
        char dx[8], dy[8];
        return refuse(a, "output", "dtype",
                      "the output dtype %s is not the input's %s: apply writes the result "
                      "over the input",
                      dtype_typestr(&out->dtype, dy), dtype_typestr(&in->dtype, dx));
    }
    if (in->format != out->format)
        return refuse(a, "output", "format",
                      "the output is Zarr format %d, the input format %d: set format = %d",
                      out->format, in->format, in->format);
    if (memcmp(in->chunks, out->chunks, sizeof(uint64_t) * in->ndim)) {
        dims_text(in->chunks, in->ndim, x, sizeof x);
        dims_text(out->chunks, out->ndim, y, sizeof y);
        return refuse(a, "output", in->sharded || out->sharded ? "shard" : "chunks",
                      "the output's chunk files are %s, the input's %s: they must be the same", y,
                      x);
    }
    if (in->fortran_order)
        return refuse(a, "input", "path", "%s has order F; apply writes C-order chunks only",
                      a->input_path);
    char *ti = meta_text(in), *to = meta_text(out);
    bool same = strcmp(ti, to) == 0;
    if (!same)
        fprintf(stderr, "roifs: the input's metadata:\n%s\nroifs: the output's:\n%s\n", ti, to);
    free(ti);
    free(to);
    if (!same)
        return refuse(a, "output", NULL,
                      "the output's encoding (compressor, codecs, fill_value, separator) is "
                      "not the input's; set [output] so that both metadata above agree");
    return 0;
}

/* ---- the input's record of an unfinished application (marker.h) ---- */

static void format_time(uint64_t secs, char *buf, size_t len)
{
    time_t tt = (time_t)secs;
    struct tm tm;
    snprintf(buf, len, "?");
    if (localtime_r(&tt, &tm))
        strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm);
}

int apply_unmark(struct apply *a)
{
    struct errbuf err = {{0}};
    if (apply_marker_remove(a->infd, &err) < 0) {
        fprintf(stderr, "roifs: %s/%s; the application finished: remove the file\n", a->input_path,
                err.msg);
        return EXIT_RUNTIME;
    }
    apply_marker_free(&a->marker);
    return 0;
}

/* Read under the lock, before the cache is opened. Another job's marker refuses (unless its
 * journal says it finished: a kill before the marker went); this job's names the cache that
 * holds its journal and its results, which this run then uses, whatever the configuration's
 * cache directory is (another copy of the configuration, another default cache). */
static int check_marker(struct apply *a)
{
    struct apply_marker *m = &a->marker;
    struct errbuf err = {{0}};
    apply_job_id(a->t, a->job);
    if (apply_marker_read(a->infd, m, &err) < 0)
        return refuse(a, "input", "path",
                      "%s/%s; it would record an unfinished `roifs apply`: not touching the "
                      "array (remove the file once you know that none is unfinished)",
                      a->input_path, err.msg);
    if (!m->present)
        return 0;
    struct journal_summary s;
    int r = journal_peek(m->cache, &s);
    bool journaled = r == 0 && s.begun && s.gen == m->gen;
    bool same = strcmp(m->job, a->job) == 0;
    if (!same && journaled && s.finished)
        return apply_unmark(a); /* a kill after its journal's end, before the marker went */
    char when[64];
    format_time(m->started, when, sizeof when);
    if (!same)
        return refuse(a, "input", "path",
                      "%s: an application of another job is unfinished (%s/%s: begun %s from "
                      "%s, its journal in %s/apply); finish it with `roifs apply %s`, or give it "
                      "up by removing %s/%s and %s/apply (the array keeps its mix of old and "
                      "new chunks)",
                      a->input_path, a->input_path, APPLY_MARKER, when, m->config, m->cache,
                      m->config, a->input_path, APPLY_MARKER, m->cache);
    if (!journaled)
        return refuse(a, "input", "path",
                      "%s/%s records an unfinished application of this job (begun %s from %s) "
                      "whose journal %s/apply/journal is %s: it cannot be finished without "
                      "applying some ROI twice; restore the array, then remove %s/%s",
                      a->input_path, APPLY_MARKER, when, m->config, m->cache,
                      r == -EBADMSG ? "damaged"
                      : r < 0       ? "unreadable"
                                    : "gone",
                      a->input_path, APPLY_MARKER);
    char *mine = path_absolute(a->t->cache_dir);
    if (strcmp(mine, m->cache) != 0) {
        fprintf(stderr,
                "roifs: apply: %s/%s: this job's application begun %s from %s; its journal "
                "and results are in %s, which this run uses\n",
                a->input_path, APPLY_MARKER, when, m->config, m->cache);
        free(a->t->cache_dir);
        a->t->cache_dir = xstrdup(m->cache);
    }
    free(mine);
    return 0;
}

int apply_check(struct apply *a)
{
    struct task *t = a->t;
    a->input_path = t->ome.array_path;
    if (t->cfg.ome)
        return refuse(a, "output", "ome",
                      "apply writes the input array itself, not an OME-Zarr image of it");
    if (t->ome.is_group)
        return refuse(a, "input", "path",
                      "%s is an OME-Zarr image group; apply writes one array: name the level "
                      "(for example %s/%s), and know that its other levels will be stale",
                      t->cfg.input_path, t->cfg.input_path, "0");
    int r = check_layout(a);
    if (r)
        return r;
    if (t->outside == OUTSIDE_FILL && roi_index_nchunks(t->index) < t->nchunks)
        return refuse(a, "output", "outside",
                      "%llu of the input's %llu chunk files lie outside every ROI and would "
                      "be lost; set outside = input to keep them",
                      (unsigned long long)(t->nchunks - roi_index_nchunks(t->index)),
                      (unsigned long long)t->nchunks);
    if (access(a->input_path, W_OK) < 0)
        return refuse(a, "input", "path", "%s: not writable (%s)", a->input_path, strerror(errno));
    a->infd = open(a->input_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    /* not inherited by processors: a child left behind must not hold the lock */
    a->lockfd = a->infd >= 0 ? fcntl(a->infd, F_DUPFD_CLOEXEC, 0) : -1;
    if (a->infd < 0 || a->lockfd < 0)
        return refuse(a, "input", "path", "%s: %s", a->input_path, strerror(errno));
    if (flock(a->lockfd, LOCK_EX | LOCK_NB) < 0)
        return refuse(a, "input", "path",
                      "%s: another roifs apply is writing this array; refusing to start a "
                      "second one (%s)",
                      a->input_path, errno == EWOULDBLOCK ? "it holds the lock" : strerror(errno));
    /* What waits for its readers is the scratch: nothing read ahead, nothing evicted. */
    t->cfg.readahead = 0;
    t->cfg.max_size = 0;
    return check_marker(a);
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
 * the kill cut off. 0 or EXIT_RUNTIME. */
static int reconcile(struct apply *a)
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
        struct errbuf err = {{0}};
        if (j->state[sid] == JC_INTENT && now.exists && file_crc(a->infd, key, &len, &crc) == 0 &&
            len == j->intent_len[sid] && crc == j->intent_crc[sid]) {
            if (journal_replaced(j, sid, &err) < 0) {
                fprintf(stderr, "roifs: %s/apply/%s\n", cache_path(a->c), err.msg);
                return EXIT_RUNTIME;
            }
            continue; /* the kill came between the rename and its record */
        }
        fprintf(stderr,
                "roifs: %s/%s: changed by something other than this apply since it began; "
                "the application cannot be finished from the original input (restore the "
                "file as it was, then run the same command again)\n",
                a->input_path, key);
        return EXIT_RUNTIME;
    }
    return 0;
}

static int begin(struct apply *a)
{
    uint64_t n = zarr_input_nstorage(a->t->reader);
    struct zarr_file_identity *ids = xmalloc((n ? n : 1) * sizeof *ids);
    for (uint64_t sid = 0; sid < n; sid++)
        zarr_input_storage_identity(a->t->reader, sid, &ids[sid]);
    struct errbuf err = {{0}};
    int r = journal_begin(&a->j, a->t->fingerprint, ids, n, &err);
    free(ids);
    if (r < 0) {
        fprintf(stderr, "roifs: %s/apply/%s\n", cache_path(a->c), err.msg);
        return EXIT_RUNTIME;
    }
    apply_fault_point("begun"); /* nothing replaced, no marker: a retry from anywhere begins */
    return APPLY_GO;
}

/* Before the first replacement: the input names this application and its cache. */
static int mark_input(struct apply *a)
{
    struct apply_marker *m = &a->marker;
    if (m->present)
        return APPLY_GO; /* check_marker: this job's, and the journal's application */
    memcpy(m->job, a->job, sizeof m->job);
    m->gen = a->j.gen;
    m->started = a->j.started;
    m->cache = path_absolute(cache_path(a->c));
    m->config = path_absolute(a->config);
    struct errbuf err = {{0}};
    if (apply_marker_write(a->infd, m, &err) < 0) {
        fprintf(stderr, "roifs: %s/%s\n", a->input_path, err.msg);
        return EXIT_RUNTIME;
    }
    m->present = true;
    apply_fault_point("marker");
    return APPLY_GO;
}

static int start_journal(struct apply *a, bool again)
{
    struct errbuf err = {{0}};
    struct journal *j = &a->j;
    if (journal_open(cache_path(a->c), j, &err) < 0) {
        fprintf(stderr, "roifs: %s/apply/%s\n", cache_path(a->c), err.msg);
        return EXIT_RUNTIME;
    }
    if (a->marker.present && (!j->begun || j->gen != a->marker.gen)) {
        fprintf(stderr, "roifs: %s/apply/journal: no longer the application %s/%s records\n",
                cache_path(a->c), a->input_path, APPLY_MARKER);
        return EXIT_RUNTIME;
    }
    if (a->marker.present && j->finished && apply_unmark(a))
        return EXIT_RUNTIME; /* a kill came after the journal's end, before the marker went */
    bool same = j->begun && j->fingerprint == a->t->fingerprint;
    if (!j->begun || (j->finished && again))
        return begin(a);
    if (j->finished) {
        char when[64] = "?";
        time_t ft = (time_t)j->finished_at;
        struct tm tm;
        if (localtime_r(&ft, &tm))
            strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
        if (!same)
            return refuse(a, "input", "path",
                          "%s already holds the result of another version of this "
                          "configuration (applied %s); `roifs apply --again` applies this one "
                          "over it",
                          a->input_path, when);
        fprintf(stderr,
                "roifs: apply: %s already holds this result (applied %s); nothing changed "
                "(`roifs apply --again` applies it once more)\n",
                a->input_path, when);
        return APPLY_DONE;
    }
    if (again)
        return refuse(a, "input", "path",
                      "an application to %s is unfinished (%llu of its chunk files replaced); "
                      "run `roifs apply` without --again to finish it first",
                      a->input_path, (unsigned long long)j->nreplaced);
    if (!same)
        return refuse(a, "input", "path",
                      "an application of another version of this configuration to %s is "
                      "unfinished; restore that version and run apply to finish it",
                      a->input_path);
    if (j->nstorage != zarr_input_nstorage(a->t->reader)) {
        fprintf(stderr, "roifs: %s/apply/journal: does not describe %s\n", cache_path(a->c),
                a->input_path);
        return EXIT_RUNTIME;
    }
    int r = reconcile(a);
    if (r)
        return r;
    fprintf(stderr, "roifs: apply: resuming: %llu chunk files of %s were replaced already\n",
            (unsigned long long)j->nreplaced, a->input_path);
    return APPLY_GO;
}

int apply_start_journal(struct apply *a, bool again)
{
    int r = start_journal(a, again);
    return r == APPLY_GO ? mark_input(a) : r;
}

/* ---- the plan ---- */

int apply_prepare(struct apply *a)
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
            fprintf(stderr,
                    "roifs: apply: chunk %llu cannot be finished: results it needs are gone "
                    "from %s and the input files they read were replaced already\n",
                    (unsigned long long)id, cache_path(a->c));
            rc = EXIT_RUNTIME;
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

void apply_note_stale_levels(const struct task *t)
{
    if (t->ome.found && t->ome.group_path)
        run_message("roifs: apply: note: %s is level %d of the OME-Zarr image %s; its other "
                    "levels were not rewritten and are stale now",
                    t->ome.array_path, t->ome.level, t->ome.group_path);
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

/* Used by clean and clean --unused: the journal is read, never changed. */
int cli_refuse_unfinished_apply(const struct task *t)
{
    struct journal_summary s;
    int r = journal_peek(t->cache_dir, &s);
    if (r < 0) {
        fprintf(stderr,
                "roifs: %s/apply/journal: %s; not cleaning (remove %s/apply to give up "
                "the application it records)\n",
                t->cache_dir, r == -EBADMSG ? "damaged" : strerror(-r), t->cache_dir);
        return EXIT_USAGE;
    }
    if (s.begun && s.finished)
        drop_finished_marker(t, s.gen);
    if (!s.begun || s.finished)
        return 0;
    fprintf(stderr,
            "roifs: %s: an unfinished `roifs apply` (%" PRIu64 " of %" PRIu64
            " input files replaced) needs this cache to finish without applying a ROI twice; "
            "finish it with `roifs apply %s` first (or remove %s/apply and %s/%s to give it "
            "up)\n",
            t->cache_dir, s.replaced, s.total, t->cfg.path, t->cache_dir, t->ome.array_path,
            APPLY_MARKER);
    return EXIT_USAGE;
}
