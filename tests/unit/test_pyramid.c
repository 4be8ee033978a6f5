/* test_pyramid.c: the pyramid of [output] ome = true. Its arithmetic (src/arrays/downsample.c)
 * against references written here: footprints and their inverse (a change's image), 2x2
 * reductions, mean (rounded half to even,
 * exact for 64-bit integers) and nearest, odd sizes, y and x anywhere among three dimensions;
 * and the levels as arrays of the set (src/arrays/pyramid.c, arrayset.c): every chunk of every
 * level read through its engine equals the reference pyramid of the input, the tree and the
 * status document list the levels. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arrays/arrayset.h"
#include "arrays/downsample.h"
#include "check.h"
#include "engine_harness.h"
#include "nd.h"
#include "scratch.h"

static char dir[256];

/* ---- the arithmetic ---- */

static void test_footprint(void)
{
    /* y and x first, z last: shape (y 5, x 3, z 4) */
    struct downsample g = {.ndim = 3, .axis_y = 0, .axis_x = 1};
    uint64_t up[3] = {5, 3, 4}, f0[3], fs[3];
    uint64_t b0[3] = {2, 1, 1}, bs[3] = {1, 1, 2};
    downsample_footprint(&g, up, b0, bs, f0, fs);
    CHECK(f0[0] == 4 && fs[0] == 1); /* rows 4..6 of 5: the odd edge */
    CHECK(f0[1] == 2 && fs[1] == 1);
    CHECK(f0[2] == 1 && fs[2] == 2); /* z as it is */
    uint64_t c0[3] = {0, 0, 0}, cs[3] = {2, 2, 4};
    downsample_footprint(&g, up, c0, cs, f0, fs);
    CHECK(fs[0] == 4 && fs[1] == 3 && fs[2] == 4);
    /* y and x apart, with z between them */
    struct downsample h = {.ndim = 3, .axis_y = 0, .axis_x = 2};
    uint64_t up2[3] = {6, 5, 7}, d0[3] = {1, 2, 3}, ds[3] = {2, 3, 1};
    downsample_footprint(&h, up2, d0, ds, f0, fs);
    CHECK(f0[0] == 2 && fs[0] == 4 && f0[1] == 2 && fs[1] == 3 && f0[2] == 6 && fs[2] == 1);
}

/* The image of a box of the level above (where a change of it reaches) is exactly the
 * elements of the level whose footprint touches it: every box of a 7 x 5 x 3 level above
 * against every element of the level below, y and x the first and last dimensions. */
static void test_image_is_what_the_footprint_touches(void)
{
    struct downsample g = {.ndim = 3, .axis_y = 0, .axis_x = 2};
    uint64_t up[3] = {7, 5, 3}, lv[3] = {4, 5, 2};
    int bad = 0;
    uint64_t u0[3], u1[3];
    for (u0[0] = 0; u0[0] < up[0]; u0[0]++)
        for (u1[0] = u0[0] + 1; u1[0] <= up[0]; u1[0]++)
            for (u0[2] = 0; u0[2] < up[2]; u0[2]++)
                for (u1[2] = u0[2] + 1; u1[2] <= up[2]; u1[2]++) {
                    u0[1] = 1, u1[1] = 3;
                    uint64_t b0[3], b1[3], e[3] = {0, 0, 0}, one[3] = {1, 1, 1};
                    downsample_image(&g, u0, u1, b0, b1);
                    do {
                        uint64_t f0[3], fs[3];
                        downsample_footprint(&g, up, e, one, f0, fs);
                        bool touches = true, inside = true;
                        for (int d = 0; d < 3; d++) {
                            touches = touches && f0[d] < u1[d] && u0[d] < f0[d] + fs[d];
                            inside = inside && b0[d] <= e[d] && e[d] < b1[d];
                        }
                        bad += touches != inside;
                    } while (nd_next_index(e, NULL, lv, 3));
                }
    CHECK_EQ_INT(bad, 0);
}

