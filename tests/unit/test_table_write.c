/* test_table_write.c: the masking table encoder's pieces (table_write.c) byte for byte, its
 * refusals, and roifs's own table reader (roi_table.c) reading what it writes. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "roi.h"
#include "table_write.h"
#include "util.h"

/* Two objects, given out of label order: 5 then 3. Per axis z, y, x. */
static const struct table_row two_rows[2] = {
    {5, {0, 1.5, 2.25}, {1, 3, 4}},
    {3, {0, 0.1, 0.2}, {1, 0.3, 0.4}},
};

static struct table_files encode(int format, enum table_backend backend,
                                 const struct table_row *rows, size_t n)
{
    struct table_spec spec = {format, backend, "../labels/nuclei", NULL};
    struct table_files f = {0};
    struct errbuf err;
    int r = table_encode(&spec, rows, n, &f, &err);
    CHECK_EQ_INT(r, 0);
    if (r < 0)
        fprintf(stderr, "table_encode: %s\n", err.msg);
    return f;
}

/* The file's bytes equal want[0..len). */
static int file_is(const struct table_files *f, const char *path, const void *want, size_t len)
{
    const struct table_file *tf = table_files_find(f, path);
    if (!tf) {
        fprintf(stderr, "no file %s\n", path);
        return 0;
    }
    if (tf->len != len || memcmp(tf->data, want, len) != 0) {
        fprintf(stderr, "%s: %zu bytes:\n%.*s\n", path, tf->len, (int)tf->len, tf->data);
        return 0;
    }
    return 1;
}

static int text_is(const struct table_files *f, const char *path, const char *want)
{
    return file_is(f, path, want, strlen(want));
}

static void test_vlen_utf8_bytes(void)
{
    struct table_files f = encode(2, TABLE_ANNDATA, two_rows, 2);
    /* u32 LE count, then per item u32 LE length and bytes; sorted by label: "3", "5" */
    static const unsigned char obs_index[] = {2, 0, 0, 0, 1, 0, 0, 0, '3', 1, 0, 0, 0, '5'};
    CHECK(file_is(&f, "obs/_index/0", obs_index, sizeof obs_index));
    const struct table_file *var = table_files_find(&f, "var/_index/0");
    CHECK(var != NULL);
    if (var) {
        static const char *const names[6] = {
            "x_micrometer",     "y_micrometer",     "z_micrometer",
            "len_x_micrometer", "len_y_micrometer", "len_z_micrometer",
        };
        unsigned char want[256], *p = want + 4;
        memcpy(want, "\6\0\0\0", 4);
        for (int i = 0; i < 6; i++) {
            uint32_t l = (uint32_t)strlen(names[i]);
            unsigned char le[4] = {(unsigned char)l, 0, 0, 0};
            memcpy(p, le, 4);
            memcpy(p + 4, names[i], l);
            p += 4 + l;
        }
        CHECK_EQ_INT(var->len, p - want);
        CHECK(var->len == (size_t)(p - want) && memcmp(var->data, want, var->len) == 0);
    }
    table_files_free(&f);
}

