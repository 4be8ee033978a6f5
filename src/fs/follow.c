/* follow.c: [input] watch on a mount. The input's files are followed (src/watch); for each
 * change the arrays forget what depends on it (arrayset_input_changed) and the kernel drops
 * the pages and attributes of those chunks' inodes (fuse_lowlevel_notify_inval_inode), from
 * the watch's own thread: never from a request's thread, where dropping pages can deadlock
 * (a page locked by a read in flight waits for that very thread). A change of the input's
 * metadata makes every chunk open fail with EIO until the mount is made again. */
#include "fs_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../watch/watch.h"

/* ---- metadata ---- */

static void dims_text(const uint64_t *v, int n, char *buf, size_t len)
{
    size_t pos = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < n && pos < len; d++)
        pos += (size_t)snprintf(buf + pos, len - pos, "%s%llu", d ? ", " : "",
                                (unsigned long long)v[d]);
    if (pos < len)
        snprintf(buf + pos, len - pos, "]");
}

/* What differs between the layouts a (at the mount) and b (now), in err; 0 when nothing
 * that decides how chunks are read does (attributes may). */
static int meta_difference(const struct zarr_meta *a, const struct zarr_meta *b, struct errbuf *err)
{
    char x[256], y[256];
    if (a->ndim != b->ndim || memcmp(a->shape, b->shape, sizeof(uint64_t) * a->ndim)) {
        dims_text(a->shape, a->ndim, x, sizeof x);
        dims_text(b->shape, b->ndim, y, sizeof y);
        return err_set(err, -EINVAL, "its shape changed from %s to %s", x, y);
    }
    if (memcmp(a->chunks, b->chunks, sizeof(uint64_t) * a->ndim)) {
        dims_text(a->chunks, a->ndim, x, sizeof x);
        dims_text(b->chunks, b->ndim, y, sizeof y);
        return err_set(err, -EINVAL, "its chunks changed from %s to %s", x, y);
    }
    char da[8], db[8];
    if (a->dtype.kind != b->dtype.kind || a->dtype.size != b->dtype.size ||
        a->dtype.big_endian != b->dtype.big_endian)
        return err_set(err, -EINVAL, "its dtype changed from %s to %s",
                       dtype_typestr(&a->dtype, da), dtype_typestr(&b->dtype, db));
    char *ea = a->format == 3 ? zarr_meta_emit_v3(a, NULL, NULL) : zarr_meta_emit_v2(a);
    char *eb = b->format == 3 ? zarr_meta_emit_v3(b, NULL, NULL) : zarr_meta_emit_v2(b);
    bool same = a->format == b->format && strcmp(ea, eb) == 0 &&
                a->fortran_order == b->fortran_order && a->fill_null == b->fill_null;
    free(ea);
    free(eb);
    return same ? 0
                : err_set(err, -EINVAL,
                          "its encoding changed (codecs, fill value, order or chunk keys)");
}

/* The input's metadata as it is now against the mount's: 0 when it is the same layout, else
 * -errno with the reason. A missing file is looked for again for a second (a writer may be
 * replacing it). */
static int check_metadata(struct fs *fs, struct errbuf *err)
{
    const struct task *t = arrayset_array(fs->set, 0)->task;
    const struct zarr_meta *was = t->in_meta;
    const char *name = was->format == 3 ? "zarr.json" : ".zarray";
    char *path = path_join(t->ome.array_path, name), *text = NULL;
    size_t len = 0;
    int r = -ENOENT;
    for (int i = 0; i < 10 && r == -ENOENT; i++) {
        if (i)
            usleep(100 * 1000);
        r = file_read_all(path, &text, &len);
    }
    if (r < 0) {
        r = err_set(err, r, "%s: %s", path, r == -ENOENT ? "removed" : strerror(-r));
        free(path);
        return r;
    }
    struct zarr_meta now;
    memset(&now, 0, sizeof now);
    struct errbuf perr = {{0}};
    r = was->format == 3 ? zarr_meta_parse_v3(text, len, &now, NULL, NULL, &perr)
                         : zarr_meta_parse_v2(text, len, &now, &perr);
    free(text);
    if (r < 0)
        r = err_set(err, r, "%s: %s", path, perr.msg);
    else if ((r = meta_difference(was, &now, &perr)) < 0)
        r = err_set(err, r, "%s: %s", path, perr.msg);
    free(path);
    return r;
}

/* ---- the watch's callbacks (on its thread) ---- */

/* Drops what the kernel holds of chunk id of an array: pages and attributes of its inodes. */
static void drop_chunk(void *ctx, int array, uint64_t id)
{
    struct fs *fs = ctx;
    uint64_t base = ns_chunk_ino(fs->ns, array, id), inos[2];
    int n = vt_invalidate(fs->vt, base, inos);
    for (int i = 0; i < n; i++) {
        int r = fuse_lowlevel_notify_inval_inode(fs->se, inos[i], 0, 0);
        if (r < 0 && r != -ENOENT)
            log_debug("[input] watch: inode %llu: cannot drop its pages: %s",
                      (unsigned long long)inos[i], strerror(-r));
    }
}

static void chunks_changed(void *ctx, const uint64_t *sids, size_t n)
{
    struct fs *fs = ctx;
    log_debug("[input] watch: %zu input chunk file%s changed", n, n == 1 ? "" : "s");
    arrayset_input_changed(fs->set, sids, n, false, drop_chunk, fs);
}

static void everything_changed(void *ctx)
{
    struct fs *fs = ctx;
    log_warn("[input] watch: events were lost (the kernel's queue overflowed); every chunk is "
             "checked again at its next open");
    arrayset_input_changed(fs->set, NULL, 0, true, drop_chunk, fs);
}

static void metadata_changed(void *ctx, const char *gone)
{
    struct fs *fs = ctx;
    struct errbuf err = {{0}};
    if (gone)
        err_set(&err, -ENOENT, "%s", gone);
    else if (check_metadata(fs, &err) == 0)
        return; /* rewritten the same (its attributes, maybe) */
    char *why = xasprintf("the input's metadata changed under the mount (%s)", err.msg);
    arrayset_input_broken(fs->set, why);
    free(why);
}

int fs_follow_start(struct fs *fs, struct errbuf *err)
{
    static const struct watch_ops ops = {.chunks_changed = chunks_changed,
                                         .metadata_changed = metadata_changed,
                                         .everything_changed = everything_changed};
    const struct task *t = arrayset_array(fs->set, 0)->task;
    int r = watch_start(t->ome.array_path, t->in_meta, &ops, fs, &fs->follow, err);
    if (r == 0)
        log_info("[input] watch: following %s", t->ome.array_path);
    return r;
}

void fs_follow_stop(struct fs *fs)
{
    watch_stop(fs->follow);
    fs->follow = NULL;
}

json_t *fs_follow_status(struct fs *fs)
{
    if (!fs->follow)
        return NULL;
    struct watch_stats st;
    watch_get_stats(fs->follow, &st);
    json_t *w = json_pack("{s:I, s:I, s:I, s:I}", "dirs", (json_int_t)st.dirs, "unwatched",
                          (json_int_t)st.unwatched, "changes", (json_int_t)st.events, "overflows",
                          (json_int_t)st.overflows);
    if (st.warning)
        json_object_set_new(w, "warning", json_string(st.warning));
    return w;
}
