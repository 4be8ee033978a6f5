/* downsample.h: the arithmetic of one pyramid level, with no engine: which box of the level
 * above a box of the level reduces (its footprint) and back (its image), and the reduction of each
 * 2x2 block of y and x (the mean, or the top-left element). */
#ifndef ROIFS_DOWNSAMPLE_H
#define ROIFS_DOWNSAMPLE_H

#include <stdbool.h>
#include <stdint.h>

#include "../dtype.h"

struct downsample {
    int ndim;
    int axis_y, axis_x; /* the halved dimensions (any two, in any place) */
    bool nearest;       /* the top-left element of each block, else the mean */
};

/* The box [f0, f0 + fshape) of the level above (of shape up_shape) that the box
 * [b0, b0 + bshape) reduces: y and x doubled and clipped to up_shape, the others the same. */
void downsample_footprint(const struct downsample *g, const uint64_t *up_shape, const uint64_t *b0,
                          const uint64_t *bshape, uint64_t *f0, uint64_t *fshape);
/* The box [b0, b1) of the level that box [u0, u1) of the level above goes into: every element
 * of the level whose footprint touches it. */
void downsample_image(const struct downsample *g, const uint64_t *u0, const uint64_t *u1,
                      uint64_t *b0, uint64_t *b1);
/* Reduces src (C order, native byte order, shape fshape: the footprint of dst's box) into dst
 * (shape shape). Mean: of the block's elements inside src (4, or 2 or 1 at an odd edge),
 * rounded half to even for integer dtypes, in long double for 64-bit integers. */
void downsample_reduce(const struct downsample *g, const struct dtype *dt, const void *src,
                       const uint64_t *fshape, void *dst, const uint64_t *shape);

#endif
