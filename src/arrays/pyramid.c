/* pyramid.c: [output] ome = true. Level 0 is the computed array; level L (1 <= L < levels)
 * is a task of its own whose ROIs are its chunks, whose processor copies its input, and
 * whose input is level L-1 downsampled by 2 in y and x: a read opens the level L-1 chunks it
 * covers through level L-1's engine (which has its own threads: no deadlock), decodes them
 * and reduces each 2x2 block (mean, or its top-left element). Level L's input signature
 * hashes the keys of those level L-1 chunks (of the versions read, for a read), so a change
 * of the input or the processor reaches every level. Each level has its own cache,
 * <cache dir>/L<n>. */
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
#include "engine_internal.h"

/* ---- the copy processor of levels >= 1 ---- */

static int copy_run(struct proc *p, const struct proc_request *rq, struct errbuf *err)
{
    (void)p;
    (void)err;
    memcpy(rq->out, rq->in, rq->out_nbytes < rq->in_nbytes ? rq->out_nbytes : rq->in_nbytes);
    return 0;
}

static void copy_destroy(struct proc *p)
{
    free(p);
}

static const struct proc_ops copy_ops = {.run = copy_run, .destroy = copy_destroy};

/* ---- geometry ---- */

static bool is_yx(const struct task *t, int d)
{
    return d == t->axis_y || d == t->axis_x;
}

/* The box of the level above (t->up) that box [b0, b0 + bshape) of t reduces. */
static void footprint(const struct task *t, const uint64_t *b0, const uint64_t *bshape,
                      uint64_t *f0, uint64_t *fshape)
{
    const struct task *up = t->up;
    for (int d = 0; d < t->out.ndim; d++) {
        if (is_yx(t, d)) {
            uint64_t lo = 2 * b0[d], hi = 2 * (b0[d] + bshape[d]);
            if (hi > up->out.shape[d])
                hi = up->out.shape[d];
            f0[d] = lo;
            fshape[d] = hi > lo ? hi - lo : 0;
        } else {
            f0[d] = b0[d];
            fshape[d] = bshape[d];
        }
    }
}

/* Range [c0, c1) of up's chunk grid that box [f0, f0 + fshape) touches; false when empty. */
static bool chunk_range(const struct task *up, const uint64_t *f0, const uint64_t *fshape,
                        uint64_t *c0, uint64_t *c1)
{
    for (int d = 0; d < up->out.ndim; d++) {
        if (fshape[d] == 0)
            return false;
        c0[d] = f0[d] / up->out.chunks[d];
        c1[d] = (f0[d] + fshape[d] - 1) / up->out.chunks[d] + 1;
    }
    return true;
}

/* Advances idx through [c0, c1) in C order; false after the last. */
static bool next_index(uint64_t *idx, const uint64_t *c0, const uint64_t *c1, int nd)
{
    for (int d = nd - 1; d >= 0; d--) {
        if (++idx[d] < c1[d])
            return true;
        idx[d] = c0[d];
    }
    return false;
}

/* ---- reading the level above ---- */

struct sync_open {
    pthread_mutex_t m;
    pthread_cond_t cv;
    bool done;
    int err, fd;
};

static void sync_cb(void *ctx, int err, int fd, int flags)
{
    (void)flags;
    struct sync_open *s = ctx;
    pthread_mutex_lock(&s->m);
    s->err = err;
    s->fd = fd;
    s->done = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->m);
}

/* Opens chunk id of up (through its engine) and decodes it into buf (up->chunk_nbytes);
 * *key gets the key of the version read. */
