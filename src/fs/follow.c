/* follow.c: [input] watch on a mount. The input's files are followed (src/watch); for each
 * change the arrays forget what depends on it (arrayset_input_changed) and the kernel drops
 * the pages and attributes of those chunks' inodes (fuse_lowlevel_notify_inval_inode), from
 * the watch's own thread: never from a request's thread, where dropping pages can deadlock
 * (a page locked by a read in flight waits for that very thread). A change of the input's
 * metadata makes every chunk open fail with EIO until the mount is made again; another
 * directory at the input's path (or none) is a change of every chunk. */
#include "fs_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../watch/watch.h"

/* ---- metadata ---- */

/* The input's metadata as it is now against the mount's: 0 when it is the same layout, else
 * -errno with the reason. A missing file is looked for again for a second (a writer may be
 * replacing it); one missing with its directory is no metadata change but the directory's
 * removal, which dir_changed reports (zarr/input_dir.c refuses to read meanwhile). */
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
        struct stat st;
        if (r == -ENOENT && stat(t->ome.array_path, &st) < 0 && errno == ENOENT) {
            free(path);
            return 0;
        }
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
    else if ((r = zarr_meta_difference(was, &now, &perr)) < 0)
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

static void metadata_changed(void *ctx)
{
    struct fs *fs = ctx;
    struct errbuf err = {{0}};
    if (check_metadata(fs, &err) == 0)
        return; /* rewritten the same (its attributes, maybe) */
    char *why = xasprintf("the input's metadata changed under the mount (%s)", err.msg);
    arrayset_input_broken(fs->set, why);
    free(why);
}

/* Another directory at the input's path, or none: every chunk is looked at again, read through
 * the new directory (zarr/input_dir.c follows it at the next look) or failing with EIO while
 * none is there; another layout stops the mount as a metadata change does. */
static void dir_changed(void *ctx, bool there)
{
    struct fs *fs = ctx;
    const struct task *t = arrayset_array(fs->set, 0)->task;
    log_warn("[input] watch: %s: the input's directory was %s; every chunk is checked again at "
             "its next open",
             t->ome.array_path, there ? "replaced by another" : "removed or moved away");
    arrayset_input_changed(fs->set, NULL, 0, true, drop_chunk, fs);
    if (there)
        metadata_changed(ctx);
}

int fs_follow_start(struct fs *fs, struct errbuf *err)
{
    static const struct watch_ops ops = {.chunks_changed = chunks_changed,
                                         .metadata_changed = metadata_changed,
                                         .dir_changed = dir_changed,
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
