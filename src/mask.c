/* mask.c: the label image of masked ROIs (docs/masks.md): which array it is (an OME label image's
 * level by scale), the checks masked ROIs need, and selections read by nearest neighbour. A
 * value task.c composes (mask_open): it reads the configuration and edits no task. */
#include "mask.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "nd.h"
#include "ome.h"
#include "zarr/zarr.h"

struct mask {
    char *path; /* the array read (an OME label image's chosen level) */
    struct zarr_input *in;
    const struct zarr_meta *meta;
    bool zero_input; /* mask_input = zero */
    int ndim;
    uint64_t out_shape[ROIFS_MAX_DIM];
};

/* ---- which array ---- */

static bool same_scale(double a, double b)
{
    return fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b));
}

/* Compares the spatial scales of a mask level with the input's: 0 equal, 1 finer or equal in
 * every axis both have, -1 coarser in one; *size the product of the level's (to rank). */
static int compare_level(const struct ome_image *in, const struct ome_image *lv, double *size)
{
    const int ia[3] = {in->axis_z, in->axis_y, in->axis_x};
    const int la[3] = {lv->axis_z, lv->axis_y, lv->axis_x};
    int rel = 0;
    *size = 1;
    for (int a = 0; a < 3; a++) {
        if (ia[a] < 0 || la[a] < 0)
            continue;
        double si = in->scale[ia[a]], sl = lv->scale[la[a]];
        *size *= sl;
        if (same_scale(si, sl))
            continue;
        if (sl > si)
            return -1;
        rel = 1;
    }
    return rel;
}

/* The array to read for path: itself, or for an OME-Zarr image group (a label image) the
 * level whose scale is the input's, else the nearest finer one, else the first; without the
 * input's scale, the level of the output's shape, else the first. malloc'd, or NULL. */
static char *choose_array(const struct ome_image *in_ome, const struct zarr_meta *out,
                          const char *path, struct errbuf *err)
{
    struct ome_image img;
    if (ome_resolve(path, 0, &img, err) < 0)
        return NULL;
    char *best = xstrdup(img.array_path);
    bool group = img.is_group && img.found;
    ome_image_free(&img);
    double best_size = -1;
    bool exact = false;
    for (int lv = 0; group && !exact; lv++) {
        struct errbuf e;
        if (ome_resolve(path, lv, &img, &e) < 0)
            break;
        struct zarr_input *z = NULL;
        bool ok = img.found && zarr_input_open(img.array_path, 1u << 20, &z, &e) == 0;
        double size = 0;
        int rel = in_ome->found && ok ? compare_level(in_ome, &img, &size) : -1;
        if (ok && !in_ome->found) {
            const struct zarr_meta *m = zarr_input_meta(z);
            rel = m->ndim == out->ndim &&
                          memcmp(m->shape, out->shape, sizeof(uint64_t) * (size_t)m->ndim) == 0
                      ? 0
                      : -1;
        }
        if (z)
            zarr_input_close(z);
        if (rel == 0 || (rel == 1 && size > best_size)) {
            free(best);
            best = xstrdup(img.array_path);
            best_size = size;
            exact = rel == 0;
        }
        ome_image_free(&img);
    }
    return best;
}

/* ---- opening and checking ---- */

static int check_combinations(const struct config *cfg, struct errbuf *err)
{
    if (cfg->watch)
        return config_error(cfg, err, "input", "watch",
                            "[input] watch: masked ROIs do not follow changes of their mask "
                            "while mounted (a remount does); set watch = false");
    if (cfg->labels && cfg->label_stitch == LABEL_STITCH_IOU)
        return config_error(cfg, err, "labels", "stitch",
                            "[labels] stitch = iou cannot stitch masked ROIs (they write only "
                            "their objects); use stitch = none");
    return 0;
}

