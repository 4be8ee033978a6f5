/* roi_table.c: ROI tables in micrometers (Fractal's AnnData on Zarr v2, ngio's CSV backend)
 * read into rows and converted to element-index boxes by fractal's or ngio's rule. */
#include "roi.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "zarr/zarr.h"

static const char *const column_names[ROI_TCOLS] = {
    "x_micrometer",     "y_micrometer",     "z_micrometer",
    "len_x_micrometer", "len_y_micrometer", "len_z_micrometer",
};

/* Largest decoded string chunk and X accepted: tables are small, a huge one is a mistake. */
#define TABLE_MAX_BYTES ((size_t)1 << 30)

static bool exists(const char *dir, const char *name)
{
    char *p = path_join(dir, name);
    struct stat st;
    bool r = stat(p, &st) == 0;
    free(p);
    return r;
}

/* .zattrs, or zarr.json's "attributes"; *attrs NULL when there are none. */
static int group_attrs(const char *dir, json_t **attrs, struct errbuf *err)
{
    char *text;
    size_t len;
    *attrs = NULL;
    int r = file_read_optional(dir, ".zattrs", &text, &len, err);
    if (r == 0 && text) {
        *attrs = json_loadb(text, len, 0, NULL);
        free(text);
    } else if (r == 0 && (r = file_read_optional(dir, "zarr.json", &text, &len, err)) == 0 &&
               text) {
        json_t *root = json_loadb(text, len, 0, NULL);
        *attrs = json_incref(json_object_get(root, "attributes"));
        json_decref(root);
        free(text);
    }
    return r;
}

/* Finds each of the six ROI columns among names; cols[c] = index into names. */
static int find_columns(const char *where, char **names, size_t n, size_t *cols, struct errbuf *err)
{
    for (int c = 0; c < ROI_TCOLS; c++) {
        size_t i = 0;
        while (i < n && strcmp(names[i], column_names[c]) != 0)
            i++;
        if (i == n)
            return err_set(err, -EINVAL, "%s: no column \"%s\"", where, column_names[c]);
        cols[c] = i;
    }
    return 0;
}

static void free_strings(char **s, size_t n)
{
    for (size_t i = 0; s && i < n; i++)
        free(s[i]);
    free(s);
}

/* One decoded vlen-utf8 chunk: u32 count, then per item u32 length and the bytes. Items
 * [0, want) go to out. */
static int parse_vlen_chunk(const char *key, const unsigned char *p, size_t len, size_t want,
                            char **out, struct errbuf *err)
{
    uint32_t count, item;
    if (len < 4)
        return err_set(err, -EIO, "%s: vlen-utf8 chunk too short", key);
    memcpy(&count, p, 4);
    size_t off = 4;
    if (count < want)
        return err_set(err, -EIO, "%s: vlen-utf8 chunk holds %u items, expected %zu", key,
                       (unsigned)count, want);
    for (size_t i = 0; i < want; i++) {
        if (len - off < 4)
            return err_set(err, -EIO, "%s: vlen-utf8 chunk truncated", key);
        memcpy(&item, p + off, 4);
        off += 4;
        if (len - off < item)
            return err_set(err, -EIO, "%s: vlen-utf8 chunk truncated", key);
        out[i] = strndup((const char *)p + off, item);
        off += item;
    }
    return 0;
}

