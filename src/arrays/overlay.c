/* overlay.c: [output] ome = labels (see overlay.h): the checks, the parent image's levels, the
 * nearest-neighbour levels of the label image and the metadata files the overlay adds. */
#include "overlay.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../measure/measure.h"
#include "../measure/mpython.h"
#include "../nd.h"
#include "overlay_remote.h"
#include "upread.h"

/* One level j of the label image. */
struct olevel {
    int number;
    char *path;                                           /* the parent's dataset path */
    char *rel;                                            /* labels/NAME/<path> */
    uint64_t shape[ROIFS_MAX_DIM], chunks[ROIFS_MAX_DIM]; /* the parent level's, without c */
    json_t *cts;            /* its coordinateTransformations without c */
    struct task *task;      /* level k: t0 (borrowed); others: derived (owned) */
    struct zarr_meta input; /* what a derived level's copy processor sees: the level */
    struct overlay *ov;
};

struct overlay {
    struct task *t0;
    int k, n, c_axis, parent_ndim; /* c_axis: the parent's c dimension, -1 when none */
    struct olevel *lv;             /* n of them (a plate holds an overlay per image) */
    int order[OVERLAY_MAX_LEVELS]; /* array i -> level */
    struct engine *engine_k;
    char *dir, *table_dir;
    json_t *ms_cts; /* the multiscale's own coordinateTransformations without c, or NULL */
    struct overlay_file files[8];
    size_t nfiles;
    bool overwrite; /* labels/NAME and tables/NAME of the input are replaced, not refused */
    /* [measure] labels: the label image is the input's own, shown as it is; level k (a copy
     * of it) is not presented, only measured; there are no other levels */
    bool measured;
    struct overlay_remote *remote; /* a remote image's tree at a mount (overlay_remote.h) */
};

/* ---- checks ---- */

#define OV_ERR(t, err, section, key, ...)                                                          \
    return config_error(&(t)->cfg, err, section, key, __VA_ARGS__)

static bool exists(const char *dir, const char *a, const char *b)
{
    char *p = xasprintf("%s/%s/%s", dir, a, b);
    bool r = zarr_store_node_exists(p); /* a remote group: by its metadata's name */
    free(p);
    return r;
}

static int check_config(const struct task *t, bool overwrite, struct errbuf *err)
{
    const struct config *c = &t->cfg;
    if (!t->ome.found || !t->ome.is_group || !t->ome.group_path)
        OV_ERR(t, err, "input", "path",
               "[input] path: ome = labels needs an OME-Zarr image group (a group with "
               "multiscales metadata); %s is not one",
               c->input_path);
    if (t->out.dtype.kind != DT_INT && t->out.dtype.kind != DT_UINT)
        OV_ERR(t, err, "output", c->dtype ? "dtype" : "ome",
               "[output] ome = labels: label values are integers; the output dtype is not "
               "(set [output] dtype, e.g. <u4)");
    static const char *const image_keys[] = {"levels", "downsample", "shard"};
    for (int i = 0; i < 3; i++)
        if (config_line(c, "output", image_keys[i]) > 0)
            OV_ERR(t, err, "output", image_keys[i],
                   "[output] %s cannot be used with ome = labels (the label image has the "
                   "parent image's levels, each one chunked as the parent's)",
                   image_keys[i]);
    if (c->watch)
        OV_ERR(t, err, "input", "watch", "[input] watch cannot be used with ome = labels");
    if (!overwrite && !t->measured && exists(t->ome.group_path, "labels", c->label_name))
        OV_ERR(t, err, "output", config_line(c, "output", "label_name") ? "label_name" : "ome",
               "[output] ome = labels: the image %s already has a label '%s'; choose another "
               "label_name",
               t->ome.group_path, c->label_name);
    if (!overwrite && c->table_name && exists(t->ome.group_path, "tables", c->table_name))
        OV_ERR(t, err, c->measure ? "measure" : "output", "table_name",
               "[%s] table_name: the image %s already has a table '%s'; choose another "
               "table_name",
               c->measure ? "measure" : "output", t->ome.group_path, c->table_name);
    if (!overwrite && c->mask_table_name && exists(t->ome.group_path, "tables", c->mask_table_name))
        OV_ERR(t, err, "output", "table_name",
               "[output] table_name: the image %s already has a table '%s'; choose another "
               "table_name",
               t->ome.group_path, c->mask_table_name);
    if (config_line(c, "output", "table_name") == 0 && config_line(c, "output", "table_format"))
        OV_ERR(t, err, "output", "table_format", "[output] table_format needs table_name");
    if (c->measure) { /* [measure]'s channels and shapes (measure.h) */
        struct measure *ms;
        int r = measure_new(t, &ms, err);
        if (r < 0)
            return r;
        measure_free(ms);
        if ((r = mpython_check(t, err)) < 0)
            return r;
    }
    return 0;
}

