/* meta.c: Zarr v2 .zarray parsing and emission (jansson), chunk grid and chunk keys.
 * Every rejection names the offending key and value, so users can fix their metadata. */
#include "zarr.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../nd.h"

/* Largest decoded chunk accepted: what blosc (and a sane LRU) can handle. */
#define ZARR_MAX_CHUNK_BYTES ((uint64_t)INT_MAX - 16)

/* A short JSON rendering of v for error messages. */
static void json_brief(const json_t *v, char *buf, size_t len)
{
    char *s = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    snprintf(buf, len, "%s", s ? s : "(missing)");
    if (strlen(buf) == len - 1 && len > 4)
        memcpy(buf + len - 4, "...", 4);
    free(s);
}

static int bad_value(struct errbuf *err, const char *key, const json_t *v, const char *why)
{
    char b[256];
    json_brief(v, b, sizeof b);
    return err_set(err, -EINVAL, "\"%s\": %s (got %s)", key, why, b);
}

static int parse_dims(json_t *root, const char *key, uint64_t *out, int *n, struct errbuf *err)
{
    json_t *a = json_object_get(root, key);
    if (!json_is_array(a))
        return bad_value(err, key, a, "expected a list of integers");
    if (json_array_size(a) > ROIFS_MAX_DIM)
        return bad_value(err, key, a, "too many dimensions (at most 32)");
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v)
    {
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return bad_value(err, key, a, "expected a list of non-negative integers");
        out[i] = (uint64_t)json_integer_value(v);
    }
    *n = (int)json_array_size(a);
    return 0;
}

static int parse_shape_chunks(json_t *root, struct zarr_meta *m, struct errbuf *err)
{
    int ns, nc;
    if (parse_dims(root, "shape", m->shape, &ns, err) < 0 ||
        parse_dims(root, "chunks", m->chunks, &nc, err) < 0)
        return -EINVAL;
    if (ns != nc)
        return bad_value(err, "chunks", json_object_get(root, "chunks"),
                         "must have as many entries as \"shape\"");
    m->ndim = ns;
    uint64_t grid = 1, nbytes = m->dtype.size;
    for (int i = 0; i < ns; i++) {
        if (m->shape[i] == 0)
            return bad_value(err, "shape", json_object_get(root, "shape"),
                             "empty array not supported");
        if (m->chunks[i] == 0)
            return bad_value(err, "chunks", json_object_get(root, "chunks"),
                             "chunk sizes must be positive");
        uint64_t g = (m->shape[i] - 1) / m->chunks[i] + 1;
        if (__builtin_mul_overflow(grid, g, &grid))
            return bad_value(err, "shape", json_object_get(root, "shape"), "too many chunks");
        if (__builtin_mul_overflow(nbytes, m->chunks[i], &nbytes) || nbytes > ZARR_MAX_CHUNK_BYTES)
            return bad_value(err, "chunks", json_object_get(root, "chunks"),
                             "a chunk would exceed 2 GiB");
    }
    return 0;
}

static int parse_int_field(json_t *obj, const char *key, int dflt, int lo, int hi, int *out,
                           struct errbuf *err)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        char why[64];
        snprintf(why, sizeof why, "expected an integer from %d to %d", lo, hi);
        char key2[64];
        snprintf(key2, sizeof key2, "compressor.%s", key);
        return bad_value(err, key2, v, why);
    }
    *out = (int)json_integer_value(v);
    return 0;
}

static int parse_blosc(json_t *c, struct zarr_codec *out, struct errbuf *err)
{
    static const char *const cnames[] = {"lz4", "lz4hc", "blosclz", "zstd", "zlib", "snappy"};
    json_t *cn = json_object_get(c, "cname");
    const char *name = cn ? json_string_value(cn) : "lz4";
    size_t i = 0;
    while (name && i < sizeof cnames / sizeof cnames[0] && strcmp(name, cnames[i]) != 0)
        i++;
    if (!name || i == sizeof cnames / sizeof cnames[0])
        return bad_value(err, "compressor.cname", cn, "unknown blosc compressor");
    snprintf(out->cname, sizeof out->cname, "%s", name);
    if (parse_int_field(c, "clevel", 5, 0, 9, &out->level, err) < 0 ||
        parse_int_field(c, "shuffle", 1, -1, 2, &out->shuffle, err) < 0 ||
        parse_int_field(c, "blocksize", 0, 0, INT_MAX, &out->blocksize, err) < 0)
        return -EINVAL;
    return 0;
}

