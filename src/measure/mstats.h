/* mstats.h: the partial statistics of [measure] (docs/measurements.md): per object id, its
 * pixel count, coordinate sums and bounding box, and per channel the count, mean, sum of squared
 * deviations from the mean (M2), min, max and sum of its intensities. A partial is made from one
 * piece of the label image (a chunk: two passes, so that M2 is taken around the piece's own mean)
 * and partials are merged pairwise with Chan et al.'s formula, never from a raw sum of squares,
 * so that the standard deviation of large intensities stays exact. The features of an object are
 * then those of its merged partial, whichever pieces cut it. FUSE-free, engine-free. */
#ifndef ROIFS_MSTATS_H
#define ROIFS_MSTATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../dtype.h"
#include "../map.h"
#include "../util.h"

/* One channel's statistics of one object. */
struct mchan {
    double sum, mean, m2, min, max;
};

/* One object's partial: followed in memory by nch struct mchan. */
struct mobj {
    uint64_t n;
    uint64_t lo[ROIFS_MAX_DIM], hi[ROIFS_MAX_DIM]; /* bounding box, inclusive */
    uint64_t csum[ROIFS_MAX_DIM];                  /* coordinate sums (exact) */
};

/* The partials of a set of objects: records (struct mobj + nch channels) in order of arrival,
 * in blocks of MSTATS_BLOCK that never move, and a map.h table from id to record index. */
#define MSTATS_BLOCK 4096
struct mstats {
    int ndim, nch;
    size_t rec; /* bytes of one object's record */
    struct map idx;
    unsigned char **blocks;
    uint64_t *ids;
    size_t n, cap; /* records, and room for them (blocks * MSTATS_BLOCK) */
};

void mstats_init(struct mstats *s, int ndim, int nch);
void mstats_destroy(struct mstats *s);
/* Object i's record (i < s->n). */
static inline struct mobj *mstats_obj(const struct mstats *s, size_t i)
{
    return (struct mobj *)(s->blocks[i / MSTATS_BLOCK] + (i % MSTATS_BLOCK) * s->rec);
}
/* The record of id, NULL when absent. */
struct mobj *mstats_get(const struct mstats *s, uint64_t id);
/* The record of id, a new zeroed one (*added) when absent. */
struct mobj *mstats_put(struct mstats *s, uint64_t id, bool *added);
static inline struct mchan *mstats_chan(struct mobj *o, int c)
{
    return (struct mchan *)(o + 1) + c;
}

/* Loads channel c's intensities of elements [e0, e0 + n) of a piece (C order) as doubles. */
typedef void (*mstats_load)(void *ctx, int c, uint64_t e0, size_t n, double *dst);

/* The partial of one piece of the image: labels (n elements of dt, C order over shape, ndim
 * dimensions, at origin[] in the whole image; 0 and negative values are background) and the
 * intensities, loaded block by block (so that no float64 copy of the piece is ever made). Adds
 * it to s (which is normally empty: the piece's own partial, to merge). */
void mstats_piece(struct mstats *s, const struct dtype *dt, const void *labels,
                  const uint64_t *origin, const uint64_t *shape, mstats_load load, void *ctx);
/* Merges every object of from into into (Chan et al.: counts, means and M2 pairwise). */
void mstats_merge(struct mstats *into, const struct mstats *from);
/* Merges one object's partial b into a. */
void mstats_merge_one(struct mobj *a, const struct mobj *b, int ndim, int nch);

#endif