/* ---- the parent image ---- */

static int find_c(const json_t *axes)
{
    for (size_t i = 0; i < json_array_size(axes); i++) {
        const json_t *a = json_array_get(axes, i);
        const char *name = json_is_string(a) ? json_string_value(a)
                                             : json_string_value(json_object_get(a, "name"));
        const char *type = json_string_value(json_object_get(a, "type"));
        if ((name && strcmp(name, "c") == 0) || (type && strcmp(type, "channel") == 0))
            return (int)i;
    }
    return -1;
}

/* A coordinateTransformations list with entry c (when >= 0) removed from each vector. */
static json_t *drop_c(const json_t *cts, int c)
{
    json_t *out = json_deep_copy(cts);
    for (size_t i = 0; c >= 0 && i < json_array_size(out); i++) {
        json_t *tr = json_array_get(out, i);
        const char *type = json_string_value(json_object_get(tr, "type"));
        json_t *v = type ? json_object_get(tr, type) : NULL;
        if (json_is_array(v) && (size_t)c < json_array_size(v))
            json_array_remove(v, (size_t)c);
    }
    return out;
}

static bool sane_path(const char *p)
{
    return p && p[0] && !strchr(p, '/') && strcmp(p, ".") != 0 && strcmp(p, "..") != 0;
}

/* Level j's shape and chunks from its array in the parent image, without c. */
static int read_level(struct overlay *ov, struct olevel *lv, struct errbuf *err)
{
    const struct task *t = ov->t0;
    char *p = path_join(ov->dir, lv->path);
    struct zarr_input *in;
    struct errbuf e;
    int r = zarr_input_open(p, 1u << 20, &in, &e);
    free(p);
    if (r < 0)
        OV_ERR(t, err, "input", "path", "[input] path: level %d (%s): %s", lv->number, lv->path,
               e.msg);
    const struct zarr_meta *m = zarr_input_meta(in);
    const uint64_t *ch = zarr_meta_read_chunks(m);
    int nd = 0;
    for (int d = 0; d < m->ndim; d++) {
        if (d == ov->c_axis)
            continue;
        lv->shape[nd] = m->shape[d];
        lv->chunks[nd] = ch[d] < m->shape[d] || m->shape[d] == 0 ? ch[d] : m->shape[d];
        nd++;
    }
    bool same = m->ndim == ov->parent_ndim;
    zarr_input_close(in);
    if (!same || nd != t->out.ndim)
        OV_ERR(t, err, "input", "path",
               "[input] path: level %d (%s) has not the dimensions of level %d", lv->number,
               lv->path, ov->k);
    return 0;
}