/* Opens the array of path as m (filled in, also on failure: the caller closes it). */
static int open_array(const struct config *cfg, const char *key, const char *path,
                      const struct ome_image *in_ome, const struct zarr_meta *out, struct mask *m,
                      struct errbuf *err)
{
    struct errbuf e;
    char *array = choose_array(in_ome, out, path, &e);
    if (!array)
        return config_error(cfg, err, "rois", key, "[rois] %s: the mask: %s", key, e.msg);
    m->path = array;
    if (zarr_input_open(array, 16u << 20, &m->in, &e) < 0)
        return config_error(cfg, err, "rois", key, "[rois] %s: the mask: %s", key, e.msg);
    zarr_input_set_verify(m->in, cfg->verify == 1);
    m->meta = zarr_input_meta(m->in);
    m->ndim = out->ndim;
    memcpy(m->out_shape, out->shape, sizeof m->out_shape);
    char ts[8];
    if (m->meta->ndim != out->ndim)
        return config_error(cfg, err, "rois", key,
                            "[rois] %s: the mask %s has %d dimensions, the output %d", key, array,
                            m->meta->ndim, out->ndim);
    if (m->meta->dtype.kind != DT_INT && m->meta->dtype.kind != DT_UINT)
        return config_error(cfg, err, "rois", key,
                            "[rois] %s: the mask %s has dtype %s; a label image needs an "
                            "integer dtype",
                            key, array, dtype_typestr(&m->meta->dtype, ts));
    for (int d = 0; d < m->ndim; d++)
        if (m->meta->shape[d] == 0)
            return config_error(cfg, err, "rois", key, "[rois] %s: the mask %s is empty", key,
                                array);
    return 0;
}

int mask_open(const struct config *cfg, bool labelled, const struct ome_image *in_ome,
              const struct zarr_meta *out, const char *region, struct mask **mask,
              struct errbuf *err)
{
    const char *key = cfg->mask ? "mask" : "table";
    const char *path = cfg->mask ? cfg->mask : region;
    *mask = NULL;
    if (!labelled) {
        if (cfg->mask)
            log_warn("%s: [rois] mask: no ROI has a label (@ L, or a masking table): the mask "
                     "is not used",
                     cfg->path);
        if (config_line(cfg, "rois", "mask_input") && !cfg->mask)
            return config_error(cfg, err, "rois", "mask_input",
                                "[rois] mask_input: there are no masked ROIs (set [rois] mask "
                                "and label ROIs with @ L, or use a masking ROI table)");
        return 0;
    }
    if (!path)
        return config_error(cfg, err, "rois", "table",
                            "[rois] table: the masking table names no label image "
                            "(region.path): set [rois] mask");
    int r = check_combinations(cfg, err);
    if (r < 0)
        return r;
    struct mask *m = xcalloc(1, sizeof *m);
    m->zero_input = cfg->mask_input == MASK_INPUT_ZERO;
    if ((r = open_array(cfg, key, path, in_ome, out, m, err)) < 0) {
        mask_close(m);
        return r;
    }
    *mask = m;
    return 0;
}

void mask_close(struct mask *m)
{
    if (!m)
        return;
    if (m->in)
        zarr_input_close(m->in);
    free(m->path);
    free(m);
}

const char *mask_array_path(const struct mask *m)
{
    return m->path;
}

const uint64_t *mask_shape(const struct mask *m)
{
    return m->meta->shape;
}

bool mask_zeroes_input(const struct mask *m)
{
    return m->zero_input;
}

void mask_identity(const struct mask *m, struct strbuf *sb)
{
    if (m)
        sb_printf(sb, "mask %s input=%s\n", m->path, m->zero_input ? "zero" : "keep");
}

/* ---- reading ---- */

/* Element p of the output along dimension d is element floor(p * M / O) of the mask. */
static uint64_t scaled(const struct mask *m, int d, uint64_t p)
{
    return (uint64_t)(((unsigned __int128)p * m->meta->shape[d]) / m->out_shape[d]);
}

/* The mask box an output box reads. */
static void mask_box(const struct mask *m, const uint64_t *start, const uint64_t *shape,
                     uint64_t *mstart, uint64_t *mshape)
{
    for (int d = 0; d < m->ndim; d++) {
        mstart[d] = scaled(m, d, start[d]);
        mshape[d] = shape[d] ? scaled(m, d, start[d] + shape[d] - 1) + 1 - mstart[d] : 0;
    }
}

/* match[k] = 1 where element k of raw (n elements of dt, native order) equals label. */
static void match_label(const struct dtype *dt, const void *raw, size_t n, uint64_t label,
                        uint8_t *match)
{
    const unsigned char *p = raw;
    bool is_signed = dt->kind == DT_INT;
    for (size_t k = 0; k < n; k++, p += dt->size) {
        uint64_t u = dtype_load_bits(p, dt->size);
        int64_t s = dtype_sign_extend(u, dt->size);
        match[k] = is_signed ? s > 0 && (uint64_t)s == label : u == label;
    }
}

