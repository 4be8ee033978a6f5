/* pyramid.c: [output] ome = true (see pyramid.h). Level L's input reads the level L-1 chunks
 * its box covers through level L-1's engine, decodes them and reduces each 2x2 block of y and
 * x (downsample.c). Its input signature hashes the keys of those level L-1 chunks (of the
 * versions read, for a read), so a change of the input or the processor reaches every level.
 * Each level has its own cache, <cache dir>/L<n>. */
#include "pyramid.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../nd.h"
#include "downsample.h"
#include "upread.h"

/* One level L >= 1: what its input source reads. */
struct level {
    int number;
    const struct downsample *geom;
    const struct task *up;    /* level L-1 */
    struct engine *up_engine; /* level L-1's engine: set (pyramid_set_engine) before this
                               * level's engine starts its threads, which read it */
    struct zarr_meta input;   /* what this level's input looks like: the level itself */
    struct task *task;
};

struct pyramid {
    struct downsample geom;
    int nlevels;
    struct task *t0;
    struct level *levels; /* nlevels of them ([0] unused but for task): a plate holds a
                             pyramid per image */
    char *group_meta, *group_attrs;
};

/* The input source of a level: read. */
static int level_read(void *ctx, const uint64_t *start, const uint64_t *shape, void *dst,
                      uint64_t *sig, struct errbuf *err)
{
    const struct level *lv = ctx;
    int nd = lv->input.ndim;
    uint64_t f0[ROIFS_MAX_DIM], fshape[ROIFS_MAX_DIM];
    downsample_footprint(lv->geom, lv->up->out.shape, start, shape, f0, fshape);
    if (sig)
        *sig = upread_signature(lv->up, NULL, NULL, NULL);
    if (nd_prod(shape, nd) == 0)
        return 0;
    void *src = xmalloc(nd_prod(fshape, nd) * lv->input.dtype.size);
    struct upread u = {.up = lv->up, .engine = lv->up_engine, .level = lv->number - 1};
    int rc = upread_box(&u, f0, fshape, src, sig, err);
    if (rc == 0)
        downsample_reduce(lv->geom, &lv->input.dtype, src, fshape, dst, shape);
    free(src);
    return rc;
}

/* The input source of a level: the signature of a box as the level above is now. */
static int level_signature(void *ctx, const uint64_t *start, const uint64_t *shape,
                           struct zarr_sigmemo *memo, uint64_t *sig)
{
    const struct level *lv = ctx;
    int nd = lv->input.ndim;
    uint64_t f0[ROIFS_MAX_DIM], fshape[ROIFS_MAX_DIM];
    *sig = upread_signature(lv->up, NULL, NULL, memo);
    downsample_footprint(lv->geom, lv->up->out.shape, start, shape, f0, fshape);
    if (nd_prod(shape, nd) > 0)
        *sig = upread_signature(lv->up, f0, fshape, memo);
    return 0;
}

/* ---- the level tasks ---- */

/* The box of the level above that box [b0, b0 + bs) of level ctx reduces. */
static void level_footprint(const void *ctx, const uint64_t *b0, const uint64_t *bs, uint64_t *f0,
                            uint64_t *fs)
{
    const struct level *lv = ctx;
    downsample_footprint(lv->geom, lv->up->out.shape, b0, bs, f0, fs);
}