/* Rounds to the nearest integer, halves to the even one. */
static double round_half_even(double m)
{
    double fl = floor(m), frac = m - fl;
    if (frac > 0.5)
        return fl + 1;
    if (frac < 0.5)
        return fl;
    return fmod(fl, 2) == 0 ? fl : fl + 1;
}

/* The reference of a 3-D reduction: out[i][j][k] from src of shape fs, y and x being the
 * dimensions ay and ax; mean of the block's elements inside src, or its first element. */
static double ref_block(const double *src, const uint64_t *fs, int ay, int ax, const int *o,
                        bool nearest)
{
    double sum = 0;
    int n = 0;
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            int p[3] = {o[0], o[1], o[2]};
            p[ay] = 2 * o[ay] + a;
            p[ax] = 2 * o[ax] + b;
            if ((uint64_t)p[ay] >= fs[ay] || (uint64_t)p[ax] >= fs[ax])
                continue;
            double v = src[((uint64_t)p[0] * fs[1] + (uint64_t)p[1]) * fs[2] + (uint64_t)p[2]];
            if (nearest)
                return v;
            sum += v;
            n++;
        }
    return sum / n;
}

/* Reduces a 3-D int16 array (values with halves and negatives) with y and x at ay, ax and
 * compares every element to the reference. */
static void check_reduce_i16(int ay, int ax, bool nearest, const uint64_t *fs)
{
    struct downsample g = {.ndim = 3, .axis_y = ay, .axis_x = ax, .nearest = nearest};
    struct dtype dt = {.kind = DT_INT, .size = 2};
    size_t nsrc = fs[0] * fs[1] * fs[2];
    int16_t *src = xmalloc(nsrc * sizeof *src);
    double *srcd = xmalloc(nsrc * sizeof *srcd);
    for (size_t i = 0; i < nsrc; i++)
        srcd[i] = src[i] = (int16_t)((int)(i * 7919 % 23) - 11);
    uint64_t shape[3] = {fs[0], fs[1], fs[2]};
    shape[ay] = (fs[ay] + 1) / 2;
    shape[ax] = (fs[ax] + 1) / 2;
    size_t n = shape[0] * shape[1] * shape[2];
    int16_t *dst = xmalloc(n * sizeof *dst);
    downsample_reduce(&g, &dt, src, fs, dst, shape);
    int bad = 0;
    for (int i = 0; i < (int)shape[0]; i++)
        for (int j = 0; j < (int)shape[1]; j++)
            for (int k = 0; k < (int)shape[2]; k++) {
                int o[3] = {i, j, k};
                double want = round_half_even(ref_block(srcd, fs, ay, ax, o, nearest));
                if (dst[((size_t)i * shape[1] + (size_t)j) * shape[2] + (size_t)k] != want)
                    bad++;
            }
    CHECK_EQ_INT(bad, 0);
    free(src);
    free(srcd);
    free(dst);
}

static void test_reduce_mean_and_nearest(void)
{
    uint64_t odd[3] = {5, 3, 4}, even[3] = {4, 6, 2}, mixed[3] = {7, 2, 5};
    for (int nearest = 0; nearest < 2; nearest++) {
        check_reduce_i16(0, 1, nearest, odd);   /* y, x, z */
        check_reduce_i16(0, 1, nearest, even);  /* no edge */
        check_reduce_i16(0, 2, nearest, mixed); /* y, z, x */
        check_reduce_i16(1, 2, nearest, odd);   /* z, y, x: the usual */
    }
    /* halves: a 2x2 block of 1, 2, 1, 2 is 1.5 -> 2; of 2, 3, 2, 3 is 2.5 -> 2 */
    struct downsample g = {.ndim = 2, .axis_y = 0, .axis_x = 1};
    struct dtype u8 = {.kind = DT_UINT, .size = 1};
    uint8_t src[8] = {1, 2, 2, 3, 1, 2, 2, 3}, dst[2];
    uint64_t fs[2] = {2, 4}, shape[2] = {1, 2};
    downsample_reduce(&g, &u8, src, fs, dst, shape);
    CHECK(dst[0] == 2 && dst[1] == 2);
}