static int read_parent(struct overlay *ov, struct errbuf *err)
{
    const struct task *t = ov->t0;
    json_t *attrs, *ms;
    struct errbuf e;
    if (ome_group_attrs(ov->dir, &attrs, &ms, &e) < 0)
        OV_ERR(t, err, "input", "path", "[input] path: %s", e.msg);
    json_t *sets = json_object_get(ms, "datasets");
    ov->c_axis = find_c(json_object_get(ms, "axes"));
    ov->parent_ndim = (int)json_array_size(json_object_get(ms, "axes"));
    int n = (int)json_array_size(sets);
    ov->k = t->ome.level;
    int r = 0;
    if (n > OVERLAY_MAX_LEVELS || ov->k >= n)
        r = config_error(&t->cfg, err, "input", "path", "[input] path: %d levels (at most %d)", n,
                         OVERLAY_MAX_LEVELS);
    else if (ov->c_axis >= 0 && t->out.ndim == ov->parent_ndim)
        r = config_error(&t->cfg, err, "input", "channel",
                         "[output] ome = labels: the image has a c axis, a label image has "
                         "none: set [input] channel");
    else
        ov->lv = xcalloc((size_t)(ov->n = n), sizeof *ov->lv);
    json_t *g = json_object_get(ms, "coordinateTransformations");
    ov->ms_cts = g ? drop_c(g, ov->c_axis) : NULL;
    for (int j = 0; r == 0 && j < ov->n; j++) {
        struct olevel *lv = &ov->lv[j];
        json_t *ds = json_array_get(sets, (size_t)j);
        const char *path = json_string_value(json_object_get(ds, "path"));
        if (!sane_path(path)) {
            r = config_error(&t->cfg, err, "input", "path",
                             "[input] path: dataset %d has no path roifs can use", j);
            break;
        }
        lv->number = j;
        lv->ov = ov;
        lv->path = xstrdup(path);
        lv->rel = xasprintf("labels/%s/%s", t->cfg.label_name, path);
        lv->cts = drop_c(json_object_get(ds, "coordinateTransformations"), ov->c_axis);
        r = read_level(ov, lv, err);
    }
    json_decref(attrs);
    return r;
}

/* ---- nearest neighbour: element i of level j is element floor(i * E_k / E_j) of level k ---- */

static uint64_t nn_map(uint64_t i, uint64_t ek, uint64_t ej)
{
    return ej ? (uint64_t)((unsigned __int128)i * ek / ej) : 0;
}

/* The box [f0, f0 + fs) of level k that box [b0, b0 + bs) of level lv reads. */
static void nn_footprint(const struct olevel *lv, const uint64_t *b0, const uint64_t *bs,
                         uint64_t *f0, uint64_t *fs)
{
    const struct task *k = lv->ov->t0;
    for (int d = 0; d < k->out.ndim; d++) {
        uint64_t ek = k->out.shape[d], ej = lv->shape[d];
        f0[d] = bs[d] ? nn_map(b0[d], ek, ej) : 0;
        fs[d] = bs[d] ? nn_map(b0[d] + bs[d] - 1, ek, ej) + 1 - f0[d] : 0;
    }
}

/* Box [b0, b0 + bs) of a level being gathered from level k: element x of the box along
 * dimension d is element map[d][x] of level k (non-decreasing in x). */
struct nn_gather {
    const struct olevel *lv;
    const uint64_t *bs;
    void *dst;
    uint64_t *map[ROIFS_MAX_DIM];
};

/* One row of the gather: dst[x] = src[m[x] - lo] for x in [xa, xb), elements of size es. */
static void nn_row(char *dst, const char *src, const uint64_t *m, uint64_t lo, uint64_t xa,
                   uint64_t xb, size_t es)
{
#define NN_ROW(T)                                                                                  \
    for (uint64_t x = xa; x < xb; x++)                                                             \
        memcpy(dst + x * sizeof(T), src + (m[x] - lo) * sizeof(T), sizeof(T));
    switch (es) {
    case 1:
        NN_ROW(uint8_t);
        break;
    case 2:
        NN_ROW(uint16_t);
        break;
    case 4:
        NN_ROW(uint32_t);
        break;
    case 8:
        NN_ROW(uint64_t);
        break;
    default:
        for (uint64_t x = xa; x < xb; x++)
            memcpy(dst + x * es, src + (m[x] - lo) * es, es);
    }
#undef NN_ROW
}

/* The elements of the box whose source lies in chunk [lo, hi) of level k, taken from it (an
 * upread_chunk_fn): only those are touched, so a coarse level reads 1/4 or 1/16 of each chunk
 * it decodes, and no copy of the whole footprint is made. */
