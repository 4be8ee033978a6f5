/* test_roi_table.c: unit tests of ROI tables: micrometers to indices by fractal's and ngio's
 * rules (half-pixel ties, float32 versus float64, clipping, 2-D images, leading axes), and
 * reading hand-written AnnData on Zarr v2 and v3 (multi-chunk X, multi-chunk compressed
 * vlen-utf8 names, v3 string labels and missing chunks) and ngio CSV tables. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "roi.h"
#include "zarr/zarr.h"

static void table_of(struct roi_table *t, const double *rows, size_t n, bool single)
{
    *t = (struct roi_table){0}; /* an ordinary table: no labels, no region */
    t->n = n;
    t->single = single;
    t->v = malloc(n * ROI_TCOLS * sizeof *t->v);
    memcpy(t->v, rows, n * ROI_TCOLS * sizeof *t->v);
}

#define BOX(rs, i, d)                                                                              \
    (rs).start[(i) * (size_t)(rs).ndim + (d)], (rs).stop[(i) * (size_t)(rs).ndim + (d)]

static void check_box(const struct roi_set *rs, size_t i, int d, uint64_t a, uint64_t b)
{
    CHECK_EQ_INT(rs->start[i * (size_t)rs->ndim + d], a);
    CHECK_EQ_INT(rs->stop[i * (size_t)rs->ndim + d], b);
}

/* Exact ties: x / px = k + 0.5 goes to the even neighbour under fractal's rule. */
static void test_fractal_ties(void)
{
    /* x, y, z, len_x, len_y, len_z; pixel 0.5 um in y and x, 1 in z */
    const double rows[] = {
        0.25, 0.75, 0, 1.0, 1.0, 2, /* x: 0.5 -> 0, 2.5 -> 2; y: 1.5 -> 2, 3.5 -> 4 */
        1.25, 1.75, 1, 1.0, 1.0, 1, /* x: 2.5 -> 2, 4.5 -> 4; y: 3.5 -> 4, 5.5 -> 6 */
    };
    struct roi_table t;
    table_of(&t, rows, 2, true);
    struct roi_pixels px = {.axis = {1, 2, 3}, .size = {1.0, 0.5, 0.5}};
    uint64_t shape[4] = {3, 4, 100, 100}; /* c, z, y, x */
    struct roi_set rs;
    struct errbuf err;
    CHECK_EQ_INT(roi_table_to_set("t", &t, &px, ROI_ROUND_FRACTAL, 4, shape, &rs, &err), 0);
    CHECK_EQ_INT(rs.n, 2);
    check_box(&rs, 0, 0, 0, 3); /* channels whole */
    check_box(&rs, 0, 1, 0, 2);
    check_box(&rs, 0, 2, 2, 4);
    check_box(&rs, 0, 3, 0, 2);
    check_box(&rs, 1, 1, 1, 2);
    check_box(&rs, 1, 2, 4, 6);
    check_box(&rs, 1, 3, 2, 4);
    roi_set_free(&rs);
    /* ngio: start 0.5 -> floor 0, stop 0.5 + 2 = 2.5 -> ceil 3 */
    CHECK_EQ_INT(roi_table_to_set("t", &t, &px, ROI_ROUND_NGIO, 4, shape, &rs, &err), 0);
    check_box(&rs, 0, 2, 1, 4); /* y: 1.5 .. 3.5 */
    check_box(&rs, 0, 3, 0, 3);
    check_box(&rs, 1, 3, 2, 5);
    roi_set_free(&rs);
    roi_table_free(&t);
}

/* float32 (NumPy 2) and float64 disagree on near-ties: 1.38125f / 0.1625f is 8.5 in float32
 * (-> 8) but 8.50000015 in float64 (-> 9). */
static void test_fractal_precision(void)
{
    const double x = (double)1.38125f;
    const double rows[] = {x, 0, 0, (double)1.625f, 1.625, 1};
    struct roi_pixels px = {.axis = {-1, 0, 1}, .size = {1.0, 0.1625, 0.1625}};
    uint64_t shape[2] = {100, 100};
    struct roi_set rs;
    struct errbuf err;
    struct roi_table t;
    table_of(&t, rows, 1, true);
    CHECK_EQ_INT(roi_table_to_set("t", &t, &px, ROI_ROUND_FRACTAL, 2, shape, &rs, &err), 0);
    check_box(&rs, 0, 1, 8, 18); /* (x + len) = 3.00625f / 0.1625f = 18.5 -> 18 */
    check_box(&rs, 0, 0, 0, 10);
    roi_set_free(&rs);
    t.single = false;
    CHECK_EQ_INT(roi_table_to_set("t", &t, &px, ROI_ROUND_FRACTAL, 2, shape, &rs, &err), 0);
    CHECK_EQ_INT(rs.start[1], 9);
    roi_set_free(&rs);
    roi_table_free(&t);
}

