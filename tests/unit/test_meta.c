/* test_meta.c: unit tests for .zarray parsing and emission, chunk grids and chunk keys. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "zarr/zarr.h"

static int parse(const char *json, struct zarr_meta *m, struct errbuf *err)
{
    return zarr_meta_parse_v2(json, strlen(json), m, err);
}

static void test_parse_real_file(void)
{
    /* written by fractal-tasks-core (zarr-python 2) */
    const char *z = "{\"chunks\":[1,1,2160,2560],\"compressor\":{\"blocksize\":0,\"clevel\":5,"
                    "\"cname\":\"lz4\",\"id\":\"blosc\",\"shuffle\":1},\"dimension_separator\":"
                    "\"/\",\"dtype\":\"<u2\",\"fill_value\":0,\"filters\":null,\"order\":\"C\","
                    "\"shape\":[2,2,4320,2560],\"zarr_format\":2}";
    struct zarr_meta m;
    struct errbuf err = {{0}};
    CHECK_EQ_INT(parse(z, &m, &err), 0);
    CHECK_EQ_INT(m.format, 2);
    CHECK_EQ_INT(m.ndim, 4);
    CHECK(m.shape[0] == 2 && m.shape[2] == 4320 && m.shape[3] == 2560);
    CHECK(m.chunks[0] == 1 && m.chunks[2] == 2160 && m.chunks[3] == 2560);
    CHECK(m.dtype.kind == DT_UINT && m.dtype.size == 2 && !m.dtype.big_endian);
    CHECK(m.compressor.id == ZC_BLOSC && m.compressor.level == 5 && m.compressor.shuffle == 1);
    CHECK(strcmp(m.compressor.cname, "lz4") == 0 && m.compressor.blocksize == 0);
    CHECK(m.separator == '/' && !m.fortran_order && !m.fill_null);
    uint64_t grid[4];
    zarr_meta_grid(&m, grid);
    CHECK(grid[0] == 2 && grid[1] == 2 && grid[2] == 2 && grid[3] == 1);
    CHECK_EQ_INT(zarr_meta_chunk_nbytes(&m), 2160 * 2560 * 2);
    char key[256];
    uint64_t idx[] = {1, 0, 1, 0};
    zarr_meta_chunk_key(&m, idx, key, sizeof key);
    CHECK(strcmp(key, "1/0/1/0") == 0);
    m.separator = '.';
    zarr_meta_chunk_key(&m, idx, key, sizeof key);
    CHECK(strcmp(key, "1.0.1.0") == 0);
}

static const char *with(const char *key_and_value)
{
    /* a valid .zarray, with one member replaced (later duplicates are not allowed, so the
     * replacement is spliced in place of a marker) */
    static char buf[2048];
    const char *base = "{\"zarr_format\": 2, \"shape\": [10, 20], \"chunks\": [4, 8], "
                       "\"dtype\": \"<i2\", \"compressor\": null, \"fill_value\": 0, "
                       "\"order\": \"C\", \"filters\": null%s}";
    snprintf(buf, sizeof buf, base, key_and_value);
    return buf;
}