static void nn_take(void *ctx, const uint64_t *lo, const uint64_t *hi, const void *cbuf)
{
    const struct nn_gather *g = ctx;
    const struct task *k = g->lv->ov->t0;
    int nd = k->out.ndim;
    size_t es = k->out.dtype.size;
    uint64_t xa[ROIFS_MAX_DIM], xb[ROIFS_MAX_DIM], cs[ROIFS_MAX_DIM], ds[ROIFS_MAX_DIM];
    for (int d = nd - 1; d >= 0; d--) {
        cs[d] = d == nd - 1 ? 1 : cs[d + 1] * k->out.chunks[d + 1];
        ds[d] = d == nd - 1 ? 1 : ds[d + 1] * g->bs[d + 1];
        uint64_t x = 0;
        while (x < g->bs[d] && g->map[d][x] < lo[d])
            x++;
        xa[d] = x;
        while (x < g->bs[d] && g->map[d][x] < hi[d])
            x++;
        xb[d] = x;
        if (xa[d] == xb[d])
            return;
    }
    uint64_t i[ROIFS_MAX_DIM];
    memcpy(i, xa, sizeof(uint64_t) * nd);
    int last = nd - 1;
    for (;;) {
        uint64_t so = 0, dof = 0;
        for (int d = 0; d < last; d++) {
            so += (g->map[d][i[d]] - lo[d]) * cs[d];
            dof += i[d] * ds[d];
        }
        nn_row((char *)g->dst + dof * es, (const char *)cbuf + so * es, g->map[last], lo[last],
               xa[last], xb[last], es);
        int d = last - 1;
        while (d >= 0 && ++i[d] == xb[d]) {
            i[d] = xa[d];
            d--;
        }
        if (d < 0)
            return;
    }
}

static int level_read(void *ctx, const uint64_t *start, const uint64_t *shape, void *dst,
                      uint64_t *sig, struct errbuf *err)
{
    const struct olevel *lv = ctx;
    const struct task *k = lv->ov->t0;
    int nd = k->out.ndim;
    uint64_t f0[ROIFS_MAX_DIM], fs[ROIFS_MAX_DIM];
    nn_footprint(lv, start, shape, f0, fs);
    if (sig)
        *sig = upread_signature(k, NULL, NULL, NULL);
    if (nd_prod(shape, nd) == 0)
        return 0;
    nd_fill(dst, nd_prod(shape, nd), k->out.fill, k->out.dtype.size);
    struct nn_gather g = {.lv = lv, .bs = shape, .dst = dst};
    for (int d = 0; d < nd; d++) {
        g.map[d] = xmalloc(shape[d] * sizeof **g.map);
        for (uint64_t x = 0; x < shape[d]; x++)
            g.map[d][x] = nn_map(start[d] + x, k->out.shape[d], lv->shape[d]);
    }
    struct upread u = {.up = k, .engine = lv->ov->engine_k, .level = lv->ov->k};
    int rc = upread_each(&u, f0, fs, nn_take, &g, sig, err);
    for (int d = 0; d < nd; d++)
        free(g.map[d]);
    return rc;
}

static int level_signature(void *ctx, const uint64_t *start, const uint64_t *shape,
                           struct zarr_sigmemo *memo, uint64_t *sig)
{
    const struct olevel *lv = ctx;
    uint64_t f0[ROIFS_MAX_DIM], fs[ROIFS_MAX_DIM];
    nn_footprint(lv, start, shape, f0, fs);
    bool empty = nd_prod(shape, lv->ov->t0->out.ndim) == 0;
    *sig = upread_signature(lv->ov->t0, empty ? NULL : f0, fs, memo);
    return 0;
}

/* nn_footprint as an upread_footprint_fn: a level reads the chunks of level k it touches. */
static void level_footprint(const void *ctx, const uint64_t *b0, const uint64_t *bs, uint64_t *f0,
                            uint64_t *fs)
{
    nn_footprint(ctx, b0, bs, f0, fs);
}

static void shape_text(struct strbuf *sb, const char *what, const uint64_t *v, int nd)
{
    sb_printf(sb, "%s", what);
    for (int d = 0; d < nd; d++)
        sb_printf(sb, " %llu", (unsigned long long)v[d]);
    sb_printf(sb, "\n");
}

