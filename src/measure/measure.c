/* measure.c: [measure] of one image (see measure.h). */
#include "measure.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../channel.h"
#include "../ome.h"

struct measure {
    const struct task *t;
    int nd;            /* the label image's dimensions */
    int cax;           /* the input's c axis, -1: the input is one channel */
    uint64_t nc;       /* the input's channels (1 without a c axis) */
    int nch;           /* channels measured */
    uint64_t *chan;    /* their indices along c */
    unsigned features; /* MEASURE_* */
    char **cols;       /* column names */
    size_t ncols;
    struct dtype in_dtype; /* the input's */
};

/* ---- channels ---- */

/* omero.channels of the image group (0.4: attributes.omero; 0.5: attributes.ome.omero), a new
 * reference or NULL. */
static json_t *omero_channels(const struct task *t)
{
    json_t *attrs = NULL, *ms = NULL, *out = NULL;
    struct errbuf e = {{0}};
    if (!t->ome.group_path || ome_group_attrs(t->ome.group_path, &attrs, &ms, &e) < 0)
        return NULL;
    json_t *omero = json_object_get(attrs, "omero");
    if (!omero)
        omero = json_object_get(json_object_get(attrs, "ome"), "omero");
    out = json_object_get(omero, "channels");
    if (json_is_array(out))
        json_incref(out);
    else
        out = NULL;
    json_decref(attrs);
    return out;
}

/* A channel's column prefix: its omero label, else its wavelength_id, else its index. */
static char *channel_name(json_t *chans, uint64_t i)
{
    json_t *c = json_array_get(chans, (size_t)i);
    const char *s = json_string_value(json_object_get(c, "label"));
    if (!s || !*s)
        s = json_string_value(json_object_get(c, "wavelength_id"));
    return s && *s ? xstrdup(s) : xasprintf("%" PRIu64, i);
}

/* Channel token w: an index, or a name matched against labels, then wavelength_ids. */
static int channel_find(json_t *chans, uint64_t nc, const char *w, uint64_t *idx)
{
    uint64_t v;
    if (parse_u64(w, &v) == 0)
        return v < nc ? (*idx = v, 0) : -ERANGE;
    const char *keys[2] = {"label", "wavelength_id"};
    for (int k = 0; k < 2; k++)
        for (uint64_t i = 0; i < nc; i++) {
            const char *s =
                json_string_value(json_object_get(json_array_get(chans, (size_t)i), keys[k]));
            if (s && strcmp(s, w) == 0)
                return *idx = i, 0;
        }
    return -ENOENT;
}

static int resolve_channels(struct measure *m, json_t *chans, struct errbuf *err)
{
    const struct config *c = &m->t->cfg;
    const char *v = c->measure_intensity;
    if (!v || strcmp(v, "all") == 0) {
        m->nch = (int)m->nc;
        m->chan = xmalloc(m->nc * sizeof *m->chan);
        for (uint64_t i = 0; i < m->nc; i++)
            m->chan[i] = i;
        return 0;
    }
    m->chan = xmalloc((strlen(v) + 1) * sizeof *m->chan);
    char *copy = xstrdup(v), *save = NULL;
    int r = 0;
    for (char *w = strtok_r(copy, ", ", &save); w && r == 0; w = strtok_r(NULL, ", ", &save)) {
        uint64_t idx;
        if ((r = channel_find(chans, m->nc, w, &idx)) < 0)
            r = config_error(c, err, "measure", "intensity",
                             "[measure] intensity: no channel '%s' (the input has %" PRIu64
                             " channels; indices from 0, or omero labels or wavelength_ids)",
                             w, m->nc);
        else
            m->chan[m->nch++] = idx;
    }
    free(copy);
    if (r == 0 && m->nch == 0)
        r = config_error(c, err, "measure", "intensity", "[measure] intensity: no channel");
    return r;
}

/* ---- columns ---- */

static void add_col(struct measure *m, char *name)
{
    m->cols = xrealloc(m->cols, (m->ncols + 1) * sizeof *m->cols);
    m->cols[m->ncols++] = name;
}

