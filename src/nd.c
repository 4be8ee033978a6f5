/* nd.c: N-dimensional box arithmetic and strided copies over C-order buffers. Copies move
 * whole contiguous runs with memcpy, merging trailing dimensions that a box covers fully. */
#include "nd.h"

#include <string.h>

#include "util.h"

uint64_t nd_prod(const uint64_t *v, int n)
{
    uint64_t p = 1;
    for (int i = 0; i < n; i++)
        p *= v[i];
    return p;
}

/* Byte strides of a C-order array of the given shape. */
static void byte_strides(const uint64_t *shape, int ndim, size_t itemsize, size_t *stride)
{
    size_t s = itemsize;
    for (int i = ndim - 1; i >= 0; i--) {
        stride[i] = s;
        s *= (size_t)shape[i];
    }
}

static size_t byte_offset(const uint64_t *off, const size_t *stride, int ndim)
{
    size_t o = 0;
    for (int i = 0; i < ndim; i++)
        o += (size_t)off[i] * stride[i];
    return o;
}

/* Number of leading dimensions left to iterate once the trailing ones that `shape` covers
 * fully in both arrays are merged into one contiguous run; *run gets its length in elements. */
static int merge_trailing(const uint64_t *a_shape, const uint64_t *b_shape, const uint64_t *shape,
                          int ndim, uint64_t *run)
{
    int k = ndim - 1;
    uint64_t r = shape[k];
    while (k > 0 && shape[k] == a_shape[k] && shape[k] == b_shape[k]) {
        k--;
        r *= shape[k];
    }
    *run = r;
    return k;
}

static int box_empty(const uint64_t *shape, int ndim)
{
    for (int i = 0; i < ndim; i++)
        if (shape[i] == 0)
            return 1;
    return 0;
}

void nd_copy(void *dst, const uint64_t *dst_shape, const uint64_t *dst_off, const void *src,
             const uint64_t *src_shape, const uint64_t *src_off, const uint64_t *shape, int ndim,
             size_t itemsize)
{
    if (ndim == 0) {
        memcpy(dst, src, itemsize);
        return;
    }
    if (box_empty(shape, ndim))
        return;
    size_t dstride[ROIFS_MAX_DIM], sstride[ROIFS_MAX_DIM];
    byte_strides(dst_shape, ndim, itemsize, dstride);
    byte_strides(src_shape, ndim, itemsize, sstride);
    char *d = (char *)dst + byte_offset(dst_off, dstride, ndim);
    const char *s = (const char *)src + byte_offset(src_off, sstride, ndim);
    uint64_t run_elems;
    int k = merge_trailing(dst_shape, src_shape, shape, ndim, &run_elems);
    size_t run = (size_t)run_elems * itemsize;
    if (k == 0) {
        memcpy(d, s, run);
        return;
    }
    /* Over dimensions 0..k-2 in C order; dimension k-1 gets a tight loop. */
    uint64_t cnt[ROIFS_MAX_DIM] = {0};
    size_t ds = dstride[k - 1], ss = sstride[k - 1];
    uint64_t n_inner = shape[k - 1];
    do {
        char *dd = d + byte_offset(cnt, dstride, k - 1);
        const char *sp = s + byte_offset(cnt, sstride, k - 1);
        for (uint64_t i = 0; i < n_inner; i++, dd += ds, sp += ss)
            memcpy(dd, sp, run);
    } while (nd_next_index(cnt, NULL, shape, k - 1));
}

void nd_fill(void *dst, size_t n, const void *value, size_t itemsize)
{
    if (n == 0)
        return;
    const unsigned char *v = value;
    size_t i = 1;
    while (i < itemsize && v[i] == v[0])
        i++;
    if (i == itemsize) {
        memset(dst, v[0], n * itemsize);
        return;
    }
    /* Double the filled prefix until the buffer is full. */
    char *d = dst;
    size_t total = n * itemsize, done = itemsize;
    memcpy(d, value, itemsize);
    while (done < total) {
        size_t c = done < total - done ? done : total - done;
        memcpy(d + done, d, c);
        done += c;
    }
}