static int parse_compressor(json_t *root, struct zarr_codec *out, struct errbuf *err)
{
    memset(out, 0, sizeof *out);
    json_t *c = json_object_get(root, "compressor");
    if (!c)
        return bad_value(err, "compressor", c, "required key is missing");
    if (json_is_null(c)) {
        out->id = ZC_NONE;
        return 0;
    }
    const char *id = json_is_object(c) ? json_string_value(json_object_get(c, "id")) : NULL;
    if (!id)
        return bad_value(err, "compressor", c, "expected null or an object with an \"id\"");
    if (strcmp(id, "blosc") == 0) {
        out->id = ZC_BLOSC;
        return parse_blosc(c, out, err);
    }
    if (strcmp(id, "zlib") == 0 || strcmp(id, "gzip") == 0) {
        out->id = id[0] == 'z' ? ZC_ZLIB : ZC_GZIP;
        return parse_int_field(c, "level", 1, -1, 9, &out->level, err);
    }
    if (strcmp(id, "zstd") == 0) {
        out->id = ZC_ZSTD;
        return parse_int_field(c, "level", 0, -131072, 22, &out->level, err);
    }
    return err_set(err, -EINVAL,
                   "\"compressor\": compressor \"%s\" is not supported (use blosc, zlib, gzip, "
                   "zstd or null)",
                   id);
}

static int parse_dtype(json_t *root, struct dtype *dt, struct errbuf *err)
{
    json_t *v = json_object_get(root, "dtype");
    if (json_is_array(v))
        return bad_value(err, "dtype", v, "structured dtypes are not supported");
    if (!json_is_string(v))
        return bad_value(err, "dtype", v, "expected a numpy typestr such as \"<u2\"");
    const char *s = json_string_value(v);
    /* v3 names ("uint16") are not valid here; short strings get dtype_parse's diagnosis */
    if (s[0] != '<' && s[0] != '>' && s[0] != '|' && strlen(s) > 3)
        return bad_value(err, "dtype", v, "expected a numpy typestr such as \"<u2\"");
    int r = dtype_parse(s, dt, err);
    if (r < 0)
        return err_prefix(err, r, "\"dtype\"");
    return 0;
}

/* Stores an integer fill value, checking it fits the dtype. */
static int fill_from_int(const struct dtype *dt, json_t *v, unsigned char *fill, struct errbuf *err)
{
    json_int_t x = json_integer_value(v);
    if (dt->kind == DT_BOOL) {
        if (x != 0 && x != 1)
            return bad_value(err, "fill_value", v, "expected true or false");
        fill[0] = (unsigned char)x;
        return 0;
    }
    if (dt->kind == DT_FLOAT) {
        double d = (double)x;
        dtype_from_double(dt, &d, fill, 1);
        return 0;
    }
    bool fits;
    if (dt->kind == DT_UINT)
        fits = x >= 0 && (dt->size == 8 || (uint64_t)x < (1ULL << (dt->size * 8)));
    else
        fits =
            dt->size == 8 || (x >= -(1LL << (dt->size * 8 - 1)) && x < (1LL << (dt->size * 8 - 1)));
    if (!fits)
        return bad_value(err, "fill_value", v, "out of range for the dtype");
    long double l = (long double)x;
    dtype_from_ldouble(dt, &l, fill, 1);
    return 0;
}

