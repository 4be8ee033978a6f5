/* cache.h: the backing directory, the only persistent state of roifs.
 *   DIR/manifest        canonical description of the task (must match to reuse the cache)
 *   DIR/chunks/<id>     encoded output chunks, by linear chunk id
 *   DIR/rois/<i>        raw results of ROIs that span several chunks, kept until every chunk
 *                       they touch is cached (so each ROI runs once even across remounts)
 *   DIR/locks/all       byte-range locks (one byte per chunk and per ROI) that make computing
 *                       a chunk, or a ROI spanning chunks, exclusive between processes sharing
 *                       the directory; the kernel drops the locks of a process that dies
 * Every file appears by rename of a complete temporary file: a reader sees all or nothing. */
#ifndef ROIFS_CACHE_H
#define ROIFS_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../task.h"

struct cache;

/* Opens (creating with mode 0700) the cache directory of t. A directory holding the cache of
 * another task is emptied and reused; a non-empty directory that is not a roifs cache is
 * refused. 0 or -errno. */
int cache_open(const struct task *t, struct cache **out, struct errbuf *err);
void cache_close(struct cache *c);
const char *cache_path(const struct cache *c);

/* Opens a cached chunk read-only: 0 and *fd, -ENOENT when not cached, or -errno. */
int cache_chunk_open(struct cache *c, uint64_t id, int *fd);
/* Size of a cached chunk: 0, or -ENOENT when not cached. */
int cache_chunk_size(struct cache *c, uint64_t id, uint64_t *size);
bool cache_chunk_exists(struct cache *c, uint64_t id);
/* Size and modification time (ns since the epoch) of a cached chunk: 0 or -errno. */
int cache_chunk_stat(struct cache *c, uint64_t id, uint64_t *size, int64_t *mtime_ns);
/* Writes chunk id atomically, tagged with sig, the signature of the input it was made from
 * (an extended attribute, so content and tag appear together). */
int cache_chunk_write(struct cache *c, uint64_t id, const void *data, size_t len, uint64_t sig);
/* The input signature a cached chunk was made from: 0, or -ENODATA / -ENOTSUP when the file
 * system keeps none (then nothing can be checked). */
int cache_chunk_sig(int fd, uint64_t *sig);
void cache_chunk_remove(struct cache *c, uint64_t id);
/* Calls fn for every cached chunk id. */
int cache_chunk_each(struct cache *c, void (*fn)(void *ctx, uint64_t id), void *ctx);

/* A stored ROI result carries the signature of the input it was made from. */
int cache_roi_write(struct cache *c, size_t roi, const void *data, size_t len, uint64_t sig);
/* Reads exactly len bytes of a stored ROI result made from input signature sig: 0, -ENOENT,
 * -ESTALE when it was made from other input, or -EIO on a short file. */
int cache_roi_read(struct cache *c, size_t roi, void *data, size_t len, uint64_t sig);
/* 0 when a result of ROI roi made from input signature sig is stored, else -ENOENT/-ESTALE. */
int cache_roi_check(struct cache *c, size_t roi, uint64_t sig);
void cache_roi_remove(struct cache *c, size_t roi);
int cache_roi_each(struct cache *c, void (*fn)(void *ctx, uint64_t roi), void *ctx);

/* Takes the lock of chunk id (wait = false: -EWOULDBLOCK when another process holds it).
 * Returns a lock descriptor to pass to cache_unlock, or -errno. */
int cache_lock_chunk(struct cache *c, uint64_t id, bool wait);
/* Takes the lock of ROI roi, waiting for it. Returns a lock descriptor or -errno. */
int cache_lock_roi(struct cache *c, size_t roi);
void cache_unlock(int lock);

#endif