static void test_defaults_and_variants(void)
{
    struct zarr_meta m;
    struct errbuf err = {{0}};
    CHECK_EQ_INT(parse(with(""), &m, &err), 0);
    CHECK(m.separator == '.' && m.compressor.id == ZC_NONE);
    CHECK_EQ_INT(parse(with(", \"dimension_separator\": null, \"attributes\": 5"), &m, &err), 0);
    CHECK(m.separator == '.');
    /* replace values by editing a copy of the base text */
    const char *z = "{\"zarr_format\":2,\"shape\":[5],\"chunks\":[5],\"dtype\":\"|u1\","
                    "\"compressor\":{\"id\":\"blosc\"},\"fill_value\":null,\"order\":\"F\","
                    "\"filters\":[]}";
    CHECK_EQ_INT(parse(z, &m, &err), 0);
    CHECK(m.compressor.id == ZC_BLOSC && m.compressor.level == 5 && m.compressor.shuffle == 1);
    CHECK(strcmp(m.compressor.cname, "lz4") == 0);
    CHECK(m.fill_null && m.fill[0] == 0 && m.fortran_order);
    z = "{\"zarr_format\":2,\"shape\":[5],\"chunks\":[5],\"dtype\":\"<f4\","
        "\"compressor\":{\"id\":\"zstd\",\"level\":3,\"checksum\":false},\"fill_value\":\"NaN\","
        "\"order\":\"C\",\"filters\":null}";
    CHECK_EQ_INT(parse(z, &m, &err), 0);
    float f;
    memcpy(&f, m.fill, 4);
    CHECK(m.compressor.id == ZC_ZSTD && m.compressor.level == 3 && isnan(f));
    z = "{\"zarr_format\":2,\"shape\":[5],\"chunks\":[5],\"dtype\":\">f8\","
        "\"compressor\":{\"id\":\"gzip\"},\"fill_value\":\"-Infinity\","
        "\"order\":\"C\",\"filters\":null}";
    CHECK_EQ_INT(parse(z, &m, &err), 0);
    double d;
    memcpy(&d, m.fill, 8);
    CHECK(m.compressor.id == ZC_GZIP && m.compressor.level == 1 && isinf(d) && d < 0);
    CHECK(m.dtype.big_endian);
    z = "{\"zarr_format\":2,\"shape\":[5],\"chunks\":[5],\"dtype\":\">i2\","
        "\"compressor\":{\"id\":\"zlib\",\"level\":9},\"fill_value\":-7,"
        "\"order\":\"C\",\"filters\":null}";
    CHECK_EQ_INT(parse(z, &m, &err), 0);
    int16_t s16;
    memcpy(&s16, m.fill, 2); /* fill is kept in native byte order */
    CHECK(s16 == -7 && m.compressor.id == ZC_ZLIB && m.compressor.level == 9);
    z = "{\"zarr_format\":2,\"shape\":[5],\"chunks\":[5],\"dtype\":\"|b1\","
        "\"compressor\":null,\"fill_value\":true,\"order\":\"C\",\"filters\":null}";
    CHECK_EQ_INT(parse(z, &m, &err), 0);
    CHECK(m.fill[0] == 1);
    z = "{\"zarr_format\":2,\"shape\":[5],\"chunks\":[5],\"dtype\":\"<f2\","
        "\"compressor\":null,\"fill_value\":1.5,\"order\":\"C\",\"filters\":null}";
    CHECK_EQ_INT(parse(z, &m, &err), 0);
    CHECK(m.fill[0] == 0x00 && m.fill[1] == 0x3e);
    z = "{\"zarr_format\":2,\"shape\":[],\"chunks\":[],\"dtype\":\"<i8\","
        "\"compressor\":null,\"fill_value\":-9223372036854775808,\"order\":\"C\","
        "\"filters\":null}";
    CHECK_EQ_INT(parse(z, &m, &err), 0);
    int64_t s64;
    memcpy(&s64, m.fill, 8);
    CHECK(m.ndim == 0 && s64 == INT64_MIN);
    CHECK_EQ_INT(zarr_meta_chunk_nbytes(&m), 8);
    char key[8];
    zarr_meta_chunk_key(&m, NULL, key, sizeof key);
    CHECK(strcmp(key, "0") == 0);
}