static void test_v2_metadata_text(void)
{
    struct table_files f = encode(2, TABLE_ANNDATA, two_rows, 2);
    CHECK(text_is(&f, ".zgroup", "{\n    \"zarr_format\": 2\n}"));
    CHECK(text_is(&f, ".zattrs",
                  "{\n    \"backend\": \"anndata\",\n    \"encoding-type\": \"anndata\",\n"
                  "    \"encoding-version\": \"0.1.0\",\n    \"fractal_table_version\": \"1\",\n"
                  "    \"index_key\": \"label\",\n    \"index_type\": \"int\",\n"
                  "    \"instance_key\": \"label\",\n    \"region\": {\n"
                  "        \"path\": \"../labels/nuclei\"\n    },\n"
                  "    \"table_version\": \"1\",\n    \"type\": \"masking_roi_table\"\n}"));
    CHECK(text_is(&f, "X/.zarray",
                  "{\n    \"chunks\": [\n        2,\n        6\n    ],\n"
                  "    \"compressor\": null,\n    \"dtype\": \"<f4\",\n    \"fill_value\": 0.0,\n"
                  "    \"filters\": null,\n    \"order\": \"C\",\n"
                  "    \"shape\": [\n        2,\n        6\n    ],\n    \"zarr_format\": 2\n}"));
    CHECK(text_is(&f, "X/.zattrs",
                  "{\n    \"encoding-type\": \"array\",\n    \"encoding-version\": \"0.2.0\"\n}"));
    CHECK(text_is(&f, "obs/_index/.zarray",
                  "{\n    \"chunks\": [\n        2\n    ],\n    \"compressor\": null,\n"
                  "    \"dtype\": \"|O\",\n    \"fill_value\": null,\n"
                  "    \"filters\": [\n        {\n            \"id\": \"vlen-utf8\"\n        }\n"
                  "    ],\n    \"order\": \"C\",\n    \"shape\": [\n        2\n    ],\n"
                  "    \"zarr_format\": 2\n}"));
    CHECK(text_is(&f, "obs/_index/.zattrs",
                  "{\n    \"encoding-type\": \"string-array\",\n"
                  "    \"encoding-version\": \"0.2.0\"\n}"));
    CHECK(text_is(&f, "obs/.zattrs",
                  "{\n    \"_index\": \"_index\",\n    \"column-order\": [\n        \"label\"\n"
                  "    ],\n    \"encoding-type\": \"dataframe\",\n"
                  "    \"encoding-version\": \"0.2.0\"\n}"));
    CHECK(text_is(&f, "var/.zattrs",
                  "{\n    \"_index\": \"_index\",\n    \"column-order\": [],\n"
                  "    \"encoding-type\": \"dataframe\",\n    \"encoding-version\": \"0.2.0\"\n}"));
    CHECK(text_is(&f, "uns/.zattrs",
                  "{\n    \"encoding-type\": \"dict\",\n    \"encoding-version\": \"0.1.0\"\n}"));
    CHECK_STR_CONTAINS((const char *)table_files_find(&f, "obs/label/.zarray")->data,
                       "\"dtype\": \"<i8\"");
    table_files_free(&f);
}

static void put_f32(unsigned char *p, double v)
{
    float x = (float)v;
    uint32_t b;
    memcpy(&b, &x, 4);
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(b >> (8 * i));
}

static void test_chunks(void)
{
    struct table_files f = encode(2, TABLE_ANNDATA, two_rows, 2);
    /* rows by label (3, 5); columns x, y, z, len_x, len_y, len_z */
    static const double x[12] = {0.2, 0.1, 0, 0.4, 0.3, 1, 2.25, 1.5, 0, 4, 3, 1};
    unsigned char want[48];
    for (int i = 0; i < 12; i++)
        put_f32(want + 4 * i, x[i]);
    CHECK(file_is(&f, "X/0.0", want, sizeof want));
    static const unsigned char labels[16] = {3, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0};
    CHECK(file_is(&f, "obs/label/0", labels, sizeof labels));
    table_files_free(&f);
}

