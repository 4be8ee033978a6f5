/* test_input.c: unit tests for the Zarr v2 input reader: arrays written from C (and, when
 * available, by zarr-python) are read back box by box and compared with a reference. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "scratch.h"
#include "nd.h"
#include "zarr/zarr.h"

static _Thread_local uint64_t rnd_state = 0x9e3779b97f4a7c15ULL;
static uint64_t rnd(uint64_t n)
{
    uint64_t v = check_xorshift(&rnd_state);
    return n ? v % n : v;
}

static char tmp_root[256];

static char *new_dir(const char *name)
{
    char *p = xasprintf("%s/%s", tmp_root, name);
    CHECK_EQ_INT(mkdir_p(p, 0755), 0);
    return p;
}

/* An array under test: its metadata and the full contents (C order, native byte order). */
struct arr {
    struct zarr_meta m;
    unsigned char *ref;
    uint64_t n;
    size_t is;
};

/* Element-wise reference copy between the full array and a chunk-shaped buffer. */
static void chunk_region(struct arr *a, const uint64_t *ci, unsigned char *chunk, bool to_chunk)
{
    const struct zarr_meta *m = &a->m;
    uint64_t cn = nd_prod(m->chunks, m->ndim), idx[ROIFS_MAX_DIM], g[ROIFS_MAX_DIM];
    for (uint64_t e = 0; e < cn; e++) {
        nd_unlinear(e, m->chunks, m->ndim, idx);
        bool inside = true;
        for (int d = 0; d < m->ndim; d++) {
            g[d] = ci[d] * m->chunks[d] + idx[d];
            inside &= g[d] < m->shape[d];
        }
        if (!inside)
            continue;
        unsigned char *r = a->ref + nd_linear(g, m->shape, m->ndim) * a->is;
        if (to_chunk)
            memcpy(chunk + e * a->is, r, a->is);
        else
            memcpy(r, chunk + e * a->is, a->is);
    }
}

static void c_to_f(unsigned char *dst, const unsigned char *src, const uint64_t *shape, int nd,
                   size_t is)
{
    uint64_t n = nd_prod(shape, nd), idx[ROIFS_MAX_DIM];
    for (uint64_t e = 0; e < n; e++) {
        nd_unlinear(e, shape, nd, idx);
        uint64_t fo = 0, st = 1;
        for (int d = 0; d < nd; d++) {
            fo += idx[d] * st;
            st *= shape[d];
        }
        memcpy(dst + fo * is, src + e * is, is);
    }
}

/* Writes a as a Zarr v2 array in dir with our own encoder. Chunks whose linear id is in
 * `missing` (id % 5 == 3 when missing is true) are not written and read as fill. */
static void write_array(struct arr *a, const char *dir, bool missing)
{
    struct zarr_meta *m = &a->m;
    char *text = zarr_meta_emit_v2(m);
    if (m->fortran_order) {
        char *o = strstr(text, "\"order\": \"C\"");
        CHECK(o != NULL);
        if (o)
            o[10] = 'F';
    }
    scratch_write_file(dir, ".zarray", text, strlen(text));
    free(text);
    uint64_t grid[ROIFS_MAX_DIM], ci[ROIFS_MAX_DIM];
    zarr_meta_grid(m, grid);
    size_t cb = zarr_meta_chunk_nbytes(m);
    unsigned char *chunk = malloc(cb), *fbuf = malloc(cb), *fillc = malloc(cb);
    nd_fill(fillc, cb / a->is, m->fill, a->is);
    for (uint64_t id = 0; id < nd_prod(grid, m->ndim); id++) {
        nd_unlinear(id, grid, m->ndim, ci);
        if (missing && id % 5 == 3) {
            chunk_region(a, ci, fillc, false);
            continue;
        }
        memset(chunk, 0xa5, cb); /* the overhang of edge chunks is junk */
        chunk_region(a, ci, chunk, true);
        unsigned char *src = chunk;
        if (m->fortran_order) {
            c_to_f(fbuf, chunk, m->chunks, m->ndim, a->is);
            src = fbuf;
        }
        if (m->dtype.big_endian)
            dtype_byteswap(src, cb / a->is, m->dtype.size);
        void *enc;
        size_t n;
        struct errbuf err;
        CHECK_EQ_INT(zarr_codec_encode(&m->compressor, src, cb, m->dtype.size, &enc, &n, &err), 0);
        char key[1024];
        zarr_meta_chunk_key(m, ci, key, sizeof key);
        scratch_write_file(dir, key, enc, n);
        free(enc);
    }
    free(chunk);
    free(fbuf);
    free(fillc);
}