/* Invalid .zarray texts, the key each error must name, and a detail it must mention. */
static const struct {
    const char *json, *key, *detail;
} bad_zarray[] = {
    {"{\"zarr_format\": 3}", "zarr_format", "2"},
    {"[1, 2]", "object", ""},
    {"{\"zarr_format\": 2, ", "invalid JSON", "line"},
    {"{\"zarr_format\":2,\"shape\":[10,0],\"chunks\":[4,8],\"dtype\":\"<i2\","
     "\"compressor\":null,\"fill_value\":0,\"order\":\"C\",\"filters\":null}",
     "shape", "empty array not supported"},
    {"{\"zarr_format\":2,\"shape\":[10,-1],\"chunks\":[4,8],\"dtype\":\"<i2\","
     "\"compressor\":null,\"fill_value\":0,\"order\":\"C\",\"filters\":null}",
     "shape", "[10,-1]"},
    {"{\"zarr_format\":2,\"chunks\":[4,8],\"dtype\":\"<i2\","
     "\"compressor\":null,\"fill_value\":0,\"order\":\"C\",\"filters\":null}",
     "shape", "missing"},
    {"{\"zarr_format\":2,\"shape\":[10,2.5],\"chunks\":[4,8],\"dtype\":\"<i2\","
     "\"compressor\":null,\"fill_value\":0,\"order\":\"C\",\"filters\":null}",
     "shape", "integers"},
    {"{\"zarr_format\":2,\"shape\":[10,20],\"chunks\":[4],\"dtype\":\"<i2\","
     "\"compressor\":null,\"fill_value\":0,\"order\":\"C\",\"filters\":null}",
     "chunks", "as many"},
    {"{\"zarr_format\":2,\"shape\":[10,20],\"chunks\":[4,0],\"dtype\":\"<i2\","
     "\"compressor\":null,\"fill_value\":0,\"order\":\"C\",\"filters\":null}",
     "chunks", "positive"},
    {"{\"zarr_format\":2,\"shape\":[10,20],\"chunks\":[100000,100000],\"dtype\":\"<i2\","
     "\"compressor\":null,\"fill_value\":0,\"order\":\"C\",\"filters\":null}",
     "chunks", "2 GiB"},
    {"{\"zarr_format\":2,\"shape\":[10,20],\"chunks\":[4,8],\"dtype\":\"<c8\","
     "\"compressor\":null,\"fill_value\":0,\"order\":\"C\",\"filters\":null}",
     "dtype", "<c8"},
    {"{\"zarr_format\":2,\"shape\":[10,20],\"chunks\":[4,8],\"dtype\":\"|O\","
     "\"compressor\":null,\"fill_value\":0,\"order\":\"C\",\"filters\":[{\"id\":"
     "\"vlen-utf8\"}]}",
     "dtype", "object"},
    {"{\"zarr_format\":2,\"shape\":[10,20],\"chunks\":[4,8],\"dtype\":\"<U5\","
     "\"compressor\":null,\"fill_value\":\"\",\"order\":\"C\",\"filters\":null}",
     "dtype", "<U5"},
    {"{\"zarr_format\":2,\"shape\":[10,20],\"chunks\":[4,8],\"dtype\":[[\"r\",\"|u1\"]],"
     "\"compressor\":null,\"fill_value\":0,\"order\":\"C\",\"filters\":null}",
     "dtype", "structured"},
    {"{\"zarr_format\":2,\"shape\":[10,20],\"chunks\":[4,8],\"dtype\":\"uint16\","
     "\"compressor\":null,\"fill_value\":0,\"order\":\"C\",\"filters\":null}",
     "dtype", "uint16"},
    {"{\"zarr_format\":2,\"shape\":[10,20],\"chunks\":[4,8],\"dtype\":\"<i2\","
     "\"compressor\":{\"id\":\"lz4\",\"acceleration\":1},\"fill_value\":0,\"order\":\"C\","
     "\"filters\":null}",
     "compressor", "\"lz4\""},
    {"{\"zarr_format\":2,\"shape\":[10,20],\"chunks\":[4,8],\"dtype\":\"<i2\","
     "\"compressor\":{\"id\":\"blosc\",\"cname\":\"brotli\"},\"fill_value\":0,"
     "\"order\":\"C\",\"filters\":null}",
     "compressor.cname", "brotli"},
    {"{\"zarr_format\":2,\"shape\":[10,20],\"chunks\":[4,8],\"dtype\":\"<i2\","
     "\"compressor\":{\"id\":\"blosc\",\"clevel\":12},\"fill_value\":0,"
     "\"order\":\"C\",\"filters\":null}",
     "compressor.clevel", "12"},
    {"{\"zarr_format\":2,\"shape\":[10,20],\"chunks\":[4,8],\"dtype\":\"<i2\","
     "\"compressor\":{\"id\":\"blosc\",\"shuffle\":3},\"fill_value\":0,"
     "\"order\":\"C\",\"filters\":null}",
     "compressor.shuffle", "3"},
    {"{\"zarr_format\":2,\"shape\":[10,20],\"chunks\":[4,8],\"dtype\":\"<i2\","
     "\"compressor\":\"zlib\",\"fill_value\":0,\"order\":\"C\",\"filters\":null}",
     "compressor", "zlib"},
    {"{\"zarr_format\":2,\"shape\":[10,20],\"chunks\":[4,8],\"dtype\":\"<i2\","
     "\"fill_value\":0,\"order\":\"C\",\"filters\":null}",
     "compressor", "missing"},
    {"{\"zarr_format\":2,\"shape\":[10,20],\"chunks\":[4,8],\"dtype\":\"<i2\","
     "\"compressor\":null,\"fill_value\":0,\"order\":\"C\",\"filters\":[{\"id\":"
     "\"delta\",\"dtype\":\"<i2\"}]}",
     "filters", "delta"},
    {"{\"zarr_format\":2,\"shape\":[10,20],\"chunks\":[4,8],\"dtype\":\"<i2\","
     "\"compressor\":null,\"fill_value\":0,\"order\":\"K\",\"filters\":null}",
     "order", "K"},
    {"{\"zarr_format\":2,\"shape\":[10,20],\"chunks\":[4,8],\"dtype\":\"<i2\","
     "\"compressor\":null,\"fill_value\":0,\"order\":\"C\",\"filters\":null,"
     "\"dimension_separator\":\"-\"}",
     "dimension_separator", "-"},
    {"{\"zarr_format\":2,\"shape\":[10,20],\"chunks\":[4,8],\"dtype\":\"|u1\","
     "\"compressor\":null,\"fill_value\":300,\"order\":\"C\",\"filters\":null}",
     "fill_value", "300"},
    {"{\"zarr_format\":2,\"shape\":[10,20],\"chunks\":[4,8],\"dtype\":\"<u4\","
     "\"compressor\":null,\"fill_value\":-1,\"order\":\"C\",\"filters\":null}",
     "fill_value", "-1"},
    {"{\"zarr_format\":2,\"shape\":[10,20],\"chunks\":[4,8],\"dtype\":\"<i2\","
     "\"compressor\":null,\"fill_value\":1.5,\"order\":\"C\",\"filters\":null}",
     "fill_value", "1.5"},
    {"{\"zarr_format\":2,\"shape\":[10,20],\"chunks\":[4,8],\"dtype\":\"<i2\","
     "\"compressor\":null,\"fill_value\":\"NaN\",\"order\":\"C\",\"filters\":null}",
     "fill_value", "NaN"},
    {"{\"zarr_format\":2,\"shape\":[10,20],\"chunks\":[4,8],\"dtype\":\"<f4\","
     "\"compressor\":null,\"fill_value\":\"nan\",\"order\":\"C\",\"filters\":null}",
     "fill_value", "nan"},
    {"{\"zarr_format\":2,\"shape\":[10,20],\"chunks\":[4,8],\"dtype\":\"<i2\","
     "\"compressor\":null,\"fill_value\":true,\"order\":\"C\",\"filters\":null}",
     "fill_value", "true"},
    {"{\"zarr_format\":2,\"shape\":[10,20],\"chunks\":[4,8],\"dtype\":\"<i2\","
     "\"compressor\":null,\"order\":\"C\",\"filters\":null}",
     "fill_value", "missing"},
};