static void make_columns(struct measure *m, json_t *chans)
{
    json_t *axes = m->t->ome.axes_json ? json_loads(m->t->ome.axes_json, 0, NULL) : NULL;
    json_t *names = axes ? ome_axes_names(axes) : NULL;
    char *dim[ROIFS_MAX_DIM];
    for (int d = 0; d < m->nd; d++) {
        const char *s = json_array_size(names) == (size_t)m->nd
                            ? json_string_value(json_array_get(names, (size_t)d))
                            : NULL;
        dim[d] = s ? xstrdup(s) : xasprintf("%d", d);
    }
    json_decref(names);
    json_decref(axes);
    if (m->features & MEASURE_AREA)
        add_col(m, xstrdup("area"));
    if (m->features & MEASURE_CENTROID)
        for (int d = 0; d < m->nd; d++)
            add_col(m, xasprintf("centroid-%s", dim[d]));
    if (m->features & MEASURE_BBOX) {
        for (int d = 0; d < m->nd; d++)
            add_col(m, xasprintf("bbox-%s-start", dim[d]));
        for (int d = 0; d < m->nd; d++)
            add_col(m, xasprintf("bbox-%s-stop", dim[d]));
    }
    if (m->features & MEASURE_INTENSITY) {
        static const char *const stat[] = {"sum", "mean", "min", "max", "std"};
        for (int c = 0; c < m->nch; c++) {
            char *cn = chans || m->cax >= 0 ? channel_name(chans, m->chan[c]) : xstrdup("0");
            for (int s = 0; s < 5; s++)
                add_col(m, xasprintf("%s-%s", cn, stat[s]));
            free(cn);
        }
    }
    for (int d = 0; d < m->nd; d++)
        free(dim[d]);
}

int measure_new(const struct task *t, struct measure **out, struct errbuf *err)
{
    struct measure *m = xcalloc(1, sizeof *m);
    m->t = t;
    m->nd = t->out.ndim;
    m->features = t->cfg.measure_features;
    const struct zarr_meta *in = zarr_input_meta(t->reader);
    m->in_dtype = in->dtype;
    m->cax = t->channel ? channel_axis(t->channel) : -1;
    m->nc = m->cax >= 0 ? in->shape[m->cax] : 1;
    int r = 0;
    for (int d = 0, k = 0; d < in->ndim && r == 0; d++) {
        if (d == m->cax)
            continue;
        if (k >= m->nd || in->shape[d] != t->out.shape[k++])
            r = config_error(&t->cfg, err, "measure", "intensity",
                             "[measure]: the input's shape is not the label image's (with the "
                             "c axis, if any, set by [input] channel)");
    }
    json_t *chans = m->cax >= 0 ? omero_channels(t) : NULL;
    if (r == 0)
        r = resolve_channels(m, chans, err);
    if (r == 0)
        make_columns(m, chans);
    json_decref(chans);
    if (r < 0) {
        measure_free(m);
        return r;
    }
    *out = m;
    return 0;
}

void measure_free(struct measure *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->ncols; i++)
        free(m->cols[i]);
    free(m->cols);
    free(m->chan);
    free(m);
}

void measure_stats_init(const struct measure *m, struct mstats *s)
{
    mstats_init(s, m->nd, (m->features & MEASURE_INTENSITY) ? m->nch : 0);
}

/* ---- pieces ---- */

/* The input's box of the label box [c0, c0 + ext): every channel. */
static int input_box(const struct measure *m, const uint64_t *c0, const uint64_t *ext,
                     uint64_t *start, uint64_t *shape)
{
    int in_nd = 0;
    for (int d = 0; d <= m->nd; d++) {
        if (in_nd == m->cax) {
            start[in_nd] = 0;
            shape[in_nd++] = m->nc;
        }
        if (d < m->nd) {
            start[in_nd] = c0[d];
            shape[in_nd++] = ext[d];
        }
    }
    return in_nd;
}

/* A piece's intensities as read: every channel of its box, in the input's dtype. */
struct raw {
    const struct measure *m;
    const unsigned char *buf;
    uint64_t inner; /* elements of the piece after the c axis (all of them without one) */
};

static void load_raw(void *ctx, int c, uint64_t e0, size_t n, double *dst)
{
    const struct raw *r = ctx;
    const struct measure *m = r->m;
    size_t es = m->in_dtype.size;
    while (n) { /* runs of elements contiguous in the input's box */
        uint64_t o = e0 / r->inner, i = e0 % r->inner;
        size_t run = r->inner - i < n ? (size_t)(r->inner - i) : n;
        dtype_to_double(&m->in_dtype, r->buf + ((o * m->nc + m->chan[c]) * r->inner + i) * es, dst,
                        run);
        dst += run;
        e0 += run;
        n -= run;
    }
}

int measure_piece(struct measure *m, const uint64_t *c0, const uint64_t *ext, const void *labels,
                  struct mstats *s, struct errbuf *err)
{
    uint64_t n = 1, inner = 1;
    for (int d = 0; d < m->nd; d++) {
        n *= ext[d];
        if (d >= m->cax)
            inner *= ext[d];
    }
    void *buf = NULL;
    if (s->nch) {
        uint64_t start[ROIFS_MAX_DIM], shape[ROIFS_MAX_DIM];
        input_box(m, c0, ext, start, shape);
        buf = xmalloc(n * m->nc * m->in_dtype.size + 1);
        int r = zarr_input_read(m->t->reader, start, shape, buf, err);
        if (r < 0) {
            free(buf);
            return r;
        }
    }
    struct raw raw = {m, buf, inner};
    mstats_piece(s, &m->t->out.dtype, labels, c0, ext, load_raw, &raw);
    free(buf);
    return 0;
}