/* Level lv->number as a derived task of t0: the level above halved in y and x. */
static int level_task(struct pyramid *p, struct level *lv, struct errbuf *err)
{
    struct task_derived_spec spec = {.out = lv->up->out};
    struct zarr_meta *o = &spec.out;
    int ay = p->geom.axis_y, ax = p->geom.axis_x;
    o->shape[ay] = (o->shape[ay] + 1) / 2;
    o->shape[ax] = (o->shape[ax] + 1) / 2;
    for (int d = 0; d < o->ndim && !o->sharded; d++)
        if (o->chunks[d] > o->shape[d] && o->shape[d] > 0)
            o->chunks[d] = o->shape[d];
    lv->input = *o; /* the copy processor sees the reduced level above: the level itself */
    upread_level_rois(lv->up, o, level_footprint, lv, &spec.rois);
    spec.proc = upread_copy_proc();
    spec.source = (struct input_source){
        .meta = &lv->input, .read = level_read, .signature = level_signature, .ctx = lv};
    /* The level above is in the input signature (its chunks' keys), not here. */
    char dt[8];
    char *identity =
        xasprintf("roifs-level 2\nroifs %s\nmethod %s\naxes %d %d\ndtype %s\n", ROIFS_VERSION,
                  p->geom.nearest ? "nearest" : "mean", ay, ax, dtype_typestr(&o->dtype, dt));
    char *dir = xasprintf("%s/L%d", p->t0->cache_dir, lv->number);
    spec.result_identity = identity;
    spec.cache_dir = dir;
    spec.dimension_names = p->t0->dimension_names; /* the OME axes' names, at every level */
    int r = task_derived(p->t0, &spec, &lv->task, err);
    free(identity);
    free(dir);
    return r;
}

/* ---- the group's metadata ---- */

/* The multiscale's "metadata" (a SHOULD of OME-NGFF that the strict schemas require): how
 * the levels were made. */
static json_t *downsample_metadata(bool nearest)
{
    return json_pack("{s:s, s:s, s:s}", "description",
                     nearest ? "each level takes the top-left element of each 2x2 block of y "
                               "and x of the level before"
                             : "each level is the mean of each 2x2 block of y and x of the "
                               "level before (of the part inside the array; integers rounded "
                               "half to even)",
                     "method", nearest ? "roifs downsample = nearest" : "roifs downsample = mean",
                     "version", ROIFS_VERSION);
}

/* The multiscales' "datasets": each level's path and scale. */
static json_t *datasets(const struct pyramid *p)
{
    const struct task *t = p->t0;
    int nd = t->out.ndim;
    bool ome_ok = t->ome.found && t->ome.ndim == nd;
    json_t *list = json_array();
    for (int l = 0; l < p->nlevels; l++) {
        json_t *scale = json_array();
        for (int d = 0; d < nd; d++) {
            double s = ome_ok ? t->ome.scale[d] : 1.0;
            if (d == p->geom.axis_y || d == p->geom.axis_x)
                s = ldexp(s, l);
            json_array_append_new(scale, json_real(s));
        }
        char path[16];
        snprintf(path, sizeof path, "%d", l);
        json_array_append_new(list, json_pack("{s:s, s:[{s:s, s:o}]}", "path", path,
                                              "coordinateTransformations", "type", "scale", "scale",
                                              scale));
    }
    return list;
}

static int build_group(struct pyramid *p, struct errbuf *err)
{
    free(p->group_meta);
    free(p->group_attrs);
    p->group_meta = p->group_attrs = NULL;
    const struct task *t = p->t0;
    json_t *axes = ome_output_axes(&t->ome, t->out.ndim, err); /* checked by task_open */
    if (!axes)
        return -EINVAL;
    bool nearest = p->geom.nearest;
    json_t *ms = json_pack("{s:s, s:o, s:o, s:s, s:o}", "name", "roifs", "axes", axes, "datasets",
                           datasets(p), "type", nearest ? "nearest" : "mean", "metadata",
                           downsample_metadata(nearest));
    json_t *attrs = json_object();
    json_t *a0 = json_loads(t->zattrs_json, 0, NULL);
    json_t *prov = json_object_get(a0, "roifs");
    if (prov)
        json_object_set(attrs, "roifs", prov);
    json_decref(a0);
    if (t->out.format == 3) {
        json_object_set_new(attrs, "ome",
                            json_pack("{s:s, s:[o]}", "version", "0.5", "multiscales", ms));
        json_t *g = json_pack("{s:i, s:s, s:o}", "zarr_format", 3, "node_type", "group",
                              "attributes", attrs);
        p->group_meta = json_dumps(g, JSON_INDENT(4) | JSON_SORT_KEYS);
        json_decref(g);
    } else {
        json_object_set_new(ms, "version", json_string("0.4"));
        json_object_set_new(attrs, "multiscales", json_pack("[o]", ms));
        p->group_attrs = json_dumps(attrs, JSON_INDENT(4) | JSON_SORT_KEYS);
        p->group_meta = xstrdup("{\n    \"zarr_format\": 2\n}");
        json_decref(attrs);
    }
    return 0;
}