int mask_select(struct mask *m, uint64_t label, const uint64_t *start, const uint64_t *shape,
                uint8_t *sel, uint64_t *sig, struct errbuf *err)
{
    int nd = m->ndim;
    uint64_t mstart[ROIFS_MAX_DIM], mshape[ROIFS_MAX_DIM], mstride[ROIFS_MAX_DIM];
    mask_box(m, start, shape, mstart, mshape);
    size_t n = nd_prod(shape, nd), mn = nd_prod(mshape, nd);
    *sig = 0;
    if (n == 0)
        return 0;
    void *raw = xmalloc(mn * m->meta->dtype.size);
    int r = zarr_input_read_sig(m->in, mstart, mshape, raw, sig, err);
    if (r < 0) {
        free(raw);
        return err_prefix(err, -EIO, "the mask %s", m->path);
    }
    uint8_t *match = xmalloc(mn);
    match_label(&m->meta->dtype, raw, mn, label, match);
    free(raw);
    /* per dimension, the offset in the mask box of each output index */
    size_t total = 0;
    for (int d = 0; d < nd; d++)
        total += shape[d];
    uint64_t *idx = xmalloc(total * sizeof *idx), *at[ROIFS_MAX_DIM];
    mstride[nd - 1] = 1;
    for (int d = nd - 2; d >= 0; d--)
        mstride[d] = mstride[d + 1] * mshape[d + 1];
    for (int d = 0, o = 0; d < nd; o += (int)shape[d], d++) {
        at[d] = idx + o;
        for (uint64_t i = 0; i < shape[d]; i++)
            at[d][i] = (scaled(m, d, start[d] + i) - mstart[d]) * mstride[d];
    }
    uint64_t i[ROIFS_MAX_DIM] = {0};
    size_t o = 0;
    for (;;) {
        uint64_t base = 0;
        for (int d = 0; d < nd - 1; d++)
            base += at[d][i[d]];
        for (uint64_t x = 0; x < shape[nd - 1]; x++)
            sel[o++] = match[base + at[nd - 1][x]];
        int d = nd - 2;
        while (d >= 0 && ++i[d] == shape[d])
            i[d--] = 0;
        if (d < 0)
            break;
    }
    free(idx);
    free(match);
    return 0;
}

uint64_t mask_signature(struct mask *m, const uint64_t *start, const uint64_t *shape)
{
    uint64_t mstart[ROIFS_MAX_DIM], mshape[ROIFS_MAX_DIM], sig = 0;
    mask_box(m, start, shape, mstart, mshape);
    if (nd_prod(shape, m->ndim))
        zarr_input_signature(m->in, mstart, mshape, &sig);
    return sig;
}

uint64_t mask_mix_sig(uint64_t input_sig, uint64_t label, uint64_t mask_sig)
{
    uint64_t v[3] = {input_sig, label, mask_sig};
    return hash64(HASH64_INIT, v, sizeof v);
}

/* ---- applying selections ---- */

void mask_zero_outside(void *buf, const uint8_t *sel, size_t n, size_t itemsize)
{
    unsigned char *p = buf;
    for (size_t k = 0; k < n; k++)
        if (!sel[k])
            memset(p + k * itemsize, 0, itemsize);
}

void mask_restore(void *buf, const uint64_t *buf_shape, const uint64_t *off, const void *saved,
                  const uint8_t *sel, const uint64_t *sel_shape, const uint64_t *sel_off,
                  const uint64_t *ext, int nd, size_t itemsize)
{
    if (nd_prod(ext, nd) == 0)
        return;
    uint64_t bstride[ROIFS_MAX_DIM], sstride[ROIFS_MAX_DIM], i[ROIFS_MAX_DIM] = {0};
    bstride[nd - 1] = sstride[nd - 1] = 1;
    for (int d = nd - 2; d >= 0; d--) {
        bstride[d] = bstride[d + 1] * buf_shape[d + 1];
        sstride[d] = sstride[d + 1] * sel_shape[d + 1];
    }
    unsigned char *b = buf;
    const unsigned char *s = saved;
    for (;;) {
        uint64_t bo = 0, so = 0;
        for (int d = 0; d < nd; d++) {
            bo += (off[d] + i[d]) * bstride[d];
            so += (sel_off[d] + i[d]) * sstride[d];
        }
        for (uint64_t x = 0; x < ext[nd - 1]; x++, s += itemsize)
            if (!sel[so + x])
                memcpy(b + (bo + x) * itemsize, s, itemsize);
        int d = nd - 2;
        while (d >= 0 && ++i[d] == ext[d])
            i[d--] = 0;
        if (d < 0)
            break;
    }
}