static void test_file_list(void)
{
    static const char *const v2[] = {
        ".zattrs",
        ".zgroup",
        "X/.zarray",
        "X/.zattrs",
        "X/0.0",
        "layers/.zattrs",
        "layers/.zgroup",
        "obs/.zattrs",
        "obs/.zgroup",
        "obs/_index/.zarray",
        "obs/_index/.zattrs",
        "obs/_index/0",
        "obs/label/.zarray",
        "obs/label/.zattrs",
        "obs/label/0",
        "obsm/.zattrs",
        "obsm/.zgroup",
        "obsp/.zattrs",
        "obsp/.zgroup",
        "uns/.zattrs",
        "uns/.zgroup",
        "var/.zattrs",
        "var/.zgroup",
        "var/_index/.zarray",
        "var/_index/.zattrs",
        "var/_index/0",
        "varm/.zattrs",
        "varm/.zgroup",
        "varp/.zattrs",
        "varp/.zgroup",
    };
    static const char *const v3[] = {
        "X/c/0/0",
        "X/zarr.json",
        "layers/zarr.json",
        "obs/_index/c/0",
        "obs/_index/zarr.json",
        "obs/label/c/0",
        "obs/label/zarr.json",
        "obs/zarr.json",
        "obsm/zarr.json",
        "obsp/zarr.json",
        "uns/zarr.json",
        "var/_index/c/0",
        "var/_index/zarr.json",
        "var/zarr.json",
        "varm/zarr.json",
        "varp/zarr.json",
        "zarr.json",
    };
    struct table_files f = encode(2, TABLE_ANNDATA, two_rows, 2);
    CHECK_EQ_INT(f.n, sizeof v2 / sizeof *v2);
    for (size_t i = 0; i < f.n && i < sizeof v2 / sizeof *v2; i++)
        CHECK(strcmp(f.v[i].path, v2[i]) == 0);
    table_files_free(&f);
    f = encode(3, TABLE_ANNDATA, two_rows, 2);
    CHECK_EQ_INT(f.n, sizeof v3 / sizeof *v3);
    for (size_t i = 0; i < f.n && i < sizeof v3 / sizeof *v3; i++)
        CHECK(strcmp(f.v[i].path, v3[i]) == 0);
    CHECK(table_files_find(&f, "zarr.json") == &f.v[f.n - 1]);
    CHECK(table_files_find(&f, "X/.zarray") == NULL);
    table_files_free(&f);
}

static void test_v3(void)
{
    struct table_files f3 = encode(3, TABLE_ANNDATA, two_rows, 2);
    struct table_files f2 = encode(2, TABLE_ANNDATA, two_rows, 2);
    /* the same chunk bytes under v3's keys */
    const struct table_file *a = table_files_find(&f2, "obs/_index/0");
    CHECK(a && file_is(&f3, "obs/_index/c/0", a->data, a->len));
    a = table_files_find(&f2, "X/0.0");
    CHECK(a && file_is(&f3, "X/c/0/0", a->data, a->len));
    CHECK(text_is(&f3, "obs/_index/zarr.json",
                  "{\n    \"attributes\": {\n        \"encoding-type\": \"string-array\",\n"
                  "        \"encoding-version\": \"0.2.0\"\n    },\n"
                  "    \"chunk_grid\": {\n        \"configuration\": {\n"
                  "            \"chunk_shape\": [\n                2\n            ]\n"
                  "        },\n        \"name\": \"regular\"\n    },\n"
                  "    \"chunk_key_encoding\": {\n        \"configuration\": {\n"
                  "            \"separator\": \"/\"\n        },\n        \"name\": \"default\"\n"
                  "    },\n    \"codecs\": [\n        {\n            \"configuration\": {},\n"
                  "            \"name\": \"vlen-utf8\"\n        }\n    ],\n"
                  "    \"data_type\": \"string\",\n    \"fill_value\": \"\",\n"
                  "    \"node_type\": \"array\",\n    \"shape\": [\n        2\n    ],\n"
                  "    \"zarr_format\": 3\n}"));
    CHECK(text_is(&f3, "uns/zarr.json",
                  "{\n    \"attributes\": {\n        \"encoding-type\": \"dict\",\n"
                  "        \"encoding-version\": \"0.1.0\"\n    },\n"
                  "    \"node_type\": \"group\",\n    \"zarr_format\": 3\n}"));
    table_files_free(&f3);
    table_files_free(&f2);
}