static int read_up_chunk(const struct task *t, uint64_t id, void *buf, struct key128 *key,
                         struct errbuf *err)
{
    const struct task *up = t->up;
    struct sync_open s = {.done = false, .fd = -1};
    pthread_mutex_init(&s.m, NULL);
    pthread_cond_init(&s.cv, NULL);
    engine_open_chunk(t->up_engine, id, sync_cb, &s);
    pthread_mutex_lock(&s.m);
    while (!s.done)
        pthread_cond_wait(&s.cv, &s.m);
    pthread_mutex_unlock(&s.m);
    pthread_mutex_destroy(&s.m);
    pthread_cond_destroy(&s.cv);
    if (s.err < 0)
        return err_set(err, -EIO, "level %d chunk %llu: %s", up->level, (unsigned long long)id,
                       strerror(-s.err));
    struct stat st;
    struct cache_chunk_meta meta;
    int rc = fstat(s.fd, &st);
    if (rc == 0 && (rc = cache_chunk_meta_of(t->up_engine->c, id, s.fd, &meta)) == 0)
        *key = meta.key;
    void *data = NULL;
    size_t got = 0;
    if (rc == 0) {
        data = xmalloc(st.st_size > 0 ? (size_t)st.st_size : 1);
        rc = pread_full(s.fd, data, (size_t)st.st_size, 0, &got);
        if (rc == 0 && got != (size_t)st.st_size)
            rc = -EIO;
    }
    close(s.fd);
    if (rc < 0) {
        free(data);
        return err_set(err, -EIO, "level %d chunk %llu: cannot read its cache file", up->level,
                       (unsigned long long)id);
    }
    rc = zarr_decode_chunk(&up->out, data, got, buf, err);
    free(data);
    return rc;
}

/* The signature of level t's input over the up chunks [c0, c1), from each one's key
 * (keys[i] in C order; a chunk that does not exist counts as zeros). */
static uint64_t level_sig(const struct task *up, const uint64_t *c0, const uint64_t *c1,
                          const struct key128 *keys)
{
    uint64_t h = fnv64(FNV64_INIT, "level 2", 7), idx[ROIFS_MAX_DIM];
    int nd = up->out.ndim;
    size_t i = 0;
    memcpy(idx, c0, sizeof(uint64_t) * nd);
    do {
        uint64_t id = nd_linear(idx, up->grid, nd);
        h = fnv64(h, &id, sizeof id);
        h = fnv64(h, &keys[i], sizeof keys[i]);
        i++;
    } while (next_index(idx, c0, c1, nd));
    return h;
}

static size_t range_count(const uint64_t *c0, const uint64_t *c1, int nd)
{
    size_t n = 1;
    for (int d = 0; d < nd; d++)
        n *= c1[d] - c0[d];
    return n;
}

/* Reads box [f0, f0 + fshape) of up into dst (C order, native): chunks that do not exist
 * read as the fill value. *sig (when not NULL) gets the signature of the versions read. */
static int read_up_box(const struct task *t, const uint64_t *f0, const uint64_t *fshape, void *dst,
                       uint64_t *sig, struct errbuf *err)
{
    const struct task *up = t->up;
    int nd = up->out.ndim;
    size_t isz = up->out.dtype.size;
    nd_fill(dst, nd_prod(fshape, nd), up->out.fill, isz);
    uint64_t c0[ROIFS_MAX_DIM], c1[ROIFS_MAX_DIM], idx[ROIFS_MAX_DIM];
    if (sig)
        *sig = fnv64(FNV64_INIT, "level 2", 7);
    if (!chunk_range(up, f0, fshape, c0, c1))
        return 0;
    memcpy(idx, c0, sizeof idx);
    void *cbuf = xmalloc(up->chunk_nbytes);
    struct key128 *keys = xcalloc(range_count(c0, c1, nd), sizeof *keys);
    size_t pos = 0;
    int rc = 0;
    do {
        uint64_t id = nd_linear(idx, up->grid, nd);
        if (!task_chunk_present(up, id)) {
            pos++;
            continue;
        }
        if ((rc = read_up_chunk(t, id, cbuf, &keys[pos++], err)) < 0)
            break;
        uint64_t doff[ROIFS_MAX_DIM], soff[ROIFS_MAX_DIM], ext[ROIFS_MAX_DIM];
        for (int d = 0; d < nd; d++) {
            uint64_t lo = idx[d] * up->out.chunks[d], hi = lo + up->out.chunks[d];
            uint64_t a = lo > f0[d] ? lo : f0[d];
            uint64_t b = hi < f0[d] + fshape[d] ? hi : f0[d] + fshape[d];
            doff[d] = a - f0[d];
            soff[d] = a - lo;
            ext[d] = b - a;
        }
        nd_copy(dst, fshape, doff, cbuf, up->out.chunks, soff, ext, nd, isz);
    } while (next_index(idx, c0, c1, nd));
    if (rc == 0 && sig)
        *sig = level_sig(up, c0, c1, keys);
    free(keys);
    free(cbuf);
    return rc;
}