static void make_arr(struct arr *a, const char *dtype, int nd, const uint64_t *shape,
                     const uint64_t *chunks, enum zarr_codec_id cid, char sep, bool fortran,
                     double fill)
{
    memset(a, 0, sizeof *a);
    struct zarr_meta *m = &a->m;
    struct errbuf err;
    CHECK_EQ_INT(dtype_parse(dtype, &m->dtype, &err), 0);
    m->format = 2;
    m->ndim = nd;
    for (int d = 0; d < nd; d++) {
        m->shape[d] = shape[d];
        m->chunks[d] = chunks[d];
    }
    m->separator = sep;
    m->fortran_order = fortran;
    m->compressor.id = cid;
    m->compressor.level = cid == ZC_ZSTD ? 3 : 5;
    strcpy(m->compressor.cname, "lz4");
    m->compressor.shuffle = 1;
    if (isnan(fill) && m->dtype.kind != DT_FLOAT)
        m->fill_null = true;
    else
        dtype_from_double(&m->dtype, &fill, m->fill, 1);
    a->is = m->dtype.size;
    a->n = nd_prod(shape, nd);
    a->ref = malloc(a->n * a->is + 1);
    for (uint64_t i = 0; i < a->n * a->is; i++)
        a->ref[i] = (unsigned char)rnd(256);
    if (m->dtype.kind == DT_BOOL)
        for (uint64_t i = 0; i < a->n; i++)
            a->ref[i] &= 1;
}

/* Reads `count` random boxes and compares each with the reference; returns mismatches. */
static int check_boxes(struct zarr_input *in, const struct arr *a, int count, uint64_t maxext)
{
    const struct zarr_meta *m = &a->m;
    int bad = 0;
    for (int it = 0; it < count; it++) {
        uint64_t start[ROIFS_MAX_DIM], shape[ROIFS_MAX_DIM], idx[ROIFS_MAX_DIM], g[ROIFS_MAX_DIM];
        for (int d = 0; d < m->ndim; d++) {
            start[d] = rnd(m->shape[d]);
            uint64_t room = m->shape[d] - start[d];
            shape[d] = 1 + rnd(room < maxext ? room : maxext);
        }
        if (it == 0) /* the whole array once */
            for (int d = 0; d < m->ndim; d++) {
                start[d] = 0;
                shape[d] = m->shape[d];
            }
        uint64_t n = nd_prod(shape, m->ndim);
        unsigned char *buf = malloc(n * a->is + 1);
        struct errbuf err = {{0}};
        int r = zarr_input_read(in, start, shape, buf, &err);
        if (r < 0) {
            fprintf(stderr, "  read failed: %s\n", err.msg);
            bad++;
        }
        for (uint64_t e = 0; r == 0 && e < n; e++) {
            nd_unlinear(e, shape, m->ndim, idx);
            for (int d = 0; d < m->ndim; d++)
                g[d] = start[d] + idx[d];
            if (memcmp(buf + e * a->is, a->ref + nd_linear(g, m->shape, m->ndim) * a->is, a->is) !=
                0) {
                bad++;
                break;
            }
        }
        free(buf);
    }
    return bad;
}

struct variant {
    const char *name, *dtype;
    int nd;
    uint64_t shape[3], chunks[3];
    enum zarr_codec_id cid;
    char sep;
    bool fortran;
    double fill;
};

