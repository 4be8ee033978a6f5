/* engine.h: demand-driven computation of output chunks. Opening a chunk queues the ROIs that
 * touch it (and, behind them, those of the chunks that follow: readahead) on a pool of
 * compute threads; each ROI runs at most once (single-flight), the chunk is assembled in ROI
 * list order, encoded, written to the cache, and every waiter is called back with an fd.
 * Callers never block on computation: the callback runs on a compute thread. */
#ifndef ROIFS_ENGINE_H
#define ROIFS_ENGINE_H

#include <stdint.h>

#include "../task.h"
#include "cache.h"

struct engine;

/* How a chunk came to be served (flags of engine_chunk_cb). */
#define ENGINE_COMPUTED 1 /* computed for this open: nothing of it can be in a page cache */
#define ENGINE_REPLACED 2 /* a cached version made from older input was thrown away */

/* Called once per engine_open_chunk: err 0 with a read-only fd of the cached chunk (the
 * callee owns it), or a negative errno (-EIO when a ROI or the input failed). */
typedef void (*engine_chunk_cb)(void *ctx, int err, int fd, int flags);

/* Starts cfg.threads compute threads. The engine borrows t and c. */
int engine_create(struct task *t, struct cache *c, struct engine **out, struct errbuf *err);
/* Stops the processor, fails every waiter with -ESHUTDOWN... (-EIO), joins the threads. */
void engine_destroy(struct engine *e);

/* Asks for chunk `id` (which must be present: task_chunk_present). cb may run before this
 * returns (chunk already cached) or later on a compute thread. */
void engine_open_chunk(struct engine *e, uint64_t id, engine_chunk_cb cb, void *ctx);
/* Size of chunk id as a reader may see it: *known false when it is not computed yet and its
 * encoded size is not fixed in advance. Never computes. */
void engine_chunk_size(struct engine *e, uint64_t id, uint64_t *size, bool *known);

/* Computes every ROI and chunk (warm/export without a mount); progress(ctx, done, total) is
 * called from time to time. Returns 0, or -EIO when some chunk failed. */
int engine_compute_all(struct engine *e, void (*progress)(void *ctx, size_t done, size_t total),
                       void *ctx);

/* The status document of SPEC §6 (malloc'd JSON text). */
char *engine_status_json(struct engine *e);

#endif
