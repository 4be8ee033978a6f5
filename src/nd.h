/* nd.h: N-dimensional box arithmetic and strided copies over C-order buffers. */
#ifndef ROIFS_ND_H
#define ROIFS_ND_H

#include <stdbool.h>
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

/* Moves the elements of the C-order array a (shape ashape) to (a_to_b) or from b, its
 * transpose in C order: b's dimension i is a's dimension order[i]. Walks b contiguously.
 * A Fortran-order array is the C-order transpose with order = ndim-1, ..., 1, 0. */
void nd_transpose(void *a, void *b, const uint64_t *ashape, const uint8_t *order, int ndim,
                  size_t itemsize, bool a_to_b);

/* Intersection of boxes [a0,a1) and [b0,b1) per dimension into [o0,o1). Returns 0 if empty. */
int nd_intersect(const uint64_t *a0, const uint64_t *a1, const uint64_t *b0, const uint64_t *b1,
                 uint64_t *o0, uint64_t *o1, int ndim);

/* Linear C-order index of coordinate `idx` in a grid of shape `grid`, and back. */
uint64_t nd_linear(const uint64_t *idx, const uint64_t *grid, int ndim);
void nd_unlinear(uint64_t lin, const uint64_t *grid, int ndim, uint64_t *idx);

/* Advances idx, a position in the box [lo, hi) (lo NULL: all zeros), to the next position in
 * C order (the last dimension fastest). After the last position it returns false and leaves
 * idx back at lo; with ndim 0 it returns false at once. The loop over a box is
 * `idx = lo; do { ... } while (nd_next_index(idx, lo, hi, ndim));` for a non-empty box. */
bool nd_next_index(uint64_t *idx, const uint64_t *lo, const uint64_t *hi, int ndim);

/* The box [lo, hi) of chunk idx in a grid of `chunks`-shaped chunks over an array of shape
 * `shape`: edge chunks are clipped to the array. */
void nd_chunk_box(const uint64_t *idx, const uint64_t *chunks, const uint64_t *shape, int ndim,
                  uint64_t *lo, uint64_t *hi);
/* The chunk indices [c0, c1) that the box [lo, hi) touches (empty when the box is). */
void nd_chunk_range(const uint64_t *lo, const uint64_t *hi, const uint64_t *chunks, int ndim,
                    uint64_t *c0, uint64_t *c1);

#endif