/* 64-bit integers are averaged in long double: exact where a double would round. */
static void test_reduce_wide_and_float(void)
{
    struct downsample g = {.ndim = 2, .axis_y = 0, .axis_x = 1};
    struct dtype i64 = {.kind = DT_INT, .size = 8};
    int64_t big = (int64_t)1 << 60;
    int64_t src[4] = {big + 1, big + 3, big + 5, big + 7}, dst[1];
    uint64_t fs[2] = {2, 2}, shape[2] = {1, 1};
    downsample_reduce(&g, &i64, src, fs, dst, shape);
    CHECK(dst[0] == big + 4);
    struct dtype f4 = {.kind = DT_FLOAT, .size = 4};
    float fsrc[6] = {0.25f, 0.5f, 1.0f, 2.0f, 0.0f, 8.0f}, fdst[2];
    uint64_t fshape[2] = {2, 3}, dshape[2] = {1, 2};
    downsample_reduce(&g, &f4, fsrc, fshape, fdst, dshape);
    CHECK(fdst[0] == 0.6875f); /* (0.25 + 0.5 + 2 + 0) / 4, not rounded */
    CHECK(fdst[1] == 4.5f);    /* the odd column: (1 + 8) / 2 */
    struct downsample near = {.ndim = 2, .axis_y = 0, .axis_x = 1, .nearest = true};
    downsample_reduce(&near, &f4, fsrc, fshape, fdst, dshape);
    CHECK(fdst[0] == 0.25f && fdst[1] == 1.0f);
}

/* ---- the levels as arrays of the set ---- */

#define Z  2
#define Y  9
#define X  7
#define NL 3

static uint16_t level_ref[NL][Z][Y][X];
static uint64_t level_shape[NL][3];

static void make_reference(void)
{
    level_shape[0][0] = Z, level_shape[0][1] = Y, level_shape[0][2] = X;
    for (int z = 0; z < Z; z++)
        for (int y = 0; y < Y; y++)
            for (int x = 0; x < X; x++)
                level_ref[0][z][y][x] = (uint16_t)(z * 1000 + y * 37 + x * 11 + (x * y) % 5);
    for (int l = 1; l < NL; l++) {
        uint64_t *up = level_shape[l - 1], *sh = level_shape[l];
        sh[0] = up[0], sh[1] = (up[1] + 1) / 2, sh[2] = (up[2] + 1) / 2;
        for (int z = 0; z < (int)sh[0]; z++)
            for (int y = 0; y < (int)sh[1]; y++)
                for (int x = 0; x < (int)sh[2]; x++) {
                    double sum = 0;
                    int n = 0;
                    for (int a = 0; a < 2; a++)
                        for (int b = 0; b < 2; b++)
                            if ((uint64_t)(2 * y + a) < up[1] && (uint64_t)(2 * x + b) < up[2]) {
                                sum += level_ref[l - 1][z][2 * y + a][2 * x + b];
                                n++;
                            }
                    level_ref[l][z][y][x] = (uint16_t)round_half_even(sum / n);
                }
    }
}

static void write_input(void)
{
    const char *zarray = "{\"zarr_format\": 2, \"shape\": [2, 9, 7], \"chunks\": [2, 9, 7], "
                         "\"dtype\": \"<u2\", \"compressor\": null, \"fill_value\": 0, "
                         "\"order\": \"C\", \"filters\": null}";
    scratch_write_file(dir, "in.zarr/.zarray", zarray, strlen(zarray));
    scratch_write_file(dir, "in.zarr/0.0.0", level_ref[0], sizeof level_ref[0]);
    const char *ini = "[input]\npath = in.zarr\n[rois]\ngrid = 1,5,4\n[process]\n"
                      "builtin = copy\nthreads = 2\n[output]\nchunks = 1,2,2\nome = true\n"
                      "levels = 3\ncompressor = zstd\n[cache]\ndir = cache\n";
    scratch_write_file(dir, "task.ini", ini, strlen(ini));
}