/* ---- the pyramid ---- */

int pyramid_build(struct task *t0, struct pyramid **out, struct errbuf *err)
{
    struct pyramid *p = xcalloc(1, sizeof *p);
    int nd = t0->out.ndim;
    p->t0 = t0;
    p->geom.ndim = nd;
    const struct ome_image *ome = &t0->ome;
    bool ome_axes = ome->found && ome->ndim == nd && ome->axis_y >= 0 && ome->axis_x >= 0;
    p->geom.axis_y = ome_axes ? ome->axis_y : nd - 2;
    p->geom.axis_x = ome_axes ? ome->axis_x : nd - 1;
    p->geom.nearest = t0->cfg.downsample == DOWNSAMPLE_NEAREST;
    p->nlevels = t0->cfg.levels > 0 ? t0->cfg.levels : 1;
    if (p->nlevels > PYRAMID_MAX_LEVELS)
        p->nlevels = PYRAMID_MAX_LEVELS;
    p->levels = xcalloc((size_t)p->nlevels, sizeof *p->levels);
    p->levels[0].task = p->t0;
    int r = 0;
    for (int l = 1; l < p->nlevels && r == 0; l++) {
        struct level *lv = &p->levels[l];
        *lv = (struct level){.number = l, .geom = &p->geom, .up = p->levels[l - 1].task};
        r = level_task(p, lv, err);
    }
    if (r == 0)
        r = build_group(p, err);
    if (r < 0) {
        pyramid_free(p);
        return r;
    }
    *out = p;
    return 0;
}

void pyramid_free(struct pyramid *p)
{
    if (!p)
        return;
    for (int l = p->nlevels - 1; l >= 1; l--)
        task_close(p->levels[l].task);
    free(p->levels);
    free(p->group_meta);
    free(p->group_attrs);
    free(p);
}

int pyramid_nlevels(const struct pyramid *p)
{
    return p->nlevels;
}

struct task *pyramid_level(const struct pyramid *p, int level)
{
    return p->levels[level].task;
}

const char *pyramid_group_meta(const struct pyramid *p)
{
    return p->group_meta;
}

const char *pyramid_group_attrs(const struct pyramid *p)
{
    return p->group_attrs;
}

void pyramid_set_engine(struct pyramid *p, int level, struct engine *e)
{
    if (level + 1 < p->nlevels)
        p->levels[level + 1].up_engine = e;
}

size_t pyramid_changed_boxes(const struct pyramid *p, int level, const uint64_t *up_ids, size_t n,
                             uint64_t **lo, uint64_t **hi)
{
    const struct task *up = p->levels[level].up;
    int nd = up->out.ndim;
    *lo = xmalloc((n ? n : 1) * nd * sizeof **lo);
    *hi = xmalloc((n ? n : 1) * nd * sizeof **hi);
    for (size_t i = 0; i < n; i++) {
        uint64_t idx[ROIFS_MAX_DIM], u0[ROIFS_MAX_DIM], u1[ROIFS_MAX_DIM];
        nd_unlinear(up_ids[i], up->grid, nd, idx);
        nd_chunk_box(idx, up->out.chunks, up->out.shape, nd, u0, u1);
        downsample_image(&p->geom, u0, u1, *lo + i * nd, *hi + i * nd);
    }
    return n;
}