static void add_setup(const struct measure *m, struct keyhash *h)
{
    key_add_str(h, "measure 1");
    key_add_u64(h, m->features);
    for (int c = 0; c < m->nch; c++)
        key_add_u64(h, m->chan[c]);
    for (size_t i = 0; i < m->ncols; i++)
        key_add_str(h, m->cols[i]);
}

struct key128 measure_piece_key(struct measure *m, struct key128 chunk, const uint64_t *c0,
                                const uint64_t *ext, struct zarr_sigmemo *memo)
{
    struct keyhash h;
    key_init(&h, "roifs-measure-piece 1");
    key_add_key(&h, chunk);
    add_setup(m, &h);
    uint64_t start[ROIFS_MAX_DIM], shape[ROIFS_MAX_DIM], sig = 0;
    input_box(m, c0, ext, start, shape);
    if (m->features & MEASURE_INTENSITY)
        zarr_input_signature_memo(m->t->reader, start, shape, memo, &sig);
    key_add_u64(&h, sig);
    return key_final(&h);
}

void measure_identity(struct measure *m, struct keyhash *h)
{
    add_setup(m, h);
    const struct zarr_meta *in = zarr_input_meta(m->t->reader);
    uint64_t start[ROIFS_MAX_DIM] = {0}, sig = 0;
    if (m->features & MEASURE_INTENSITY)
        zarr_input_signature(m->t->reader, start, in->shape, &sig);
    key_add_u64(h, sig);
}

const struct task *measure_task(const struct measure *m)
{
    return m->t;
}

int measure_nchannels(const struct measure *m)
{
    return m->nch;
}

const struct dtype *measure_input_dtype(const struct measure *m)
{
    return &m->in_dtype;
}

int measure_intensity_crop(const struct measure *m, const uint64_t *c0, const uint64_t *ext,
                           void *dst, struct errbuf *err)
{
    uint64_t start[ROIFS_MAX_DIM], shape[ROIFS_MAX_DIM], n = 1, outer = 1;
    input_box(m, c0, ext, start, shape);
    for (int d = 0; d < m->nd; d++) {
        n *= ext[d];
        if (d < m->cax)
            outer *= ext[d];
    }
    size_t es = m->in_dtype.size;
    unsigned char *buf = xmalloc(n * m->nc * es + 1);
    int r = zarr_input_read(m->t->reader, start, shape, buf, err);
    if (r == 0) { /* (outer, c, inner) to (channels measured, outer, inner) */
        uint64_t inner = n / (outer ? outer : 1);
        for (int c = 0; c < m->nch; c++)
            for (uint64_t o = 0; o < outer; o++)
                memcpy((unsigned char *)dst + ((uint64_t)c * n + o * inner) * es,
                       buf + ((o * m->nc + m->chan[c]) * inner) * es, inner * es);
    }
    free(buf);
    return r;
}

size_t measure_ncols(const struct measure *m)
{
    return m->ncols;
}

const char *const *measure_colnames(const struct measure *m)
{
    return (const char *const *)m->cols;
}

void measure_row(const struct measure *m, const struct mobj *o, double *row)
{
    size_t k = 0;
    double n = (double)o->n;
    if (m->features & MEASURE_AREA)
        row[k++] = n;
    if (m->features & MEASURE_CENTROID)
        for (int d = 0; d < m->nd; d++)
            row[k++] = (double)o->csum[d] / n;
    if (m->features & MEASURE_BBOX) {
        for (int d = 0; d < m->nd; d++)
            row[k++] = (double)o->lo[d];
        for (int d = 0; d < m->nd; d++)
            row[k++] = (double)o->hi[d] + 1;
    }
    if (m->features & MEASURE_INTENSITY)
        for (int c = 0; c < m->nch; c++) {
            const struct mchan *ch = mstats_chan((struct mobj *)o, c);
            row[k++] = ch->sum;
            row[k++] = ch->mean;
            row[k++] = ch->min;
            row[k++] = ch->max;
            row[k++] = sqrt(ch->m2 / n);
        }
}

/* ---- the table ---- */

