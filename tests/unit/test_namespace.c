/* test_namespace.c: the presented tree (src/tree/namespace.c) over a table of entries and the
 * chunk files of arrays: listing order and lookups of what is listed, canonical chunk names
 * only, nested keys and format 3's "c", ".." of every directory, resuming a listing at every
 * offset, several arrays in one tree, and directories with many entries. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "nd.h"
#include "tree/namespace.h"

/* A task with only what the namespace reads: a grid of 3-element chunks over shape - 1 (a
 * partial edge chunk), ROIs touching the chunks listed in `touched` (a C-order bitmap). */
static struct task *fake_task(int ndim, const uint64_t *grid, int format, char sep,
                              const char *touched)
{
    struct task *t = xcalloc(1, sizeof *t);
    t->out.ndim = ndim;
    t->out.format = format;
    t->out.separator = sep;
    t->out.key_prefix_c = format == 3;
    t->out.dtype = (struct dtype){.kind = DT_UINT, .size = 1};
    t->nchunks = 1;
    for (int d = 0; d < ndim; d++) {
        t->grid[d] = grid[d];
        t->out.chunks[d] = 3;
        t->out.shape[d] = grid[d] * 3 - 1;
        t->nchunks *= grid[d];
    }
    size_t n = strlen(touched);
    t->rois.ndim = ndim;
    t->rois.start = xcalloc(n * (size_t)ndim + 1, sizeof(uint64_t));
    t->rois.stop = xcalloc(n * (size_t)ndim + 1, sizeof(uint64_t));
    for (size_t id = 0; id < n; id++) {
        if (touched[id] != '1')
            continue;
        uint64_t idx[ROIFS_MAX_DIM], lo[ROIFS_MAX_DIM], hi[ROIFS_MAX_DIM];
        nd_unlinear(id, t->grid, ndim, idx);
        nd_chunk_box(idx, t->out.chunks, t->out.shape, ndim, lo, hi);
        memcpy(&t->rois.start[t->rois.n * (size_t)ndim], lo, sizeof(uint64_t) * (size_t)ndim);
        memcpy(&t->rois.stop[t->rois.n * (size_t)ndim], hi, sizeof(uint64_t) * (size_t)ndim);
        t->rois.n++;
    }
    struct errbuf err;
    CHECK_EQ_INT(roi_index_build(&t->rois, t->out.shape, t->out.chunks, &t->index, &err), 0);
    return t;
}

static void free_task(struct task *t)
{
    roi_index_free(t->index);
    roi_set_free(&t->rois);
    free(t);
}

struct listing {
    char names[64][32];
    uint64_t inos[64];
    bool dirs[64];
    uint64_t offs[64];
    int n;
};

static int collect(void *ctx, const char *name, uint64_t ino, bool is_dir, uint64_t next_off)
{
    struct listing *l = ctx;
    if (l->n == 64)
        return 1;
    snprintf(l->names[l->n], sizeof l->names[l->n], "%s", name);
    l->inos[l->n] = ino;
    l->dirs[l->n] = is_dir;
    l->offs[l->n++] = next_off;
    return 0;
}

/* The names of directory ino joined by spaces; every one of them looks up to its listed
 * inode and kind, and a listing resumed after any entry goes on with the next one. */
static char *list(const struct ns *ns, uint64_t ino)
{
    struct listing l = {0};
    CHECK_EQ_INT(ns_readdir(ns, ino, 0, collect, &l), 0);
    struct strbuf sb = {0};
    for (int i = 0; i < l.n; i++) {
        sb_printf(&sb, "%s%s", i ? " " : "", l.names[i]);
        struct ns_node n;
        if (i >= 2) {
            CHECK(ns_lookup(ns, ino, l.names[i], &n) == 0 && n.ino == l.inos[i]);
            CHECK((n.kind == NS_DIR) == l.dirs[i]);
        }
        struct listing rest = {0};
        CHECK_EQ_INT(ns_readdir(ns, ino, l.offs[i], collect, &rest), 0);
        CHECK_EQ_INT(rest.n, l.n - i - 1);
        if (rest.n > 0)
            CHECK(strcmp(rest.names[0], l.names[i + 1]) == 0);
    }
    return sb.buf ? sb.buf : xstrdup("");
}

static uint64_t lookup(const struct ns *ns, uint64_t dir, const char *name, struct ns_node *n)
{
    struct ns_node tmp;
    struct ns_node *out = n ? n : &tmp;
    return ns_lookup(ns, dir, name, out) == 0 ? out->ino : 0;
}

/* The parent listed as ".." of directory ino. */
static uint64_t dotdot(const struct ns *ns, uint64_t ino)
{
    struct listing l = {0};
    ns_readdir(ns, ino, 0, collect, &l);
    return l.n >= 2 ? l.inos[1] : 0;
}