static void test_errors_name_the_key(void)
{
    for (size_t i = 0; i < sizeof bad_zarray / sizeof bad_zarray[0]; i++) {
        struct zarr_meta m;
        struct errbuf err = {{0}};
        int r = parse(bad_zarray[i].json, &m, &err);
        CHECK_EQ_INT(r, -EINVAL);
        CHECK_STR_CONTAINS(err.msg, bad_zarray[i].key);
        CHECK_STR_CONTAINS(err.msg, bad_zarray[i].detail);
    }
}

static struct zarr_meta sample_meta(int variant)
{
    struct zarr_meta m;
    memset(&m, 0, sizeof m);
    struct errbuf err;
    static const char *const dtypes[] = {"<u2", "|u1", ">i4", "<f4", "<f8", "|b1", "<i8", "<f2"};
    dtype_parse(dtypes[variant % 8], &m.dtype, &err);
    m.format = 2;
    m.ndim = 1 + variant % 3;
    for (int d = 0; d < m.ndim; d++) {
        m.shape[d] = 100 + (uint64_t)(d * 37 + variant);
        m.chunks[d] = 16 + (uint64_t)d;
    }
    m.separator = variant % 2 ? '/' : '.';
    m.compressor.id = (enum zarr_codec_id)(variant % 5);
    m.compressor.level = m.compressor.id == ZC_BLOSC ? 5 : m.compressor.id == ZC_NONE ? 0 : 3;
    if (m.compressor.id == ZC_BLOSC) {
        strcpy(m.compressor.cname, variant % 3 ? "zstd" : "lz4");
        m.compressor.shuffle = variant % 3;
    }
    double fills[] = {0, 7, -3, 1.5, NAN, INFINITY, -INFINITY, 1e300};
    double f = fills[variant % 8];
    if (m.dtype.kind != DT_FLOAT && !isfinite(f))
        f = 1;
    dtype_from_double(&m.dtype, &f, m.fill, 1);
    return m;
}

