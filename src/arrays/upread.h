/* upread.h: an array of the mount reading another (a pyramid level the level above, a label
 * level the computed level) through the other array's engine, and the signature of what it
 * reads. A compute thread of the reader waits for the other engine, so the arrays must read
 * one another one way only (a directed acyclic graph), ending at arrays that read their
 * input alone: then no wait can close a cycle. */
#ifndef ROIFS_UPREAD_H
#define ROIFS_UPREAD_H

#include <stdbool.h>
#include <stdint.h>

#include "../engine/engine.h"
#include "../task.h"

struct upread {
    const struct task *up; /* the array read */
    struct engine *engine; /* its engine (running while the reader's threads read) */
    int level;             /* its number, for messages */
};

/* Reads box [f0, f0 + fshape) of u->up into dst (C order, native byte order): chunks that do
 * not exist read as the fill value. *sig (when not NULL) gets the signature of the versions
 * read. 0 or -EIO with err set. */
int upread_box(const struct upread *u, const uint64_t *f0, const uint64_t *fshape, void *dst,
               uint64_t *sig, struct errbuf *err);
/* What upread_each hands over for each chunk of up that exists: its box [lo, hi) in up and
 * its values (cbuf: C order, up's chunk shape, native byte order; valid during the call). */
typedef void (*upread_chunk_fn)(void *ctx, const uint64_t *lo, const uint64_t *hi,
                                const void *cbuf);
/* upread_box without the box: calls fn for each chunk of u->up that box [f0, f0 + fshape)
 * touches and that exists, in C order, so that a reader that needs only some elements takes
 * them straight from the chunk (chunks that do not exist are the caller's to fill). */
int upread_each(const struct upread *u, const uint64_t *f0, const uint64_t *fshape,
                upread_chunk_fn fn, void *ctx, uint64_t *sig, struct errbuf *err);
/* The signature of box [f0, f0 + fshape) of up as it is now (what upread_box would give);
 * with f0 NULL, that of an empty box. */
uint64_t upread_signature(const struct task *up, const uint64_t *f0, const uint64_t *fshape,
                          struct zarr_sigmemo *memo);
/* True when the box touches a chunk of up that exists. */
bool upread_touches_present(const struct task *up, const uint64_t *f0, const uint64_t *fshape);

/* The box [f0, f0 + fs) of up that box [b0, b0 + bs) of a level reads (ctx: the level). */
typedef void (*upread_footprint_fn)(const void *ctx, const uint64_t *b0, const uint64_t *bs,
                                    uint64_t *f0, uint64_t *fs);
/* The ROIs of a level (metadata o) that reads up: its chunks whose footprint touches a chunk of
 * up that exists, each ROI one chunk's box. */
void upread_level_rois(const struct task *up, const struct zarr_meta *o, upread_footprint_fn fp,
                       const void *ctx, struct roi_set *rs);

/* Decodes chunk id of up from fd (a cache file its engine gave) into buf (up's chunk_nbytes);
 * *key (when not NULL) gets the key of the version read. 0 or -errno with err set. */
int upread_decode_fd(const struct task *up, struct cache *cache, uint64_t id, int fd, void *buf,
                     struct key128 *key, struct errbuf *err);

/* A processor that copies its input to its output: that of an array whose input source
 * already gives its values (a pyramid or label level). */
struct proc *upread_copy_proc(void);

#endif
