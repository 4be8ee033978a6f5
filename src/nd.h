/* nd.h: N-dimensional box arithmetic and strided copies over C-order buffers. */
#ifndef ROIFS_ND_H
#define ROIFS_ND_H

#include <stddef.h>
#include <stdint.h>

/* Product of the n entries of v (1 for n == 0). */
uint64_t nd_prod(const uint64_t *v, int n);

/* Copies the box of extent `shape`, starting at src_off inside the C-order array src (of
 * shape src_shape), to dst_off inside the C-order array dst (of shape dst_shape). The
 * innermost contiguous run is copied with memcpy. */
void nd_copy(void *dst, const uint64_t *dst_shape, const uint64_t *dst_off, const void *src,
             const uint64_t *src_shape, const uint64_t *src_off, const uint64_t *shape, int ndim,
             size_t itemsize);

/* Fills the box `shape` at `off` inside dst (shape dst_shape) with one element value. */
void nd_fill_box(void *dst, const uint64_t *dst_shape, const uint64_t *off, const uint64_t *shape,
                 int ndim, const void *value, size_t itemsize);

/* Fills n elements of dst with value. */
void nd_fill(void *dst, size_t n, const void *value, size_t itemsize);

/* Reorders a Fortran-order array (first dimension fastest) of the given shape into C order. */
void nd_f_to_c(void *dst, const void *src, const uint64_t *shape, int ndim, size_t itemsize);

/* Intersection of boxes [a0,a1) and [b0,b1) per dimension into [o0,o1). Returns 0 if empty. */
int nd_intersect(const uint64_t *a0, const uint64_t *a1, const uint64_t *b0, const uint64_t *b1,
                 uint64_t *o0, uint64_t *o1, int ndim);

/* Linear C-order index of coordinate `idx` in a grid of shape `grid`, and back. */
uint64_t nd_linear(const uint64_t *idx, const uint64_t *grid, int ndim);
void nd_unlinear(uint64_t lin, const uint64_t *grid, int ndim, uint64_t *idx);

#endif
