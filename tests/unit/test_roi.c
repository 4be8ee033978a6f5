/* test_roi.c: unit tests of the ROI list parser, grid tiling, read regions and the chunk -> ROIs
 * index (checked against a brute-force reference), with timings for 100,000 ROIs. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "nd.h"
#include "roi.h"

static const uint64_t shape3[3] = {2, 1024, 512};

/* Checks ROI i of rs against the boxes a (start) and b (stop). */
static int roi_is(const struct roi_set *rs, size_t i, const uint64_t *a, const uint64_t *b)
{
    for (int d = 0; d < rs->ndim; d++)
        if (rs->start[i * (size_t)rs->ndim + d] != a[d] ||
            rs->stop[i * (size_t)rs->ndim + d] != b[d])
            return 0;
    return 1;
}

static void test_parse_basic(void)
{
    const char *text = "# z, y, x\n"
                       "0:1, 0:512, 0:512\n"
                       "\n"
                       "   \t\n"
                       "0:1,480:992,0:512   # trailing comment\n"
                       ":, 100:200, 300:400\n"
                       "  1 : 2 ,  3:4,5 :6  \r\n"
                       "1:, :10, 500:\n"
                       "# the end";
    struct roi_set rs;
    struct errbuf err;
    int r = roi_parse_text("rois.txt", text, 3, shape3, &rs, &err);
    CHECK_EQ_INT(r, 0);
    if (r != 0) {
        fprintf(stderr, "%s\n", err.msg);
        return;
    }
    CHECK_EQ_INT(rs.ndim, 3);
    CHECK_EQ_INT(rs.n, 5);
    CHECK(roi_is(&rs, 0, (uint64_t[]){0, 0, 0}, (uint64_t[]){1, 512, 512}));
    CHECK(roi_is(&rs, 1, (uint64_t[]){0, 480, 0}, (uint64_t[]){1, 992, 512}));
    CHECK(roi_is(&rs, 2, (uint64_t[]){0, 100, 300}, (uint64_t[]){2, 200, 400}));
    CHECK(roi_is(&rs, 3, (uint64_t[]){1, 3, 5}, (uint64_t[]){2, 4, 6}));
    CHECK(roi_is(&rs, 4, (uint64_t[]){1, 0, 500}, (uint64_t[]){2, 10, 512}));
    roi_set_free(&rs);

    /* what the one-pass reader leaves to the careful one: long numbers, other blanks */
    r = roi_parse_text("x", "0000000000000000000000001:2, \v3:4\f, 5:6\n0:1\t,0:1,0:1\n", 3, shape3,
                       &rs, &err);
    CHECK_EQ_INT(r, 0);
    CHECK_EQ_INT(rs.n, 2);
    CHECK(roi_is(&rs, 0, (uint64_t[]){1, 3, 5}, (uint64_t[]){2, 4, 6}));
    CHECK(roi_is(&rs, 1, (uint64_t[]){0, 0, 0}, (uint64_t[]){1, 1, 1}));
    roi_set_free(&rs);

    /* one dimension, no final newline */
    r = roi_parse_text("x", "3:7", 1, (uint64_t[]){10}, &rs, &err);
    CHECK_EQ_INT(r, 0);
    CHECK(rs.n == 1 && rs.start[0] == 3 && rs.stop[0] == 7);
    roi_set_free(&rs);
}

/* `@ LABEL` lines (docs/configuration.md, ROI list file; docs/masks.md): labels kept per ROI, 0 for
 * lines without one, across the growth of the arrays (the first label after 300 plain lines);
 * refused without the flag. */