static const struct variant variants[] = {
    {"v1", "<u2", 1, {1000}, {64}, ZC_BLOSC, '.', false, 7},
    {"v2", ">i4", 2, {37, 50}, {8, 16}, ZC_ZLIB, '/', true, -3},
    {"v3", "<f8", 3, {9, 10, 11}, {4, 3, 5}, ZC_GZIP, '.', true, NAN},
    {"v4", "|u1", 3, {20, 7, 33}, {6, 7, 8}, ZC_ZSTD, '/', false, 255},
    {"v5", "<f2", 2, {30, 40}, {30, 9}, ZC_NONE, '.', false, 1.5},
    {"v6", ">u8", 2, {17, 19}, {5, 4}, ZC_BLOSC, '/', true, 0},
    {"v7", ">f4", 1, {100}, {7}, ZC_ZSTD, '.', true, -INFINITY},
    {"v8", "<i2", 2, {25, 25}, {10, 10}, ZC_NONE, '/', true, NAN}, /* fill null */
    {"v9", "|b1", 3, {5, 6, 7}, {2, 6, 3}, ZC_BLOSC, '.', false, 1},
    {"v10", ">i8", 3, {4, 5, 6}, {4, 5, 6}, ZC_GZIP, '/', false, -1}, /* one chunk */
};

static bool have_python;

/* zarr-python reads the array at dir and writes its contents as little-endian C-order bytes;
 * returns 0 when they equal the reference. */
static int python_reads_same(const struct arr *a, const char *dir)
{
    char *cmd = xasprintf("/usr/bin/python3 -c 'import sys, zarr; z = zarr.open(sys.argv[1], "
                          "mode=\"r\"); a = z[...]; "
                          "open(sys.argv[1] + \".bin\", \"wb\").write(a.astype(a.dtype."
                          "newbyteorder(\"<\")).tobytes())' %s",
                          dir);
    int r = system(cmd);
    free(cmd);
    if (r != 0)
        return -1;
    char *bin = xasprintf("%s.bin", dir), *data;
    size_t len;
    r = file_read_all(bin, &data, &len);
    free(bin);
    if (r < 0)
        return r;
    r = len == a->n * a->is && memcmp(data, a->ref, len) == 0 ? 0 : 1;
    free(data);
    return r;
}

static void test_variants(void)
{
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        const struct variant *t = &variants[v];
        struct arr a;
        make_arr(&a, t->dtype, t->nd, t->shape, t->chunks, t->cid, t->sep, t->fortran, t->fill);
        char *dir = new_dir(t->name);
        write_array(&a, dir, true);
        struct zarr_input *in;
        struct errbuf err = {{0}};
        int r = zarr_input_open(dir, 1 << 20, &in, &err);
        CHECK_EQ_INT(r, 0);
        if (r == 0) {
            const struct zarr_meta *m = zarr_input_meta(in);
            CHECK(m->fortran_order == t->fortran && m->separator == t->sep);
            CHECK(m->dtype.big_endian == a.m.dtype.big_endian);
            int bad = check_boxes(in, &a, 300, 12);
            if (bad)
                fprintf(stderr, "  variant %s: %d bad boxes\n", t->name, bad);
            CHECK_EQ_INT(bad, 0);
            zarr_input_close(in);
        } else {
            fprintf(stderr, "  %s\n", err.msg);
        }
        /* a tiny cache (two chunks) gives the same answers */
        if (zarr_input_open(dir, 0, &in, &err) == 0) {
            CHECK_EQ_INT(check_boxes(in, &a, 100, 20), 0);
            struct zarr_input_stats st;
            zarr_input_get_stats(in, &st);
            size_t cb = zarr_meta_chunk_nbytes(&a.m);
            CHECK(st.bytes <= 2 * cb + 1024);
            zarr_input_close(in);
        }
        if (have_python && python_reads_same(&a, dir) != 0) {
            fprintf(stderr, "  variant %s: zarr-python reads different data\n", t->name);
            CHECK(0);
        }
        free(dir);
        free(a.ref);
    }
}

/* Opens the input at dir (an LRU of lru bytes), which the test expects to open: NULL (a
 * failed check, the reason on stderr) when it does not. */
static struct zarr_input *open_ok(const char *dir, size_t lru)
{
    struct zarr_input *in = NULL;
    struct errbuf err;
    int r = zarr_input_open(dir, lru, &in, &err);
    if (r < 0)
        fprintf(stderr, "zarr_input_open: %s\n", err.msg);
    CHECK_EQ_INT(r, 0);
    /* the files were written just now: without this, no decoded chunk of theirs would be
     * used twice for 2 s (the racy-timestamp margin, which test_racy_reads tests) */
    if (r == 0)
        zarr_input_set_racy_margin(in, 0);
    return r == 0 ? in : NULL;
}

