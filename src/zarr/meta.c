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
#include "zarr_json.h"

/* A short JSON rendering of v for error messages. */
static void json_brief(const json_t *v, char *buf, size_t len)
{
    char *s = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    snprintf(buf, len, "%s", s ? s : "(missing)");
    if (strlen(buf) == len - 1 && len > 4)
        memcpy(buf + len - 4, "...", 4);
    free(s);
}

int zarr_json_bad_value(struct errbuf *err, const char *key, const json_t *v, const char *why)
{
    char b[256];
    json_brief(v, b, sizeof b);
    return err_set(err, -EINVAL, "\"%s\": %s (got %s)", key, why, b);
}

#define bad_value zarr_json_bad_value

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

/* "0x..." with exactly two hex digits per byte of a float dtype: the raw bits (v3). */
static int fill_from_hex(const struct dtype *dt, json_t *v, const char *s, unsigned char *fill,
                         struct errbuf *err)
{
    size_t n = strlen(s + 2);
    if (dt->kind != DT_FLOAT || n != 2 * dt->size || strspn(s + 2, "0123456789abcdefABCDEF") != n)
        return bad_value(err, "fill_value", v,
                         dt->kind == DT_FLOAT ? "a hex bit pattern needs 2 hex digits per byte"
                                              : "hex bit patterns are only valid for floats");
    uint64_t bits = strtoull(s + 2, NULL, 16);
    if (dt->size == 2) {
        uint16_t b = (uint16_t)bits;
        memcpy(fill, &b, 2);
    } else if (dt->size == 4) {
        uint32_t b = (uint32_t)bits;
        memcpy(fill, &b, 4);
    } else {
        memcpy(fill, &bits, 8);
    }
    return 0;
}

/* A uint64 fill value above INT64_MAX, as zarr_json_load passes it on: the mark, then the
 * decimal digits. */
static bool big_fill_value(const char *s, uint64_t *out)
{
    size_t n = strlen(ZARR_JSON_BIG_MARK);
    return s && strncmp(s, ZARR_JSON_BIG_MARK, n) == 0 && parse_u64(s + n, out) == 0;
}

json_t *zarr_json_load(const char *json, size_t len, json_error_t *jerr)
{
    json_t *root = json_loadb(json, len, 0, jerr);
    if (root || json_error_code(jerr) != json_error_numeric_overflow || jerr->position <= 0 ||
        (size_t)jerr->position > len)
        return root;
    /* the token that overflowed ends at jerr->position: is it the value of "fill_value"? */
    size_t end = (size_t)jerr->position, start = end, p;
    while (start > 0 && json[start - 1] >= '0' && json[start - 1] <= '9')
        start--;
    for (p = start; p > 0 && strchr(" \t\r\n", json[p - 1]); p--)
        ;
    static const char key[] = "\"fill_value\"";
    size_t klen = sizeof key - 1;
    if (start == end || end - start > 20 || p == 0 || json[p - 1] != ':')
        return NULL;
    for (p--; p > 0 && strchr(" \t\r\n", json[p - 1]); p--)
        ;
    if (p < klen || memcmp(json + p - klen, key, klen) != 0)
        return NULL;
    char digits[21];
    memcpy(digits, json + start, end - start);
    digits[end - start] = '\0';
    uint64_t v;
    if (parse_u64(digits, &v) < 0)
        return NULL;
    char *text = xasprintf("%.*s\"%s%s\"%.*s", (int)start, json, ZARR_JSON_BIG_MARK, digits,
                           (int)(len - end), json + end);
    json_error_t e2;
    root = json_loadb(text, strlen(text), 0, &e2);
    free(text);
    uint64_t got;
    /* only the array's own fill value (not one nested deeper) may be taken this way */
    if (root && !(json_is_object(root) &&
                  big_fill_value(json_string_value(json_object_get(root, "fill_value")), &got) &&
                  got == v)) {
        json_decref(root);
        root = NULL;
    }
    return root;
}