/* Reduces src (shape fshape, the footprint of dst's box) into dst (shape shape). */
static void reduce(const struct task *t, const void *src, const uint64_t *fshape, void *dst,
                   const uint64_t *shape)
{
    int nd = t->out.ndim;
    const struct dtype *dt = &t->out.dtype;
    size_t isz = dt->size, n = nd_prod(shape, nd), nsrc = nd_prod(fshape, nd);
    uint64_t stride[ROIFS_MAX_DIM];
    uint64_t s = 1;
    for (int d = nd - 1; d >= 0; d--) {
        stride[d] = s;
        s *= fshape[d];
    }
    int ay = t->axis_y, ax = t->axis_x;
    bool wide = dt->size == 8 && dt->kind != DT_FLOAT;
    double *vd = NULL, *od = NULL;
    long double *vl = NULL, *ol = NULL;
    if (!t->nearest) {
        if (wide) {
            vl = xmalloc(nsrc * sizeof *vl);
            ol = xmalloc(n * sizeof *ol);
            dtype_to_ldouble(dt, src, vl, nsrc);
        } else {
            vd = xmalloc(nsrc * sizeof *vd);
            od = xmalloc(n * sizeof *od);
            dtype_to_double(dt, src, vd, nsrc);
        }
    }
    uint64_t idx[ROIFS_MAX_DIM] = {0};
    for (size_t i = 0; i < n; i++) {
        uint64_t base = 0;
        for (int d = 0; d < nd; d++)
            base += (is_yx(t, d) ? 2 * idx[d] : idx[d]) * stride[d];
        if (t->nearest) {
            memcpy((char *)dst + i * isz, (const char *)src + base * isz, isz);
        } else {
            int ny = 2 * idx[ay] + 1 < fshape[ay] ? 2 : 1;
            int nx = 2 * idx[ax] + 1 < fshape[ax] ? 2 : 1;
            if (wide) {
                long double sum = 0;
                for (int a = 0; a < ny; a++)
                    for (int b = 0; b < nx; b++)
                        sum += vl[base + a * stride[ay] + b * stride[ax]];
                ol[i] = rintl(sum / (ny * nx));
            } else {
                double sum = 0;
                for (int a = 0; a < ny; a++)
                    for (int b = 0; b < nx; b++)
                        sum += vd[base + a * stride[ay] + b * stride[ax]];
                double m = sum / (ny * nx);
                od[i] = dt->kind == DT_INT || dt->kind == DT_UINT ? rint(m) : m;
            }
        }
        for (int d = nd - 1; d >= 0; d--) {
            if (++idx[d] < shape[d])
                break;
            idx[d] = 0;
        }
    }
    if (wide && !t->nearest)
        dtype_from_ldouble(dt, ol, dst, n);
    else if (!t->nearest)
        dtype_from_double(dt, od, dst, n);
    free(vd);
    free(od);
    free(vl);
    free(ol);
}

static int level_read(void *ctx, const uint64_t *start, const uint64_t *shape, void *dst,
                      uint64_t *sig, struct errbuf *err)
{
    const struct task *t = ctx;
    int nd = t->out.ndim;
    uint64_t f0[ROIFS_MAX_DIM], fshape[ROIFS_MAX_DIM];
    footprint(t, start, shape, f0, fshape);
    if (sig)
        *sig = fnv64(FNV64_INIT, "level 2", 7);
    if (nd_prod(shape, nd) == 0)
        return 0;
    void *src = xmalloc(nd_prod(fshape, nd) * t->out.dtype.size);
    int rc = read_up_box(t, f0, fshape, src, sig, err);
    if (rc == 0)
        reduce(t, src, fshape, dst, shape);
    free(src);
    return rc;
}