/* Reads the box that is exactly interior chunk ci into buf: 0, or the read's error. */
static int read_chunk_box(struct zarr_input *in, const struct zarr_meta *m, const uint64_t *ci,
                          void *buf, struct errbuf *err)
{
    uint64_t start[ROIFS_MAX_DIM];
    for (int d = 0; d < m->ndim; d++)
        start[d] = ci[d] * m->chunks[d];
    return zarr_input_read(in, start, m->chunks, buf, err);
}

/* A box that is exactly one chunk (a ROI that is its chunk: grid = chunks) is read straight
 * into place and not cached; every codec, byte order and layout gives the reference, missing
 * chunks the fill; a cached chunk is served from the cache; a plain chunk file of the wrong
 * size is an error naming it. */
static void test_whole_chunk_boxes(void)
{
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        const struct variant *t = &variants[v];
        struct arr a;
        make_arr(&a, t->dtype, t->nd, t->shape, t->chunks, t->cid, t->sep, t->fortran, t->fill);
        char *dir = new_dir("whole");
        char *sub = xasprintf("%s/%s", dir, t->name);
        CHECK_EQ_INT(mkdir_p(sub, 0755), 0);
        write_array(&a, sub, true);
        struct zarr_input *in = open_ok(sub, 1 << 20);
        const struct zarr_meta *m = in ? zarr_input_meta(in) : NULL;
        uint64_t grid[ROIFS_MAX_DIM], ci[ROIFS_MAX_DIM], n = 0;
        size_t cb = zarr_meta_chunk_nbytes(&a.m);
        unsigned char *buf = malloc(cb + 1), *want = malloc(cb + 1);
        zarr_meta_grid(&a.m, grid);
        for (uint64_t id = 0; m && id < nd_prod(grid, m->ndim); id++) {
            nd_unlinear(id, grid, m->ndim, ci);
            bool interior = true;
            for (int d = 0; d < m->ndim; d++)
                interior &= (ci[d] + 1) * m->chunks[d] <= m->shape[d];
            if (!interior)
                continue;
            struct errbuf err = {{0}};
            int r = read_chunk_box(in, m, ci, buf, &err);
            if (r < 0)
                fprintf(stderr, "  variant %s chunk %llu: %s\n", t->name, (unsigned long long)id,
                        err.msg);
            CHECK_EQ_INT(r, 0);
            chunk_region(&a, ci, want, true);
            if (memcmp(buf, want, cb) != 0) {
                fprintf(stderr, "  variant %s: chunk %llu differs\n", t->name,
                        (unsigned long long)id);
                CHECK(0);
            }
            n++;
        }
        struct zarr_input_stats st;
        if (in) {
            zarr_input_get_stats(in, &st);
            CHECK(n > 0);
            CHECK_EQ_INT((int)st.loads, (int)n); /* each read once... */
            CHECK_EQ_INT((int)st.bytes, 0);      /* ...and none kept */
            /* chunk 0, cached by a read of part of it, is then served from the cache */
            uint64_t one[ROIFS_MAX_DIM], zero[ROIFS_MAX_DIM] = {0};
            for (int d = 0; d < m->ndim; d++)
                one[d] = 1;
            struct errbuf err = {{0}};
            CHECK_EQ_INT(zarr_input_read(in, zero, one, buf, &err), 0);
            CHECK_EQ_INT(read_chunk_box(in, m, zero, buf, &err), 0);
            chunk_region(&a, zero, want, true);
            CHECK(memcmp(buf, want, cb) == 0);
            zarr_input_get_stats(in, &st);
            CHECK_EQ_INT((int)st.hits, 1);
            zarr_input_close(in);
        }
        free(buf);
        free(want);
        free(sub);
        free(dir);
        free(a.ref);
    }
    /* a plain (uncompressed) chunk file one byte short, and one byte long */
    struct arr a;
    uint64_t shape[2] = {8, 8}, chunks[2] = {4, 4};
    make_arr(&a, "<u2", 2, shape, chunks, ZC_NONE, '.', false, 0);
    char *dir = new_dir("wplain");
    write_array(&a, dir, false);
    for (int grow = 0; grow < 2; grow++) {
        char *f = xasprintf("%s/0.1", dir);
        CHECK_EQ_INT(truncate(f, grow ? 33 : 31), 0);
        free(f);
        struct zarr_input *in = open_ok(dir, 1 << 20);
        if (!in)
            continue;
        uint16_t buf[16];
        uint64_t ci[2] = {0, 1};
        struct errbuf err = {{0}};
        CHECK_EQ_INT(read_chunk_box(in, zarr_input_meta(in), ci, buf, &err), -EIO);
        CHECK_STR_CONTAINS(err.msg, "0.1");
        zarr_input_close(in);
    }
    free(dir);
    free(a.ref);
}