/* Stores fill value x (above INT64_MAX) for dtype dt. */
static int fill_from_big(const struct dtype *dt, uint64_t x, unsigned char *fill,
                         struct errbuf *err)
{
    if (dt->kind == DT_UINT && dt->size == 8) {
        memcpy(fill, &x, 8);
        return 0;
    }
    if (dt->kind == DT_FLOAT) {
        double d = (double)x;
        dtype_from_double(dt, &d, fill, 1);
        return 0;
    }
    return err_set(err, -EINVAL, "\"fill_value\": out of range for the dtype (got %llu)",
                   (unsigned long long)x);
}

int zarr_json_parse_fill(const struct dtype *dt, json_t *v, bool v3, unsigned char *fill,
                         bool *is_null, struct errbuf *err)
{
    memset(fill, 0, 8);
    *is_null = false;
    if (!v)
        return bad_value(err, "fill_value", v, "required key is missing");
    uint64_t big;
    if (big_fill_value(json_string_value(v), &big))
        return fill_from_big(dt, big, fill, err);
    if (json_is_null(v)) {
        if (v3)
            return bad_value(err, "fill_value", v, "null is not allowed in Zarr v3");
        *is_null = true;
        return 0;
    }
    if (json_is_boolean(v)) {
        if (dt->kind != DT_BOOL)
            return bad_value(err, "fill_value", v, "a boolean needs a bool dtype");
        fill[0] = json_is_true(v);
        return 0;
    }
    if (json_is_integer(v))
        return fill_from_int(dt, v, fill, err);
    if (json_is_real(v))
        return fill_from_real(dt, v, json_real_value(v), fill, err);
    const char *s = json_string_value(v);
    double d;
    if (s && strcmp(s, "NaN") == 0)
        d = NAN;
    else if (s && strcmp(s, "Infinity") == 0)
        d = INFINITY;
    else if (s && strcmp(s, "-Infinity") == 0)
        d = -INFINITY;
    else if (v3 && s && (strncmp(s, "0x", 2) == 0 || strncmp(s, "0X", 2) == 0))
        return fill_from_hex(dt, v, s, fill, err);
    else
        return bad_value(err, "fill_value", v,
                         v3 ? "expected a number, a boolean, \"NaN\", \"Infinity\", "
                              "\"-Infinity\" or a hex bit pattern such as \"0x7fc00000\""
                            : "expected a number, a boolean, null, \"NaN\", "
                              "\"Infinity\" or \"-Infinity\"");
    if (dt->kind != DT_FLOAT)
        return bad_value(err, "fill_value", v, "non-finite values need a float dtype");
    dtype_from_double(dt, &d, fill, 1);
    return 0;
}