static int level_task(struct overlay *ov, struct olevel *lv, struct errbuf *err)
{
    const struct task *k = ov->t0;
    struct task_derived_spec spec = {.out = k->out};
    struct zarr_meta *o = &spec.out;
    memcpy(o->shape, lv->shape, sizeof o->shape);
    memcpy(o->chunks, lv->chunks, sizeof o->chunks);
    lv->input = *o;
    upread_level_rois(ov->t0, o, level_footprint, lv, &spec.rois);
    spec.proc = upread_copy_proc();
    spec.source = (struct input_source){
        .meta = &lv->input, .read = level_read, .signature = level_signature, .ctx = lv};
    struct strbuf sb = {0};
    char dt[8];
    sb_printf(&sb, "roifs-label-level 1\nroifs %s\nnearest\ndtype %s\n", ROIFS_VERSION,
              dtype_typestr(&o->dtype, dt));
    shape_text(&sb, "from", k->out.shape, o->ndim);
    shape_text(&sb, "to", o->shape, o->ndim);
    char *dir = xasprintf("%s/N%d", k->cache_dir, lv->number);
    spec.result_identity = sb.buf;
    spec.cache_dir = dir;
    spec.dimension_names = k->dimension_names;
    int r = task_derived(k, &spec, &lv->task, err);
    free(sb.buf);
    free(dir);
    return r;
}

/* ---- metadata ---- */

/* The JSON object in file dir/rel, or NULL. */
static json_t *json_file(const char *dir, const char *rel)
{
    char *p = path_join(dir, rel), *text = NULL;
    size_t len;
    json_t *j = NULL;
    if (zarr_store_read(p, &text, &len, NULL) == 0)
        j = json_loadb(text, len, 0, NULL);
    free(text);
    free(p);
    if (j && !json_is_object(j)) {
        json_decref(j);
        j = NULL;
    }
    return j;
}

/* The object at key of o, made when absent. */
static json_t *object_at(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_object(v)) {
        v = json_object();
        json_object_set_new(o, key, v);
    }
    return v;
}

/* overlay_list_text with the names name and name2 (NULL: none) added. */
static char *list_text(const char *image, int format, const char *group, const char *name,
                       const char *name2, char **rel)
{
    bool v3 = format == 3;
    *rel = xasprintf("%s/%s", group, v3 ? "zarr.json" : ".zattrs");
    json_t *doc = json_file(image, *rel);
    if (!doc)
        doc =
            v3 ? json_pack("{s:i, s:s, s:{}}", "zarr_format", 3, "node_type", "group", "attributes")
               : json_object();
    json_t *where = v3 ? object_at(doc, "attributes") : doc;
    if (v3 && strcmp(group, "labels") == 0) {
        where = object_at(where, "ome");
        if (!json_object_get(where, "version"))
            json_object_set_new(where, "version", json_string("0.5"));
    }
    json_t *list = json_object_get(where, group);
    if (!json_is_array(list)) {
        list = json_array();
        json_object_set_new(where, group, list);
    }
    for (int k = 0; k < 2; k++) {
        const char *nm = k ? name2 : name;
        bool listed = !nm; /* already (an overwrite): listed once */
        for (size_t i = 0; i < json_array_size(list) && nm; i++)
            listed = listed || strcmp(json_string_value(json_array_get(list, i)) ?: "", nm) == 0;
        if (!listed)
            json_array_append_new(list, json_string(nm));
    }
    char *text = json_dumps(doc, JSON_INDENT(4));
    json_decref(doc);
    return text;
}

char *overlay_list_text(const char *image, int format, const char *group, const char *name,
                        char **rel)
{
    return list_text(image, format, group, name, NULL, rel);
}

static void add_text(struct overlay *ov, char *path, char *text)
{
    ov->files[ov->nfiles++] = (struct overlay_file){path, text, NULL, NULL};
}

static void add_file(struct overlay *ov, char *path, json_t *doc)
{
    add_text(ov, path, json_dumps(doc, JSON_INDENT(4)));
    json_decref(doc);
}

/* A list group (labels/ or tables/) with name appended to its list, and for format 2 its
 * .zgroup when the input has none. */
static void list_group(struct overlay *ov, const char *group, const char *name)
{
    bool v3 = ov->t0->out.format == 3;
    char *rel;
    const char *name2 = strcmp(group, "tables") == 0 ? ov->t0->cfg.mask_table_name : NULL;
    char *text = list_text(ov->dir, ov->t0->out.format, group, name, name2, &rel);
    ov->files[ov->nfiles++] = (struct overlay_file){rel, text, group, name};
    char *zg = xasprintf("%s/.zgroup", group);
    json_t *g = v3 ? NULL : json_file(ov->dir, zg);
    if (!v3 && !g)
        add_file(ov, zg, json_pack("{s:i}", "zarr_format", 2));
    else
        free(zg);
    json_decref(g);
}