static void test_csv(void)
{
    const struct table_row rows[3] = {
        {9, {0, 1.0 / 3, 1e-7}, {1, 1e21, 5}},
        {2, {-0.0, 0.1, 123456789.125}, {2.5, 0.3, 0.4}},
        {UINT64_MAX, {7, 8, 9}, {1, 2, 3}},
    };
    struct table_files f = encode(2, TABLE_CSV, rows, 3);
    CHECK_EQ_INT(f.n, 3);
    CHECK(text_is(&f, "table.csv",
                  "label,x_micrometer,y_micrometer,z_micrometer,len_x_micrometer,"
                  "len_y_micrometer,len_z_micrometer\n"
                  "2,123456789.125,0.1,-0.0,0.4,0.3,2.5\n"
                  "9,1e-07,0.3333333333333333,0.0,5.0,1e+21,1.0\n"
                  "18446744073709551615,9.0,8.0,7.0,3.0,2.0,1.0\n"));
    CHECK(text_is(&f, ".zattrs",
                  "{\n    \"backend\": \"csv\",\n    \"index_key\": \"label\",\n"
                  "    \"index_type\": \"int\",\n    \"instance_key\": \"label\",\n"
                  "    \"region\": {\n        \"path\": \"../labels/nuclei\"\n    },\n"
                  "    \"table_version\": \"1\",\n    \"type\": \"masking_roi_table\"\n}"));
    CHECK(text_is(&f, ".zgroup", "{\n    \"zarr_format\": 2\n}"));
    table_files_free(&f);
    f = encode(3, TABLE_CSV, rows, 3);
    CHECK_EQ_INT(f.n, 2);
    CHECK(strcmp(f.v[0].path, "table.csv") == 0 && strcmp(f.v[1].path, "zarr.json") == 0);
    CHECK_STR_CONTAINS((const char *)f.v[1].data, "\"backend\": \"csv\"");
    CHECK_STR_CONTAINS((const char *)f.v[1].data, "\"node_type\": \"group\"");
    table_files_free(&f);
}

static void test_empty_and_big_labels(void)
{
    struct table_files f = encode(2, TABLE_ANNDATA, NULL, 0);
    CHECK(table_files_find(&f, "X/0.0") == NULL);
    CHECK(table_files_find(&f, "obs/_index/0") == NULL);
    CHECK(table_files_find(&f, "var/_index/0") != NULL);
    CHECK_STR_CONTAINS((const char *)table_files_find(&f, "X/.zarray")->data,
                       "\"shape\": [\n        0,\n        6\n    ]");
    CHECK_STR_CONTAINS((const char *)table_files_find(&f, "X/.zarray")->data,
                       "\"chunks\": [\n        1,\n        6\n    ]");
    table_files_free(&f);
    f = encode(2, TABLE_CSV, NULL, 0);
    CHECK(text_is(&f, "table.csv",
                  "label,x_micrometer,y_micrometer,z_micrometer,len_x_micrometer,"
                  "len_y_micrometer,len_z_micrometer\n"));
    table_files_free(&f);
    const struct table_row big = {(uint64_t)INT64_MAX + 1, {0, 0, 0}, {1, 1, 1}};
    f = encode(2, TABLE_ANNDATA, &big, 1);
    CHECK_STR_CONTAINS((const char *)table_files_find(&f, "obs/label/.zarray")->data,
                       "\"dtype\": \"<u8\"");
    table_files_free(&f);
}

static void test_deterministic(void)
{
    const struct table_row sorted[2] = {two_rows[1], two_rows[0]};
    for (int format = 2; format <= 3; format++)
        for (int b = 0; b < 2; b++) {
            struct table_files x = encode(format, (enum table_backend)b, two_rows, 2);
            struct table_files y = encode(format, (enum table_backend)b, sorted, 2);
            CHECK_EQ_INT(x.n, y.n);
            for (size_t i = 0; i < x.n && i < y.n; i++)
                CHECK(strcmp(x.v[i].path, y.v[i].path) == 0 && x.v[i].len == y.v[i].len &&
                      memcmp(x.v[i].data, y.v[i].data, x.v[i].len) == 0);
            table_files_free(&x);
            table_files_free(&y);
        }
}