static int fill_from_real(const struct dtype *dt, json_t *v, double d, unsigned char *fill,
                          struct errbuf *err)
{
    if (dt->kind == DT_FLOAT) {
        dtype_from_double(dt, &d, fill, 1);
        return 0;
    }
    if (dt->kind == DT_BOOL || !isfinite(d) || d != floor(d))
        return bad_value(err, "fill_value", v, "not a valid value for an integer or bool dtype");
    long double lo = dt->kind == DT_UINT ? 0 : -ldexpl(1, (int)dt->size * 8 - 1);
    long double hi = ldexpl(1, (int)dt->size * 8 - (dt->kind == DT_INT));
    if (d < lo || d >= hi)
        return bad_value(err, "fill_value", v, "out of range for the dtype");
    long double l = d;
    dtype_from_ldouble(dt, &l, fill, 1);
    return 0;
}

static int parse_fill(json_t *root, struct zarr_meta *m, struct errbuf *err)
{
    const struct dtype *dt = &m->dtype;
    memset(m->fill, 0, sizeof m->fill);
    m->fill_null = false;
    json_t *v = json_object_get(root, "fill_value");
    if (!v)
        return bad_value(err, "fill_value", v, "required key is missing");
    if (json_is_null(v)) {
        m->fill_null = true;
        return 0;
    }
    if (json_is_boolean(v)) {
        if (dt->kind != DT_BOOL)
            return bad_value(err, "fill_value", v, "a boolean needs a bool dtype");
        m->fill[0] = json_is_true(v);
        return 0;
    }
    if (json_is_integer(v))
        return fill_from_int(dt, v, m->fill, err);
    if (json_is_real(v))
        return fill_from_real(dt, v, json_real_value(v), m->fill, err);
    const char *s = json_string_value(v);
    double d;
    if (s && strcmp(s, "NaN") == 0)
        d = NAN;
    else if (s && strcmp(s, "Infinity") == 0)
        d = INFINITY;
    else if (s && strcmp(s, "-Infinity") == 0)
        d = -INFINITY;
    else
        return bad_value(err, "fill_value", v,
                         "expected a number, a boolean, null, \"NaN\", "
                         "\"Infinity\" or \"-Infinity\"");
    if (dt->kind != DT_FLOAT)
        return bad_value(err, "fill_value", v, "non-finite values need a float dtype");
    dtype_from_double(dt, &d, m->fill, 1);
    return 0;
}

static int parse_layout(json_t *root, struct zarr_meta *m, struct errbuf *err)
{
    json_t *v = json_object_get(root, "order");
    const char *s = json_string_value(v);
    if (!s || (strcmp(s, "C") != 0 && strcmp(s, "F") != 0))
        return bad_value(err, "order", v, "expected \"C\" or \"F\"");
    m->fortran_order = s[0] == 'F';
    v = json_object_get(root, "filters");
    if (v && !json_is_null(v) && !(json_is_array(v) && json_array_size(v) == 0))
        return bad_value(err, "filters", v, "filters are not supported (only null or [])");
    v = json_object_get(root, "dimension_separator");
    m->separator = '.';
    if (v && !json_is_null(v)) {
        s = json_string_value(v);
        if (!s || (strcmp(s, ".") != 0 && strcmp(s, "/") != 0))
            return bad_value(err, "dimension_separator", v, "expected \".\" or \"/\"");
        m->separator = s[0];
    }
    return 0;
}

int zarr_meta_parse_v2(const char *json, size_t len, struct zarr_meta *m, struct errbuf *err)
{
    memset(m, 0, sizeof *m);
    json_error_t jerr;
    json_t *root = json_loadb(json, len, 0, &jerr);
    if (!root)
        return err_set(err, -EINVAL, "invalid JSON at line %d, column %d: %s", jerr.line,
                       jerr.column, jerr.text);
    int r = -EINVAL;
    if (!json_is_object(root)) {
        err_set(err, r, "expected a JSON object");
        goto out;
    }
    json_t *fmt = json_object_get(root, "zarr_format");
    if (!json_is_integer(fmt) || json_integer_value(fmt) != 2) {
        bad_value(err, "zarr_format", fmt, "expected 2");
        goto out;
    }
    m->format = 2;
    if (parse_dtype(root, &m->dtype, err) < 0 || parse_shape_chunks(root, m, err) < 0 ||
        parse_compressor(root, &m->compressor, err) < 0 || parse_fill(root, m, err) < 0 ||
        parse_layout(root, m, err) < 0)
        goto out;
    r = 0;
out:
    json_decref(root);
    return r;
}