static void label_group(struct overlay *ov)
{
    const struct task *t = ov->t0;
    bool v3 = t->out.format == 3;
    struct errbuf e;
    json_t *axes = ome_output_axes(&t->ome, t->out.ndim, &e); /* checked by task_open */
    json_t *sets = json_array();
    for (int j = 0; j < ov->n; j++)
        json_array_append_new(sets, json_pack("{s:s, s:O}", "path", ov->lv[j].path,
                                              "coordinateTransformations", ov->lv[j].cts));
    json_t *ms = json_pack("{s:s, s:o, s:o}", "name", t->cfg.label_name, "axes",
                           axes ? axes : json_array(), "datasets", sets);
    if (ov->ms_cts)
        json_object_set(ms, "coordinateTransformations", ov->ms_cts);
    json_t *il =
        json_pack("{s:s, s:{s:s}}", "version", v3 ? "0.5" : "0.4", "source", "image", "../../");
    const char *name = t->cfg.label_name;
    if (v3) {
        json_t *ome =
            json_pack("{s:s, s:[o], s:o}", "version", "0.5", "multiscales", ms, "image-label", il);
        add_file(ov, xasprintf("labels/%s/zarr.json", name),
                 json_pack("{s:i, s:s, s:{s:o}}", "zarr_format", 3, "node_type", "group",
                           "attributes", "ome", ome));
        return;
    }
    json_object_set_new(ms, "version", json_string("0.4"));
    add_file(ov, xasprintf("labels/%s/.zgroup", name), json_pack("{s:i}", "zarr_format", 2));
    add_file(ov, xasprintf("labels/%s/.zattrs", name),
             json_pack("{s:[o], s:o}", "multiscales", ms, "image-label", il));
}

static int by_path(const void *a, const void *b)
{
    return strcmp(((const struct overlay_file *)a)->path, ((const struct overlay_file *)b)->path);
}

/* ---- the overlay ---- */

int overlay_build(struct task *t0, bool overwrite, struct overlay **out, struct errbuf *err)
{
    int r = check_config(t0, overwrite, err);
    if (r < 0)
        return r;
    struct overlay *ov = xcalloc(1, sizeof *ov);
    ov->t0 = t0;
    ov->overwrite = overwrite;
    ov->dir = xstrdup(t0->ome.group_path);
    ov->measured = t0->measured != NULL;
    r = read_parent(ov, err);
    for (int j = 0; r == 0 && j < ov->n; j++) {
        if (j == ov->k)
            ov->lv[j].task = t0;
        else if (!ov->measured)
            r = level_task(ov, &ov->lv[j], err);
    }
    if (r < 0) {
        overlay_free(ov);
        return r;
    }
    ov->order[0] = ov->k;
    for (int j = 0, i = 1; j < ov->n; j++)
        if (j != ov->k)
            ov->order[i++] = j;
    if (!ov->measured) {
        list_group(ov, "labels", t0->cfg.label_name);
        label_group(ov);
    }
    if (t0->cfg.table_name) {
        list_group(ov, "tables", t0->cfg.table_name);
        ov->table_dir = xasprintf("tables/%s", t0->cfg.table_name);
    }
    qsort(ov->files, ov->nfiles, sizeof *ov->files, by_path);
    *out = ov;
    return 0;
}

void overlay_free(struct overlay *ov)
{
    if (!ov)
        return;
    for (int j = 0; j < ov->n; j++) {
        if (j != ov->k)
            task_close(ov->lv[j].task);
        free(ov->lv[j].path);
        free(ov->lv[j].rel);
        json_decref(ov->lv[j].cts);
    }
    free(ov->lv);
    overlay_remote_free(ov->remote);
    for (size_t i = 0; i < ov->nfiles; i++) {
        free(ov->files[i].path);
        free(ov->files[i].text);
    }
    json_decref(ov->ms_cts);
    free(ov->dir);
    free(ov->table_dir);
    free(ov);
}

size_t overlay_narrays(const struct overlay *ov)
{
    return ov->measured ? 1 : (size_t)ov->n;
}