static void test_zero_dim(void)
{
    struct arr a;
    make_arr(&a, ">i4", 0, NULL, NULL, ZC_BLOSC, '.', false, 0);
    char *dir = new_dir("zerodim");
    write_array(&a, dir, false);
    struct zarr_input *in;
    struct errbuf err;
    in = open_ok(dir, 0);
    if (!in)
        return;
    int32_t v = 0;
    CHECK_EQ_INT(zarr_input_read(in, NULL, NULL, &v, &err), 0);
    CHECK(memcmp(&v, a.ref, 4) == 0);
    zarr_input_close(in);
    free(dir);
    free(a.ref);
}

static void test_errors(void)
{
    struct zarr_input *in;
    struct errbuf err = {{0}};
    char *empty = new_dir("empty");
    CHECK_EQ_INT(zarr_input_open(empty, 0, &in, &err), -ENOENT);
    CHECK_STR_CONTAINS(err.msg, "not a Zarr v2 array (no .zarray)");
    CHECK_STR_CONTAINS(err.msg, empty);
    scratch_write_file(empty, "zarr.json", "{}", 2);
    CHECK(zarr_input_open(empty, 0, &in, &err) < 0);
    CHECK_STR_CONTAINS(err.msg, "v3");
    char *nowhere = xasprintf("%s/does-not-exist", tmp_root);
    CHECK_EQ_INT(zarr_input_open(nowhere, 0, &in, &err), -ENOENT);
    CHECK_STR_CONTAINS(err.msg, nowhere);
    free(nowhere);
    free(empty);

    uint64_t shape[] = {10, 10}, chunks[] = {5, 5};
    struct arr a;
    make_arr(&a, "<u2", 2, shape, chunks, ZC_BLOSC, '.', false, 0);
    char *dir = new_dir("errs");
    write_array(&a, dir, false);
    scratch_write_file(dir, ".zattrs", "{\"a\": 1}", 8);
    in = open_ok(dir, 0);
    if (!in)
        return;
    CHECK(strcmp(zarr_input_zattrs_text(in), "{\"a\": 1}") == 0);
    CHECK_STR_CONTAINS(zarr_input_zarray_text(in), "\"zarr_format\": 2");
    uint64_t st[] = {3, 3}, sh[] = {4, 4}, bad_sh[] = {8, 1};
    uint16_t buf[16];
    CHECK_EQ_INT(zarr_input_read(in, st, bad_sh, buf, &err), -EINVAL);
    /* a corrupt chunk: -EIO naming the file; the failure is not cached */
    scratch_write_file(dir, "1.1", "garbage that is not blosc", 25);
    CHECK_EQ_INT(zarr_input_read(in, st, sh, buf, &err), -EIO);
    CHECK_STR_CONTAINS(err.msg, "errs/1.1");
    void *enc; /* a chunk of the wrong decoded size */
    size_t n;
    CHECK_EQ_INT(zarr_codec_encode(&a.m.compressor, a.ref, 48, 2, &enc, &n, &err), 0);
    scratch_write_file(dir, "1.1", enc, n);
    free(enc);
    CHECK_EQ_INT(zarr_input_read(in, st, sh, buf, &err), -EIO);
    CHECK_STR_CONTAINS(err.msg, "errs/1.1");
    CHECK_STR_CONTAINS(err.msg, "decoded 48 bytes, expected 50");
    write_array(&a, dir, false); /* repaired: the next read succeeds */
    CHECK_EQ_INT(check_boxes(in, &a, 50, 10), 0);
    zarr_input_close(in);
    scratch_write_file(dir, ".zattrs", "[1, 2", 5);
    CHECK_EQ_INT(zarr_input_open(dir, 0, &in, &err), -EINVAL);
    CHECK_STR_CONTAINS(err.msg, ".zattrs");
    char *zattrs = xasprintf("%s/.zattrs", dir);
    unlink(zattrs);
    free(zattrs);
    scratch_write_file(dir, ".zarray", "{\"zarr_format\": 2}", 18);
    CHECK_EQ_INT(zarr_input_open(dir, 0, &in, &err), -EINVAL);
    CHECK_STR_CONTAINS(err.msg, "errs/.zarray");
    CHECK_STR_CONTAINS(err.msg, "dtype");
    free(dir);
    free(a.ref);
}

