/* table_write.c: a masking ROI table encoded as files in memory, written from the definitions
 * of AnnData's on-disk format (anndata 0.8+), Zarr v2/v3 and ngio's table attributes. */
#include "table_write.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* X's columns in the order fractal-tasks-core's masking tables have them, and for each the
 * axis (0 z, 1 y, 2 x) and whether it is the start or the length of the box. */
static const char *const column_names[6] = {
    "x_micrometer",     "y_micrometer",     "z_micrometer",
    "len_x_micrometer", "len_y_micrometer", "len_z_micrometer",
};
static const int column_axis[6] = {2, 1, 0, 2, 1, 0};
#define NCOLS 6

static double row_value(const struct table_row *r, int col)
{
    return col < 3 ? r->start[column_axis[col]] : r->length[column_axis[col]];
}

/* ---- the file list ---- */

struct flist {
    struct table_file *v;
    size_t n, cap;
};

/* Appends dir/name holding data (taken over). */
static void add_file(struct flist *fl, const char *dir, const char *name, void *data, size_t len)
{
    if (fl->n == fl->cap)
        fl->v = xrealloc(fl->v, (fl->cap = fl->cap ? 2 * fl->cap : 32) * sizeof *fl->v);
    struct table_file *f = &fl->v[fl->n++];
    f->path = *dir ? xasprintf("%s/%s", dir, name) : xstrdup(name);
    f->data = data;
    f->len = len;
}

/* Appends dir/name holding obj as indented JSON with sorted keys (deterministic); takes obj. */
static void add_json(struct flist *fl, const char *dir, const char *name, json_t *obj)
{
    char *text = json_dumps(obj, JSON_INDENT(4) | JSON_SORT_KEYS);
    json_decref(obj);
    if (!text) /* only on allocation failure, which xmalloc treats as fatal too */
        abort();
    add_file(fl, dir, name, text, strlen(text));
}

static json_t *encoding(const char *type, const char *version)
{
    return json_pack("{s:s, s:s}", "encoding-type", type, "encoding-version", version);
}

/* A group at dir with attrs (taken; NULL for none). */
static void add_group(struct flist *fl, int format, const char *dir, json_t *attrs)
{
    if (format == 2) {
        add_json(fl, dir, ".zgroup", json_pack("{s:i}", "zarr_format", 2));
        if (attrs)
            add_json(fl, dir, ".zattrs", attrs);
        return;
    }
    json_t *g = json_pack("{s:i, s:s}", "zarr_format", 3, "node_type", "group");
    if (attrs)
        json_object_set_new(g, "attributes", attrs);
    add_json(fl, dir, "zarr.json", g);
}

/* ---- arrays: one chunk each, no compression ---- */

enum elem { ELEM_F32, ELEM_I64, ELEM_U64, ELEM_STR, ELEM_F64 };

static json_t *shape_json(int ndim, const uint64_t *shape, bool chunk)
{
    json_t *a = json_array();
    for (int d = 0; d < ndim; d++) /* a chunk of an empty array still has extent 1 */
        json_array_append_new(a, json_integer(chunk && !shape[d] ? 1 : (json_int_t)shape[d]));
    return a;
}

static json_t *array_meta_v2(enum elem e, int ndim, const uint64_t *shape)
{
    static const char *const dtypes[] = {"<f4", "<i8", "<u8", "|O", "<f8"};
    json_t *m = json_pack("{s:i, s:s, s:n, s:s}", "zarr_format", 2, "dtype", dtypes[e],
                          "compressor", "order", "C");
    json_object_set_new(m, "shape", shape_json(ndim, shape, false));
    json_object_set_new(m, "chunks", shape_json(ndim, shape, true));
    /* Object arrays: numcodecs' VLenUTF8 turns the items into bytes; no fill value applies. */
    json_object_set_new(m, "filters",
                        e == ELEM_STR ? json_pack("[{s:s}]", "id", "vlen-utf8") : json_null());
    json_object_set_new(m, "fill_value",
                        e == ELEM_F32 || e == ELEM_F64 ? json_real(0.0)
                        : e == ELEM_STR                ? json_null()
                                                       : json_integer(0));
    return m;
}