static int level_signature(void *ctx, const uint64_t *start, const uint64_t *shape,
                           struct zarr_sigmemo *memo, uint64_t *sig)
{
    const struct task *t = ctx, *up = t->up;
    int nd = t->out.ndim;
    uint64_t f0[ROIFS_MAX_DIM], fshape[ROIFS_MAX_DIM], c0[ROIFS_MAX_DIM], c1[ROIFS_MAX_DIM],
        idx[ROIFS_MAX_DIM];
    *sig = fnv64(FNV64_INIT, "level 2", 7);
    footprint(t, start, shape, f0, fshape);
    if (nd_prod(shape, nd) == 0 || !chunk_range(up, f0, fshape, c0, c1))
        return 0;
    struct key128 *keys = xcalloc(range_count(c0, c1, nd), sizeof *keys);
    size_t pos = 0;
    memcpy(idx, c0, sizeof idx);
    do {
        uint64_t id = nd_linear(idx, up->grid, nd);
        if (task_chunk_present(up, id)) {
            struct chunk_keys k;
            engine_chunk_keys_now(up, id, memo, &k);
            keys[pos] = k.chunk;
            chunk_keys_free(&k);
        }
        pos++;
    } while (next_index(idx, c0, c1, nd));
    *sig = level_sig(up, c0, c1, keys);
    free(keys);
    return 0;
}

/* ---- metadata ---- */

/* A level's array metadata: level 0's dimension names (the OME axes names), in zarr.json for
 * format 3 (OME-NGFF 0.5 requires them there) and as _ARRAY_DIMENSIONS for format 2. */
static void level_meta(struct task *t, const char *dimension_names)
{
    const struct zarr_meta *o = &t->out;
    t->dimension_names = dimension_names ? xstrdup(dimension_names) : NULL;
    if (o->format == 3) {
        t->zattrs_json = xstrdup("{}");
        t->zarr_json = zarr_meta_emit_v3(o, NULL, t->dimension_names);
        return;
    }
    json_t *attrs = json_object();
    if (t->dimension_names)
        json_object_set_new(attrs, "_ARRAY_DIMENSIONS", json_loads(t->dimension_names, 0, NULL));
    t->zattrs_json = json_dumps(attrs, JSON_INDENT(4) | JSON_SORT_KEYS);
    json_decref(attrs);
    t->zarray_json = zarr_meta_emit_v2(o);
}

/* The multiscale's "metadata" (a SHOULD of OME-NGFF that the strict schemas require): how
 * the levels were made. */
static json_t *downsample_metadata(const struct task *t)
{
    return json_pack("{s:s, s:s, s:s}", "description",
                     t->nearest ? "each level takes the top-left element of each 2x2 block of y "
                                  "and x of the level before"
                                : "each level is the mean of each 2x2 block of y and x of the "
                                  "level before (of the part inside the array; integers rounded "
                                  "half to even)",
                     "method",
                     t->nearest ? "roifs downsample = nearest" : "roifs downsample = mean",
                     "version", ROIFS_VERSION);
}

/* ---- the level tasks ---- */