static void test_emit_parse_round_trip(void)
{
    for (int v = 0; v < 40; v++) {
        struct zarr_meta m = sample_meta(v), back;
        char *text = zarr_meta_emit_v2(&m);
        struct errbuf err = {{0}};
        int r = zarr_meta_parse_v2(text, strlen(text), &back, &err);
        CHECK_EQ_INT(r, 0);
        if (r < 0) {
            fprintf(stderr, "  %s\n%s\n", err.msg, text);
            free(text);
            continue;
        }
        CHECK(back.ndim == m.ndim && back.separator == m.separator);
        CHECK(memcmp(back.shape, m.shape, sizeof m.shape) == 0);
        CHECK(memcmp(back.chunks, m.chunks, sizeof m.chunks) == 0);
        CHECK(memcmp(&back.dtype, &m.dtype, sizeof m.dtype) == 0);
        CHECK(back.compressor.id == m.compressor.id);
        CHECK(back.compressor.level == m.compressor.level);
        CHECK(strcmp(back.compressor.cname, m.compressor.cname) == 0);
        CHECK(memcmp(back.fill, m.fill, m.dtype.size) == 0);
        CHECK(!back.fortran_order && !back.fill_null);
        free(text);
    }
}

static void test_emit_format(void)
{
    struct zarr_meta m = sample_meta(1); /* |u1, 2-d, blosc zstd shuffle 1, '/' */
    m.compressor.shuffle = -1;
    char *text = zarr_meta_emit_v2(&m);
    /* sorted keys, 4-space indent, the way zarr-python 2 writes .zarray */
    const char *order[] = {"\"chunks\"", "\"compressor\"", "\"dimension_separator\"",
                           "\"dtype\"",  "\"fill_value\"", "\"filters\"",
                           "\"order\"",  "\"shape\"",      "\"zarr_format\""};
    const char *prev = text;
    for (int i = 0; i < 9; i++) {
        const char *p = strstr(text, order[i]);
        CHECK(p != NULL && p >= prev);
        prev = p ? p : prev;
    }
    CHECK_STR_CONTAINS(text, "\n    \"chunks\": [");
    CHECK_STR_CONTAINS(text, "\"filters\": null");
    CHECK_STR_CONTAINS(text, "\"order\": \"C\"");
    CHECK_STR_CONTAINS(text, "\"dimension_separator\": \"/\"");
    CHECK_STR_CONTAINS(text, "\"dtype\": \"|u1\"");
    CHECK_STR_CONTAINS(text, "\"zarr_format\": 2");
    CHECK_STR_CONTAINS(text, "\"shuffle\": 2"); /* auto resolved: bit shuffle for 1-byte types */
    CHECK_STR_CONTAINS(text, "\"blocksize\": 0");
    CHECK(strstr(text, "typesize") == NULL);
    CHECK(text[strlen(text) - 1] == '\n');
    free(text);
    /* fill values: NaN and infinities as strings, floats as floats, bools as bools */
    m = sample_meta(4); /* <f8, NaN */
    text = zarr_meta_emit_v2(&m);
    CHECK_STR_CONTAINS(text, "\"fill_value\": \"NaN\"");
    free(text);
    m = sample_meta(6); /* <i8 */
    int64_t big = INT64_MIN;
    memcpy(m.fill, &big, 8);
    text = zarr_meta_emit_v2(&m);
    CHECK_STR_CONTAINS(text, "\"fill_value\": -9223372036854775808,");
    free(text);
    m = sample_meta(13); /* |b1 */
    m.fill[0] = 1;
    text = zarr_meta_emit_v2(&m);
    CHECK_STR_CONTAINS(text, "\"fill_value\": true");
    free(text);
    m = sample_meta(3); /* <f4 1.5 */
    text = zarr_meta_emit_v2(&m);
    CHECK_STR_CONTAINS(text, "\"fill_value\": 1.5");
    free(text);
    m = sample_meta(0); /* <u2 0 */
    m.compressor.id = ZC_NONE;
    m.fortran_order = true;
    text = zarr_meta_emit_v2(&m);
    CHECK_STR_CONTAINS(text, "\"fill_value\": 0,");
    CHECK_STR_CONTAINS(text, "\"compressor\": null");
    CHECK_STR_CONTAINS(text, "\"order\": \"C\"");
    free(text);
    /* uint64 beyond INT64_MAX is written exactly */
    m = sample_meta(0);
    dtype_parse("<u8", &m.dtype, NULL);
    uint64_t u = UINT64_MAX;
    memcpy(m.fill, &u, 8);
    text = zarr_meta_emit_v2(&m);
    CHECK_STR_CONTAINS(text, "\"fill_value\": 18446744073709551615,");
    json_error_t jerr;
    json_t *j = json_loads(text, 0, &jerr); /* still valid JSON apart from the big number */
    CHECK(j == NULL || json_is_object(j));
    json_decref(j);
    free(text);
}