static int refuse(int format, const char *region, const struct table_row *rows, size_t n,
                  const char *needle)
{
    struct table_spec spec = {format, TABLE_ANNDATA, region, NULL};
    struct table_files f = {(struct table_file *)&f, 12345}; /* must stay untouched */
    struct errbuf err = {{0}};
    int r = table_encode(&spec, rows, n, &f, &err);
    CHECK(f.n == 12345);
    CHECK_STR_CONTAINS(err.msg, needle);
    return r;
}

static void test_refusals(void)
{
    struct table_row rows[2] = {two_rows[0], two_rows[1]};
    CHECK_EQ_INT(refuse(4, "../labels/a", rows, 2, "Zarr format 4"), -EINVAL);
    CHECK_EQ_INT(refuse(2, NULL, rows, 2, "no region path"), -EINVAL);
    CHECK_EQ_INT(refuse(2, "", rows, 2, "no region path"), -EINVAL);
    CHECK_EQ_INT(refuse(2, "../labels/\xff", rows, 2, "not valid UTF-8"), -EINVAL);
    CHECK_EQ_INT(refuse(2, "r", rows, TABLE_MAX_ROWS + 1, "rows (at most"), -EFBIG);
    rows[1].label = 5;
    CHECK_EQ_INT(refuse(2, "r", rows, 2, "label 5 has two rows"), -EINVAL);
    rows[1].label = 0;
    CHECK_EQ_INT(refuse(2, "r", rows, 2, "row 1: label 0"), -EINVAL);
    rows[1] = two_rows[1];
    rows[1].length[1] = NAN;
    CHECK_EQ_INT(refuse(2, "r", rows, 2, "len_y_micrometer is nan"), -EINVAL);
    rows[1].length[1] = 0.3;
    rows[1].start[2] = 1e39; /* finite, but float32's X cannot hold it */
    CHECK_EQ_INT(refuse(2, "r", rows, 2, "x_micrometer is 1e+39"), -EINVAL);
    rows[1].start[2] = -INFINITY;
    CHECK_EQ_INT(refuse(3, "r", rows, 2, "x_micrometer is -inf"), -EINVAL);
}

/* Writes the files under dir (created). */
static void write_tree(const char *dir, const struct table_files *f)
{
    for (size_t i = 0; i < f->n; i++) {
        char *p = path_join(dir, f->v[i].path), *d = path_dirname(p);
        CHECK_EQ_INT(mkdir_p(d, 0755), 0);
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        CHECK(fd >= 0);
        if (fd >= 0) {
            CHECK_EQ_INT(write_full(fd, f->v[i].data, f->v[i].len), 0);
            close(fd);
        }
        free(d);
        free(p);
    }
}

/* roifs reads its own tables (a second mount's ROIs are the first one's table). */
static void test_roi_table_reads_it(void)
{
    char tmp[] = "/tmp/test_table_write.XXXXXX";
    CHECK(mkdtemp(tmp) != NULL);
    static const int col_axis[ROI_TCOLS] = {2, 1, 0, 2, 1, 0};
    for (int b = 0; b < 2; b++)
        for (int format = 2; format <= 3; format++) {
            if (b == 0 && format == 3)
                continue; /* roi_table.c reads AnnData on Zarr v2 only */
            char *dir = xasprintf("%s/t%d%d", tmp, b, format);
            struct table_files f = encode(format, (enum table_backend)b, two_rows, 2);
            write_tree(dir, &f);
            table_files_free(&f);
            struct roi_table t;
            struct errbuf err;
            int r = roi_table_read(dir, &t, &err);
            CHECK_EQ_INT(r, 0);
            if (r < 0)
                fprintf(stderr, "%s: %s\n", dir, err.msg);
            CHECK_EQ_INT(t.n, 2);
            for (size_t i = 0; r == 0 && i < 2; i++) {
                const struct table_row *w = &two_rows[1 - i]; /* sorted by label */
                for (int c = 0; c < ROI_TCOLS; c++) {
                    double v = c < 3 ? w->start[col_axis[c]] : w->length[col_axis[c]];
                    CHECK(t.v[i * ROI_TCOLS + c] == (b == 0 ? (double)(float)v : v));
                }
            }
            roi_table_free(&t);
            free(dir);
        }
    char *cmd = xasprintf("rm -rf '%s'", tmp);
    CHECK_EQ_INT(system(cmd), 0);
    free(cmd);
}

