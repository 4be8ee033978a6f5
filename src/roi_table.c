/* roi_table.c: ROI tables in micrometers (AnnData on Zarr v2 as Fractal writes it, or v3 as
 * anndata with zarr-python 3 does; ngio's CSV backend)
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
    bool r = zarr_store_node_exists(p);
    free(p);
    return r;
}

/* .zattrs, or zarr.json's "attributes"; *attrs NULL when there are none. */
static int group_attrs(const char *dir, json_t **attrs, struct errbuf *err)
{
    char *text;
    size_t len;
    *attrs = NULL;
    int r = zarr_store_read_optional(dir, ".zattrs", &text, &len, err);
    if (r == 0 && text) {
        *attrs = json_loadb(text, len, 0, NULL);
        free(text);
    } else if (r == 0 && (r = zarr_store_read_optional(dir, "zarr.json", &text, &len, err)) == 0 &&
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

/* Where a string array's chunks are and how they are encoded. */
struct string_array {
    uint64_t n, chunk;
    bool v3;
    struct zarr_codec codec; /* v2 */
    struct zarr_meta m;      /* v3: chunk keys and the bytes-to-bytes codecs */
};

/* The metadata of the 1-D string array at dir: a v2 .zarray (dtype |O, vlen-utf8 filter) or a
 * v3 zarr.json (data_type "string", codecs vlen-utf8 and compressors). */
static int string_array_meta(const char *dir, struct string_array *sa, struct errbuf *err)
{
    memset(sa, 0, sizeof *sa);
    sa->v3 = !exists(dir, ".zarray") && exists(dir, "zarr.json");
    char *text, *p = path_join(dir, sa->v3 ? "zarr.json" : ".zarray");
    size_t len;
    int r = zarr_store_read(p, &text, &len, NULL);
    if (r < 0) {
        err_set(err, r == -ENOENT ? -EINVAL : r, "%s: %s", p, file_strerror(r));
        free(p);
        return r == -ENOENT ? -EINVAL : r;
    }
    if (sa->v3) {
        r = zarr_meta_parse_v3_vlen_utf8(text, len, &sa->m, err);
        sa->n = sa->m.shape[0];
        sa->chunk = sa->m.chunks[0];
    } else {
        r = zarr_meta_parse_v2_vlen_utf8(text, len, &sa->n, &sa->chunk, &sa->codec, err);
    }
    free(text);
    if (r < 0)
        err_prefix(err, r, "%s", p);
    free(p);
    return r;
}

/* Chunk k of a string array, decoded (u32 count, then per item u32 length and the bytes);
 * *dec NULL when a v3 chunk file is absent (every item is the fill value, ""). */
static int string_chunk(const char *dir, const struct string_array *sa, uint64_t k, void **dec,
                        size_t *declen, struct errbuf *err)
{
    char key[48];
    if (sa->v3)
        zarr_meta_chunk_key(&sa->m, &k, key, sizeof key);
    else
        snprintf(key, sizeof key, "%llu", (unsigned long long)k);
    char *kp = path_join(dir, key), *raw;
    size_t rawlen;
    *dec = NULL;
    int r = zarr_store_read(kp, &raw, &rawlen, NULL);
    if (r == -ENOENT && sa->v3) {
        r = 0; /* zarr-python 3 writes no chunk that holds only the fill value */
    } else if (r < 0) {
        r = err_set(err, -EINVAL, "%s: %s", kp, file_strerror(r));
    } else {
        r = sa->v3 ? zarr_chain_decode_bytes(&sa->m.codecs, raw, rawlen, TABLE_MAX_BYTES, dec,
                                             declen, err)
                   : zarr_codec_decode_alloc(&sa->codec, raw, rawlen, TABLE_MAX_BYTES, dec, declen,
                                             err);
        if (r < 0)
            r = err_prefix(err, -EINVAL, "%s", kp);
        free(raw);
    }
    free(kp);
    return r;
}

/* Reads a 1-D string array (Zarr v2 or v3, as AnnData writes its indexes) whole. */
static int read_string_array(const char *dir, char ***out, size_t *count, struct errbuf *err)
{
    struct string_array sa;
    int r = string_array_meta(dir, &sa, err);
    if (r < 0)
        return r;
    uint64_t n = sa.n, chunk = sa.chunk;
    if (n > 1u << 20)
        return err_set(err, -EINVAL, "%s: too many strings (%llu)", dir, (unsigned long long)n);
    char **s = xcalloc(n ? n : 1, sizeof *s);
    for (uint64_t k = 0; r == 0 && k * chunk < n; k++) {
        void *dec;
        size_t declen;
        uint64_t want = n - k * chunk < chunk ? n - k * chunk : chunk;
        r = string_chunk(dir, &sa, k, &dec, &declen, err);
        if (r == 0 && dec) {
            char key[32];
            snprintf(key, sizeof key, "chunk %llu", (unsigned long long)k);
            char *where = path_join(dir, key);
            r = parse_vlen_chunk(where, dec, declen, want, s + k * chunk, err) < 0 ? -EINVAL : 0;
            free(where);
        }
        for (uint64_t i = 0; r == 0 && !dec && i < want; i++)
            s[k * chunk + i] = xstrdup("");
        free(dec);
    }
    if (r < 0) {
        free_strings(s, n);
        return r;
    }
    *out = s;
    *count = n;
    return 0;
}

/* ---- masking tables: each row's label ---- */

/* Which column holds a masking table's labels (NULL key: not a masking table). */
struct label_source {
    const char *key;       /* instance_key, "label" by default */
    const char *index_key; /* index_key, or NULL */
};

/* A label as a table cell holds it: an integer, or a float of integral value ("7.0", as
 * AnnData's float X gives it). */
static int label_from_double(const char *where, size_t row, double v, uint64_t *out,
                             struct errbuf *err)
{
    if (!(v >= 1 && v < 18446744073709551616.0) || v != floor(v))
        return err_set(err, -EINVAL, "%s: row %zu: label %g is not a positive integer", where, row,
                       v);
    *out = (uint64_t)v;
    return 0;
}

static int label_from_text(const char *where, size_t row, const char *text, uint64_t *out,
                           struct errbuf *err)
{
    double v;
    if (parse_u64(text, out) == 0 && *out > 0)
        return 0;
    if (parse_double(text, &v) == 0)
        return label_from_double(where, row, v, out, err);
    return err_set(err, -EINVAL, "%s: row %zu: label '%s' is not a positive integer", where, row,
                   text);
}

/* The labels from a numeric 1-D array (an obs column). */
static int labels_from_array(const char *dir, size_t n, uint64_t *label, struct errbuf *err)
{
    struct zarr_input *a = NULL;
    struct errbuf e;
    int r = zarr_input_open(dir, 16u << 20, &a, &e);
    if (r < 0)
        return err_set(err, -EINVAL, "%s", e.msg);
    const struct zarr_meta *m = zarr_input_meta(a);
    if (m->ndim != 1 || m->shape[0] != n || m->dtype.kind == DT_BOOL) {
        zarr_input_close(a);
        return err_set(err, -EINVAL, "%s: expected %zu numbers, one per row", dir, n);
    }
    void *raw = xmalloc(n * m->dtype.size);
    double *v = xmalloc(n * sizeof *v);
    uint64_t start = 0;
    r = zarr_input_read(a, &start, m->shape, raw, &e);
    if (r < 0)
        r = err_set(err, -EINVAL, "%s", e.msg);
    else
        dtype_to_double(&m->dtype, raw, v, n);
    for (size_t i = 0; r == 0 && i < n; i++)
        r = label_from_double(dir, i, v[i], &label[i], err);
    free(raw);
    free(v);
    zarr_input_close(a);
    return r;
}

static int labels_from_strings(const char *dir, size_t n, uint64_t *label, struct errbuf *err)
{
    char **s = NULL;
    size_t count = 0;
    int r = read_string_array(dir, &s, &count, err);
    if (r == 0 && count != n)
        r = err_set(err, -EINVAL, "%s: %zu strings for %zu rows", dir, count, n);
    for (size_t i = 0; r == 0 && i < n; i++)
        r = label_from_text(dir, i, s[i], &label[i], err);
    free_strings(s, count);
    return r;
}

/* True when the 1-D array at dir holds strings (AnnData's string columns and indexes): a v2
 * dtype "|O" or a v3 data_type "string". */
static bool is_string_array(const char *dir)
{
    char *text;
    size_t len;
    struct errbuf e;
    bool v3 = !exists(dir, ".zarray");
    if (zarr_store_read_optional(dir, v3 ? "zarr.json" : ".zarray", &text, &len, &e) < 0 || !text)
        return false;
    bool r = false;
    if (v3) {
        json_t *root = json_loadb(text, len, 0, NULL);
        const char *dt = json_string_value(json_object_get(root, "data_type"));
        r = dt && strcmp(dt, "string") == 0;
        json_decref(root);
    } else {
        r = strstr(text, "\"|O\"") != NULL;
    }
    free(text);
    return r;
}

/* An AnnData table's labels when they are not a column of X: the obs column named by the key,
 * or the obs index (strings) when it is that column or the table's index_key. */
static int anndata_obs_labels(const char *path, const struct label_source *ls, size_t n,
                              uint64_t *label, struct errbuf *err)
{
    char *obs = path_join(path, "obs");
    json_t *oattrs;
    int r = group_attrs(obs, &oattrs, err);
    if (r < 0) {
        free(obs);
        return r;
    }
    const char *iname = json_string_value(json_object_get(oattrs, "_index"));
    if (!iname)
        iname = "_index";
    char *col = path_join(obs, ls->key);
    bool is_index = strcmp(iname, ls->key) == 0;
    if (is_index || exists(obs, ls->key)) {
        r = is_index || is_string_array(col) ? labels_from_strings(col, n, label, err)
                                             : labels_from_array(col, n, label, err);
    } else if (ls->index_key && strcmp(ls->index_key, ls->key) == 0) {
        char *idx = path_join(obs, iname);
        r = labels_from_strings(idx, n, label, err);
        free(idx);
    } else {
        r = err_set(err, -EINVAL,
                    "%s: a masking table without a \"%s\" column (its instance_key) in X or obs",
                    path, ls->key);
    }
    free(col);
    json_decref(oattrs);
    free(obs);
    return r;
}

static int read_anndata(const char *path, const struct label_source *ls, struct roi_table *t,
                        struct errbuf *err)
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
    size_t ncols = 0, cols[ROI_TCOLS], lcol = SIZE_MAX;
    r = read_string_array(idir, &names, &ncols, err);
    if (r == 0)
        r = find_columns(idir, names, ncols, cols, err);
    for (size_t i = 0; r == 0 && ls->key && i < ncols; i++)
        if (strcmp(names[i], ls->key) == 0)
            lcol = i; /* the labels are a column of X (fractal-tasks-core writes them so) */
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
        if (ls->key)
            t->label = xcalloc(t->n, sizeof *t->label);
        for (size_t i = 0; lcol != SIZE_MAX && r == 0 && i < t->n; i++)
            r = label_from_double(xp, i, all[i * ncols + lcol], &t->label[i], err);
        if (r == 0 && ls->key && lcol == SIZE_MAX)
            r = anndata_obs_labels(path, ls, t->n, t->label, err);
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

static int read_csv(const char *path, const struct label_source *ls, struct roi_table *t,
                    struct errbuf *err)
{
    char *p = path_join(path, "table.csv"), *text;
    size_t len;
    int r = zarr_store_read(p, &text, &len, NULL);
    if (r < 0) {
        err_set(err, -EINVAL, "%s: %s", p, file_strerror(r));
        free(p);
        return -EINVAL;
    }
    enum { MAXF = 4096 };
    char **fields = xmalloc(MAXF * sizeof *fields);
    size_t cols[ROI_TCOLS], nhead = 0, cap = 0, lcol = 0;
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
            for (lcol = 0; r == 0 && ls->key && lcol < nf && strcmp(fields[lcol], ls->key);)
                lcol++;
            if (r == 0 && ls->key && lcol == nf)
                r = err_at(err, -EINVAL, p, line, "no column \"%s\" (the masking table's labels)",
                           ls->key);
        } else if (nf != nhead) {
            r = err_at(err, -EINVAL, p, line, "%zu fields, the header has %zu", nf, nhead);
        } else {
            if (t->n == cap) {
                cap = cap ? 2 * cap : 64;
                t->v = xrealloc(t->v, cap * ROI_TCOLS * sizeof *t->v);
                if (ls->key)
                    t->label = xrealloc(t->label, cap * sizeof *t->label);
            }
            if (ls->key && r == 0 && label_from_text(p, t->n, fields[lcol], &t->label[t->n], err))
                r = err_at(err, -EINVAL, p, line, "%s: '%s' is not a positive integer", ls->key,
                           fields[lcol]);
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

/* A masking table's region.path: relative to the tables group that holds the table (Fractal's
 * and ngio's "../labels/NAME"), or, when nothing is there, to the table group itself. */
static char *table_region(const char *path, json_t *attrs)
{
    const char *rel = json_string_value(json_object_get(json_object_get(attrs, "region"), "path"));
    if (!rel)
        return NULL; /* [rois] mask must name the label image */
    char *parent = path_dirname(path);
    char *p = path_join(parent, rel);
    if (!zarr_store_node_exists(p)) {
        char *own = path_join(path, rel);
        if (zarr_store_node_exists(own)) {
            free(p);
            p = own;
        } else {
            free(own);
        }
    }
    free(parent);
    return p;
}

int roi_table_read(const char *path, struct roi_table *t, struct errbuf *err)
{
    memset(t, 0, sizeof *t);
    struct stat st;
    if (zarr_is_url(path) ? !zarr_store_node_exists(path)
                          : stat(path, &st) < 0 || !S_ISDIR(st.st_mode))
        return err_set(err, -EINVAL, "%s: %s", path,
                       zarr_is_url(path) || errno == ENOENT ? "no such table"
                                                            : "not a table group (a directory)");
    json_t *attrs;
    int r = group_attrs(path, &attrs, err);
    if (r < 0)
        return r;
    const char *backend = json_string_value(json_object_get(attrs, "backend"));
    const char *type = json_string_value(json_object_get(attrs, "type"));
    struct label_source ls = {0};
    if (type && strcmp(type, "masking_roi_table") == 0) {
        ls.key = json_string_value(json_object_get(attrs, "instance_key"));
        ls.key = ls.key ? ls.key : "label";
        ls.index_key = json_string_value(json_object_get(attrs, "index_key"));
        t->region = table_region(path, attrs);
    }
    bool csv =
        backend ? strcmp(backend, "csv") == 0 : !exists(path, "X") && exists(path, "table.csv");
    if (backend && !csv && strncmp(backend, "anndata", 7) != 0)
        r = err_set(err, -EINVAL, "%s: table backend \"%s\" is not supported (anndata or csv)",
                    path, backend);
    else
        r = csv ? read_csv(path, &ls, t, err) : read_anndata(path, &ls, t, err);
    json_decref(attrs);
    if (r < 0)
        roi_table_free(t);
    return r;
}

void roi_table_free(struct roi_table *t)
{
    free(t->v);
    free(t->label);
    free(t->region);
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
    if (t->label)
        out->label = xmalloc((t->n ? t->n : 1) * sizeof *out->label);
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
        if (t->label)
            out->label[out->n] = t->label[i];
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

int roi_table_find(const char *group, const char *name, char **path, struct errbuf *err)
{
    char *tables = path_join(group, "tables");
    json_t *attrs;
    int r = group_attrs(tables, &attrs, err);
    json_t *list = json_object_get(attrs, "tables"), *v;
    size_t i;
    bool listed = false;
    json_array_foreach(list, i, v)
    {
        const char *s = json_string_value(v);
        listed = listed || (s && strcmp(s, name) == 0);
    }
    json_decref(attrs);
    if (r == 0 && listed)
        *path = path_join(tables, name);
    else if (r == 0)
        r = err_set(err, -ENOENT, "%s: no table \"%s\" in its \"tables\" list", tables, name);
    free(tables);
    return r;
}