/* 0: a FIFO, 1: a link to /dev/zero, 2: a sparse file of 1 TiB, 3: a symbolic link loop. */
static int make_special_file(const char *path, int kind)
{
    if (kind == 0)
        return mkfifo(path, 0600);
    if (kind == 1)
        return symlink("/dev/zero", path);
    if (kind == 3)
        return symlink(strrchr(path, '/') + 1, path);
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int r = ftruncate(fileno(f), (off_t)1 << 40);
    fclose(f);
    return r;
}

/* Chunk paths that are not regular files (regression: a FIFO hung the reading thread in
 * open(), a link to /dev/zero read for ever, a huge sparse file aborted the allocation). */
static void test_special_files(void)
{
    alarm(60); /* a hang is a failure, not a stuck test */
    uint64_t shape[] = {10, 10}, chunks[] = {5, 5};
    struct arr a;
    make_arr(&a, "<u2", 2, shape, chunks, ZC_BLOSC, '.', false, 0);
    char *dir = new_dir("special");
    write_array(&a, dir, false);
    struct zarr_input *in;
    struct errbuf err = {{0}};
    if (zarr_input_open(dir, 0, &in, &err) < 0) {
        CHECK(!"open");
        return;
    }
    char *chunk = xasprintf("%s/1.1", dir);
    uint64_t st[] = {4, 4}, sh[] = {3, 3};
    uint16_t buf[9];
    const char *why[] = {"not a regular file", "not a regular file", "too large",
                         "Too many levels of symbolic links"};
    for (int kind = 0; kind < 4; kind++) {
        unlink(chunk);
        CHECK_EQ_INT(make_special_file(chunk, kind), 0);
        err.msg[0] = '\0';
        CHECK_EQ_INT(zarr_input_read(in, st, sh, buf, &err), -EIO);
        CHECK_STR_CONTAINS(err.msg, "special/1.1");
        CHECK_STR_CONTAINS(err.msg, why[kind]);
    }
    /* a directory in place of a chunk reads as missing (the fill value), as in zarr-python */
    unlink(chunk);
    CHECK_EQ_INT(mkdir(chunk, 0700), 0);
    CHECK_EQ_INT(zarr_input_read(in, st, sh, buf, &err), 0);
    uint64_t st2[] = {5, 5}, sh2[] = {1, 1};
    CHECK_EQ_INT(zarr_input_read(in, st2, sh2, buf, &err), 0);
    CHECK_EQ_INT(buf[0], 0);
    rmdir(chunk);
    write_array(&a, dir, false); /* repaired */
    CHECK_EQ_INT(check_boxes(in, &a, 20, 10), 0);
    zarr_input_close(in);
    free(chunk);
    free(dir);
    free(a.ref);
    alarm(0);
}

/* ---- threads ---- */

struct worker {
    struct zarr_input *in;
    struct arr *a;
    pthread_barrier_t *barrier;
    int bad;
    uint64_t seed;
};

static void *read_same_chunk(void *arg)
{
    struct worker *w = arg;
    uint64_t start[] = {w->seed * 16, 0}, shape[] = {16, 64};
    uint16_t *buf = malloc(16 * 64 * 2);
    struct errbuf err;
    pthread_barrier_wait(w->barrier);
    if (zarr_input_read(w->in, start, shape, buf, &err) != 0)
        w->bad++;
    for (uint64_t y = 0; y < 16; y++)
        if (memcmp(buf + y * 64, w->a->ref + (start[0] + y) * w->a->m.shape[1] * 2, 64 * 2))
            w->bad++;
    free(buf);
    return NULL;
}

