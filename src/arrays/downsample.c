/* downsample.c: footprints and 2x2 reductions of pyramid levels (see downsample.h). */
#include "downsample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../nd.h"
#include "../util.h"

static bool is_yx(const struct downsample *g, int d)
{
    return d == g->axis_y || d == g->axis_x;
}

void downsample_footprint(const struct downsample *g, const uint64_t *up_shape, const uint64_t *b0,
                          const uint64_t *bshape, uint64_t *f0, uint64_t *fshape)
{
    for (int d = 0; d < g->ndim; d++) {
        if (is_yx(g, d)) {
            uint64_t lo = 2 * b0[d], hi = 2 * (b0[d] + bshape[d]);
            if (hi > up_shape[d])
                hi = up_shape[d];
            f0[d] = lo;
            fshape[d] = hi > lo ? hi - lo : 0;
        } else {
            f0[d] = b0[d];
            fshape[d] = bshape[d];
        }
    }
}

void downsample_image(const struct downsample *g, const uint64_t *u0, const uint64_t *u1,
                      uint64_t *b0, uint64_t *b1)
{
    for (int d = 0; d < g->ndim; d++) {
        bool half = is_yx(g, d);
        b0[d] = half ? u0[d] / 2 : u0[d];
        b1[d] = half ? (u1[d] + 1) / 2 : u1[d];
    }
}

/* A reduction's walk: the C-order strides of src, and the position (in dst) of the element
 * being made, whose block starts at block_base. */
struct block_walk {
    uint64_t stride[ROIFS_MAX_DIM];
    uint64_t idx[ROIFS_MAX_DIM];
};

static void walk_init(struct block_walk *w, const struct downsample *g, const uint64_t *fshape)
{
    uint64_t s = 1;
    for (int d = g->ndim - 1; d >= 0; d--) {
        w->stride[d] = s;
        s *= fshape[d];
    }
    memset(w->idx, 0, sizeof w->idx);
}

static uint64_t block_base(const struct block_walk *w, const struct downsample *g)
{
    uint64_t base = 0;
    for (int d = 0; d < g->ndim; d++)
        base += (is_yx(g, d) ? 2 * w->idx[d] : w->idx[d]) * w->stride[d];
    return base;
}

/* Rows (ny) and columns (nx) of the current block that lie inside src. */
static void block_size(const struct block_walk *w, const struct downsample *g,
                       const uint64_t *fshape, int *ny, int *nx)
{
    *ny = 2 * w->idx[g->axis_y] + 1 < fshape[g->axis_y] ? 2 : 1;
    *nx = 2 * w->idx[g->axis_x] + 1 < fshape[g->axis_x] ? 2 : 1;
}

static void reduce_nearest(const struct downsample *g, size_t isz, const void *src,
                           const uint64_t *fshape, void *dst, const uint64_t *shape)
{
    struct block_walk w;
    walk_init(&w, g, fshape);
    size_t i = 0;
    do
        memcpy((char *)dst + i++ * isz, (const char *)src + block_base(&w, g) * isz, isz);
    while (nd_next_index(w.idx, NULL, shape, g->ndim));
}

/* The mean of each block: in double, or in long double for 64-bit integers, which do not fit
 * a double's mantissa. */
static void reduce_mean(const struct downsample *g, const struct dtype *dt, const void *src,
                        const uint64_t *fshape, void *dst, const uint64_t *shape)
{
    size_t n = nd_prod(shape, g->ndim), nsrc = nd_prod(fshape, g->ndim);
    bool wide = dt->size == 8 && dt->kind != DT_FLOAT;
    bool integer = dt->kind == DT_INT || dt->kind == DT_UINT;
    double *vd = NULL, *od = NULL;
    long double *vl = NULL, *ol = NULL;
    if (wide) {
        vl = xmalloc(nsrc * sizeof *vl);
        ol = xmalloc(n * sizeof *ol);
        dtype_to_ldouble(dt, src, vl, nsrc);
    } else {
        vd = xmalloc(nsrc * sizeof *vd);
        od = xmalloc(n * sizeof *od);
        dtype_to_double(dt, src, vd, nsrc);
    }
    struct block_walk w;
    walk_init(&w, g, fshape);
    uint64_t sy = w.stride[g->axis_y], sx = w.stride[g->axis_x];
    size_t i = 0;
    do {
        uint64_t base = block_base(&w, g);
        int ny, nx;
        block_size(&w, g, fshape, &ny, &nx);
        long double suml = 0;
        double sum = 0;
        for (int a = 0; a < ny; a++)
            for (int b = 0; b < nx; b++) {
                uint64_t at = base + a * sy + b * sx;
                if (wide)
                    suml += vl[at];
                else
                    sum += vd[at];
            }
        if (wide)
            ol[i] = rintl(suml / (ny * nx));
        else
            od[i] = integer ? rint(sum / (ny * nx)) : sum / (ny * nx);
        i++;
    } while (nd_next_index(w.idx, NULL, shape, g->ndim));
    if (wide)
        dtype_from_ldouble(dt, ol, dst, n);
    else
        dtype_from_double(dt, od, dst, n);
    free(vd);
    free(od);
    free(vl);
    free(ol);
}

void downsample_reduce(const struct downsample *g, const struct dtype *dt, const void *src,
                       const uint64_t *fshape, void *dst, const uint64_t *shape)
{
    if (nd_prod(shape, g->ndim) == 0)
        return;
    if (g->nearest)
        reduce_nearest(g, dt->size, src, fshape, dst, shape);
    else
        reduce_mean(g, dt, src, fshape, dst, shape);
}