void nd_fill_box(void *dst, const uint64_t *dst_shape, const uint64_t *off, const uint64_t *shape,
                 int ndim, const void *value, size_t itemsize)
{
    if (ndim == 0) {
        memcpy(dst, value, itemsize);
        return;
    }
    if (box_empty(shape, ndim))
        return;
    size_t stride[ROIFS_MAX_DIM];
    byte_strides(dst_shape, ndim, itemsize, stride);
    char *d = (char *)dst + byte_offset(off, stride, ndim);
    uint64_t run;
    int k = merge_trailing(dst_shape, dst_shape, shape, ndim, &run);
    /* Fill the first run, then copy it to every other run (dimensions 0..k-1). */
    nd_fill(d, (size_t)run, value, itemsize);
    size_t runb = (size_t)run * itemsize;
    uint64_t cnt[ROIFS_MAX_DIM] = {0};
    while (nd_next_index(cnt, NULL, shape, k))
        memcpy(d + byte_offset(cnt, stride, k), d, runb);
}

int nd_intersect(const uint64_t *a0, const uint64_t *a1, const uint64_t *b0, const uint64_t *b1,
                 uint64_t *o0, uint64_t *o1, int ndim)
{
    int nonempty = 1;
    for (int i = 0; i < ndim; i++) {
        o0[i] = a0[i] > b0[i] ? a0[i] : b0[i];
        o1[i] = a1[i] < b1[i] ? a1[i] : b1[i];
        if (o0[i] >= o1[i])
            nonempty = 0;
    }
    return nonempty;
}

uint64_t nd_linear(const uint64_t *idx, const uint64_t *grid, int ndim)
{
    uint64_t lin = 0;
    for (int i = 0; i < ndim; i++)
        lin = lin * grid[i] + idx[i];
    return lin;
}

void nd_unlinear(uint64_t lin, const uint64_t *grid, int ndim, uint64_t *idx)
{
    for (int i = ndim - 1; i >= 0; i--) {
        idx[i] = grid[i] ? lin % grid[i] : 0;
        lin = grid[i] ? lin / grid[i] : 0;
    }
}

bool nd_next_index(uint64_t *idx, const uint64_t *lo, const uint64_t *hi, int ndim)
{
    for (int d = ndim - 1; d >= 0; d--) {
        if (++idx[d] < hi[d])
            return true;
        idx[d] = lo ? lo[d] : 0;
    }
    return false;
}

void nd_chunk_box(const uint64_t *idx, const uint64_t *chunks, const uint64_t *shape, int ndim,
                  uint64_t *lo, uint64_t *hi)
{
    for (int d = 0; d < ndim; d++) {
        lo[d] = idx[d] * chunks[d];
        hi[d] = shape[d] - lo[d] < chunks[d] ? shape[d] : lo[d] + chunks[d];
    }
}

void nd_chunk_range(const uint64_t *lo, const uint64_t *hi, const uint64_t *chunks, int ndim,
                    uint64_t *c0, uint64_t *c1)
{
    for (int d = 0; d < ndim; d++) {
        c0[d] = lo[d] / chunks[d];
        c1[d] = hi[d] / chunks[d] + (hi[d] % chunks[d] != 0);
    }
}

void nd_transpose(void *a, void *b, const uint64_t *ashape, const uint8_t *order, int ndim,
                  size_t itemsize, bool a_to_b)
{
    if (ndim == 0) {
        memcpy(a_to_b ? b : a, a_to_b ? a : b, itemsize);
        return;
    }
    size_t astride[ROIFS_MAX_DIM], step[ROIFS_MAX_DIM];
    uint64_t bshape[ROIFS_MAX_DIM], pos[ROIFS_MAX_DIM] = {0};
    byte_strides(ashape, ndim, itemsize, astride);
    for (int d = 0; d < ndim; d++) {
        bshape[d] = ashape[order[d]];
        step[d] = astride[order[d]]; /* bytes moved in a per step along b's dimension d */
    }
    if (box_empty(bshape, ndim))
        return;
    uint64_t inner = bshape[ndim - 1];
    size_t istep = step[ndim - 1];
    unsigned char *bp = b;
    /* b is walked contiguously; a's offset follows b's position in dimensions 0..ndim-2 */
    do {
        unsigned char *ap = (unsigned char *)a + byte_offset(pos, step, ndim - 1);
        if (a_to_b)
            for (uint64_t j = 0; j < inner; j++, bp += itemsize, ap += istep)
                memcpy(bp, ap, itemsize);
        else
            for (uint64_t j = 0; j < inner; j++, bp += itemsize, ap += istep)
                memcpy(ap, bp, itemsize);
    } while (nd_next_index(pos, NULL, bshape, ndim - 1));
}