static void test_ngio_snap(void)
{
    /* x / px = 2.995 snaps to 3; 2.98 does not (floor 2); len 1.5 px: stop = start + 1.5 */
    const double rows[] = {2.995, 2.98, 0, 1.5, 1.005, 1};
    struct roi_table t;
    table_of(&t, rows, 1, false);
    struct roi_pixels px = {.axis = {-1, 0, 1}, .size = {1.0, 1.0, 1.0}};
    uint64_t shape[2] = {10, 10};
    struct roi_set rs;
    struct errbuf err;
    CHECK_EQ_INT(roi_table_to_set("t", &t, &px, ROI_ROUND_NGIO, 2, shape, &rs, &err), 0);
    check_box(&rs, 0, 1, 3, 5); /* 3 .. 4.5 */
    check_box(&rs, 0, 0, 2, 4); /* 2.98 .. 2.98 + 1 (1.005 snaps) = 3.98 */
    roi_set_free(&rs);
    roi_table_free(&t);
}

static void test_clip_drop_negative(void)
{
    const double rows[] = {
        8,  0, 0, 4, 2, 1, /* x 8..12 clipped to 8..10 */
        20, 0, 0, 4, 2, 1, /* outside: dropped */
        0,  0, 5, 2, 2, 1, /* z ignored on a 2-D image */
    };
    struct roi_table t;
    table_of(&t, rows, 3, false);
    struct roi_pixels px = {.axis = {-1, 0, 1}, .size = {1.0, 1.0, 1.0}};
    uint64_t shape[2] = {10, 10};
    struct roi_set rs;
    struct errbuf err;
    CHECK_EQ_INT(roi_table_to_set("t", &t, &px, ROI_ROUND_FRACTAL, 2, shape, &rs, &err), 0);
    CHECK_EQ_INT(rs.n, 2);
    check_box(&rs, 0, 1, 8, 10);
    check_box(&rs, 1, 1, 0, 2);
    roi_set_free(&rs);
    t.v[0] = -1;
    CHECK_EQ_INT(roi_table_to_set("tab", &t, &px, ROI_ROUND_FRACTAL, 2, shape, &rs, &err), -EINVAL);
    CHECK_STR_CONTAINS(err.msg, "tab: row 0: negative x index");
    /* ngio clamps instead */
    CHECK_EQ_INT(roi_table_to_set("tab", &t, &px, ROI_ROUND_NGIO, 2, shape, &rs, &err), 0);
    check_box(&rs, 0, 1, 0, 3);
    roi_set_free(&rs);
    t.n = 1;
    t.v[0] = 30;
    CHECK_EQ_INT(roi_table_to_set("tab", &t, &px, ROI_ROUND_FRACTAL, 2, shape, &rs, &err), -EINVAL);
    CHECK_STR_CONTAINS(err.msg, "no row selects");
    roi_table_free(&t);
}

static void put(const char *dir, const char *name, const void *data, size_t len)
{
    char *p;
    if (asprintf(&p, "%s/%s", dir, name) < 0)
        abort();
    FILE *f = fopen(p, "wb");
    CHECK(f != NULL);
    if (f) {
        fwrite(data, 1, len, f);
        fclose(f);
    }
    free(p);
}

static void put_str(const char *dir, const char *name, const char *s)
{
    put(dir, name, s, strlen(s));
}

/* A vlen-utf8 chunk of the strings, padded to n items with "" as zarr does at the edge. */
static size_t vlen_chunk(const char *const *s, size_t count, size_t n, unsigned char *buf)
{
    uint32_t u = (uint32_t)n;
    size_t off = 4;
    memcpy(buf, &u, 4);
    for (size_t i = 0; i < n; i++) {
        u = i < count ? (uint32_t)strlen(s[i]) : 0;
        memcpy(buf + off, &u, 4);
        if (u)
            memcpy(buf + off + 4, s[i], u);
        off += 4 + u;
    }
    return off;
}