static json_t *array_meta_v3(enum elem e, int ndim, const uint64_t *shape, json_t *attrs)
{
    static const char *const dtypes[] = {"float32", "int64", "uint64", "string", "float64"};
    json_t *m = json_pack("{s:i, s:s, s:s}", "zarr_format", 3, "node_type", "array", "data_type",
                          dtypes[e]);
    json_object_set_new(m, "shape", shape_json(ndim, shape, false));
    json_object_set_new(m, "chunk_grid",
                        json_pack("{s:s, s:{s:o}}", "name", "regular", "configuration",
                                  "chunk_shape", shape_json(ndim, shape, true)));
    json_object_set_new(
        m, "chunk_key_encoding",
        json_pack("{s:s, s:{s:s}}", "name", "default", "configuration", "separator", "/"));
    json_object_set_new(m, "fill_value",
                        e == ELEM_F32 || e == ELEM_F64 ? json_real(0.0)
                        : e == ELEM_STR                ? json_string("")
                                                       : json_integer(0));
    /* Strings: the zarr-extensions "string" data type and its vlen-utf8 codec (the same byte
     * layout as numcodecs' VLenUTF8); numbers: plain little-endian bytes. */
    json_object_set_new(
        m, "codecs",
        e == ELEM_STR
            ? json_pack("[{s:s, s:{}}]", "name", "vlen-utf8", "configuration")
            : json_pack("[{s:s, s:{s:s}}]", "name", "bytes", "configuration", "endian", "little"));
    json_object_set_new(m, "attributes", attrs);
    return m;
}

/* The array at dir: metadata, attrs (taken) and, unless it is empty, its one chunk (taken). */
static void add_array(struct flist *fl, int format, const char *dir, enum elem e, int ndim,
                      const uint64_t *shape, json_t *attrs, void *chunk, size_t chunk_len)
{
    bool empty = false;
    for (int d = 0; d < ndim; d++)
        empty = empty || shape[d] == 0;
    if (format == 2) {
        add_json(fl, dir, ".zarray", array_meta_v2(e, ndim, shape));
        add_json(fl, dir, ".zattrs", attrs);
    } else {
        add_json(fl, dir, "zarr.json", array_meta_v3(e, ndim, shape, attrs));
    }
    if (empty) { /* every element is the fill value: no chunk is stored */
        free(chunk);
        return;
    }
    add_file(fl, dir, format == 2 ? (ndim == 2 ? "0.0" : "0") : (ndim == 2 ? "c/0/0" : "c/0"),
             chunk, chunk_len);
}

/* ---- chunk contents ---- */

static void put_le(unsigned char *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* numcodecs' VLenUTF8 layout: a little-endian u32 item count, then per item its length
 * (u32 LE) and its UTF-8 bytes. items[i] are NUL-terminated. */
static unsigned char *vlen_utf8(const char *const *items, size_t n, size_t *len)
{
    size_t total = 4;
    for (size_t i = 0; i < n; i++)
        total += 4 + strlen(items[i]);
    unsigned char *buf = xmalloc(total), *p = buf;
    put_le(p, n, 4);
    p += 4;
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(items[i]);
        put_le(p, l, 4);
        memcpy(p + 4, items[i], l);
        p += 4 + l;
    }
    *len = total;
    return buf;
}

/* X: rows x 6 float32, C order, little-endian. */
static unsigned char *x_chunk(const struct table_row *rows, size_t n, size_t *len)
{
    unsigned char *buf = xmalloc(n * NCOLS * 4 + 1);
    for (size_t i = 0; i < n; i++)
        for (int c = 0; c < NCOLS; c++) {
            float f = (float)row_value(&rows[i], c);
            uint32_t bits;
            memcpy(&bits, &f, 4);
            put_le(buf + (i * NCOLS + c) * 4, bits, 4);
        }
    *len = n * NCOLS * 4;
    return buf;
}