static void *read_random(void *arg)
{
    struct worker *w = arg;
    rnd_state = 0x9e3779b97f4a7c15ULL * (w->seed + 1); /* each thread its own boxes */
    pthread_barrier_wait(w->barrier);
    w->bad = check_boxes(w->in, w->a, 200, 300);
    return NULL;
}

static void test_threads(void)
{
    uint64_t shape[] = {1024, 1024}, chunks[] = {512, 512};
    struct arr a;
    make_arr(&a, "<u2", 2, shape, chunks, ZC_BLOSC, '.', false, 0);
    a.m.compressor.level = 9;
    strcpy(a.m.compressor.cname, "zstd");
    char *dir = new_dir("threads");
    write_array(&a, dir, false);
    enum { NT = 8 };
    pthread_t th[NT];
    struct worker w[NT];
    pthread_barrier_t barrier;
    struct zarr_input *in;
    /* single flight: eight threads want chunk (0, 0) at once; it is decoded once */
    in = open_ok(dir, 64 << 20);
    if (!in)
        return;
    pthread_barrier_init(&barrier, NULL, NT);
    for (int i = 0; i < NT; i++) {
        w[i] = (struct worker){in, &a, &barrier, 0, (uint64_t)i};
        pthread_create(&th[i], NULL, read_same_chunk, &w[i]);
    }
    int bad = 0;
    for (int i = 0; i < NT; i++) {
        pthread_join(th[i], NULL);
        bad += w[i].bad;
    }
    pthread_barrier_destroy(&barrier);
    CHECK_EQ_INT(bad, 0);
    struct zarr_input_stats st;
    zarr_input_get_stats(in, &st);
    CHECK_EQ_INT(st.loads, 1);
    CHECK_EQ_INT(st.hits, NT - 1);
    CHECK(st.waits <= NT - 1);
    zarr_input_close(in);
    /* random boxes from four threads through a two-chunk cache */
    in = open_ok(dir, 0);
    if (!in)
        return;
    pthread_barrier_init(&barrier, NULL, 4);
    for (int i = 0; i < 4; i++) {
        w[i] = (struct worker){in, &a, &barrier, 0, (uint64_t)i};
        pthread_create(&th[i], NULL, read_random, &w[i]);
    }
    bad = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        bad += w[i].bad;
    }
    pthread_barrier_destroy(&barrier);
    CHECK_EQ_INT(bad, 0);
    zarr_input_get_stats(in, &st);
    CHECK(st.evictions > 0);
    zarr_input_close(in);
    free(dir);
    free(a.ref);
}

static void test_read_speed(void)
{
    uint64_t shape[] = {4096, 4096}, chunks[] = {1024, 1024};
    struct arr a;
    make_arr(&a, "<u2", 2, shape, chunks, ZC_BLOSC, '.', false, 0);
    for (uint64_t i = 0; i < a.n; i++) { /* compressible, like an image */
        uint16_t v = (uint16_t)((i % 4096) / 8 + (i / 4096) / 8 + (i % 3));
        memcpy(a.ref + 2 * i, &v, 2);
    }
    char *dir = new_dir("speed");
    write_array(&a, dir, false);
    struct zarr_input *in;
    struct errbuf err;
    in = open_ok(dir, 64 << 20);
    if (!in)
        return;
    uint16_t *buf = malloc(64 * 64 * 2);
    uint64_t start[2], box[] = {64, 64};
    for (uint64_t y = 0; y < 4096; y += 1024) /* decode the 16 chunks */
        for (uint64_t x = 0; x < 4096; x += 1024) {
            start[0] = y;
            start[1] = x;
            zarr_input_read(in, start, box, buf, &err);
        }
    double t0 = now_monotonic();
    int bad = 0;
    for (int i = 0; i < 4096; i++) {
        start[0] = rnd(4096 - 64);
        start[1] = rnd(4096 - 64);
        if (zarr_input_read(in, start, box, buf, &err) < 0)
            bad++;
        if (i % 256 == 0 && memcmp(buf, a.ref + (start[0] * 4096 + start[1]) * 2, 128) != 0)
            bad++;
    }
    double dt = now_monotonic() - t0;
    CHECK_EQ_INT(bad, 0);
    /* Timing is bench/'s business (a shared machine makes timed unit tests flaky); what this
     * checks is that the 4096 reads decode each chunk exactly once. */
    printf("# 4096 reads of 64x64 <u2 from cached chunks: %.1f ms\n", dt * 1e3);
    struct zarr_input_stats st;
    zarr_input_get_stats(in, &st);
    CHECK_EQ_INT(st.loads, 16);
    free(buf);
    zarr_input_close(in);
    free(dir);
    free(a.ref);
}