static void test_parse_labels(void)
{
    struct strbuf sb = {0};
    for (int i = 0; i < 300; i++)
        sb_printf(&sb, "0:1, %d:%d, 0:512\n", i, i + 1);
    sb_printf(&sb, "0:1, 0:10, 0:10 @ 7   # a comment\n1:2,0:1,0:1@18446744073709551615\n");
    sb_printf(&sb, "0:1, 5:6, 0:1\n");
    struct roi_set rs;
    struct errbuf err;
    int r = roi_parse_text_flags("l.txt", sb.buf, 3, shape3, ROI_PARSE_LABELS, &rs, &err);
    CHECK_EQ_INT(r, 0);
    CHECK_EQ_INT(rs.n, 303);
    CHECK(rs.label != NULL);
    CHECK(roi_label(&rs, 0) == 0 && roi_label(&rs, 299) == 0);
    CHECK(roi_label(&rs, 300) == 7 && roi_label(&rs, 301) == UINT64_MAX);
    CHECK(roi_label(&rs, 302) == 0);
    CHECK(roi_is(&rs, 300, (uint64_t[]){0, 0, 0}, (uint64_t[]){1, 10, 10}));
    CHECK(roi_is(&rs, 301, (uint64_t[]){1, 0, 0}, (uint64_t[]){2, 1, 1}));
    roi_set_free(&rs);
    CHECK(rs.label == NULL);
    r = roi_parse_text_flags("l.txt", "0:1, 0:1, 0:1\n", 3, shape3, ROI_PARSE_LABELS, &rs, &err);
    CHECK(r == 0 && rs.label == NULL); /* no labelled line: no labels */
    roi_set_free(&rs);
    r = roi_parse_text("l.txt", "0:1, 0:1, 0:1\n0:1, 0:1, 0:1 @ 2\n", 3, shape3, &rs, &err);
    CHECK_EQ_INT(r, -EINVAL);
    CHECK(strstr(err.msg, "l.txt:2: a label (@ 2) needs [rois] mask") != NULL);
    r = roi_parse_text_flags("l.txt", "0:1, 0:1, 0:1 @ 0\n", 3, shape3, ROI_PARSE_LABELS, &rs,
                             &err);
    CHECK(r == -EINVAL && strstr(err.msg, "l.txt:1: label 0 is the background") != NULL);
    r = roi_parse_text_flags("l.txt", "0:1, 0:1 @ 3\n", 3, shape3, ROI_PARSE_LABELS, &rs, &err);
    CHECK(r == -EINVAL && strstr(err.msg, "2 ranges, the array has 3 dimensions") != NULL);
    sb_free(&sb);
}

/* Parses text for shape3 and expects -EINVAL with each needle in the message. */
#define EXPECT_ROI_ERROR(text, ...)                                                                \
    expect_roi_error(__LINE__, text, (const char *[]){__VA_ARGS__, NULL})
static void expect_roi_error(int line, const char *text, const char **needles)
{
    struct roi_set rs;
    struct errbuf err;
    int r = roi_parse_text("rois.txt", text, 3, shape3, &rs, &err);
    CHECK_EQ_INT(r, -EINVAL);
    CHECK(rs.start == NULL && rs.n == 0);
    for (const char **n = needles; *n; n++) {
        if (!strstr(err.msg, *n))
            fprintf(stderr, "test line %d:\n", line);
        CHECK_STR_CONTAINS(err.msg, *n);
    }
    if (getenv("SHOW_MESSAGES"))
        printf("  %s\n", err.msg);
}

