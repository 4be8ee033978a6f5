/* check.c: what `roifs apply` settles before opening the cache (apply.h): the refusals, the
 * lock that keeps a second apply of the same input out, and the input's record of an
 * unfinished application. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

int apply_refuse(const struct apply *a, struct errbuf *err, const char *section, const char *key,
                 const char *fmt, ...)
{
    int line = key ? config_line(&a->t->cfg, section, key) : 0;
    char where[512] = "", msg[sizeof err->msg];
    if (key)
        snprintf(where, sizeof where, "[%s] %s: ", section, key);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_at(err, -EINVAL, a->config, line, "%s%s", where, msg);
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
static int check_layout(const struct apply *a, struct errbuf *err)
{
    const struct zarr_meta *in = a->t->in_meta, *out = &a->t->out;
    char x[256], y[256];
    if (in->ndim != out->ndim || memcmp(in->shape, out->shape, sizeof(uint64_t) * in->ndim)) {
        dims_text(in->shape, in->ndim, x, sizeof x);
        dims_text(out->shape, out->ndim, y, sizeof y);
        return apply_refuse(a, err, "input", "channel",
                            "the output's shape (%s) is not the input's (%s): apply writes the "
                            "result over the input",
                            y, x);
    }
    if (in->dtype.kind != out->dtype.kind || in->dtype.size != out->dtype.size ||
        in->dtype.big_endian != out->dtype.big_endian) {
        char dx[8], dy[8];
        return apply_refuse(a, err, "output", "dtype",
                            "the output dtype %s is not the input's %s: apply writes the result "
                            "over the input",
                            dtype_typestr(&out->dtype, dy), dtype_typestr(&in->dtype, dx));
    }
    if (in->format != out->format)
        return apply_refuse(a, err, "output", "format",
                            "the output is Zarr format %d, the input format %d: set format = %d",
                            out->format, in->format, in->format);
    if (memcmp(in->chunks, out->chunks, sizeof(uint64_t) * in->ndim)) {
        dims_text(in->chunks, in->ndim, x, sizeof x);
        dims_text(out->chunks, out->ndim, y, sizeof y);
        return apply_refuse(
            a, err, "output", in->sharded || out->sharded ? "shard" : "chunks",
            "the output's chunk files are %s, the input's %s: they must be the same", y, x);
    }
    if (in->fortran_order)
        return apply_refuse(a, err, "input", "path",
                            "%s has order F; apply writes C-order chunks only", a->input_path);
    char *ti = meta_text(in), *to = meta_text(out);
    bool same = strcmp(ti, to) == 0;
    if (!same)
        a->note("roifs: the input's metadata:\n%s\nroifs: the output's:\n%s", ti, to);
    free(ti);
    free(to);
    if (!same)
        return apply_refuse(a, err, "output", NULL,
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

int apply_unmark(struct apply *a, struct errbuf *err)
{
    struct errbuf e = {{0}};
    if (apply_marker_remove(a->infd, &e) < 0)
        return err_set(err, -EIO, "%s/%s; the application finished: remove the file", a->input_path,
                       e.msg);
    apply_marker_free(&a->marker);
    return 0;
}

/* Read under the lock, before the cache is opened. Another job's marker refuses (unless its
 * journal says it finished: a kill before the marker went); this job's names the cache that
 * holds its journal and its results, which this run then uses, whatever the configuration's
 * cache directory is (another copy of the configuration, another default cache). */
static int check_marker(struct apply *a, struct errbuf *err)
{
    struct apply_marker *m = &a->marker;
    struct errbuf e = {{0}};
    apply_job_id(a->t, a->job);
    if (apply_marker_read(a->infd, m, &e) < 0)
        return apply_refuse(a, err, "input", "path",
                            "%s/%s; it would record an unfinished `roifs apply`: not touching the "
                            "array (remove the file once you know that none is unfinished)",
                            a->input_path, e.msg);
    if (!m->present)
        return 0;
    struct journal_summary s;
    int r = journal_peek(m->cache, &s);
    bool journaled = r == 0 && s.begun && s.gen == m->gen;
    bool same = strcmp(m->job, a->job) == 0;
    if (!same && journaled && s.finished)
        return apply_unmark(a, err); /* a kill after its journal's end, before the marker went */
    char when[64];
    format_time(m->started, when, sizeof when);
    if (!same)
        return apply_refuse(
            a, err, "input", "path",
            "%s: an application of another job is unfinished (%s/%s: begun %s from "
            "%s, its journal in %s/apply); finish it with `roifs apply %s`, or give it "
            "up by removing %s/%s and %s/apply (the array keeps its mix of old and "
            "new chunks)",
            a->input_path, a->input_path, APPLY_MARKER, when, m->config, m->cache, m->config,
            a->input_path, APPLY_MARKER, m->cache);
    if (!journaled)
        return apply_refuse(
            a, err, "input", "path",
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
        a->note("roifs: apply: %s/%s: this job's application begun %s from %s; its journal and "
                "results are in %s, which this run uses",
                a->input_path, APPLY_MARKER, when, m->config, m->cache);
        free(a->t->cache_dir);
        a->t->cache_dir = xstrdup(m->cache);
    }
    free(mine);
    return 0;
}

int apply_check(struct apply *a, struct errbuf *err)
{
    struct task *t = a->t;
    a->input_path = t->ome.array_path;
    if (zarr_is_url(a->input_path)) /* docs/remote.md */
        return apply_refuse(a, err, "input", "path",
                            "%s is a remote input, read-only: apply writes the input in place",
                            a->input_path);
    if (t->cfg.ome)
        return apply_refuse(a, err, "output", "ome",
                            "apply writes the input array itself, not an OME-Zarr image of it");
    if (t->ome.is_group)
        return apply_refuse(a, err, "input", "path",
                            "%s is an OME-Zarr image group; apply writes one array: name the level "
                            "(for example %s/%s), and know that its other levels will be stale",
                            t->cfg.input_path, t->cfg.input_path, "0");
    int r = check_layout(a, err);
    if (r)
        return r;
    if (t->outside == OUTSIDE_FILL && roi_index_nchunks(t->index) < t->nchunks)
        return apply_refuse(a, err, "output", "outside",
                            "%llu of the input's %llu chunk files lie outside every ROI and would "
                            "be lost; set outside = input to keep them",
                            (unsigned long long)(t->nchunks - roi_index_nchunks(t->index)),
                            (unsigned long long)t->nchunks);
    if (access(a->input_path, W_OK) < 0)
        return apply_refuse(a, err, "input", "path", "%s: not writable (%s)", a->input_path,
                            strerror(errno));
    a->infd = open(a->input_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    /* not inherited by processors: a child left behind must not hold the lock */
    a->lockfd = a->infd >= 0 ? fcntl(a->infd, F_DUPFD_CLOEXEC, 0) : -1;
    if (a->infd < 0 || a->lockfd < 0)
        return apply_refuse(a, err, "input", "path", "%s: %s", a->input_path, strerror(errno));
    if (flock(a->lockfd, LOCK_EX | LOCK_NB) < 0)
        return apply_refuse(a, err, "input", "path",
                            "%s: another roifs apply is writing this array; refusing to start a "
                            "second one (%s)",
                            a->input_path,
                            errno == EWOULDBLOCK ? "it holds the lock" : strerror(errno));
    /* What waits for its readers is the scratch: nothing read ahead, nothing evicted. */
    t->cfg.readahead = 0;
    t->cfg.max_size = 0;
    return check_marker(a, err);
}