/* n float64 values, little-endian (malloc'd, n * 8 bytes). */
static unsigned char *f64_le(const double *v, size_t n)
{
    unsigned char *buf = xmalloc(n * 8 + 1);
    for (size_t i = 0; i < n; i++) {
        uint64_t bits;
        memcpy(&bits, &v[i], 8);
        put_le(buf + i * 8, bits, 8);
    }
    return buf;
}

static unsigned char *label_chunk(const uint64_t *labels, size_t n, size_t *len)
{
    unsigned char *buf = xmalloc(n * 8 + 1);
    for (size_t i = 0; i < n; i++)
        put_le(buf + i * 8, labels[i], 8);
    *len = n * 8;
    return buf;
}

/* ---- the table group ---- */

/* The group attributes ngio's masking_roi_table v1 and fractal-tasks-core read. */
static json_t *table_attrs(const struct table_spec *spec)
{
    json_t *a = json_pack("{s:s, s:s, s:{s:s}, s:s, s:s, s:s}", "type",
                          spec->type ? spec->type : "masking_roi_table", "table_version", "1",
                          "region", "path", spec->region_path, "instance_key", "label", "index_key",
                          "label", "index_type", "int");
    if (spec->backend == TABLE_CSV) {
        json_object_set_new(a, "backend", json_string("csv"));
        return a;
    }
    json_object_set_new(a, "backend", json_string("anndata"));
    json_object_set_new(a, "fractal_table_version", json_string("1")); /* legacy readers */
    json_object_set_new(a, "encoding-type", json_string("anndata"));
    json_object_set_new(a, "encoding-version", json_string("0.1.0"));
    return a;
}

/* A dataframe group: attributes naming its index array and columns. */
static json_t *dataframe_attrs(const char *column)
{
    json_t *a = encoding("dataframe", "0.2.0");
    json_object_set_new(a, "_index", json_string("_index"));
    json_object_set_new(a, "column-order", column ? json_pack("[s]", column) : json_array());
    return a;
}

static void add_string_array(struct flist *fl, int format, const char *dir,
                             const char *const *items, size_t n)
{
    size_t len;
    unsigned char *chunk = vlen_utf8(items, n, &len);
    uint64_t shape[1] = {n};
    add_array(fl, format, dir, ELEM_STR, 1, shape, encoding("string-array", "0.2.0"), chunk, len);
}

/* obs: the index holds the labels as strings; the label column the ids themselves, as
 * fractal-tasks-core's masked loading looks them up in obs[instance_key]. */
static void add_obs(struct flist *fl, int format, const uint64_t *labels, size_t n)
{
    add_group(fl, format, "obs", dataframe_attrs("label"));
    char **names = xmalloc((n ? n : 1) * sizeof *names);
    bool big = false;
    for (size_t i = 0; i < n; i++) {
        names[i] = xasprintf("%" PRIu64, labels[i]);
        big = big || labels[i] > INT64_MAX;
    }
    add_string_array(fl, format, "obs/_index", (const char *const *)names, n);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    size_t len;
    unsigned char *chunk = label_chunk(labels, n, &len);
    uint64_t shape[1] = {n};
    /* int64 as pandas would have it, unless an id does not fit */
    add_array(fl, format, "obs/label", big ? ELEM_U64 : ELEM_I64, 1, shape,
              encoding("array", "0.2.0"), chunk, len);
}

static void add_var_and_mappings(struct flist *fl, int format, const char *const *cols,
                                 size_t ncols)
{
    add_group(fl, format, "var", dataframe_attrs(NULL));
    add_string_array(fl, format, "var/_index", cols, ncols);
    static const char *const mappings[] = {"layers", "obsm", "obsp", "uns", "varm", "varp"};
    for (size_t i = 0; i < sizeof mappings / sizeof *mappings; i++)
        add_group(fl, format, mappings[i], encoding("dict", "0.1.0"));
}

static void encode_anndata(struct flist *fl, const struct table_spec *spec,
                           const struct table_row *rows, size_t n)
{
    int format = spec->zarr_format;
    add_group(fl, format, "", table_attrs(spec));
    size_t len;
    unsigned char *x = x_chunk(rows, n, &len);
    uint64_t xshape[2] = {n, NCOLS};
    add_array(fl, format, "X", ELEM_F32, 2, xshape, encoding("array", "0.2.0"), x, len);
    uint64_t *labels = xmalloc((n ? n : 1) * sizeof *labels);
    for (size_t i = 0; i < n; i++)
        labels[i] = rows[i].label;
    add_obs(fl, format, labels, n);
    free(labels);
    add_var_and_mappings(fl, format, column_names, NCOLS);
}