/* Opens chunk id of array a through its engine and decodes it into buf. */
static int read_level_chunk(const struct array *a, uint64_t id, void *buf)
{
    int fd, r = harness_open_wait(a->engine, id, &fd);
    if (r)
        return r;
    char data[4096];
    ssize_t n = pread(fd, data, sizeof data, 0);
    close(fd);
    struct errbuf err;
    return n < 0 ? -EIO : zarr_decode_chunk(&a->task->out, data, (size_t)n, buf, &err);
}

/* Every chunk of array a (level l) against the reference; returns the mismatches. */
static int check_level(const struct array *a, int l)
{
    const struct task *t = a->task;
    int bad = 0;
    for (uint64_t id = 0; id < t->nchunks; id++) {
        uint16_t v[4];
        uint64_t idx[3];
        nd_unlinear(id, t->grid, 3, idx);
        if (!task_chunk_present(t, id) || read_level_chunk(a, id, v) != 0) {
            bad++;
            continue;
        }
        for (int i = 0; i < 4; i++) {
            uint64_t y = idx[1] * 2 + (uint64_t)i / 2, x = idx[2] * 2 + (uint64_t)i % 2;
            if (y < level_shape[l][1] && x < level_shape[l][2] &&
                v[i] != level_ref[l][idx[0]][y][x])
                bad++;
        }
    }
    return bad;
}

static int count_entry(void *ctx, const char *name, uint64_t ino, bool is_dir, uint64_t next)
{
    (void)ino, (void)is_dir, (void)next;
    struct strbuf *sb = ctx;
    sb_printf(sb, "%s ", name);
    return 0;
}

static void test_levels_through_engines(void)
{
    make_reference();
    write_input();
    char *path = path_join(dir, "task.ini");
    struct task *t = NULL;
    struct arrayset *s = NULL;
    struct errbuf err = {{0}};
    struct arrayset_opts o = {.status_file = true};
    int r = task_open(path, &t, &err);
    if (r == 0)
        r = arrayset_open(t, &o, &s, &err);
    if (r == 0)
        r = arrayset_start(s, &err);
    free(path);
    CHECK_EQ_INT(r, 0);
    if (r < 0) {
        fprintf(stderr, "%s\n", err.msg);
        arrayset_close(s);
        task_close(t);
        return;
    }
    CHECK_EQ_INT(arrayset_count(s), NL);
    /* the coarsest level first: it waits on the levels above, which compute meanwhile */
    for (int l = NL - 1; l >= 0; l--) {
        CHECK_EQ_INT(arrayset_array(s, (size_t)l)->level, l);
        CHECK_EQ_INT(check_level(arrayset_array(s, (size_t)l), l), 0);
    }
    struct strbuf names = {0};
    ns_readdir(arrayset_tree(s), NS_INO_ROOT, 0, NULL, count_entry, &names);
    CHECK_STR_CONTAINS(names.buf, ". .. .zgroup .zattrs .roifs 0 1 2 ");
    sb_free(&names);
    json_t *st = arrayset_status(s);
    json_t *levels = json_object_get(st, "levels");
    CHECK_EQ_INT(json_array_size(levels), NL);
    const struct task *t1 = arrayset_array(s, 1)->task;
    CHECK_EQ_INT(json_integer_value(json_object_get(json_array_get(levels, 1), "calls")),
                 t1->rois.n);
    json_decref(st);
    arrayset_stop(s);
    arrayset_close(s);
    task_close(t);
}

int main(void)
{
    if (check_mkdtemp(dir, sizeof dir, "pyramid"))
        return 1;
    log_open_stderr(false);
    RUN(test_footprint);
    RUN(test_image_is_what_the_footprint_touches);
    RUN(test_reduce_mean_and_nearest);
    RUN(test_reduce_wide_and_float);
    RUN(test_levels_through_engines);
    check_rmtree(dir);
    return check_done();
}
