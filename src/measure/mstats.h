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

/* The partials of a set of objects: a map.h table from id to struct mobj + nch channels. */
struct mstats {
    int ndim, nch;
    size_t rec; /* bytes of one object's record */
    struct map objs;
};

void mstats_init(struct mstats *s, int ndim, int nch);
void mstats_destroy(struct mstats *s);
static inline struct mchan *mstats_chan(struct mobj *o, int c)
{
    return (struct mchan *)(o + 1) + c;
}

/* The partial of one piece of the image: labels (n elements of dt, C order over shape, ndim
 * dimensions, at origin[] in the whole image; 0 and negative values are background) and the
 * intensities (nch planes of n doubles each, plane c at inten + c * n). Adds it to s (which is
 * normally empty: the piece's own partial, to merge). */
void mstats_piece(struct mstats *s, const struct dtype *dt, const void *labels,
                  const uint64_t *origin, const uint64_t *shape, const double *inten);
/* Merges every object of from into into (Chan et al.: counts, means and M2 pairwise). */
void mstats_merge(struct mstats *into, const struct mstats *from);
/* Merges one object's partial b into a. */
void mstats_merge_one(struct mobj *a, const struct mobj *b, int ndim, int nch);

#endif
