/* cache.h: the backing directory, the only persistent state of roifs.
 *   DIR/manifest        canonical description of the task (must match to reuse the cache)
 *   DIR/chunks/<id>     encoded output chunks, by linear chunk id
 *   DIR/rois/<i>        raw results of ROIs that span several chunks, kept until every chunk
 *                       they touch is cached (so each ROI runs once even across remounts)
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
int cache_chunk_write(struct cache *c, uint64_t id, const void *data, size_t len);
/* Calls fn for every cached chunk id. */
int cache_chunk_each(struct cache *c, void (*fn)(void *ctx, uint64_t id), void *ctx);

int cache_roi_write(struct cache *c, size_t roi, const void *data, size_t len);
/* Reads exactly len bytes of a stored ROI result: 0, -ENOENT, or -EIO on a short file. */
int cache_roi_read(struct cache *c, size_t roi, void *data, size_t len);
void cache_roi_remove(struct cache *c, size_t roi);
int cache_roi_each(struct cache *c, void (*fn)(void *ctx, uint64_t roi), void *ctx);

#endif