/* A plate's feature table (table_encode_concat_features): the parts' rows in order with the
 * index and extra columns; the columns are every part's, once each in the order first seen, a
 * part without one NaN (an empty csv field); X float64; a part's labels out of order refused. */
static void test_concat_features(void)
{
    static const char *const names[2] = {"row", "path_in_plate"};
    static const char *const t1[2] = {"B", "B/03/0"}, *const t2[2] = {"C", "C/05/0"};
    static const char *const c1[2] = {"area", "DAPI-sum"}, *const c2[2] = {"area", "GFP-sum"};
    const uint64_t l1[2] = {1, 4}, l2[1] = {2};
    const double v1[4] = {3, 0.5, 7, 1e21}, v2[2] = {2, 9.25};
    struct table_fpart parts[2] = {
        {l1, v1, 2, c1, 2, "B/03/0", t1},
        {l2, v2, 1, c2, 2, "C/05/0", t2},
    };
    struct table_concat c = {names, 2};
    struct table_spec spec = {2, TABLE_CSV, NULL, "feature_table"};
    struct table_files f = {0};
    struct errbuf err;
    CHECK_EQ_INT(table_encode_concat_features(&spec, &c, parts, 2, &f, &err), 0);
    CHECK(text_is(&f, "table.csv",
                  "index,label,area,DAPI-sum,GFP-sum,row,path_in_plate\n"
                  "B/03/0:1,1,3.0,0.5,,B,B/03/0\n"
                  "B/03/0:4,4,7.0,1e+21,,B,B/03/0\n"
                  "C/05/0:2,2,2.0,,9.25,C,C/05/0\n"));
    CHECK_STR_CONTAINS((const char *)table_files_find(&f, ".zattrs")->data,
                       "\"type\": \"feature_table\"");
    table_files_free(&f);
    spec.backend = TABLE_ANNDATA;
    CHECK_EQ_INT(table_encode_concat_features(&spec, &c, parts, 2, &f, &err), 0);
    const struct table_file *x = table_files_find(&f, "X/0.0");
    CHECK(x && x->len == 3 * 3 * 8);
    if (x && x->len == 72) {
        double got[9];
        memcpy(got, x->data, sizeof got); /* little-endian hosts only run the tests */
        CHECK(got[0] == 3 && got[1] == 0.5 && isnan(got[2]) && got[4] == 1e21);
        CHECK(got[6] == 2 && isnan(got[7]) && got[8] == 9.25);
    }
    CHECK_STR_CONTAINS((const char *)table_files_find(&f, "X/.zarray")->data, "<f8");
    CHECK(table_files_find(&f, "obs/path_in_plate/0") && table_files_find(&f, "obs/_index/0"));
    table_files_free(&f);
    const uint64_t bad[2] = {4, 1};
    parts[0].labels = bad;
    CHECK_EQ_INT(table_encode_concat_features(&spec, &c, parts, 2, &f, &err), -EINVAL);
    CHECK_STR_CONTAINS(err.msg, "B/03/0: row 1: label 1");
}

int main(void)
{
    RUN(test_vlen_utf8_bytes);
    RUN(test_v2_metadata_text);
    RUN(test_chunks);
    RUN(test_file_list);
    RUN(test_v3);
    RUN(test_csv);
    RUN(test_empty_and_big_labels);
    RUN(test_deterministic);
    RUN(test_refusals);
    RUN(test_roi_table_reads_it);
    RUN(test_concat_features);
    return check_done();
}