static void test_read_anndata(void)
{
    char dir[] = "/tmp/roifs-table-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char sub[256];
    const char *dirs[] = {"X", "var", "var/names", "obs"};
    for (int i = 0; i < 4; i++) {
        snprintf(sub, sizeof sub, "%s/%s", dir, dirs[i]);
        mkdir(sub, 0755);
    }
    put_str(dir, ".zattrs", "{\"type\": \"roi_table\", \"encoding-type\": \"anndata\"}");
    put_str(dir, "var/.zattrs", "{\"_index\": \"names\"}");
    /* 7 column names in chunks of 4: the second chunk zlib-compressed and padded */
    const char *names[] = {"label",           "x_micrometer",     "y_micrometer",
                           "z_micrometer",    "len_x_micrometer", "len_y_micrometer",
                           "len_z_micrometer"};
    put_str(dir, "var/names/.zarray",
            "{\"chunks\": [4], \"compressor\": {\"id\": \"zlib\", \"level\": 1}, \"dtype\": \"|O\","
            " \"fill_value\": 0, \"filters\": [{\"id\": \"vlen-utf8\"}], \"order\": \"C\","
            " \"shape\": [7], \"zarr_format\": 2}");
    unsigned char buf[512];
    struct zarr_codec zlib = {.id = ZC_ZLIB, .level = 1};
    struct errbuf err;
    for (int k = 0; k < 2; k++) {
        size_t len = vlen_chunk(names + 4 * k, k ? 3 : 4, 4, buf);
        void *enc;
        size_t elen;
        CHECK_EQ_INT(zarr_codec_encode(&zlib, buf, len, 1, &enc, &elen, &err), 0);
        snprintf(sub, sizeof sub, "var/names/%d", k);
        put(dir, sub, enc, elen);
        free(enc);
    }
    /* X: 3 rows x 7 float32 in chunks of 2 x 4 */
    put_str(dir, "X/.zarray",
            "{\"chunks\": [2, 4], \"compressor\": null, \"dtype\": \"<f4\", \"fill_value\": 0.0,"
            " \"filters\": null, \"order\": \"C\", \"shape\": [3, 7], \"zarr_format\": 2}");
    float x[4][8] = {{0}};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 7; j++)
            x[i][j] = (float)(10 * i + j) + 0.5f;
    for (int ci = 0; ci < 2; ci++)
        for (int cj = 0; cj < 2; cj++) {
            float c[2][4] = {{0}};
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 4; j++)
                    c[i][j] = x[2 * ci + i][4 * cj + j];
            snprintf(sub, sizeof sub, "X/%d.%d", ci, cj);
            put(dir, sub, c, sizeof c);
        }
    struct roi_table t;
    CHECK_EQ_INT(roi_table_read(dir, &t, &err), 0);
    CHECK_EQ_INT(t.n, 3);
    CHECK(t.single);
    if (t.n == 3) {
        CHECK(t.v[2 * ROI_TCOLS + ROI_TX] == 21.5);
        CHECK(t.v[2 * ROI_TCOLS + ROI_TLZ] == 26.5);
        CHECK(t.v[1 * ROI_TCOLS + ROI_TY] == 12.5);
    }
    roi_table_free(&t);
    /* a missing column is named */
    put_str(dir, "var/.zattrs", "{\"_index\": \"other\"}");
    CHECK_EQ_INT(roi_table_read(dir, &t, &err), -EINVAL);
    CHECK_STR_CONTAINS(err.msg, "other");

    /* the ngio CSV backend */
    put_str(dir, ".zattrs", "{\"backend\": \"csv\", \"index_key\": \"FieldIndex\"}");
    put_str(dir, "table.csv",
            "FieldIndex,x_micrometer,y_micrometer,z_micrometer,len_x_micrometer,"
            "len_y_micrometer,len_z_micrometer,\"note, quoted\"\r\n"
            "FOV_1,0.0,1.5,0,10,20,1,a\r\n"
            "\"FOV_2\",3.25,0,0,1e1,2,1,\"b,c\"\r\n");
    CHECK_EQ_INT(roi_table_read(dir, &t, &err), 0);
    CHECK_EQ_INT(t.n, 2);
    CHECK(!t.single);
    if (t.n == 2) {
        CHECK(t.v[ROI_TY] == 1.5);
        CHECK(t.v[ROI_TCOLS + ROI_TX] == 3.25);
        CHECK(t.v[ROI_TCOLS + ROI_TLX] == 10);
    }
    roi_table_free(&t);
    put_str(dir, "table.csv",
            "x_micrometer,y_micrometer,z_micrometer,len_x_micrometer,len_y_micrometer,"
            "len_z_micrometer\n\n1,2,3,4,5,6\n1,2,3,4,5,x\n");
    CHECK_EQ_INT(roi_table_read(dir, &t, &err), -EINVAL);
    CHECK_STR_CONTAINS(err.msg, "table.csv:4: len_z_micrometer: not a number: 'x'");
    put_str(dir, "table.csv", "x_micrometer,y_micrometer\n1,2\n");
    CHECK_EQ_INT(roi_table_read(dir, &t, &err), -EINVAL);
    CHECK_STR_CONTAINS(err.msg, "no column \"z_micrometer\"");
    put_str(dir, ".zattrs", "{\"backend\": \"parquet\"}");
    CHECK_EQ_INT(roi_table_read(dir, &t, &err), -EINVAL);
    CHECK_STR_CONTAINS(err.msg, "parquet");
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK_EQ_INT(system(cmd), 0);
}