bool overlay_presents_levels(const struct overlay *ov)
{
    return !ov->measured;
}

struct task *overlay_array_task(const struct overlay *ov, size_t array)
{
    return ov->lv[ov->order[array]].task;
}

int overlay_array_level(const struct overlay *ov, size_t array)
{
    return ov->order[array];
}

void overlay_set_engine(struct overlay *ov, struct engine *e)
{
    ov->engine_k = e;
}

struct engine *overlay_engine(const struct overlay *ov)
{
    return ov->engine_k;
}

int overlay_build_remote_tree(struct overlay *ov, struct ns *ns, int root, struct errbuf *err)
{
    overlay_remote_free(ov->remote); /* (a tree is built once; never two at a time) */
    ov->remote = NULL;
    return overlay_remote_build(ov, ns, root, &ov->remote, err);
}

const char *overlay_image_dir(const struct overlay *ov)
{
    return ov->dir;
}

const char *overlay_level_path(const struct overlay *ov, size_t array)
{
    return ov->lv[ov->order[array]].rel;
}

const struct overlay_file *overlay_files(const struct overlay *ov, size_t *n)
{
    *n = ov->nfiles;
    return ov->files;
}

/* True when rel is group/name or below it. */
static bool at_or_below(const char *rel, const char *group, const char *name)
{
    size_t g = strlen(group), n = strlen(name);
    return strncmp(rel, group, g) == 0 && rel[g] == '/' && strncmp(rel + g + 1, name, n) == 0 &&
           (rel[g + 1 + n] == '\0' || rel[g + 1 + n] == '/');
}

char *overlay_file_now(const struct overlay *ov, size_t i)
{
    const struct overlay_file *f = &ov->files[i];
    if (!f->group)
        return xstrdup(f->text);
    const char *name2 = strcmp(f->group, "tables") == 0 ? ov->t0->cfg.mask_table_name : NULL;
    char *rel, *text = list_text(ov->dir, ov->t0->out.format, f->group, f->name, name2, &rel);
    free(rel);
    return text;
}

bool overlay_owns(const struct overlay *ov, const char *rel)
{
    const struct config *c = &ov->t0->cfg;
    return (!ov->measured && at_or_below(rel, "labels", c->label_name)) ||
           (c->mask_table_name && at_or_below(rel, "tables", c->mask_table_name)) ||
           (c->table_name && at_or_below(rel, "tables", c->table_name));
}

const char *overlay_table_dir(const struct overlay *ov)
{
    return ov->table_dir;
}

/* A transformation's vector of type type in cts into v (nd entries), composed as x*s + t. */
static void vec_of(const json_t *cts, const char *type, int nd, double *v)
{
    for (size_t i = 0; i < json_array_size(cts); i++) {
        const json_t *tr = json_array_get(cts, i);
        const char *ty = json_string_value(json_object_get(tr, "type"));
        const json_t *a = ty && strcmp(ty, type) == 0 ? json_object_get(tr, type) : NULL;
        for (int d = 0; a && d < nd && (size_t)d < json_array_size(a); d++)
            v[d] = json_number_value(json_array_get(a, (size_t)d));
    }
}

void overlay_geometry(const struct overlay *ov, struct overlay_geometry *g)
{
    const struct task *t = ov->t0;
    int nd = t->out.ndim;
    double s2[ROIFS_MAX_DIM], t2[ROIFS_MAX_DIM];
    memset(g, 0, sizeof *g); /* the dimensions past nd too: the table's record key hashes them */
    g->t = t;
    for (int d = 0; d < nd; d++) {
        g->scale[d] = s2[d] = 1;
        g->translation[d] = t2[d] = 0;
    }
    vec_of(ov->lv[ov->k].cts, "scale", nd, g->scale);
    vec_of(ov->lv[ov->k].cts, "translation", nd, g->translation);
    vec_of(ov->ms_cts, "scale", nd, s2);
    vec_of(ov->ms_cts, "translation", nd, t2);
    for (int d = 0; d < nd; d++) {
        g->scale[d] *= s2[d];
        g->translation[d] = g->translation[d] * s2[d] + t2[d];
    }
    g->axis[0] = t->ome.axis_z;
    g->axis[1] = t->ome.axis_y;
    g->axis[2] = t->ome.axis_x;
}