static void test_parse_errors(void)
{
    EXPECT_ROI_ERROR("0:1,0:2,0:3\n0:1,0:2\n",
                     "rois.txt:2: ", "2 ranges, the array has 3 dimensions");
    EXPECT_ROI_ERROR("# c\n0:1,0:2,0:3,0:4\n",
                     "rois.txt:2: ", "4 ranges, the array has 3 dimensions");
    EXPECT_ROI_ERROR("0:1\n", "rois.txt:1: 1 range, the array has 3 dimensions");
    EXPECT_ROI_ERROR("\n\n0:1, 5:5, 0:3\n", "rois.txt:3: ", "range 2", "5:5",
                     "start 5 is not less than stop 5");
    EXPECT_ROI_ERROR("0:1, 9:4, 0:3\n", "rois.txt:1: ", "range 2", "start 9");
    EXPECT_ROI_ERROR("0:1, 0:2, 0:700\n",
                     "rois.txt:1: ", "range 3 (0:700) exceeds the extent 512 of dimension 3");
    EXPECT_ROI_ERROR("0:1, 2000:, 0:7\n",
                     "rois.txt:1: ", "range 2 (2000:) exceeds the extent 1024");
    EXPECT_ROI_ERROR("0:3, 0:2, 0:7\n", "rois.txt:1: ", "exceeds the extent 2 of dimension 1");
    EXPECT_ROI_ERROR("0:1, a:2, 0:7\n", "rois.txt:1: ", "range 2: 'a' is not an integer");
    EXPECT_ROI_ERROR("0:1, 0:2.5, 0:7\n", "rois.txt:1: ", "'2.5' is not an integer");
    EXPECT_ROI_ERROR("0:1, 0:2, 0:7 junk\n", "rois.txt:1: ", "'7 junk' is not an integer");
    EXPECT_ROI_ERROR("0:1, 0:2, 0:1:2\n", "rois.txt:1: ", "'1:2' is not an integer");
    EXPECT_ROI_ERROR("0:1, -3:2, 0:7\n", "rois.txt:1: ", "'-3' is negative");
    EXPECT_ROI_ERROR("0:1, 0:2, 99999999999999999999999:1\n", "rois.txt:1: ", "too large");
    EXPECT_ROI_ERROR("0:1, 5, 0:7\n", "rois.txt:1: ", "range 2: expected start:stop, got '5'");
    EXPECT_ROI_ERROR("hello world\n", "rois.txt:1: ", "expected start:stop, got 'hello world'");
    EXPECT_ROI_ERROR("0:1, 0:2, 0:7,\n", "rois.txt:1: ", "range 4 is empty");
    EXPECT_ROI_ERROR("0:1, , 0:7\n", "rois.txt:1: ", "range 2 is empty");
    EXPECT_ROI_ERROR("", "rois.txt: no ROIs");
    EXPECT_ROI_ERROR("# only\n\n  # comments\n", "rois.txt: no ROIs");
}