static int by_id(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

size_t measure_rows(const struct measure *m, const struct mstats *s, uint64_t **ids, double **vals)
{
    size_t n = s->n;
    *ids = xmalloc((n ? n : 1) * sizeof **ids);
    memcpy(*ids, s->ids, n * sizeof **ids);
    qsort(*ids, n, sizeof **ids, by_id);
    *vals = xmalloc((n ? n : 1) * (m->ncols ? m->ncols : 1) * sizeof **vals);
    for (size_t i = 0; i < n; i++)
        measure_row(m, mstats_get(s, (*ids)[i]), *vals + i * m->ncols);
    return n;
}

int measure_encode(const struct measure *m, const struct table_spec *spec, const struct mstats *s,
                   struct table_files *out, struct errbuf *err)
{
    uint64_t *ids;
    double *vals;
    size_t n = measure_rows(m, s, &ids, &vals);
    int r = table_encode_features(spec, ids, n, measure_colnames(m), m->ncols, vals, out, err);
    free(vals);
    free(ids);
    return r;
}

int measure_encode_extra(const struct measure *m, const struct table_spec *spec,
                         const struct mstats *s, size_t nx, const char *const *xnames,
                         const uint64_t *xids, const double *xvals, struct table_files *out,
                         struct errbuf *err)
{
    uint64_t *ids;
    double *vals;
    size_t n = measure_rows(m, s, &ids, &vals), nc = m->ncols + nx;
    for (size_t i = 0; i < n; i++)
        if (xids[i] != ids[i]) {
            free(vals);
            free(ids);
            return err_set(err, -EIO, "the Python features are not of the objects measured");
        }
    double *all = xmalloc((n ? n : 1) * (nc ? nc : 1) * sizeof *all);
    const char **names = xmalloc((nc ? nc : 1) * sizeof *names);
    for (size_t j = 0; j < m->ncols; j++)
        names[j] = m->cols[j];
    for (size_t j = 0; j < nx; j++)
        names[m->ncols + j] = xnames[j];
    for (size_t i = 0; i < n; i++) {
        memcpy(all + i * nc, vals + i * m->ncols, m->ncols * sizeof *all);
        memcpy(all + i * nc + m->ncols, xvals + i * nx, nx * sizeof *all);
    }
    int r = table_encode_features(spec, ids, n, names, nc, all, out, err);
    free(names);
    free(all);
    free(vals);
    free(ids);
    return r;
}

/* ---- the record of the partials ---- */

#define RECORD_MAGIC "roifs-measure-partials 1\n"

int measure_record_write(const struct mstats *s, int dirfd, const char *name)
{
    struct strbuf sb = {0};
    sb_append(&sb, RECORD_MAGIC, strlen(RECORD_MAGIC));
    uint64_t head[3] = {(uint64_t)s->ndim, (uint64_t)s->nch, (uint64_t)s->n};
    sb_append(&sb, (const char *)head, sizeof head);
    for (size_t i = 0; i < s->n; i++) {
        sb_append(&sb, (const char *)&s->ids[i], sizeof s->ids[i]);
        sb_append(&sb, (const char *)mstats_obj(s, i), s->rec);
    }
    uint64_t sum = hash64(HASH64_INIT, sb.buf, sb.len);
    sb_append(&sb, (const char *)&sum, sizeof sum);
    int r = file_write_atomic(dirfd, name, sb.buf, sb.len, false);
    free(sb.buf);
    return r < 0 ? r : 0;
}

int measure_record_read(struct mstats *s, const char *path)
{
    char *data = NULL;
    size_t len = 0, magic = strlen(RECORD_MAGIC);
    uint64_t head[3], sum;
    int r = file_read_all(path, &data, &len);
    if (r < 0)
        return r;
    r = -EIO;
    if (len >= magic + sizeof head + sizeof sum && memcmp(data, RECORD_MAGIC, magic) == 0) {
        memcpy(head, data + magic, sizeof head);
        memcpy(&sum, data + len - sizeof sum, sizeof sum);
        size_t each = sizeof(uint64_t) + s->rec;
        if (head[0] == (uint64_t)s->ndim && head[1] == (uint64_t)s->nch &&
            head[2] <= (len - magic - sizeof head - sizeof sum) / each &&
            len == magic + sizeof head + head[2] * each + sizeof sum &&
            hash64(HASH64_INIT, data, len - sizeof sum) == sum) {
            const char *p = data + magic + sizeof head;
            r = 0;
            for (uint64_t i = 0; i < head[2] && r == 0; i++, p += each) {
                uint64_t id;
                bool added;
                memcpy(&id, p, sizeof id);
                struct mobj *o = mstats_put(s, id, &added);
                if (added)
                    memcpy(o, p + sizeof id, s->rec);
                else
                    r = -EIO; /* an id twice: damaged */
            }
        }
    }
    free(data);
    return r;
}