/* Reads a 1-D Zarr v2 string array (dtype |O, vlen-utf8 filter) whole. */
static int read_string_array(const char *dir, char ***out, size_t *count, struct errbuf *err)
{
    char *text, *p = path_join(dir, ".zarray");
    size_t len;
    int r = file_read_all(p, &text, &len);
    if (r < 0) {
        if (r == -ENOENT && exists(dir, "zarr.json"))
            err_set(err, -EINVAL, "%s: AnnData tables in Zarr v3 are not supported", dir);
        else
            err_set(err, r == -ENOENT ? -EINVAL : r, "%s: %s", p, file_strerror(r));
        free(p);
        return r == -ENOENT ? -EINVAL : r;
    }
    uint64_t n, chunk;
    struct zarr_codec codec;
    r = zarr_meta_parse_v2_vlen_utf8(text, len, &n, &chunk, &codec, err);
    free(text);
    if (r < 0) {
        err_prefix(err, r, "%s", p);
        free(p);
        return r;
    }
    free(p);
    if (n > 1u << 20)
        return err_set(err, -EINVAL, "%s: too many strings (%llu)", dir, (unsigned long long)n);
    char **s = xcalloc(n ? n : 1, sizeof *s);
    for (uint64_t k = 0; r == 0 && k * chunk < n; k++) {
        char key[32];
        snprintf(key, sizeof key, "%llu", (unsigned long long)k);
        char *kp = path_join(dir, key), *raw;
        size_t rawlen;
        r = file_read_all(kp, &raw, &rawlen);
        if (r < 0) {
            err_set(err, -EINVAL, "%s: %s", kp, file_strerror(r));
            r = -EINVAL;
        } else {
            void *dec = NULL;
            size_t declen;
            uint64_t want = n - k * chunk < chunk ? n - k * chunk : chunk;
            r = zarr_codec_decode_alloc(&codec, raw, rawlen, TABLE_MAX_BYTES, &dec, &declen, err);
            if (r == 0)
                r = parse_vlen_chunk(kp, dec, declen, want, s + k * chunk, err);
            else
                err_prefix(err, r, "%s", kp);
            free(dec);
            free(raw);
            if (r < 0)
                r = -EINVAL;
        }
        free(kp);
    }
    if (r < 0) {
        free_strings(s, n);
        return r;
    }
    *out = s;
    *count = n;
    return 0;
}

static int read_anndata(const char *path, struct roi_table *t, struct errbuf *err)
{
    char *var = path_join(path, "var");
    json_t *vattrs;
    int r = group_attrs(var, &vattrs, err);
    if (r < 0) {
        free(var);
        return r;
    }
    const char *iname = json_string_value(json_object_get(vattrs, "_index"));
    char *idir = path_join(var, iname ? iname : "_index");
    json_decref(vattrs);
    free(var);
    char **names = NULL;
    size_t ncols = 0, cols[ROI_TCOLS];
    r = read_string_array(idir, &names, &ncols, err);
    if (r == 0)
        r = find_columns(idir, names, ncols, cols, err);
    free_strings(names, ncols);
    free(idir);
    if (r < 0)
        return r;
    char *xp = path_join(path, "X");
    struct zarr_input *x = NULL;
    struct errbuf e;
    r = zarr_input_open(xp, 16u << 20, &x, &e);
    if (r < 0) {
        r = err_set(err, r == -ENOENT ? -EINVAL : r, "%s", e.msg);
        goto out;
    }
    const struct zarr_meta *m = zarr_input_meta(x);
    if (m->ndim != 2 || m->dtype.kind != DT_FLOAT || m->dtype.size < 4) {
        r = err_set(err, -EINVAL, "%s: expected a 2-D float32 or float64 array", xp);
        goto out;
    }
    if (m->shape[1] != ncols) {
        r = err_set(err, -EINVAL, "%s: %llu columns, but var names %zu", xp,
                    (unsigned long long)m->shape[1], ncols);
        goto out;
    }
    uint64_t n = m->shape[0];
    if (n == 0 || ncols == 0 || n > TABLE_MAX_BYTES / 8 / ncols) {
        r = err_set(err, -EINVAL, "%s: %s", xp, n ? "too large" : "the table has no rows");
        goto out;
    }
    size_t cells = (size_t)n * ncols;
    void *raw = xmalloc(cells * m->dtype.size);
    double *all = xmalloc(cells * sizeof *all);
    uint64_t start[2] = {0, 0};
    r = zarr_input_read(x, start, m->shape, raw, &e);
    if (r < 0) {
        r = err_set(err, -EINVAL, "%s", e.msg);
    } else {
        dtype_to_double(&m->dtype, raw, all, cells);
        t->n = (size_t)n;
        t->single = m->dtype.size == 4;
        t->v = xmalloc(t->n * ROI_TCOLS * sizeof *t->v);
        for (size_t i = 0; i < t->n; i++)
            for (int c = 0; c < ROI_TCOLS; c++)
                t->v[i * ROI_TCOLS + c] = all[i * ncols + cols[c]];
    }
    free(raw);
    free(all);
out:
    if (x)
        zarr_input_close(x);
    free(xp);
    return r;
}