/* ---- arrays written by zarr-python ---- */

static const char *py_fixture =
    "import sys, numpy as np, zarr, numcodecs\n"
    "d = sys.argv[1]\n"
    "shape, chunks = (37, 23, 11), (8, 7, 5)\n"
    "v = (np.arange(37 * 23 * 11).reshape(shape) * 7) % 60000 + 1\n"
    "specs = [('blosc', '>i4', 'F', numcodecs.Blosc('lz4', 5, 1), '/'),\n"
    "         ('zlib', '<u2', 'C', numcodecs.Zlib(3), '.'),\n"
    "         ('gzip', '<f4', 'F', numcodecs.GZip(5), '/'),\n"
    "         ('zstd', '<i8', 'C', numcodecs.Zstd(3), '.')]\n"
    "for name, dt, order, comp, sep in specs:\n"
    "    z = zarr.open(d + '/' + name, mode='w', shape=shape, chunks=chunks, dtype=dt,\n"
    "                  order=order, compressor=comp, fill_value=5, dimension_separator=sep)\n"
    "    z[:20] = v[:20].astype(dt)\n";

static void test_zarr_python_fixture(void)
{
    if (!have_python) {
        printf("# zarr-python not available: fixture test skipped\n");
        return;
    }
    char *script = xasprintf("%s/fixture.py", tmp_root);
    scratch_write_file(tmp_root, "fixture.py", py_fixture, strlen(py_fixture));
    char *cmd = xasprintf("/usr/bin/python3 %s %s/py", script, tmp_root);
    CHECK_EQ_INT(system(cmd), 0);
    free(cmd);
    free(script);
    static const char *const names[] = {"blosc", "zlib", "gzip", "zstd"};
    for (int k = 0; k < 4; k++) {
        char *dir = xasprintf("%s/py/%s", tmp_root, names[k]);
        struct zarr_input *in;
        struct errbuf err = {{0}};
        int r = zarr_input_open(dir, 0, &in, &err);
        CHECK_EQ_INT(r, 0);
        free(dir);
        if (r < 0) {
            fprintf(stderr, "  %s\n", err.msg);
            continue;
        }
        const struct zarr_meta *m = zarr_input_meta(in);
        if (k == 0)
            CHECK(m->fortran_order && m->dtype.big_endian && m->separator == '/' &&
                  m->compressor.id == ZC_BLOSC);
        uint64_t start[] = {0, 0, 0}, shape[] = {37, 23, 11};
        size_t n = 37 * 23 * 11;
        unsigned char *buf = malloc(n * m->dtype.size);
        CHECK_EQ_INT(zarr_input_read(in, start, shape, buf, &err), 0);
        double *vals = malloc(n * sizeof *vals);
        dtype_to_double(&m->dtype, buf, vals, n);
        int bad = 0;
        for (size_t i = 0; i < n; i++) {
            double want = i < 20 * 23 * 11 ? (double)((i * 7) % 60000 + 1) : 5.0;
            bad += vals[i] != want;
        }
        CHECK_EQ_INT(bad, 0);
        free(vals);
        free(buf);
        zarr_input_close(in);
    }
}

int main(void)
{
    if (check_mkdtemp(tmp_root, sizeof tmp_root, "input"))
        return 1;
    have_python = system("/usr/bin/python3 -c 'import zarr' 2>/dev/null") == 0;
    RUN(test_variants);
    RUN(test_zero_dim);
    RUN(test_whole_chunk_boxes);
    RUN(test_errors);
    RUN(test_special_files);
    RUN(test_threads);
    RUN(test_read_speed);
    RUN(test_zarr_python_fixture);
    check_rmtree(tmp_root);
    return check_done();
}
