/* test_v3.c: unit tests for Zarr v3 metadata: crc32c, zarr.json parsing (valid, fill values,
 * invalid), chunk keys. Emission, the codecs, shards and the input reader on v3 arrays are
 * in test_v3_codecs.c. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "scratch.h"
#include "nd.h"
#include "zarr/zarr.h"

static uint64_t rnd_state = 0x2545F4914F6CDD1DULL;
static uint64_t rnd(void)
{
    return check_xorshift(&rnd_state);
}

static int parse(const char *json, struct zarr_meta *m, struct errbuf *err)
{
    return zarr_meta_parse_v3(json, strlen(json), m, NULL, NULL, err);
}

/* ---- crc32c ---- */

static uint32_t crc32c_bitwise(const unsigned char *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    while (n--) {
        c ^= *p++;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return ~c;
}

static void test_crc32c(void)
{
    CHECK_EQ_INT(zarr_crc32c(0, "123456789", 9), 0xE3069283u);
    CHECK_EQ_INT(zarr_crc32c(0, "", 0), 0);
    unsigned char buf[1000];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (unsigned char)rnd();
    for (size_t off = 0; off < 9; off++) /* every alignment, every tail length */
        for (size_t n = 0; n < 40; n++)
            CHECK_EQ_INT(zarr_crc32c(0, buf + off, n), crc32c_bitwise(buf + off, n));
    CHECK_EQ_INT(zarr_crc32c(0, buf, sizeof buf), crc32c_bitwise(buf, sizeof buf));
    /* continuing a CRC equals computing it at once */
    CHECK_EQ_INT(zarr_crc32c(zarr_crc32c(0, buf, 333), buf + 333, sizeof buf - 333),
                 zarr_crc32c(0, buf, sizeof buf));
}

/* ---- zarr.json parsing ---- */

static const char *const ngio_example =
    "{\"shape\":[2,10,64,64],\"data_type\":\"uint16\","
    "\"chunk_grid\":{\"name\":\"regular\",\"configuration\":{\"chunk_shape\":[2,10,64,64]}},"
    "\"chunk_key_encoding\":{\"name\":\"default\",\"configuration\":{\"separator\":\"/\"}},"
    "\"fill_value\":0,"
    "\"codecs\":[{\"name\":\"bytes\",\"configuration\":{\"endian\":\"little\"}},"
    "{\"name\":\"zstd\",\"configuration\":{\"level\":0,\"checksum\":false}}],"
    "\"attributes\":{\"a\": [1, 2]},\"dimension_names\":[\"c\",\"z\",\"y\",\"x\"],"
    "\"zarr_format\":3,\"node_type\":\"array\",\"storage_transformers\":[]}";

static void test_parse_valid(void)
{
    struct zarr_meta m;
    struct errbuf err = {{0}};
    char *attrs, *dims;
    int r = zarr_meta_parse_v3(ngio_example, strlen(ngio_example), &m, &attrs, &dims, &err);
    CHECK_EQ_INT(r, 0);
    if (r < 0) {
        fprintf(stderr, "%s\n", err.msg);
        return;
    }
    CHECK_EQ_INT(m.format, 3);
    CHECK_EQ_INT(m.ndim, 4);
    CHECK(m.shape[3] == 64 && m.chunks[1] == 10);
    CHECK(m.dtype.kind == DT_UINT && m.dtype.size == 2 && !m.dtype.big_endian);
    CHECK(m.key_prefix_c && m.separator == '/');
    CHECK(!m.sharded && !m.codecs.transpose && !m.codecs.big_endian);
    CHECK_EQ_INT(m.codecs.nbb, 1);
    CHECK(m.codecs.bb[0].c.id == ZC_ZSTD && !m.codecs.bb[0].crc32c);
    CHECK(m.compressor.id == ZC_ZSTD);
    CHECK(attrs && strcmp(attrs, "{\"a\":[1,2]}") == 0);
    CHECK(dims && strcmp(dims, "[\"c\",\"z\",\"y\",\"x\"]") == 0);
    free(attrs);
    free(dims);
    uint64_t idx[] = {1, 0, 3, 2};
    char key[128];
    zarr_meta_chunk_key(&m, idx, key, sizeof key);
    CHECK(strcmp(key, "c/1/0/3/2") == 0);

    /* short-hand names, a bytes codec without endian for one-byte types, v2 keys, sharding,
     * an extension that need not be understood */
    const char *j =
        "{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[10,9],\"data_type\":\"int8\","
        "\"chunk_grid\":{\"name\":\"regular\",\"configuration\":{\"chunk_shape\":[4,6]}},"
        "\"chunk_key_encoding\":{\"name\":\"v2\",\"configuration\":{\"separator\":\"/\"}},"
        "\"fill_value\":-3,\"codecs\":[{\"name\":\"sharding_indexed\",\"configuration\":{"
        "\"chunk_shape\":[2,3],\"codecs\":[{\"name\":\"transpose\",\"configuration\":{\"order\":"
        "[1,0]}},\"bytes\",{\"name\":\"blosc\",\"configuration\":{\"cname\":\"zstd\",\"clevel\":"
        "3,\"shuffle\":\"bitshuffle\",\"typesize\":1,\"blocksize\":0}},\"crc32c\"],"
        "\"index_codecs\":[{\"name\":\"bytes\",\"configuration\":{\"endian\":\"big\"}},"
        "\"crc32c\"],\"index_location\":\"start\"}}],"
        "\"my_extension\":{\"must_understand\":false,\"x\":1}}";
    CHECK_EQ_INT(parse(j, &m, &err), 0);
    CHECK(m.sharded && m.shard.index_at_start);
    CHECK(m.shard.inner[0] == 2 && m.shard.inner[1] == 3);
    CHECK(m.shard.codecs.transpose && m.shard.codecs.order[0] == 1);
    CHECK_EQ_INT(m.shard.codecs.nbb, 2);
    CHECK(m.shard.codecs.bb[0].c.id == ZC_BLOSC && m.shard.codecs.bb[0].c.shuffle == 2);
    CHECK(strcmp(m.shard.codecs.bb[0].c.cname, "zstd") == 0 && m.shard.codecs.bb[1].crc32c);
    CHECK(m.shard.index_codecs.big_endian && m.shard.index_codecs.nbb == 1);
    CHECK(m.fill[0] == (unsigned char)-3);
    CHECK(zarr_meta_read_chunks(&m) == m.shard.inner);
    CHECK_EQ_INT(zarr_shard_count(&m), 4);
    CHECK_EQ_INT(zarr_shard_index_size(&m), 4 * 16 + 4);
    uint64_t i2[] = {2, 1};
    zarr_meta_chunk_key(&m, i2, key, sizeof key);
    CHECK(strcmp(key, "2/1") == 0);
    CHECK(!m.key_prefix_c);
}

/* A 1-d float array with the given data_type and fill_value JSON. */
static int parse_fill(const char *type, const char *fill, struct zarr_meta *m, struct errbuf *err)
{
    char *j = xasprintf(
        "{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[4],\"data_type\":\"%s\","
        "\"chunk_grid\":{\"name\":\"regular\",\"configuration\":{\"chunk_shape\":[4]}},"
        "\"chunk_key_encoding\":{\"name\":\"default\",\"configuration\":{\"separator\":\".\"}},"
        "\"fill_value\":%s,\"codecs\":[{\"name\":\"bytes\",\"configuration\":"
        "{\"endian\":\"little\"}}]}",
        type, fill);
    int r = parse(j, m, err);
    free(j);
    return r;
}

static void test_fill_values(void)
{
    struct zarr_meta m;
    struct errbuf err = {{0}};
    float f;
    double d;
    uint16_t h;
    CHECK_EQ_INT(parse_fill("float32", "\"NaN\"", &m, &err), 0);
    memcpy(&f, m.fill, 4);
    CHECK(isnan(f));
    CHECK_EQ_INT(parse_fill("float64", "\"-Infinity\"", &m, &err), 0);
    memcpy(&d, m.fill, 8);
    CHECK(isinf(d) && d < 0);
    CHECK_EQ_INT(parse_fill("float32", "\"Infinity\"", &m, &err), 0);
    memcpy(&f, m.fill, 4);
    CHECK(isinf(f) && f > 0);
    CHECK_EQ_INT(parse_fill("float32", "\"0x7fc00000\"", &m, &err), 0);
    uint32_t bits;
    memcpy(&bits, m.fill, 4);
    CHECK_EQ_INT(bits, 0x7fc00000u);
    CHECK_EQ_INT(parse_fill("float32", "\"0x3f800000\"", &m, &err), 0);
    memcpy(&f, m.fill, 4);
    CHECK(f == 1.0f);
    CHECK_EQ_INT(parse_fill("float16", "\"0x7e01\"", &m, &err), 0);
    memcpy(&h, m.fill, 2);
    CHECK_EQ_INT(h, 0x7e01);
    CHECK_EQ_INT(parse_fill("float64", "\"0x4000000000000000\"", &m, &err), 0);
    memcpy(&d, m.fill, 8);
    CHECK(d == 2.0);
    CHECK_EQ_INT(parse_fill("float64", "-0.5", &m, &err), 0);
    memcpy(&d, m.fill, 8);
    CHECK(d == -0.5);
    CHECK_EQ_INT(parse_fill("int16", "-300", &m, &err), 0);
    int16_t s;
    memcpy(&s, m.fill, 2);
    CHECK_EQ_INT(s, -300);
    CHECK_EQ_INT(parse_fill("bool", "true", &m, &err), 0);
    CHECK_EQ_INT(m.fill[0], 1);
    /* emission: the canonical NaN by name, other NaNs as their bits */
    CHECK_EQ_INT(parse_fill("float32", "\"0x7fc00001\"", &m, &err), 0);
    char *text = zarr_meta_emit_v3(&m, NULL, NULL);
    CHECK_STR_CONTAINS(text, "\"fill_value\": \"0x7fc00001\"");
    free(text);
    CHECK_EQ_INT(parse_fill("float32", "\"0x7fc00000\"", &m, &err), 0);
    text = zarr_meta_emit_v3(&m, NULL, NULL);
    CHECK_STR_CONTAINS(text, "\"fill_value\": \"NaN\"");
    free(text);

    struct {
        const char *type, *fill, *msg;
    } bad[] = {
        {"float32", "null", "null is not allowed"},
        {"float32", "\"0x7fc0\"", "2 hex digits per byte"},
        {"float32", "\"0x7fc0000g\"", "2 hex digits per byte"},
        {"int32", "\"0x00000001\"", "only valid for floats"},
        {"int8", "200", "out of range"},
        {"int32", "\"NaN\"", "need a float dtype"},
        {"float32", "\"nan\"", "hex bit pattern"},
        {"uint8", "true", "bool dtype"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ_INT(parse_fill(bad[i].type, bad[i].fill, &m, &err), -EINVAL);
        CHECK_STR_CONTAINS(err.msg, "\"fill_value\"");
        CHECK_STR_CONTAINS(err.msg, bad[i].msg);
    }
}

/* zarr.json with the given codecs list (and more top-level members) for a uint16 [8,6]
 * array in chunks [4,3]. */
static int parse_codecs(const char *codecs, const char *more, struct zarr_meta *m,
                        struct errbuf *err)
{
    char *j = xasprintf(
        "{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[8,6],\"data_type\":\"uint16\","
        "\"chunk_grid\":{\"name\":\"regular\",\"configuration\":{\"chunk_shape\":[4,3]}},"
        "\"chunk_key_encoding\":{\"name\":\"default\"},\"fill_value\":0,\"codecs\":%s%s}",
        codecs, more);
    int r = parse(j, m, err);
    free(j);
    return r;
}

#define BYTES_LE "{\"name\":\"bytes\",\"configuration\":{\"endian\":\"little\"}}"

static void test_parse_invalid(void)
{
    struct zarr_meta m;
    struct errbuf err = {{0}};
    struct {
        const char *codecs, *more, *msg;
    } bad[] = {
        {"[" BYTES_LE ",{\"name\":\"lz4\"}]", "", "codec \"lz4\" is not supported"},
        {"[" BYTES_LE ",\"numcodecs.zlib\"]", "", "\"codecs[1]\": codec \"numcodecs.zlib\""},
        {"[\"bytes\"]", "", "needs \"endian\" for a 2-byte data type"},
        {"[" BYTES_LE ",{\"name\":\"bytes\"}]", "", "after the array-to-bytes codec"},
        {"[\"crc32c\"," BYTES_LE "]", "", "before the array-to-bytes codec"},
        {"[{\"name\":\"transpose\",\"configuration\":{\"order\":[0,0]}}," BYTES_LE "]", "",
         "permutation"},
        {"[{\"name\":\"transpose\",\"configuration\":{\"order\":[1,0,2]}}," BYTES_LE "]", "",
         "expected 2 entries"},
        {"[{\"name\":\"transpose\"}," BYTES_LE "]", "", "codecs[0].configuration.order"},
        {"[]", "", "non-empty list of codecs"},
        {"[{\"name\":\"transpose\",\"configuration\":{\"order\":[1,0]}}]", "",
         "no array-to-bytes codec"},
        {"[" BYTES_LE ",{\"name\":\"gzip\",\"configuration\":{\"level\":12}}]", "",
         "codecs[1].configuration.level"},
        {"[" BYTES_LE ",\"gzip\",\"zstd\"]", "", "second compressor"},
        {"[" BYTES_LE ",{\"name\":\"blosc\",\"configuration\":{\"shuffle\":1}}]", "",
         "noshuffle|shuffle|bitshuffle"},
        {"[" BYTES_LE ",{\"name\":\"bytes\",\"configuration\":{\"endian\":\"middle\"}}]", "",
         "after the array-to-bytes"},
        {"[{\"name\":\"bytes\",\"configuration\":{\"endian\":\"middle\"}}]", "", "little|big"},
        {"[{\"name\":\"sharding_indexed\",\"configuration\":{\"chunk_shape\":[3,3],\"codecs\":"
         "[" BYTES_LE "],\"index_codecs\":[" BYTES_LE "]}}]",
         "", "must divide"},
        {"[{\"name\":\"sharding_indexed\",\"configuration\":{\"chunk_shape\":[2,3],\"codecs\":["
         "{\"name\":\"sharding_indexed\",\"configuration\":{}}],\"index_codecs\":[" BYTES_LE "]}}]",
         "", "nested sharding"},
        {"[{\"name\":\"sharding_indexed\",\"configuration\":{\"chunk_shape\":[2,3],\"codecs\":"
         "[" BYTES_LE "],\"index_codecs\":[" BYTES_LE ",\"gzip\"]}}]",
         "", "index_codecs may only hold bytes and crc32c"},
        {"[{\"name\":\"sharding_indexed\",\"configuration\":{\"chunk_shape\":[2,3],\"codecs\":"
         "[" BYTES_LE "],\"index_codecs\":[" BYTES_LE "],\"index_location\":\"middle\"}}]",
         "", "start|end"},
        {"[{\"name\":\"sharding_indexed\",\"configuration\":{\"chunk_shape\":[2,3],\"codecs\":"
         "[" BYTES_LE "],\"index_codecs\":[" BYTES_LE "]}},\"crc32c\"]",
         "", "after sharding_indexed are not supported"},
        {"[" BYTES_LE "]", ",\"storage_transformers\":[{\"name\":\"x\"}]",
         "\"storage_transformers\""},
        {"[" BYTES_LE "]", ",\"dimension_names\":[\"y\"]", "one per dimension"},
        {"[" BYTES_LE "]", ",\"attributes\":[]", "\"attributes\": expected an object"},
        {"[" BYTES_LE "]", ",\"new_thing\":{\"name\":\"x\"}",
         "\"new_thing\": unknown extension that must be understood"},
        {"[" BYTES_LE "]", ",\"new_thing\":{\"must_understand\":true}", "must be understood"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int r = parse_codecs(bad[i].codecs, bad[i].more, &m, &err);
        CHECK_EQ_INT(r, -EINVAL);
        if (!strstr(err.msg, bad[i].msg))
            fprintf(stderr, "case %zu: %s\n", i, err.msg);
        CHECK_STR_CONTAINS(err.msg, bad[i].msg);
    }
    CHECK_EQ_INT(parse_codecs("[" BYTES_LE "]", ",\"dimension_names\":[\"y\",null]", &m, &err), 0);

    struct {
        const char *json, *msg;
    } whole[] = {
        {"[1]", "expected a JSON object"},
        {"{\"zarr_format\": 3", "invalid JSON"},
        {"{\"zarr_format\": 2}", "\"zarr_format\": expected 3"},
        {"{\"zarr_format\": 3, \"node_type\": \"group\"}", "a group, not an array"},
        {"{\"zarr_format\": 3, \"node_type\": \"array\", \"data_type\": \"complex64\"}",
         "\"data_type\""},
        {"{\"zarr_format\": 3, \"node_type\": \"array\", \"data_type\": \"<u2\"}",
         "core numeric data type"},
        {"{\"zarr_format\": 3, \"node_type\": \"array\", \"data_type\": \"uint8\", \"shape\": "
         "[0]}",
         "empty array"},
        {"{\"zarr_format\": 3, \"node_type\": \"array\", \"data_type\": \"uint8\", \"shape\": "
         "[4], \"chunk_grid\": {\"name\": \"rectilinear\", \"configuration\": {}}}",
         "only the \"regular\" grid"},
        {"{\"zarr_format\": 3, \"node_type\": \"array\", \"data_type\": \"uint8\", \"shape\": "
         "[4], \"chunk_grid\": {\"name\": \"regular\", \"configuration\": {\"chunk_shape\": "
         "[0]}}}",
         "chunk_grid.configuration.chunk_shape"},
        {"{\"zarr_format\": 3, \"node_type\": \"array\", \"data_type\": \"uint8\", \"shape\": "
         "[4], \"chunk_grid\": {\"name\": \"regular\", \"configuration\": {\"chunk_shape\": "
         "[2]}}, \"chunk_key_encoding\": {\"name\": \"morton\"}}",
         "\"chunk_key_encoding\""},
        {"{\"zarr_format\": 3, \"node_type\": \"array\", \"data_type\": \"uint8\", \"shape\": "
         "[4], \"chunk_grid\": {\"name\": \"regular\", \"configuration\": {\"chunk_shape\": "
         "[2]}}, \"chunk_key_encoding\": {\"name\": \"default\", \"configuration\": "
         "{\"separator\": \"-\"}}}",
         "chunk_key_encoding.configuration.separator"},
        {"{\"zarr_format\": 3, \"node_type\": \"array\", \"data_type\": \"uint8\", \"shape\": "
         "[4], \"chunk_grid\": {\"name\": \"regular\", \"configuration\": {\"chunk_shape\": "
         "[2]}}, \"chunk_key_encoding\": \"default\", \"fill_value\": 0}",
         "\"codecs\""},
    };
    for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++) {
        CHECK_EQ_INT(parse(whole[i].json, &m, &err), -EINVAL);
        if (!strstr(err.msg, whole[i].msg))
            fprintf(stderr, "whole %zu: %s\n", i, err.msg);
        CHECK_STR_CONTAINS(err.msg, whole[i].msg);
    }
}

static void test_chunk_keys(void)
{
    struct zarr_meta m = {.format = 3, .ndim = 3, .key_prefix_c = true, .separator = '/'};
    uint64_t idx[] = {1, 0, 12};
    char key[128];
    zarr_meta_chunk_key(&m, idx, key, sizeof key);
    CHECK(strcmp(key, "c/1/0/12") == 0);
    m.separator = '.';
    zarr_meta_chunk_key(&m, idx, key, sizeof key);
    CHECK(strcmp(key, "c.1.0.12") == 0);
    m.key_prefix_c = false;
    zarr_meta_chunk_key(&m, idx, key, sizeof key);
    CHECK(strcmp(key, "1.0.12") == 0);
    m.ndim = 0;
    zarr_meta_chunk_key(&m, idx, key, sizeof key);
    CHECK(strcmp(key, "0") == 0);
    m.key_prefix_c = true;
    zarr_meta_chunk_key(&m, idx, key, sizeof key);
    CHECK(strcmp(key, "c") == 0);
}

/* ---- codecs ---- */

int main(void)
{
    RUN(test_crc32c);
    RUN(test_parse_valid);
    RUN(test_fill_values);
    RUN(test_parse_invalid);
    RUN(test_chunk_keys);
    return check_done();
}