static void test_flat_array(void)
{
    uint64_t grid[2] = {2, 3};
    struct task *t = fake_task(2, grid, 2, '.', "100011");
    struct ns *ns = ns_new();
    ns_add_file(ns, NS_ROOT, ".zarray", "{}");
    ns_add_file(ns, NS_ROOT, ".zattrs", "{\"a\": 1}");
    ns_add_status(ns, ns_add_dir(ns, NS_ROOT, ".roifs"), "status");
    struct errbuf err;
    CHECK_EQ_INT(ns_add_chunks(ns, NS_ROOT, t, 0, &err), 0);
    char *names = list(ns, NS_INO_ROOT);
    CHECK(strcmp(names, ". .. .zarray .zattrs .roifs 0.0 1.1 1.2") == 0);
    free(names);
    struct ns_node n;
    CHECK(lookup(ns, NS_INO_ROOT, "1.2", &n) && n.kind == NS_CHUNK && n.chunk == 5 && n.array == 0);
    CHECK(lookup(ns, NS_INO_ROOT, ".zattrs", &n) && n.kind == NS_META && n.len == 8);
    uint64_t roifs = lookup(ns, NS_INO_ROOT, ".roifs", NULL);
    CHECK(lookup(ns, roifs, "status", &n) && n.kind == NS_STATUS);
    CHECK_EQ_INT(dotdot(ns, roifs), NS_INO_ROOT);
    /* only canonical names of chunks that exist */
    const char *bad[] = {"0.1", "01.0", "+1.1", "1.1.0", "1", "2.0", "1.", ".1", "c.1.1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_EQ_INT(ns_lookup(ns, NS_INO_ROOT, bad[i], &n), -ENOENT);
    uint64_t chunk = lookup(ns, NS_INO_ROOT, "0.0", NULL);
    CHECK_EQ_INT(ns_lookup(ns, chunk, "x", &n), -ENOTDIR);
    CHECK_EQ_INT(ns_get(ns, 999999, &n), -ENOENT);
    CHECK_EQ_INT(ns_get(ns, NS_INO_LIMIT - 1, &n), -ENOENT);
    ns_free(ns);
    free_task(t);
}

static void test_nested_v3(void)
{
    uint64_t grid[3] = {2, 2, 3};
    struct task *t = fake_task(3, grid, 3, '/', "000000000010");
    struct ns *ns = ns_new();
    ns_add_file(ns, NS_ROOT, "zarr.json", "{}");
    struct errbuf err;
    CHECK_EQ_INT(ns_add_chunks(ns, NS_ROOT, t, 0, &err), 0);
    char *names = list(ns, NS_INO_ROOT);
    CHECK(strcmp(names, ". .. zarr.json c") == 0);
    free(names);
    uint64_t c = lookup(ns, NS_INO_ROOT, "c", NULL);
    uint64_t c1 = lookup(ns, c, "1", NULL), c11 = lookup(ns, c1, "1", NULL);
    CHECK(c && c1 && c11);
    CHECK_EQ_INT(lookup(ns, c, "0", NULL), 0); /* no chunk under c/0 */
    names = list(ns, c11);
    CHECK(strcmp(names, ". .. 1") == 0);
    free(names);
    struct ns_node n;
    CHECK(lookup(ns, c11, "1", &n) && n.kind == NS_CHUNK && n.chunk == 10);
    CHECK_EQ_INT(dotdot(ns, c), NS_INO_ROOT);
    CHECK_EQ_INT(dotdot(ns, c1), c);
    CHECK_EQ_INT(dotdot(ns, c11), c1);
    /* outside = input: every chunk exists */
    t->outside = OUTSIDE_INPUT;
    CHECK(lookup(ns, c, "0", NULL) != 0);
    ns_free(ns);
    free_task(t);
}

/* Several arrays in one tree (a pyramid's levels), and a directory with more entries than
 * the first chunk offset of earlier versions (16). */
static void test_several_arrays(void)
{
    uint64_t g0[2] = {2, 2}, g1[2] = {1, 1};
    struct task *t0 = fake_task(2, g0, 2, '/', "1111"), *t1 = fake_task(2, g1, 2, '/', "1");
    struct ns *ns = ns_new();
    ns_add_file(ns, NS_ROOT, ".zgroup", "{}");
    struct errbuf err;
    int d0 = ns_add_dir(ns, NS_ROOT, "0"), d1 = ns_add_dir(ns, NS_ROOT, "1");
    CHECK_EQ_INT(ns_add_chunks(ns, d0, t0, 0, &err), 0);
    char extra[20][16];
    for (int i = 0; i < 20; i++) {
        snprintf(extra[i], sizeof extra[i], "file%02d", i);
        ns_add_file(ns, d1, extra[i], "x");
    }
    CHECK_EQ_INT(ns_add_chunks(ns, d1, t1, 1, &err), 0);
    char *names = list(ns, NS_INO_ROOT);
    CHECK(strcmp(names, ". .. .zgroup 0 1") == 0);
    free(names);
    uint64_t i1 = lookup(ns, NS_INO_ROOT, "1", NULL);
    names = list(ns, i1);
    CHECK_STR_CONTAINS(names, "file00 file01");
    CHECK_STR_CONTAINS(names, "file19 0");
    free(names);
    struct ns_node a, b;
    uint64_t a1 = lookup(ns, lookup(ns, NS_INO_ROOT, "0", NULL), "1", NULL);
    CHECK(lookup(ns, a1, "1", &a) && a.array == 0 && a.chunk == 3);
    CHECK(lookup(ns, lookup(ns, i1, "0", NULL), "0", &b) && b.array == 1 && b.chunk == 0);
    CHECK(a.ino != b.ino);
    CHECK(ns_get(ns, b.ino, &a) == 0 && a.array == 1 && a.kind == NS_CHUNK);
    ns_free(ns);
    free_task(t0);
    free_task(t1);
}

int main(void)
{
    RUN(test_flat_array);
    RUN(test_nested_v3);
    RUN(test_several_arrays);
    return check_done();
}