/* The shortest decimal that reads back as v, always with a '.' or an exponent so that readers
 * (pandas) take the column as floating point. printf's "C" locale: roifs never sets another. */
static void put_double(struct strbuf *sb, double v)
{
    char buf[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    sb_append(sb, buf, strlen(buf));
    if (!strpbrk(buf, ".e"))
        sb_append(sb, ".0", 2);
}

static void encode_csv(struct flist *fl, const struct table_spec *spec,
                       const struct table_row *rows, size_t n)
{
    add_group(fl, spec->zarr_format, "", table_attrs(spec));
    struct strbuf sb = {0};
    sb_printf(&sb, "label");
    for (int c = 0; c < NCOLS; c++)
        sb_printf(&sb, ",%s", column_names[c]);
    sb_append(&sb, "\n", 1);
    for (size_t i = 0; i < n; i++) {
        sb_printf(&sb, "%" PRIu64, rows[i].label);
        for (int c = 0; c < NCOLS; c++) {
            sb_append(&sb, ",", 1);
            put_double(&sb, row_value(&rows[i], c));
        }
        sb_append(&sb, "\n", 1);
    }
    add_file(fl, "", "table.csv", sb.buf, sb.len);
}

/* ---- entry points ---- */

static int by_label(const void *a, const void *b)
{
    uint64_t x = ((const struct table_row *)a)->label, y = ((const struct table_row *)b)->label;
    return (x > y) - (x < y);
}

static int by_path(const void *a, const void *b)
{
    return strcmp(((const struct table_file *)a)->path, ((const struct table_file *)b)->path);
}

static int check_rows(const struct table_row *rows, size_t n, struct errbuf *err)
{
    for (size_t i = 0; i < n; i++) {
        if (rows[i].label == 0)
            return err_set(err, -EINVAL, "masking table: row %zu: label 0 is the background", i);
        for (int c = 0; c < NCOLS; c++) {
            double v = row_value(&rows[i], c);
            if (!isfinite(v) || fabs(v) > FLT_MAX)
                return err_set(err, -EINVAL,
                               "masking table: label %" PRIu64 ": %s is %g, not a finite "
                               "float32 number",
                               rows[i].label, column_names[c], v);
        }
    }
    return 0;
}

int table_encode(const struct table_spec *spec, const struct table_row *rows, size_t nrows,
                 struct table_files *out, struct errbuf *err)
{
    if (spec->zarr_format != 2 && spec->zarr_format != 3)
        return err_set(err, -EINVAL, "masking table: Zarr format %d (expected 2 or 3)",
                       spec->zarr_format);
    if (spec->backend != TABLE_ANNDATA && spec->backend != TABLE_CSV)
        return err_set(err, -EINVAL, "masking table: unknown back end %d", (int)spec->backend);
    if (!spec->region_path || !*spec->region_path)
        return err_set(err, -EINVAL, "masking table: no region path (the label image)");
    json_t *probe = json_string(spec->region_path); /* NULL unless valid UTF-8, as JSON needs */
    if (!probe)
        return err_set(err, -EINVAL, "masking table: region path is not valid UTF-8");
    json_decref(probe);
    if (nrows > TABLE_MAX_ROWS)
        return err_set(err, -EFBIG, "masking table: %zu rows (at most %zu)", nrows, TABLE_MAX_ROWS);
    int r = check_rows(rows, nrows, err);
    if (r < 0)
        return r;
    struct table_row *sorted = xmalloc((nrows ? nrows : 1) * sizeof *sorted);
    if (nrows)
        memcpy(sorted, rows, nrows * sizeof *sorted);
    qsort(sorted, nrows, sizeof *sorted, by_label);
    for (size_t i = 1; i < nrows; i++)
        if (sorted[i].label == sorted[i - 1].label) {
            r = err_set(err, -EINVAL, "masking table: label %" PRIu64 " has two rows",
                        sorted[i].label);
            free(sorted);
            return r;
        }
    struct flist fl = {0};
    if (spec->backend == TABLE_ANNDATA)
        encode_anndata(&fl, spec, sorted, nrows);
    else
        encode_csv(&fl, spec, sorted, nrows);
    free(sorted);
    qsort(fl.v, fl.n, sizeof *fl.v, by_path);
    out->v = fl.v;
    out->n = fl.n;
    return 0;
}

/* ---- feature tables ---- */

static int check_spec(const struct table_spec *spec, size_t nrows, struct errbuf *err)
{
    if (spec->zarr_format != 2 && spec->zarr_format != 3)
        return err_set(err, -EINVAL, "table: Zarr format %d (expected 2 or 3)", spec->zarr_format);
    if (spec->backend != TABLE_ANNDATA && spec->backend != TABLE_CSV)
        return err_set(err, -EINVAL, "table: unknown back end %d", (int)spec->backend);
    if (!spec->region_path || !*spec->region_path)
        return err_set(err, -EINVAL, "table: no region path (the label image)");
    json_t *probe = json_string(spec->region_path);
    if (!probe)
        return err_set(err, -EINVAL, "table: region path is not valid UTF-8");
    json_decref(probe);
    if (nrows > TABLE_MAX_ROWS)
        return err_set(err, -EFBIG, "table: %zu rows (at most %zu)", nrows, TABLE_MAX_ROWS);
    return 0;
}

int table_encode_features(const struct table_spec *spec, const uint64_t *labels, size_t n,
                          const char *const *cols, size_t ncols, const double *values,
                          struct table_files *out, struct errbuf *err)
{
    int r = check_spec(spec, n, err);
    if (r < 0)
        return r;
    for (size_t i = 0; i < n; i++)
        if (labels[i] == 0 || (i && labels[i] <= labels[i - 1]))
            return err_set(err, -EINVAL,
                           "feature table: row %zu: label %" PRIu64
                           " is 0 or not above the one before",
                           i, labels[i]);
    struct flist fl = {0};
    int format = spec->zarr_format;
    add_group(&fl, format, "", table_attrs(spec));
    if (spec->backend == TABLE_ANNDATA) {
        unsigned char *x = f64_le(values, n * ncols);
        uint64_t xshape[2] = {n, ncols};
        add_array(&fl, format, "X", ELEM_F64, 2, xshape, encoding("array", "0.2.0"), x,
                  n * ncols * 8);
        add_obs(&fl, format, labels, n);
        add_var_and_mappings(&fl, format, cols, ncols);
    } else {
        struct strbuf sb = {0};
        sb_printf(&sb, "label");
        for (size_t c = 0; c < ncols; c++)
            sb_printf(&sb, ",%s", cols[c]);
        sb_append(&sb, "\n", 1);
        for (size_t i = 0; i < n; i++) {
            sb_printf(&sb, "%" PRIu64, labels[i]);
            for (size_t c = 0; c < ncols; c++) {
                sb_append(&sb, ",", 1);
                put_double(&sb, values[i * ncols + c]);
            }
            sb_append(&sb, "\n", 1);
        }
        add_file(&fl, "", "table.csv", sb.buf, sb.len);
    }
    qsort(fl.v, fl.n, sizeof *fl.v, by_path);
    out->v = fl.v;
    out->n = fl.n;
    return 0;
}

/* ---- concatenated tables ---- */

struct flat {
    struct table_row *rows;
    size_t n;
    char **index;
    const char ***text; /* text[c][row], borrowed */
};

static void flat_free(struct flat *f, size_t ntext)
{
    for (size_t i = 0; i < f->n; i++)
        free(f->index[i]);
    for (size_t c = 0; c < ntext; c++)
        free(f->text[c]);
    free(f->text);
    free(f->index);
    free(f->rows);
}

/* The parts' rows one after another, each part's sorted by label and checked. */
static int flatten(const struct table_concat *c, const struct table_part *parts, size_t nparts,
                   struct flat *f, struct errbuf *err)
{
    size_t total = 0;
    for (size_t p = 0; p < nparts; p++)
        total += parts[p].n;
    if (total > TABLE_MAX_ROWS)
        return err_set(err, -EFBIG, "table: %zu rows (at most %zu)", total, TABLE_MAX_ROWS);
    f->rows = xmalloc((total ? total : 1) * sizeof *f->rows);
    f->index = xmalloc((total ? total : 1) * sizeof *f->index);
    f->text = xcalloc(c->ntext ? c->ntext : 1, sizeof *f->text);
    for (size_t k = 0; k < c->ntext; k++)
        f->text[k] = xmalloc((total ? total : 1) * sizeof **f->text);
    f->n = 0;
    for (size_t p = 0; p < nparts; p++) {
        int r = check_rows(parts[p].rows, parts[p].n, err);
        if (r < 0)
            return err_prefix(err, r, "%s: ", parts[p].prefix);
        struct table_row *dst = f->rows + f->n;
        if (parts[p].n)
            memcpy(dst, parts[p].rows, parts[p].n * sizeof *dst);
        qsort(dst, parts[p].n, sizeof *dst, by_label);
        for (size_t i = 0; i < parts[p].n; i++) {
            if (i && dst[i].label == dst[i - 1].label)
                return err_set(err, -EINVAL, "%s: label %" PRIu64 " has two rows", parts[p].prefix,
                               dst[i].label);
            f->index[f->n] = xasprintf("%s:%" PRIu64, parts[p].prefix, dst[i].label);
            for (size_t k = 0; k < c->ntext; k++)
                f->text[k][f->n] = parts[p].text[k];
            f->n++;
        }
    }
    return 0;
}

static json_t *concat_attrs(const struct table_spec *spec)
{
    json_t *a = json_pack("{s:s, s:s, s:s, s:s, s:s}", "type",
                          spec->type ? spec->type : "roi_table", "table_version", "1",
                          "instance_key", "label", "index_key", "index", "index_type", "str");
    json_object_set_new(a, "backend", json_string(spec->backend == TABLE_CSV ? "csv" : "anndata"));
    if (spec->backend == TABLE_ANNDATA) {
        json_object_set_new(a, "encoding-type", json_string("anndata"));
        json_object_set_new(a, "encoding-version", json_string("0.1.0"));
    }
    return a;
}

/* obs of a concatenated table: the index "PREFIX:LABEL", the label column and the extra
 * string columns. */
static void add_concat_obs(struct flist *fl, int format, const struct table_concat *c,
                           const char *const *index, const uint64_t *ids, size_t n,
                           const char ***text)
{
    json_t *obs = dataframe_attrs("label");
    json_t *order = json_object_get(obs, "column-order");
    for (size_t k = 0; k < c->ntext; k++)
        json_array_append_new(order, json_string(c->text_names[k]));
    add_group(fl, format, "obs", obs);
    add_string_array(fl, format, "obs/_index", index, n);
    bool big = false;
    for (size_t i = 0; i < n; i++)
        big = big || ids[i] > INT64_MAX;
    size_t len;
    unsigned char *chunk = label_chunk(ids, n, &len);
    uint64_t shape[1] = {n};
    add_array(fl, format, "obs/label", big ? ELEM_U64 : ELEM_I64, 1, shape,
              encoding("array", "0.2.0"), chunk, len);
    for (size_t k = 0; k < c->ntext; k++) {
        char *dir = xasprintf("obs/%s", c->text_names[k]);
        add_string_array(fl, format, dir, text[k], n);
        free(dir);
    }
}

static void encode_concat_anndata(struct flist *fl, const struct table_spec *spec,
                                  const struct table_concat *c, const struct flat *f)
{
    int format = spec->zarr_format;
    add_group(fl, format, "", concat_attrs(spec));
    size_t len;
    unsigned char *x = x_chunk(f->rows, f->n, &len);
    uint64_t xshape[2] = {f->n, NCOLS};
    add_array(fl, format, "X", ELEM_F32, 2, xshape, encoding("array", "0.2.0"), x, len);
    uint64_t *ids = xmalloc((f->n ? f->n : 1) * sizeof *ids);
    for (size_t i = 0; i < f->n; i++)
        ids[i] = f->rows[i].label;
    add_concat_obs(fl, format, c, (const char *const *)f->index, ids, f->n, f->text);
    free(ids);
    add_var_and_mappings(fl, format, column_names, NCOLS);
}

static void encode_concat_csv(struct flist *fl, const struct table_spec *spec,
                              const struct table_concat *c, const struct flat *f)
{
    add_group(fl, spec->zarr_format, "", concat_attrs(spec));
    struct strbuf sb = {0};
    sb_printf(&sb, "index,label");
    for (int k = 0; k < NCOLS; k++)
        sb_printf(&sb, ",%s", column_names[k]);
    for (size_t k = 0; k < c->ntext; k++)
        sb_printf(&sb, ",%s", c->text_names[k]);
    sb_append(&sb, "\n", 1);
    for (size_t i = 0; i < f->n; i++) {
        sb_printf(&sb, "%s,%" PRIu64, f->index[i], f->rows[i].label);
        for (int k = 0; k < NCOLS; k++) {
            sb_append(&sb, ",", 1);
            put_double(&sb, row_value(&f->rows[i], k));
        }
        for (size_t k = 0; k < c->ntext; k++)
            sb_printf(&sb, ",%s", f->text[k][i]);
        sb_append(&sb, "\n", 1);
    }
    add_file(fl, "", "table.csv", sb.buf, sb.len);
}

int table_encode_concat(const struct table_spec *spec, const struct table_concat *c,
                        const struct table_part *parts, size_t nparts, struct table_files *out,
                        struct errbuf *err)
{
    if (spec->zarr_format != 2 && spec->zarr_format != 3)
        return err_set(err, -EINVAL, "table: Zarr format %d (expected 2 or 3)", spec->zarr_format);
    struct flat f = {0};
    int r = flatten(c, parts, nparts, &f, err);
    if (r == 0) {
        struct flist fl = {0};
        if (spec->backend == TABLE_CSV)
            encode_concat_csv(&fl, spec, c, &f);
        else
            encode_concat_anndata(&fl, spec, c, &f);
        qsort(fl.v, fl.n, sizeof *fl.v, by_path);
        out->v = fl.v;
        out->n = fl.n;
    }
    flat_free(&f, c->ntext);
    return r;
}

/* ---- concatenated feature tables ---- */

/* The columns of every part, each name once, in the order first seen. */
static size_t column_union(const struct table_fpart *parts, size_t nparts, const char ***out)
{
    size_t n = 0, cap = 0;
    const char **u = NULL;
    for (size_t p = 0; p < nparts; p++)
        for (size_t j = 0; j < parts[p].ncols; j++) {
            size_t k = 0;
            while (k < n && strcmp(u[k], parts[p].cols[j]) != 0)
                k++;
            if (k < n)
                continue;
            if (n == cap)
                u = xrealloc(u, (cap = cap ? 2 * cap : 16) * sizeof *u);
            u[n++] = parts[p].cols[j];
        }
    *out = u;
    return n;
}

int table_encode_concat_features(const struct table_spec *spec, const struct table_concat *c,
                                 const struct table_fpart *parts, size_t nparts,
                                 struct table_files *out, struct errbuf *err)
{
    if (spec->zarr_format != 2 && spec->zarr_format != 3)
        return err_set(err, -EINVAL, "table: Zarr format %d (expected 2 or 3)", spec->zarr_format);
    size_t total = 0;
    for (size_t p = 0; p < nparts; p++) {
        total += parts[p].n;
        for (size_t i = 0; i < parts[p].n; i++)
            if (parts[p].labels[i] == 0 || (i && parts[p].labels[i] <= parts[p].labels[i - 1]))
                return err_set(err, -EINVAL,
                               "%s: row %zu: label %" PRIu64 " is 0 or not above the one before",
                               parts[p].prefix, i, parts[p].labels[i]);
    }
    if (total > TABLE_MAX_ROWS)
        return err_set(err, -EFBIG, "table: %zu rows (at most %zu)", total, TABLE_MAX_ROWS);
    const char **cols;
    size_t ncols = column_union(parts, nparts, &cols);
    uint64_t *ids = xmalloc((total ? total : 1) * sizeof *ids);
    double *x = xmalloc((total ? total : 1) * (ncols ? ncols : 1) * sizeof *x);
    char **index = xmalloc((total ? total : 1) * sizeof *index);
    const char ***text = xcalloc(c->ntext ? c->ntext : 1, sizeof *text);
    for (size_t k = 0; k < c->ntext; k++)
        text[k] = xmalloc((total ? total : 1) * sizeof **text);
    size_t *where = xmalloc((ncols ? ncols : 1) * sizeof *where);
    size_t n = 0;
    for (size_t p = 0; p < nparts; p++) {
        const struct table_fpart *pt = &parts[p];
        for (size_t j = 0; j < pt->ncols; j++) /* the part's column j in the union */
            for (where[j] = 0; strcmp(cols[where[j]], pt->cols[j]) != 0;)
                where[j]++;
        for (size_t i = 0; i < pt->n; i++, n++) {
            ids[n] = pt->labels[i];
            index[n] = xasprintf("%s:%" PRIu64, pt->prefix, pt->labels[i]);
            for (size_t k = 0; k < c->ntext; k++)
                text[k][n] = pt->text[k];
            for (size_t j = 0; j < ncols; j++) /* a column the part has not: NaN */
                x[n * ncols + j] = NAN;
            for (size_t j = 0; j < pt->ncols; j++)
                x[n * ncols + where[j]] = pt->values[i * pt->ncols + j];
        }
    }
    struct flist fl = {0};
    int format = spec->zarr_format;
    add_group(&fl, format, "", concat_attrs(spec));
    if (spec->backend == TABLE_ANNDATA) {
        unsigned char *chunk = f64_le(x, n * ncols);
        uint64_t xshape[2] = {n, ncols};
        add_array(&fl, format, "X", ELEM_F64, 2, xshape, encoding("array", "0.2.0"), chunk,
                  n * ncols * 8);
        add_concat_obs(&fl, format, c, (const char *const *)index, ids, n, text);
        add_var_and_mappings(&fl, format, cols, ncols);
    } else {
        struct strbuf sb = {0};
        sb_printf(&sb, "index,label");
        for (size_t j = 0; j < ncols; j++)
            sb_printf(&sb, ",%s", cols[j]);
        for (size_t k = 0; k < c->ntext; k++)
            sb_printf(&sb, ",%s", c->text_names[k]);
        sb_append(&sb, "\n", 1);
        for (size_t i = 0; i < n; i++) {
            sb_printf(&sb, "%s,%" PRIu64, index[i], ids[i]);
            for (size_t j = 0; j < ncols; j++) {
                sb_append(&sb, ",", 1);
                if (!isnan(x[i * ncols + j])) /* empty: pandas reads NaN */
                    put_double(&sb, x[i * ncols + j]);
            }
            for (size_t k = 0; k < c->ntext; k++)
                sb_printf(&sb, ",%s", text[k][i]);
            sb_append(&sb, "\n", 1);
        }
        add_file(&fl, "", "table.csv", sb.buf, sb.len);
    }
    qsort(fl.v, fl.n, sizeof *fl.v, by_path);
    out->v = fl.v;
    out->n = fl.n;
    for (size_t i = 0; i < n; i++)
        free(index[i]);
    for (size_t k = 0; k < c->ntext; k++)
        free(text[k]);
    free(text);
    free(index);
    free(where);
    free(x);
    free(ids);
    free(cols);
    return 0;
}

const struct table_file *table_files_find(const struct table_files *f, const char *path)
{
    struct table_file key = {.path = (char *)path};
    return f->n ? bsearch(&key, f->v, f->n, sizeof *f->v, by_path) : NULL;
}

void table_files_free(struct table_files *f)
{
    for (size_t i = 0; i < f->n; i++) {
        free(f->v[i].path);
        free(f->v[i].data);
    }
    free(f->v);
    f->v = NULL;
    f->n = 0;
}