/* Splits one CSV line (no newline) into fields in place; simple double quotes handled. */
static size_t csv_split(char *line, char **fields, size_t max)
{
    size_t n = 0;
    char *p = line;
    for (;;) {
        char *w = p, *f = p;
        bool quoted = *p == '"';
        if (quoted)
            p++;
        while (*p && (quoted || *p != ',')) {
            if (quoted && *p == '"') {
                if (p[1] == '"') {
                    *w++ = '"';
                    p += 2;
                    continue;
                }
                quoted = false;
                p++;
                continue;
            }
            *w++ = *p++;
        }
        bool more = *p == ',';
        *w = '\0';
        if (n < max)
            fields[n] = f;
        n++;
        if (!more)
            return n;
        p++;
    }
}

static int read_csv(const char *path, struct roi_table *t, struct errbuf *err)
{
    char *p = path_join(path, "table.csv"), *text;
    size_t len;
    int r = file_read_all(p, &text, &len);
    if (r < 0) {
        err_set(err, -EINVAL, "%s: %s", p, file_strerror(r));
        free(p);
        return -EINVAL;
    }
    enum { MAXF = 4096 };
    char **fields = xmalloc(MAXF * sizeof *fields);
    size_t cols[ROI_TCOLS], nhead = 0, cap = 0;
    int line = 0;
    for (char *l = text, *next; l && *l && r == 0; l = next) {
        line++;
        next = strchr(l, '\n');
        if (next)
            *next++ = '\0';
        size_t ll = strlen(l);
        if (ll && l[ll - 1] == '\r')
            l[--ll] = '\0';
        if (!ll)
            continue;
        size_t nf = csv_split(l, fields, MAXF);
        if (nf > MAXF) {
            r = err_at(err, -EINVAL, p, line, "too many columns");
        } else if (!nhead) {
            nhead = nf;
            r = find_columns(p, fields, nf, cols, err);
        } else if (nf != nhead) {
            r = err_at(err, -EINVAL, p, line, "%zu fields, the header has %zu", nf, nhead);
        } else {
            if (t->n == cap)
                t->v = xrealloc(t->v, (cap = cap ? 2 * cap : 64) * ROI_TCOLS * sizeof *t->v);
            for (int c = 0; c < ROI_TCOLS && r == 0; c++)
                if (parse_double(fields[cols[c]], &t->v[t->n * ROI_TCOLS + c]) < 0)
                    r = err_at(err, -EINVAL, p, line, "%s: not a number: '%s'", column_names[c],
                               fields[cols[c]]);
            t->n++;
        }
    }
    if (r == 0 && !t->n)
        r = err_set(err, -EINVAL, "%s: the table has no rows", p);
    free(fields);
    free(text);
    free(p);
    return r;
}

int roi_table_read(const char *path, struct roi_table *t, struct errbuf *err)
{
    memset(t, 0, sizeof *t);
    struct stat st;
    if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode))
        return err_set(err, -EINVAL, "%s: %s", path,
                       errno == ENOENT ? "no such table" : "not a table group (a directory)");
    json_t *attrs;
    int r = group_attrs(path, &attrs, err);
    if (r < 0)
        return r;
    const char *backend = json_string_value(json_object_get(attrs, "backend"));
    bool csv =
        backend ? strcmp(backend, "csv") == 0 : !exists(path, "X") && exists(path, "table.csv");
    if (backend && !csv && strncmp(backend, "anndata", 7) != 0)
        r = err_set(err, -EINVAL, "%s: table backend \"%s\" is not supported (anndata or csv)",
                    path, backend);
    else
        r = csv ? read_csv(path, t, err) : read_anndata(path, t, err);
    json_decref(attrs);
    if (r < 0)
        roi_table_free(t);
    return r;
}