static int parse_fill(json_t *root, struct zarr_meta *m, struct errbuf *err)
{
    return zarr_json_parse_fill(&m->dtype, json_object_get(root, "fill_value"), false, m->fill,
                                &m->fill_null, err);
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
    json_t *root = zarr_json_load(json, len, &jerr);
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

/* True when the float element at p is NaN with other bits than the canonical quiet NaN. */
static bool odd_nan(const struct dtype *dt, const unsigned char *p, uint64_t *bits)
{
    uint64_t b = 0;
    memcpy(&b, p, dt->size);
    *bits = b;
    switch (dt->size) {
    case 2:
        return (b & 0x7c00) == 0x7c00 && (b & 0x3ff) && b != 0x7e00;
    case 4:
        return (b & 0x7f800000) == 0x7f800000 && (b & 0x7fffff) && b != 0x7fc00000;
    default:
        return (b & 0x7ff0000000000000ULL) == 0x7ff0000000000000ULL && (b & 0xfffffffffffffULL) &&
               b != 0x7ff8000000000000ULL;
    }
}

json_t *zarr_json_fill(const struct zarr_meta *m, bool v3, uint64_t *big)
{
    const struct dtype *dt = &m->dtype;
    if (dt->kind == DT_BOOL)
        return json_boolean(m->fill[0] != 0);
    if (dt->kind == DT_FLOAT) {
        uint64_t bits;
        if (v3 && odd_nan(dt, m->fill, &bits)) {
            char hex[24];
            snprintf(hex, sizeof hex, "0x%0*llx", (int)dt->size * 2, (unsigned long long)bits);
            return json_string(hex);
        }
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
        return json_string(ZARR_JSON_BIG_MARK);
    }
    return json_integer((json_int_t)l);
}

char *zarr_json_dump(json_t *root, bool sort_keys, uint64_t big)
{
    char *text = json_dumps(root, JSON_INDENT(4) | (sort_keys ? JSON_SORT_KEYS : 0));
    json_decref(root);
    if (!text)
        abort(); /* jansson only fails to dump on allocation failure */
    char *mark = strstr(text, "\"" ZARR_JSON_BIG_MARK "\"");
    if (mark) {
        *mark = '\0';
        char *out = xasprintf("%s%" PRIu64 "%s", text, big, mark + strlen(ZARR_JSON_BIG_MARK) + 2);
        free(text);
        text = out;
    }
    char *out = xasprintf("%s\n", text);
    free(text);
    return out;
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
    json_object_set_new(root, "fill_value", zarr_json_fill(m, false, &big));
    json_object_set_new(root, "order", json_string("C"));
    json_object_set_new(root, "filters", json_null());
    char sep[2] = {m->separator == '/' ? '/' : '.', '\0'};
    json_object_set_new(root, "dimension_separator", json_string(sep));
    return zarr_json_dump(root, true, big);
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

const uint64_t *zarr_meta_read_chunks(const struct zarr_meta *m)
{
    return m->sharded ? m->shard.inner : m->chunks;
}

void zarr_meta_chunk_key(const struct zarr_meta *m, const uint64_t *idx, char *buf, size_t len)
{
    if (len == 0)
        return;
    if (m->ndim == 0) {
        snprintf(buf, len, "%s", m->key_prefix_c ? "c" : "0");
        return;
    }
    /* "c/" or "" then the indices joined by the separator; written by hand, as snprintf was
     * a few percent of a small ROI's cost (every input read looks up its chunk file) */
    char tmp[ROIFS_MAX_DIM * 22 + 4];
    size_t pos = 0;
    if (m->key_prefix_c) {
        tmp[pos++] = 'c';
        tmp[pos++] = m->separator;
    }
    for (int i = 0; i < m->ndim; i++) {
        if (i)
            tmp[pos++] = m->separator;
        pos += u64_dec(tmp + pos, idx[i]);
    }
    size_t n = pos < len ? pos : len - 1; /* truncated as snprintf would */
    memcpy(buf, tmp, n);
    buf[n] = '\0';
}

int zarr_meta_parse_v2_vlen_utf8(const char *json, size_t len, uint64_t *n, uint64_t *chunk,
                                 struct zarr_codec *c, struct errbuf *err)
{
    json_error_t jerr;
    json_t *root = json_loadb(json, len, 0, &jerr);
    if (!root)
        return err_set(err, -EINVAL, "invalid JSON at line %d, column %d: %s", jerr.line,
                       jerr.column, jerr.text);
    int r = -EINVAL;
    json_t *v = json_object_get(root, "dtype");
    json_t *f = json_object_get(root, "filters");
    json_t *f0 = json_array_get(f, 0);
    json_t *shape = json_object_get(root, "shape"), *chunks = json_object_get(root, "chunks");
    if (!json_is_object(root)) {
        err_set(err, r, "expected a JSON object");
    } else if (!json_is_string(v) || strcmp(json_string_value(v), "|O") != 0) {
        bad_value(err, "dtype", v, "expected \"|O\" (a string array)");
    } else if (json_array_size(f) != 1 || !json_is_string(json_object_get(f0, "id")) ||
               strcmp(json_string_value(json_object_get(f0, "id")), "vlen-utf8") != 0) {
        bad_value(err, "filters", f, "expected [{\"id\": \"vlen-utf8\"}]");
    } else if (json_array_size(shape) != 1 || json_array_size(chunks) != 1 ||
               !json_is_integer(json_array_get(shape, 0)) ||
               !json_is_integer(json_array_get(chunks, 0)) ||
               json_integer_value(json_array_get(shape, 0)) < 0 ||
               json_integer_value(json_array_get(chunks, 0)) <= 0) {
        bad_value(err, "shape", shape, "expected a 1-D array with positive chunks");
    } else if (parse_compressor(root, c, err) == 0) {
        *n = (uint64_t)json_integer_value(json_array_get(shape, 0));
        *chunk = (uint64_t)json_integer_value(json_array_get(chunks, 0));
        r = 0;
    }
    json_decref(root);
    return r;
}