static int level_task(struct task *l0, struct task *up, int level, struct task **out,
                      struct errbuf *err)
{
    struct task *t = xcalloc(1, sizeof *t);
    t->cfg = l0->cfg; /* borrowed: task_close does not free it for level > 0 */
    t->cfg.outside = OUTSIDE_FILL;
    t->cfg.halo_ndim = 0;
    t->level = level;
    t->up = up;
    t->axis_y = l0->axis_y;
    t->axis_x = l0->axis_x;
    t->nearest = l0->nearest;
    t->out = up->out;
    struct zarr_meta *o = &t->out;
    int nd = o->ndim;
    o->shape[t->axis_y] = (o->shape[t->axis_y] + 1) / 2;
    o->shape[t->axis_x] = (o->shape[t->axis_x] + 1) / 2;
    for (int d = 0; d < nd && !o->sharded; d++)
        if (o->chunks[d] > o->shape[d] && o->shape[d] > 0)
            o->chunks[d] = o->shape[d];
    zarr_meta_grid(o, t->grid);
    t->nchunks = 1;
    for (int d = 0; d < nd; d++)
        t->nchunks *= t->grid[d];
    t->chunk_nbytes = zarr_meta_chunk_nbytes(o);
    t->chunk_fixed_size = zarr_chunk_fixed_size(o);
    t->level_in = *o;
    t->in = &t->level_in;
    t->src = (struct input_source){.read = level_read, .signature = level_signature, .ctx = t};
    /* ROIs: the chunks whose footprint touches a chunk of the level above that exists */
    size_t cap = 16;
    t->rois.ndim = nd;
    t->rois.start = xmalloc(cap * nd * sizeof(uint64_t));
    t->rois.stop = xmalloc(cap * nd * sizeof(uint64_t));
    for (uint64_t id = 0; id < t->nchunks; id++) {
        uint64_t idx[ROIFS_MAX_DIM], b0[ROIFS_MAX_DIM], bs[ROIFS_MAX_DIM], f0[ROIFS_MAX_DIM],
            fs[ROIFS_MAX_DIM], c0[ROIFS_MAX_DIM], c1[ROIFS_MAX_DIM], ci[ROIFS_MAX_DIM];
        nd_unlinear(id, t->grid, nd, idx);
        for (int d = 0; d < nd; d++) {
            b0[d] = idx[d] * o->chunks[d];
            uint64_t e = b0[d] + o->chunks[d] < o->shape[d] ? b0[d] + o->chunks[d] : o->shape[d];
            bs[d] = e - b0[d];
        }
        footprint(t, b0, bs, f0, fs);
        bool any = false;
        if (chunk_range(up, f0, fs, c0, c1)) {
            memcpy(ci, c0, sizeof ci);
            do
                any = task_chunk_present(up, nd_linear(ci, up->grid, nd));
            while (!any && next_index(ci, c0, c1, nd));
        }
        if (!any)
            continue;
        if (t->rois.n == cap) {
            cap *= 2;
            t->rois.start = xrealloc(t->rois.start, cap * nd * sizeof(uint64_t));
            t->rois.stop = xrealloc(t->rois.stop, cap * nd * sizeof(uint64_t));
        }
        for (int d = 0; d < nd; d++) {
            t->rois.start[t->rois.n * nd + d] = b0[d];
            t->rois.stop[t->rois.n * nd + d] = b0[d] + bs[d];
        }
        t->rois.n++;
    }
    int r = roi_index_build(&t->rois, o->shape, o->chunks, &t->index, err);
    if (r < 0) {
        task_close(t);
        return r;
    }
    struct proc *p = xcalloc(1, sizeof *p);
    p->ops = &copy_ops;
    t->proc = p;
    level_meta(t, l0->dimension_names);
    t->manifest =
        xasprintf("roifs-level 1\nlevel %d\nupstream %016llx\nmethod %s\naxes %d %d\n"
                  "output %s\n",
                  level, (unsigned long long)up->fingerprint, t->nearest ? "nearest" : "mean",
                  t->axis_y, t->axis_x, o->format == 3 ? t->zarr_json : t->zarray_json);
    t->fingerprint = fnv64(FNV64_INIT, t->manifest, strlen(t->manifest));
    /* The upstream is in the input signature (the keys of the level above), not here. */
    char dt[8];
    t->result_identity = xasprintf("roifs-level 2\nroifs %s\nmethod %s\naxes %d %d\ndtype %s\n",
                                   ROIFS_VERSION, t->nearest ? "nearest" : "mean", t->axis_y,
                                   t->axis_x, dtype_typestr(&o->dtype, dt));
    task_identity_keys(t);
    t->cache_dir = xasprintf("%s/L%d", l0->cache_dir, level);
    *out = t;
    return 0;
}

static int build_group(struct task *t, struct errbuf *err)
{
    int nd = t->out.ndim;
    json_t *axes = ome_output_axes(&t->ome, nd, err); /* checked by task_open: no error */
    if (!axes)
        return -EINVAL;
    bool ome_ok = t->ome.found && t->ome.ndim == nd;
    json_t *datasets = json_array();
    for (int l = 0; l < t->nlevels; l++) {
        json_t *scale = json_array();
        for (int d = 0; d < nd; d++) {
            double s = ome_ok ? t->ome.scale[d] : 1.0;
            if (d == t->axis_y || d == t->axis_x)
                s = ldexp(s, l);
            json_array_append_new(scale, json_real(s));
        }
        char path[16];
        snprintf(path, sizeof path, "%d", l);
        json_array_append_new(datasets, json_pack("{s:s, s:[{s:s, s:o}]}", "path", path,
                                                  "coordinateTransformations", "type", "scale",
                                                  "scale", scale));
    }
    json_t *ms =
        json_pack("{s:s, s:o, s:o, s:s, s:o}", "name", "roifs", "axes", axes, "datasets", datasets,
                  "type", t->nearest ? "nearest" : "mean", "metadata", downsample_metadata(t));
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
        t->group_meta_json = json_dumps(g, JSON_INDENT(4) | JSON_SORT_KEYS);
        json_decref(g);
    } else {
        json_object_set_new(ms, "version", json_string("0.4"));
        json_object_set_new(attrs, "multiscales", json_pack("[o]", ms));
        t->group_zattrs_json = json_dumps(attrs, JSON_INDENT(4) | JSON_SORT_KEYS);
        t->group_meta_json = xstrdup("{\n    \"zarr_format\": 2\n}");
        json_decref(attrs);
    }
    return 0;
}

