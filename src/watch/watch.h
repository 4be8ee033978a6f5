/* watch.h: following the input array's files with inotify ([input] watch = true): the
 * directory of the array and every directory of its chunk keys (nested keys, v3 "c/..."),
 * also those created later. A chunk (or shard) file written and closed, renamed into place
 * or removed is reported by its storage grid index; a change of the array's metadata file
 * (.zarray, zarr.json) is reported as such, as is another directory (or none) at the array's
 * path (its parent is watched for the name: removed, moved away, made again), which is then
 * watched in the old one's place.
 * Events are read and reported on a thread of its own, in batches. No FUSE here. */
#ifndef ROIFS_WATCH_H
#define ROIFS_WATCH_H

#include <stddef.h>
#include <stdint.h>

#include "../util.h"
#include "../zarr/zarr.h"

struct watch_ops {
    /* Storage files sids[0..n) changed (each once per batch). */
    void (*chunks_changed)(void *ctx, const uint64_t *sids, size_t n);
    /* The metadata file was written, replaced or removed. */
    void (*metadata_changed)(void *ctx);
    /* The directory at the array's path is another one now (there), watched from now on in
     * its place, or none (!there): anything may have changed. Reported instead of the batch's
     * chunk and metadata changes. */
    void (*dir_changed)(void *ctx, bool there);
    /* Events were lost (the kernel's queue overflowed): anything may have changed. */
    void (*everything_changed)(void *ctx);
};

struct watch;

/* Starts watching the array at path (its metadata m). Directories that cannot be watched
 * (the inotify limits) are logged with what to do, and counted; the rest is watched.
 * 0, or -errno with err set when inotify cannot be used at all. */
int watch_start(const char *path, const struct zarr_meta *m, const struct watch_ops *ops, void *ctx,
                struct watch **out, struct errbuf *err);
/* Stops the thread (no callback runs after it returns) and frees w. */
void watch_stop(struct watch *w);

struct watch_stats {
    size_t dirs;      /* directories watched */
    size_t unwatched; /* directories that could not be (a limit was reached) */
    uint64_t events;  /* chunk changes reported */
    uint64_t overflows;
    const char *warning; /* why directories are not watched (valid while w is), or NULL */
};
void watch_get_stats(struct watch *w, struct watch_stats *st);

/* The storage grid index of the chunk key rel (a path relative to the array, "1.2", "c/1/2",
 * ...) for metadata m: 0, or -1 when rel names no chunk of the grid. */
int watch_parse_key(const struct zarr_meta *m, const char *rel, uint64_t *sid);

#endif