void roi_table_free(struct roi_table *t)
{
    free(t->v);
    memset(t, 0, sizeof *t);
}

/* ---- micrometers to indices ---- */

static double snap(double v)
{
    double r = nearbyint(v);
    return fabs(r - v) < 0.01 ? r : v;
}

/* [*start, *stop) of one axis before clipping; -1 when fractal's rule gives a negative index. */
static int axis_range(const struct roi_table *t, enum roi_rounding rounding, double pos, double len,
                      double size, double *start, double *stop)
{
    if (rounding == ROI_ROUND_NGIO) {
        double s = snap(pos / size);
        double e = s + snap(len / size);
        *start = floor(s);
        *stop = ceil(e);
        return 0;
    }
    if (t->single) { /* NumPy 2: float32 scalar op Python float stays float32 */
        float px = (float)size, x = (float)pos, l = (float)len;
        float s = x / px, e = (x + l) / px;
        *start = nearbyintf(s);
        *stop = nearbyintf(e);
    } else {
        *start = nearbyint(pos / size);
        *stop = nearbyint((pos + len) / size);
    }
    return *start < 0 || *stop < 0 ? -1 : 0;
}

int roi_table_to_set(const char *name, const struct roi_table *t, const struct roi_pixels *px,
                     enum roi_rounding rounding, int ndim, const uint64_t *shape,
                     struct roi_set *out, struct errbuf *err)
{
    static const char *const axis_names[3] = {"z", "y", "x"};
    static const int pos_col[3] = {ROI_TZ, ROI_TY, ROI_TX},
                     len_col[3] = {ROI_TLZ, ROI_TLY, ROI_TLX};
    memset(out, 0, sizeof *out);
    out->ndim = ndim;
    out->start = xmalloc((t->n ? t->n : 1) * (size_t)ndim * sizeof *out->start);
    out->stop = xmalloc((t->n ? t->n : 1) * (size_t)ndim * sizeof *out->stop);
    size_t dropped = 0;
    for (size_t i = 0; i < t->n; i++) {
        uint64_t *s = out->start + out->n * ndim, *e = out->stop + out->n * ndim;
        for (int d = 0; d < ndim; d++) {
            s[d] = 0;
            e[d] = shape[d];
        }
        bool empty = false;
        for (int a = 0; a < 3; a++) {
            int d = px->axis[a];
            if (d < 0 || d >= ndim)
                continue;
            double pos = t->v[i * ROI_TCOLS + pos_col[a]], len = t->v[i * ROI_TCOLS + len_col[a]];
            if (!isfinite(pos) || !isfinite(len)) {
                roi_set_free(out);
                return err_set(err, -EINVAL, "%s: row %zu: %s is not a finite number", name, i,
                               column_names[len_col[a]]);
            }
            double lo, hi;
            if (axis_range(t, rounding, pos, len, px->size[a], &lo, &hi) < 0) {
                roi_set_free(out);
                return err_set(err, -EINVAL,
                               "%s: row %zu: negative %s index (%s = %g, %s = %g, pixel %g)", name,
                               i, axis_names[a], column_names[pos_col[a]], pos,
                               column_names[len_col[a]], len, px->size[a]);
            }
            /* numpy slicing: clamp both ends to [0, dim] */
            double dim = (double)shape[d];
            lo = lo < 0 ? 0 : lo > dim ? dim : lo;
            hi = hi < 0 ? 0 : hi > dim ? dim : hi;
            if (hi <= lo)
                empty = true;
            s[d] = (uint64_t)lo;
            e[d] = (uint64_t)hi;
        }
        if (empty) {
            if (dropped++ < 10)
                log_warn("%s: row %zu selects no element of the image; ignored", name, i);
            continue;
        }
        out->n++;
    }
    if (dropped > 10)
        log_warn("%s: %zu rows select no element of the image; ignored", name, dropped);
    if (!out->n) {
        roi_set_free(out);
        return err_set(err, -EINVAL, "%s: no row selects any element of the image", name);
    }
    return 0;
}