int pyramid_build(struct task *t, struct errbuf *err)
{
    int nd = t->out.ndim;
    if (t->ome.found && t->ome.ndim == nd && t->ome.axis_y >= 0 && t->ome.axis_x >= 0) {
        t->axis_y = t->ome.axis_y;
        t->axis_x = t->ome.axis_x;
    } else {
        t->axis_y = nd - 2;
        t->axis_x = nd - 1;
    }
    t->nearest = t->cfg.downsample == DOWNSAMPLE_NEAREST;
    t->nlevels = t->cfg.levels > 0 ? t->cfg.levels : 1;
    if (t->nlevels > TASK_MAX_LEVELS)
        t->nlevels = TASK_MAX_LEVELS;
    t->levels[0] = t;
    for (int l = 1; l < t->nlevels; l++) {
        int r = level_task(t, t->levels[l - 1], l, &t->levels[l], err);
        if (r < 0)
            return r;
    }
    return build_group(t, err);
}

void pyramid_free(struct task *t)
{
    if (t->level != 0)
        return;
    for (int l = t->nlevels - 1; l >= 1; l--)
        if (t->levels[l])
            task_close(t->levels[l]);
    t->nlevels = 0;
    free(t->group_meta_json);
    free(t->group_zattrs_json);
    t->group_meta_json = t->group_zattrs_json = NULL;
}

/* ---- engines of the levels ---- */

int pyramid_engines_create(struct engine *e, struct errbuf *err)
{
    struct task *t = e->t;
    for (int l = 1; l < t->nlevels; l++) {
        struct task *lt = t->levels[l];
        lt->up_engine = engine_level(e, l - 1);
        lt->cfg.threads = t->cfg.threads; /* what `-j N` set after task_open */
        lt->cfg.readahead = t->cfg.readahead;
        int r = cache_open(lt, &e->sub_cache[l], err);
        if (r == 0 && (r = engine_create(lt, e->sub_cache[l], &e->sub[l], err)) < 0) {
            cache_close(e->sub_cache[l]);
            e->sub_cache[l] = NULL;
        }
        if (r < 0) {
            pyramid_engines_destroy(e);
            return r;
        }
    }
    return 0;
}

void pyramid_engines_destroy(struct engine *e)
{
    for (int l = TASK_MAX_LEVELS - 1; l >= 1; l--) {
        if (e->sub[l])
            engine_destroy(e->sub[l]);
        if (e->sub_cache[l])
            cache_close(e->sub_cache[l]);
        e->sub[l] = NULL;
        e->sub_cache[l] = NULL;
    }
}

struct engine *engine_level(struct engine *e, int level)
{
    if (level <= 0 || level >= TASK_MAX_LEVELS || !e->sub[level])
        return e;
    return e->sub[level];
}

/* "levels" of the status document: the counters of each level. */
json_t *pyramid_status(struct engine *e)
{
    json_t *a = json_array();
    for (int l = 0; l < e->t->nlevels; l++) {
        struct engine_progress p;
        engine_progress(engine_level(e, l), &p);
        json_array_append_new(
            a, json_pack("{s:i, s:{s:I, s:I, s:I}, s:{s:I, s:I, s:I}, s:I}", "level", l, "rois",
                         "total", (json_int_t)p.rois_total, "done", (json_int_t)p.rois_done,
                         "failed", (json_int_t)p.rois_failed, "chunks", "total",
                         (json_int_t)p.chunks_total, "present", (json_int_t)p.chunks_present,
                         "cached", (json_int_t)p.chunks_cached, "calls", (json_int_t)p.calls));
    }
    return a;
}