/* Regression: zarr-python writes uint64 fill values above INT64_MAX as plain JSON numbers,
 * which jansson refuses ("too big integer"); such arrays were rejected as invalid JSON. */
static void test_big_uint64_fill(void)
{
    struct zarr_meta m;
    struct errbuf err = {{0}};
    char z[512];
    const char *fmt = "{\"chunks\": [2], \"compressor\": null, \"dtype\": \"%s\", "
                      "\"fill_value\":%s, \"filters\": null, \"order\": \"C\", "
                      "\"shape\": [5], \"zarr_format\": 2}";
    snprintf(z, sizeof z, fmt, "<u8", "  18446744073709551615\n");
    CHECK_EQ_INT(parse(z, &m, &err), 0);
    uint64_t f;
    memcpy(&f, m.fill, 8);
    CHECK(f == UINT64_MAX && !m.fill_null);
    char *text = zarr_meta_emit_v2(&m); /* the emitter writes it the same way */
    CHECK(strstr(text, "\"fill_value\": 18446744073709551615") != NULL);
    struct zarr_meta m2;
    CHECK_EQ_INT(zarr_meta_parse_v2(text, strlen(text), &m2, &err), 0);
    CHECK(memcmp(m2.fill, m.fill, 8) == 0);
    free(text);
    snprintf(z, sizeof z, fmt, ">u8", "9223372036854775813");
    CHECK_EQ_INT(parse(z, &m, &err), 0);
    memcpy(&f, m.fill, 8);
    CHECK(f == 9223372036854775813ULL);
    snprintf(z, sizeof z, fmt, "<f8", "18446744073709551615");
    CHECK_EQ_INT(parse(z, &m, &err), 0);
    double d;
    memcpy(&d, m.fill, 8);
    CHECK(d == 18446744073709551615.0);
    /* rejected: out of the dtype's range, or a big number under a key other than fill_value
     * (msg NULL: any message) */
    static const struct {
        const char *dtype, *fill, *msg;
    } bad[] = {
        {"<i8", "9223372036854775808",
         "\"fill_value\": out of range for the dtype (got 9223372036854775808)"},
        {"<u8", "18446744073709551616", "too big integer"}, /* 2^64: still too big */
        {"<u8", "-9223372036854775809", NULL},
        {"<u8", "0, \"x\": 18446744073709551615", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(z, sizeof z, fmt, bad[i].dtype, bad[i].fill);
        CHECK_EQ_INT(parse(z, &m, &err), -EINVAL);
        if (bad[i].msg)
            CHECK_STR_CONTAINS(err.msg, bad[i].msg);
    }
    /* a big number elsewhere, even under a key named fill_value, is still an error */
    const char *nested = "{\"chunks\": [2], \"compressor\": {\"id\": \"zlib\", \"fill_value\": "
                         "18446744073709551615}, \"dtype\": \"<u8\", \"fill_value\": 0, "
                         "\"filters\": null, \"order\": \"C\", \"shape\": [5], \"zarr_format\": 2}";
    CHECK_EQ_INT(parse(nested, &m, &err), -EINVAL);
    CHECK_STR_CONTAINS(err.msg, "too big integer");
    /* the same in zarr.json, which zarr-python 3 writes likewise */
    const char *v3 = "{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[7],\"data_type\":"
                     "\"uint64\",\"chunk_grid\":{\"name\":\"regular\",\"configuration\":{"
                     "\"chunk_shape\":[7]}},\"chunk_key_encoding\":{\"name\":\"default\"},"
                     "\"fill_value\":18446744073709551615,\"codecs\":[{\"name\":\"bytes\","
                     "\"configuration\":{\"endian\":\"little\"}}]}";
    CHECK_EQ_INT(zarr_meta_parse_v3(v3, strlen(v3), &m, NULL, NULL, &err), 0);
    memcpy(&f, m.fill, 8);
    CHECK(f == UINT64_MAX);
    text = zarr_meta_emit_v3(&m, NULL, NULL);
    CHECK(strstr(text, "\"fill_value\": 18446744073709551615") != NULL);
    CHECK_EQ_INT(zarr_meta_parse_v3(text, strlen(text), &m2, NULL, NULL, &err), 0);
    CHECK(memcmp(m2.fill, m.fill, 8) == 0);
    free(text);
}

/* Chunk keys are written by hand (no printf): exactly what snprintf gave, for every index
 * size up to UINT64_MAX, with and without the v3 "c" prefix, and truncated to the buffer. */
static void test_chunk_key_as_printf(void)
{
    struct zarr_meta m = {0};
    m.ndim = 3;
    uint64_t vals[] = {0, 7, 9, 10, 99, 100, 123456789, 18446744073709551615ull};
    char key[256], want[256], dec[21];
    for (size_t a = 0; a < sizeof vals / sizeof *vals; a++) {
        snprintf(want, sizeof want, "%" PRIu64, vals[a]);
        CHECK_EQ_INT(u64_dec(dec, vals[a]), strlen(want));
        CHECK(strcmp(dec, want) == 0);
        uint64_t idx[] = {vals[a], 0, vals[(a + 3) % 8]};
        for (int c = 0; c < 2; c++) {
            m.key_prefix_c = c;
            m.separator = c ? '/' : '.';
            zarr_meta_chunk_key(&m, idx, key, sizeof key);
            snprintf(want, sizeof want, "%s%" PRIu64 "%c0%c%" PRIu64, c ? "c/" : "", idx[0],
                     m.separator, m.separator, idx[2]);
            CHECK(strcmp(key, want) == 0);
            char small[6];
            zarr_meta_chunk_key(&m, idx, small, sizeof small);
            CHECK(strncmp(small, want, 5) == 0 &&
                  strlen(small) == (strlen(want) < 5 ? strlen(want) : 5));
        }
    }
    struct strbuf sb = {0};
    sb_add_u64(&sb, 0);
    sb_append(&sb, ":", 1);
    sb_add_u64(&sb, 18446744073709551615ull);
    CHECK(strcmp(sb.buf, "0:18446744073709551615") == 0);
    sb_free(&sb);
}

int main(void)
{
    RUN(test_chunk_key_as_printf);
    RUN(test_parse_real_file);
    RUN(test_defaults_and_variants);
    RUN(test_errors_name_the_key);
    RUN(test_emit_parse_round_trip);
    RUN(test_emit_format);
    RUN(test_big_uint64_fill);
    return check_done();
}