/* Zarr v3 array metadata: a string array (vlen-utf8 then codecs) or a 2-D float32 one. */
static void put_v3_strings(const char *dir, const char *name, int n, int chunk, const char *codecs)
{
    char path[256], text[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/zarr.json", name);
    snprintf(text, sizeof text,
             "{\"zarr_format\": 3, \"node_type\": \"array\", \"shape\": [%d], \"data_type\": "
             "\"string\", \"chunk_grid\": {\"name\": \"regular\", \"configuration\": "
             "{\"chunk_shape\": [%d]}}, \"chunk_key_encoding\": {\"name\": \"default\"}, "
             "\"fill_value\": \"\", \"codecs\": [{\"name\": \"vlen-utf8\", \"configuration\": "
             "{}}%s], \"attributes\": {\"encoding-type\": \"string-array\"}}",
             n, chunk, codecs);
    put_str(dir, path, text);
    snprintf(path, sizeof path, "%s/%s/c", dir, name);
    mkdir(path, 0755);
}

/* Chunk k of a v3 string array: the strings, zstd-compressed then with a crc32c (zstd) or
 * as they are. */
static void put_v3_chunk(const char *dir, const char *name, int k, const char *const *s, size_t n,
                         bool zstd)
{
    unsigned char buf[512];
    size_t len = vlen_chunk(s, n, n, buf);
    void *enc = NULL;
    struct errbuf err;
    if (zstd) {
        struct zarr_codec z = {.id = ZC_ZSTD, .level = 3};
        CHECK_EQ_INT(zarr_codec_encode(&z, buf, len, 1, &enc, &len, &err), 0);
        enc = realloc(enc, len + 4);
        uint32_t crc = zarr_crc32c(0, enc, len);
        for (int i = 0; i < 4; i++)
            ((unsigned char *)enc)[len + i] = (unsigned char)(crc >> (8 * i));
        len += 4;
    }
    char sub[256];
    snprintf(sub, sizeof sub, "%s/c/%d", name, k);
    put(dir, sub, zstd ? enc : buf, len);
    free(enc);
}

/* AnnData on Zarr v3, as anndata writes it with zarr-python 3: groups with zarr.json, the
 * names in "string" arrays (vlen-utf8 and compressors), X float32 with bytes and zstd; a
 * masking table whose labels are an obs column of strings. */
static void test_read_anndata_v3(void)
{
    char dir[] = "/tmp/roifs-table-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char sub[256];
    const char *dirs[] = {"X", "X/c", "X/c/0", "X/c/1", "var", "obs"};
    for (int i = 0; i < 6; i++) {
        snprintf(sub, sizeof sub, "%s/%s", dir, dirs[i]);
        mkdir(sub, 0755);
    }
    put_str(dir, "zarr.json",
            "{\"zarr_format\": 3, \"node_type\": \"group\", \"attributes\": {\"encoding-type\": "
            "\"anndata\", \"type\": \"masking_roi_table\", \"instance_key\": \"label\", "
            "\"region\": {\"path\": \"../labels/nuclei\"}}}");
    put_str(dir, "var/zarr.json",
            "{\"zarr_format\": 3, \"node_type\": \"group\", \"attributes\": {\"_index\": "
            "\"_index\", \"encoding-type\": \"dataframe\"}}");
    put_str(dir, "obs/zarr.json",
            "{\"zarr_format\": 3, \"node_type\": \"group\", \"attributes\": {\"_index\": "
            "\"_index\", \"column-order\": [\"label\"], \"encoding-type\": \"dataframe\"}}");
    /* 6 column names in chunks of 4, zstd and crc32c */
    const char *names[] = {"x_micrometer",     "y_micrometer",     "z_micrometer",
                           "len_x_micrometer", "len_y_micrometer", "len_z_micrometer"};
    put_v3_strings(dir, "var/_index", 6, 4,
                   ", {\"name\": \"zstd\", \"configuration\": {\"level\": 3, \"checksum\": "
                   "false}}, {\"name\": \"crc32c\"}");
    put_v3_chunk(dir, "var/_index", 0, names, 4, true);
    put_v3_chunk(dir, "var/_index", 1, names + 4, 2, true);
    /* the labels: strings, in chunks of 2, without compression */
    const char *labels[] = {"7", "8", "9"};
    put_v3_strings(dir, "obs/label", 3, 2, "");
    put_v3_chunk(dir, "obs/label", 0, labels, 2, false);
    put_v3_chunk(dir, "obs/label", 1, labels + 2, 1, false);
    /* X: 3 rows x 6 float32 in chunks of 2 x 6, zstd */
    put_str(dir, "X/zarr.json",
            "{\"zarr_format\": 3, \"node_type\": \"array\", \"shape\": [3, 6], \"data_type\": "
            "\"float32\", \"chunk_grid\": {\"name\": \"regular\", \"configuration\": "
            "{\"chunk_shape\": [2, 6]}}, \"chunk_key_encoding\": {\"name\": \"default\"}, "
            "\"fill_value\": 0.0, \"codecs\": [{\"name\": \"bytes\", \"configuration\": "
            "{\"endian\": \"little\"}}, {\"name\": \"zstd\", \"configuration\": {\"level\": 0, "
            "\"checksum\": false}}], \"attributes\": {\"encoding-type\": \"array\"}}");
    struct zarr_codec z = {.id = ZC_ZSTD, .level = 1};
    struct errbuf err;
    for (int ci = 0; ci < 2; ci++) {
        float c[2][6] = {{0}};
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 6; j++)
                c[i][j] = (float)(10 * (2 * ci + i) + j) + 0.5f;
        void *enc;
        size_t elen;
        CHECK_EQ_INT(zarr_codec_encode(&z, c, sizeof c, 4, &enc, &elen, &err), 0);
        snprintf(sub, sizeof sub, "X/c/%d/0", ci);
        put(dir, sub, enc, elen);
        free(enc);
    }
    struct roi_table t;
    CHECK_EQ_INT(roi_table_read(dir, &t, &err), 0);
    CHECK_EQ_INT(t.n, 3);
    CHECK(t.single);
    if (t.n == 3 && t.label) {
        CHECK(t.v[2 * ROI_TCOLS + ROI_TX] == 20.5);
        CHECK(t.v[2 * ROI_TCOLS + ROI_TLZ] == 25.5);
        CHECK(t.v[1 * ROI_TCOLS + ROI_TY] == 11.5);
        CHECK_EQ_INT(t.label[0], 7);
        CHECK_EQ_INT(t.label[2], 9);
    }
    CHECK(t.region && strstr(t.region, "/labels/nuclei") != NULL); /* resolved as a path */
    roi_table_free(&t);
    /* a chunk zarr-python 3 did not write holds the fill value, "" */
    snprintf(sub, sizeof sub, "%s/obs/label/c/1", dir);
    CHECK_EQ_INT(unlink(sub), 0);
    CHECK_EQ_INT(roi_table_read(dir, &t, &err), -EINVAL);
    CHECK_STR_CONTAINS(err.msg, "row 2: label '' is not a positive integer");
    /* a damaged chunk: the checksum says so */
    snprintf(sub, sizeof sub, "%s/var/_index/c/1", dir);
    FILE *f = fopen(sub, "r+b");
    CHECK(f != NULL);
    if (f) {
        fseek(f, 5, SEEK_SET);
        fputc('!', f);
        fclose(f);
    }
    CHECK_EQ_INT(roi_table_read(dir, &t, &err), -EINVAL);
    CHECK_STR_CONTAINS(err.msg, "crc32c: checksum mismatch");
    /* anything but vlen-utf8 first is named */
    put_v3_strings(dir, "var/_index", 6, 4, "");
    snprintf(sub, sizeof sub, "%s/var/_index/zarr.json", dir);
    char *text = NULL;
    size_t len = 0;
    CHECK_EQ_INT(file_read_all(sub, &text, &len), 0);
    char *at = text ? strstr(text, "vlen-utf8") : NULL;
    CHECK(at != NULL);
    if (at)
        memcpy(at, "vlen-utf9", 9);
    put_str(dir, "var/_index/zarr.json", text ? text : "");
    free(text);
    CHECK_EQ_INT(roi_table_read(dir, &t, &err), -EINVAL);
    CHECK_STR_CONTAINS(err.msg, "first codec must be \"vlen-utf8\", not \"vlen-utf9\"");
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK_EQ_INT(system(cmd), 0);
}

int main(void)
{
    RUN(test_fractal_ties);
    RUN(test_fractal_precision);
    RUN(test_ngio_snap);
    RUN(test_clip_drop_negative);
    RUN(test_read_anndata);
    RUN(test_read_anndata_v3);
    return check_done();
}