static void test_parse_file(void)
{
    char dir[] = "/tmp/roifs-test-roi.XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[128];
    snprintf(path, sizeof path, "%s/rois.txt", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    fputs("# header\n0:1, 0:10, 0:10\n1:2, :, :\n", f);
    fclose(f);
    struct roi_set rs;
    struct errbuf err;
    int r = roi_parse_file(path, 3, shape3, &rs, &err);
    CHECK_EQ_INT(r, 0);
    CHECK_EQ_INT(rs.n, 2);
    CHECK(roi_is(&rs, 1, (uint64_t[]){1, 0, 0}, (uint64_t[]){2, 1024, 512}));
    roi_set_free(&rs);

    f = fopen(path, "w");
    fputs("0:1, 0:10, 0:10\n\n0:1, 0:10, 0:1000\n", f);
    fclose(f);
    r = roi_parse_file(path, 3, shape3, &rs, &err);
    CHECK_EQ_INT(r, -EINVAL);
    char want[160];
    snprintf(want, sizeof want, "%s:3: range 3 (0:1000) exceeds", path);
    CHECK_STR_CONTAINS(err.msg, want);

    f = fopen(path, "w");
    fwrite("0:1,0:1,0:1\n0:1\0", 1, 16, f);
    fclose(f);
    r = roi_parse_file(path, 3, shape3, &rs, &err);
    CHECK_EQ_INT(r, -EINVAL);
    CHECK_STR_CONTAINS(err.msg, ":2: NUL byte");

    unlink(path);
    r = roi_parse_file(path, 3, shape3, &rs, &err);
    CHECK_EQ_INT(r, -ENOENT);
    CHECK_STR_CONTAINS(err.msg, "rois.txt: cannot read: ");
    rmdir(dir);
}

static void test_grid(void)
{
    struct roi_set rs;
    struct errbuf err;
    int r = roi_grid((uint64_t[]){2, 3}, 2, (uint64_t[]){5, 7}, &rs, &err);
    CHECK_EQ_INT(r, 0);
    CHECK_EQ_INT(rs.n, 9);
    CHECK(roi_is(&rs, 0, (uint64_t[]){0, 0}, (uint64_t[]){2, 3}));
    CHECK(roi_is(&rs, 1, (uint64_t[]){0, 3}, (uint64_t[]){2, 6}));
    CHECK(roi_is(&rs, 2, (uint64_t[]){0, 6}, (uint64_t[]){2, 7}));
    CHECK(roi_is(&rs, 3, (uint64_t[]){2, 0}, (uint64_t[]){4, 3}));
    CHECK(roi_is(&rs, 8, (uint64_t[]){4, 6}, (uint64_t[]){5, 7}));
    roi_set_free(&rs);

    /* a tile larger than the array is one clipped box */
    r = roi_grid((uint64_t[]){1, 600, 600}, 3, shape3, &rs, &err);
    CHECK_EQ_INT(r, 0);
    CHECK_EQ_INT(rs.n, 2 * 2);
    CHECK(roi_is(&rs, 3, (uint64_t[]){1, 600, 0}, (uint64_t[]){2, 1024, 512}));
    roi_set_free(&rs);

    r = roi_grid((uint64_t[]){1, 0, 4}, 3, shape3, &rs, &err);
    CHECK_EQ_INT(r, -EINVAL);
    CHECK_STR_CONTAINS(err.msg, "grid entry 2 is 0");
    r = roi_grid((uint64_t[]){4, 4}, 2, (uint64_t[]){0, 8}, &rs, &err);
    CHECK_EQ_INT(r, -EINVAL);
    CHECK_STR_CONTAINS(err.msg, "no ROIs");
    r = roi_grid((uint64_t[]){1, 1}, 2, (uint64_t[]){1 << 20, 1 << 20}, &rs, &err);
    CHECK_EQ_INT(r, -E2BIG);
    CHECK(rs.start == NULL);
}

static void test_read_region(void)
{
    struct roi_set rs;
    struct errbuf err;
    const uint64_t shape[3] = {3, 100, 50};
    int r = roi_parse_text("t", "1:2, 5:20, 40:50\n0:3, 0:100, 0:50\n", 3, shape, &rs, &err);
    CHECK_EQ_INT(r, 0);
    uint64_t a[3], s[3];
    roi_read_region(&rs, 0, (uint64_t[]){0, 16, 16}, shape, a, s);
    CHECK(a[0] == 1 && a[1] == 0 && a[2] == 24);
    CHECK(s[0] == 1 && s[1] == 36 && s[2] == 26);
    roi_read_region(&rs, 0, (uint64_t[]){1, 3, 0}, shape, a, s);
    CHECK(a[0] == 0 && a[1] == 2 && a[2] == 40);
    CHECK(s[0] == 3 && s[1] == 21 && s[2] == 10);
    roi_read_region(&rs, 0, NULL, shape, a, s);
    CHECK(a[0] == 1 && a[1] == 5 && a[2] == 40);
    CHECK(s[0] == 1 && s[1] == 15 && s[2] == 10);
    roi_read_region(&rs, 1, (uint64_t[]){UINT64_MAX, UINT64_MAX, 7}, shape, a, s);
    CHECK(a[0] == 0 && a[1] == 0 && a[2] == 0);
    CHECK(s[0] == 3 && s[1] == 100 && s[2] == 50);

    uint64_t c0[3], c1[3];
    roi_chunk_range(&rs, 0, (uint64_t[]){1, 5, 16}, c0, c1);
    CHECK(c0[0] == 1 && c1[0] == 2);
    CHECK(c0[1] == 1 && c1[1] == 4);
    CHECK(c0[2] == 2 && c1[2] == 4);
    roi_set_free(&rs);
}

static struct roi_set make_set(int ndim, size_t n)
{
    struct roi_set rs = {.ndim = ndim, .n = n};
    rs.start = xcalloc(n * (size_t)ndim + 1, sizeof(uint64_t));
    rs.stop = xcalloc(n * (size_t)ndim + 1, sizeof(uint64_t));
    return rs;
}

/* Compares the index with a brute-force scan of every chunk of the grid. */
static void check_against_reference(const struct roi_set *rs, const uint64_t *shape,
                                    const uint64_t *chunks, const struct roi_index *ix)
{
    int nd = rs->ndim;
    uint64_t grid[ROIFS_MAX_DIM], total = 1, idx[ROIFS_MAX_DIM] = {0};
    for (int d = 0; d < nd; d++) {
        grid[d] = (shape[d] + chunks[d] - 1) / chunks[d];
        total *= grid[d];
    }
    uint32_t *want = xmalloc((rs->n + 1) * sizeof *want);
    uint64_t *per_roi = xcalloc(rs->n + 1, sizeof *per_roi);
    size_t touched = 0, contacts = 0;
    for (uint64_t id = 0; id < total; id++) {
        size_t nwant = 0;
        for (size_t i = 0; i < rs->n; i++) {
            int hit = 1;
            for (int d = 0; d < nd; d++) {
                uint64_t lo = idx[d] * chunks[d], hi = lo + chunks[d];
                hit =
                    hit && rs->start[i * (size_t)nd + d] < hi && rs->stop[i * (size_t)nd + d] > lo;
            }
            if (hit) {
                want[nwant++] = (uint32_t)i;
                per_roi[i]++;
            }
        }
        int64_t k = roi_index_find(ix, id);
        size_t lb = roi_index_lower_bound(ix, id);
        CHECK_EQ_INT(lb, touched);
        if (nwant == 0) {
            CHECK_EQ_INT(k, -1);
        } else {
            CHECK_EQ_INT(k, (int64_t)touched);
            size_t count = 0;
            const uint32_t *got = k >= 0 ? roi_index_rois(ix, (size_t)k, &count) : NULL;
            CHECK_EQ_INT(count, nwant);
            CHECK(count == nwant && memcmp(got, want, nwant * sizeof *want) == 0);
            CHECK(roi_index_chunk_id(ix, touched) == id);
            touched++;
            contacts += nwant;
        }
        nd_next_index(idx, NULL, grid, nd);
    }
    CHECK_EQ_INT(roi_index_nchunks(ix), touched);
    CHECK_EQ_INT(roi_index_ncontacts(ix), contacts);
    CHECK_EQ_INT(roi_index_lower_bound(ix, total), touched);
    for (size_t i = 0; i < rs->n; i++)
        CHECK_EQ_INT(roi_index_roi_nchunks(ix, i), per_roi[i]);
    free(want);
    free(per_roi);
}

static void test_index_reference(void)
{
    srand(12345);
    int failures_before = check_failures;
    for (int iter = 0; iter < 300 && check_failures == failures_before; iter++) {
        int nd = 1 + rand() % 3;
        uint64_t shape[3], chunks[3];
        for (int d = 0; d < nd; d++) {
            shape[d] = 1 + (uint64_t)(rand() % 40);
            chunks[d] = 1 + (uint64_t)(rand() % 12);
        }
        size_t n = (size_t)(rand() % 40);
        struct roi_set rs = make_set(nd, n);
        for (size_t i = 0; i < n; i++)
            for (int d = 0; d < nd; d++) {
                uint64_t a = (uint64_t)rand() % shape[d];
                uint64_t b = a + 1 + (uint64_t)rand() % (shape[d] - a);
                rs.start[i * (size_t)nd + d] = a;
                rs.stop[i * (size_t)nd + d] = b;
            }
        struct roi_index *ix;
        struct errbuf err;
        int r = roi_index_build(&rs, shape, chunks, &ix, &err);
        CHECK_EQ_INT(r, 0);
        if (r == 0) {
            check_against_reference(&rs, shape, chunks, ix);
            roi_index_free(ix);
        }
        roi_set_free(&rs);
    }
}

static void test_index_huge_grid(void)
{
    /* 10^10 chunks in the grid, two ROIs: memory follows the contacts only */
    const uint64_t shape[2] = {1000000, 1000000}, chunks[2] = {10, 10};
    struct roi_set rs = make_set(2, 2);
    uint64_t boxes[2][4] = {{5, 999990, 25, 1000000}, {999999, 0, 1000000, 1}};
    for (int i = 0; i < 2; i++) {
        rs.start[2 * i] = boxes[i][0];
        rs.start[2 * i + 1] = boxes[i][1];
        rs.stop[2 * i] = boxes[i][2];
        rs.stop[2 * i + 1] = boxes[i][3];
    }
    struct roi_index *ix;
    struct errbuf err;
    int r = roi_index_build(&rs, shape, chunks, &ix, &err);
    CHECK_EQ_INT(r, 0);
    if (r == 0) {
        CHECK_EQ_INT(roi_index_nchunks(ix), 4);
        CHECK(roi_index_chunk_id(ix, 0) == 99999);
        CHECK(roi_index_chunk_id(ix, 2) == 2 * 100000ULL + 99999);
        CHECK(roi_index_chunk_id(ix, 3) == 99999ULL * 100000);
        CHECK_EQ_INT(roi_index_find(ix, 100000 + 99999), 1);
        CHECK_EQ_INT(roi_index_find(ix, 100000 + 99998), -1);
        CHECK_EQ_INT(roi_index_roi_nchunks(ix, 0), 3);
        size_t count;
        const uint32_t *rois = roi_index_rois(ix, 3, &count);
        CHECK(count == 1 && rois[0] == 1);
        roi_index_free(ix);
    }
    roi_set_free(&rs);
}

static void test_index_limits(void)
{
    struct roi_index *ix;
    struct errbuf err;
    /* 2^80 chunks */
    struct roi_set rs = make_set(2, 1);
    rs.stop[0] = rs.stop[1] = 1;
    int r =
        roi_index_build(&rs, (uint64_t[]){1ULL << 40, 1ULL << 40}, (uint64_t[]){1, 1}, &ix, &err);
    CHECK_EQ_INT(r, -E2BIG);
    CHECK(ix == NULL);
    CHECK_STR_CONTAINS(err.msg, "2^63");
    /* exactly 2^63 chunks is fine, up to the very last one */
    rs.start[0] = (1ULL << 62) - 1;
    rs.stop[0] = 1ULL << 62;
    rs.start[1] = 1;
    rs.stop[1] = 2;
    r = roi_index_build(&rs, (uint64_t[]){1ULL << 62, 2}, (uint64_t[]){1, 1}, &ix, &err);
    CHECK_EQ_INT(r, 0);
    if (r == 0) {
        CHECK(roi_index_chunk_id(ix, 0) == (1ULL << 63) - 1);
        roi_index_free(ix);
    }
    /* a ROI outside the array */
    r = roi_index_build(&rs, (uint64_t[]){4, 4}, (uint64_t[]){1, 1}, &ix, &err);
    CHECK_EQ_INT(r, -EINVAL);
    /* a chunk shape of 0 */
    r = roi_index_build(&rs, (uint64_t[]){1ULL << 62, 2}, (uint64_t[]){0, 1}, &ix, &err);
    CHECK_EQ_INT(r, -EINVAL);
    /* one ROI touching 2^63 chunks cannot be indexed, nor one whose 2^40 contacts would not
     * fit in memory (issue 14.4): refused before anything is allocated */
    rs.start[0] = rs.start[1] = 0;
    rs.stop[0] = 1ULL << 31;
    rs.stop[1] = 1ULL << 32;
    r = roi_index_build(&rs, (uint64_t[]){1ULL << 31, 1ULL << 32}, (uint64_t[]){1, 1}, &ix, &err);
    CHECK_EQ_INT(r, -E2BIG);
    rs.stop[0] = rs.stop[1] = 1ULL << 20;
    r = roi_index_build(&rs, (uint64_t[]){1ULL << 20, 1ULL << 20}, (uint64_t[]){1, 1}, &ix, &err);
    CHECK_EQ_INT(r, -E2BIG);
    CHECK_STR_CONTAINS(err.msg, "memory");
    roi_set_free(&rs);
    /* more ROIs than 32 bits can number: rejected before the boxes are read */
    struct roi_set big = {.ndim = 1, .n = (size_t)UINT32_MAX + 1};
    r = roi_index_build(&big, (uint64_t[]){10}, (uint64_t[]){1}, &ix, &err);
    CHECK_EQ_INT(r, -E2BIG);
    CHECK(ix == NULL);
}

/* 100,000 ROIs of 100 x 100 at random places in a 100,000 x 100,000 array with chunks of
 * 256: about 1.6 chunks each. */
static void test_perf_100k(void)
{
    enum { N = 100000 };
    const uint64_t shape[2] = {100000, 100000}, chunks[2] = {256, 256};
    struct strbuf sb = {0};
    srand(7);
    for (int i = 0; i < N; i++) {
        unsigned y = (unsigned)rand() % 99900, x = (unsigned)rand() % 99900;
        sb_printf(&sb, "%u:%u, %u:%u\n", y, y + 100, x, x + 100);
    }
    struct roi_set rs;
    struct errbuf err;
    double t0 = now_monotonic();
    int r = roi_parse_text("perf.txt", sb.buf, 2, shape, &rs, &err);
    double t1 = now_monotonic();
    sb_free(&sb);
    CHECK_EQ_INT(r, 0);
    CHECK_EQ_INT(rs.n, N);
    struct roi_index *ix = NULL;
    double t2 = now_monotonic();
    r = roi_index_build(&rs, shape, chunks, &ix, &err);
    double t3 = now_monotonic();
    CHECK_EQ_INT(r, 0);
    if (r == 0) {
        printf("# 100,000 ROIs: parse %.1f ms, index build %.1f ms (%zu contacts, %zu chunks)\n",
               (t1 - t0) * 1e3, (t3 - t2) * 1e3, roi_index_ncontacts(ix), roi_index_nchunks(ix));
        CHECK(roi_index_ncontacts(ix) >= N);
        roi_index_free(ix);
    }
    CHECK(t1 - t0 < 5.0);
    CHECK(t3 - t2 < 5.0);

    roi_set_free(&rs);

    /* a 3-D grid of 100,000 tiles, most touching 4 chunks */
    r = roi_grid((uint64_t[]){1, 20, 20}, 3, (uint64_t[]){10, 2000, 2000}, &rs, &err);
    CHECK_EQ_INT(rs.n, N);
    t0 = now_monotonic();
    r = roi_index_build(&rs, (uint64_t[]){10, 2000, 2000}, (uint64_t[]){1, 30, 30}, &ix, &err);
    t1 = now_monotonic();
    CHECK_EQ_INT(r, 0);
    if (r == 0) {
        printf("# 100,000 grid ROIs: index build %.1f ms (%zu contacts)\n", (t1 - t0) * 1e3,
               roi_index_ncontacts(ix));
        roi_index_free(ix);
    }
    roi_set_free(&rs);
}

int main(void)
{
    RUN(test_parse_basic);
    RUN(test_parse_errors);
    RUN(test_parse_labels);
    RUN(test_parse_file);
    RUN(test_grid);
    RUN(test_read_region);
    RUN(test_index_reference);
    RUN(test_index_huge_grid);
    RUN(test_index_limits);
    RUN(test_perf_100k);
    return check_done();
}