static json_t *dims_json(const uint64_t *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_integer((json_int_t)v[i]));
    return a;
}

/* Marks a fill value jansson cannot represent (uint64 above INT64_MAX); replaced after dump. */
#define BIG_FILL_MARK "\"@roifs-big-uint64-fill@\""

static json_t *fill_json(const struct zarr_meta *m, uint64_t *big)
{
    const struct dtype *dt = &m->dtype;
    if (dt->kind == DT_BOOL)
        return json_boolean(m->fill[0] != 0);
    if (dt->kind == DT_FLOAT) {
        double d;
        dtype_to_double(dt, m->fill, &d, 1);
        if (isnan(d))
            return json_string("NaN");
        if (isinf(d))
            return json_string(d > 0 ? "Infinity" : "-Infinity");
        return json_real(d);
    }
    long double l;
    dtype_to_ldouble(dt, m->fill, &l, 1);
    if (l >= 0x1p63L) {
        *big = (uint64_t)l;
        return json_string("@roifs-big-uint64-fill@");
    }
    return json_integer((json_int_t)l);
}

char *zarr_meta_emit_v2(const struct zarr_meta *m)
{
    char ts[8];
    uint64_t big = 0;
    json_t *root = json_object();
    json_object_set_new(root, "zarr_format", json_integer(2));
    json_object_set_new(root, "shape", dims_json(m->shape, m->ndim));
    json_object_set_new(root, "chunks", dims_json(m->chunks, m->ndim));
    json_object_set_new(root, "dtype", json_string(dtype_typestr(&m->dtype, ts)));
    json_t *c = zarr_codec_to_json(&m->compressor, m->dtype.size);
    json_object_set_new(root, "compressor", c ? c : json_null());
    json_object_set_new(root, "fill_value", fill_json(m, &big));
    json_object_set_new(root, "order", json_string("C"));
    json_object_set_new(root, "filters", json_null());
    char sep[2] = {m->separator == '/' ? '/' : '.', '\0'};
    json_object_set_new(root, "dimension_separator", json_string(sep));
    char *text = json_dumps(root, JSON_INDENT(4) | JSON_SORT_KEYS);
    json_decref(root);
    if (!text)
        abort(); /* jansson only fails to dump on allocation failure */
    char *mark = strstr(text, BIG_FILL_MARK);
    if (mark) {
        *mark = '\0';
        char *out = xasprintf("%s%" PRIu64 "%s", text, big, mark + strlen(BIG_FILL_MARK));
        free(text);
        text = out;
    }
    char *out = xasprintf("%s\n", text);
    free(text);
    return out;
}

void zarr_meta_grid(const struct zarr_meta *m, uint64_t *grid)
{
    for (int i = 0; i < m->ndim; i++)
        grid[i] = (m->shape[i] + m->chunks[i] - 1) / m->chunks[i];
}

size_t zarr_meta_chunk_nbytes(const struct zarr_meta *m)
{
    return (size_t)nd_prod(m->chunks, m->ndim) * m->dtype.size;
}

void zarr_meta_chunk_key(const struct zarr_meta *m, const uint64_t *idx, char *buf, size_t len)
{
    if (len == 0)
        return;
    if (m->ndim == 0) {
        snprintf(buf, len, "0");
        return;
    }
    size_t pos = 0;
    buf[0] = '\0';
    for (int i = 0; i < m->ndim && pos < len; i++) {
        int n = i ? snprintf(buf + pos, len - pos, "%c%" PRIu64, m->separator, idx[i])
                  : snprintf(buf, len, "%" PRIu64, idx[i]);
        if (n < 0)
            break;
        pos += (size_t)n;
    }
}
