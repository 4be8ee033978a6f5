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
    /* Odometer over dimensions 0..k-1; the innermost of them gets a tight loop. */
    uint64_t cnt[ROIFS_MAX_DIM] = {0};
    size_t ds = dstride[k - 1], ss = sstride[k - 1];
    uint64_t n_inner = shape[k - 1];
    for (;;) {
        char *dd = d;
        const char *sp = s;
        for (uint64_t i = 0; i < n_inner; i++, dd += ds, sp += ss)
            memcpy(dd, sp, run);
        int j = k - 2;
        for (; j >= 0; j--) {
            d += dstride[j];
            s += sstride[j];
            if (++cnt[j] < shape[j])
                break;
            d -= dstride[j] * (size_t)shape[j];
            s -= sstride[j] * (size_t)shape[j];
            cnt[j] = 0;
        }
        if (j < 0)
            return;
    }
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
    if (k == 0) {
        nd_fill(d, (size_t)run, value, itemsize);
        return;
    }
    /* Fill the first run, then copy it to every other run. */
    nd_fill(d, (size_t)run, value, itemsize);
    const char *first = d;
    size_t runb = (size_t)run * itemsize;
    uint64_t cnt[ROIFS_MAX_DIM] = {0};
    for (;;) {
        int j = k - 1;
        for (; j >= 0; j--) {
            d += stride[j];
            if (++cnt[j] < shape[j])
                break;
            d -= stride[j] * (size_t)shape[j];
            cnt[j] = 0;
        }
        if (j < 0)
            return;
        memcpy(d, first, runb);
    }
}

/* Walks the Fortran-order source sequentially; dimension 0 (fastest there) is the inner loop,
 * with the destination's C stride for that dimension. */
#define F_TO_C_LOOP(T)                                                                             \
    do {                                                                                           \
        const T *s = src;                                                                          \
        T *base = dst;                                                                             \
        for (;;) {                                                                                 \
            T *d = base;                                                                           \
            for (uint64_t i = 0; i < n0; i++, d += cs0)                                            \
                *d = *s++;                                                                         \
            int j = 1;                                                                             \
            for (; j < ndim; j++) {                                                                \
                base += cstride[j];                                                                \
                if (++cnt[j] < shape[j])                                                           \
                    break;                                                                         \
                base -= cstride[j] * shape[j];                                                     \
                cnt[j] = 0;                                                                        \
            }                                                                                      \
            if (j == ndim)                                                                         \
                return;                                                                            \
        }                                                                                          \
    } while (0)

void nd_f_to_c(void *dst, const void *src, const uint64_t *shape, int ndim, size_t itemsize)
{
    uint64_t n = nd_prod(shape, ndim);
    if (n == 0)
        return;
    if (ndim <= 1) {
        memcpy(dst, src, (size_t)n * itemsize);
        return;
    }
    uint64_t cstride[ROIFS_MAX_DIM], cnt[ROIFS_MAX_DIM] = {0};
    uint64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        cstride[i] = s;
        s *= shape[i];
    }
    uint64_t n0 = shape[0], cs0 = cstride[0];
    switch (itemsize) {
    case 1:
        F_TO_C_LOOP(uint8_t);
        break;
    case 2:
        F_TO_C_LOOP(uint16_t);
        break;
    case 4:
        F_TO_C_LOOP(uint32_t);
        break;
    case 8:
        F_TO_C_LOOP(uint64_t);
        break;
    default:
        break;
    }
    /* Other element sizes: byte copies of each element. */
    const char *sp = src;
    for (;;) {
        uint64_t o = 0;
        for (int j = 0; j < ndim; j++)
            o += cnt[j] * cstride[j];
        memcpy((char *)dst + o * itemsize, sp, itemsize);
        sp += itemsize;
        int j = 0;
        for (; j < ndim; j++) {
            if (++cnt[j] < shape[j])
                break;
            cnt[j] = 0;
        }
        if (j == ndim)
            return;
    }
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
