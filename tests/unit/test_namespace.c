/* test_namespace.c: the presented tree (src/tree/namespace.c) over a table of entries and the
 * chunk files of arrays: listing order and lookups of what is listed, canonical chunk names
 * only, nested keys and format 3's "c", ".." of every directory, resuming a listing at every
 * offset, several arrays in one tree, directories with many entries, directories that
 * mirror the file system as it is now (ome = labels), and directories whose entries are added
 * when first needed (a plate's images). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "nd.h"
#include "tree/live.h"
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
    CHECK_EQ_INT(ns_readdir(ns, ino, 0, NULL, collect, &l), 0);
    struct strbuf sb = {0};
    for (int i = 0; i < l.n; i++) {
        sb_printf(&sb, "%s%s", i ? " " : "", l.names[i]);
        struct ns_node n;
        if (i >= 2) {
            CHECK(ns_lookup(ns, ino, l.names[i], &n) == 0 && n.ino == l.inos[i]);
            CHECK((n.kind == NS_DIR) == l.dirs[i]);
        }
        struct listing rest = {0};
        CHECK_EQ_INT(ns_readdir(ns, ino, l.offs[i], NULL, collect, &rest), 0);
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
    ns_readdir(ns, ino, 0, NULL, collect, &l);
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

static void put_text(const char *dir, const char *name, const char *text)
{
    char *p = path_join(dir, name);
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    free(p);
}

static void make_dir(const char *dir, const char *name)
{
    char *p = path_join(dir, name);
    CHECK_EQ_INT(mkdir(p, 0755), 0);
    free(p);
}

#define CHECK_LISTED(got, want)                                                                    \
    do {                                                                                           \
        CHECK(strcmp(got, want) == 0);                                                             \
        if (strcmp(got, want) != 0)                                                                \
            fprintf(stderr, "listed \"%s\", expected \"%s\"\n", got, want);                        \
    } while (0)

/* A directory mirroring one of the file system (ome = labels over the input image): its own
 * entries first, then what the directory holds at each look, in name order, its own names
 * and the hidden one left out; a name keeps its inode while it is there, a file that became a
 * directory gets a new one, and the old inode still resolves while held; a link to a parent
 * stops at LIVE_MAX_DEPTH; a name's node goes with its last lookup forgotten. */
static void test_mirrored_directory(void)
{
    char root[] = "/tmp/roifs-ns-XXXXXX";
    CHECK(mkdtemp(root) != NULL);
    make_dir(root, "labels");
    make_dir(root, "labels/old");
    put_text(root, ".zattrs", "{}");
    put_text(root, "a.txt", "a");
    put_text(root, "labels/.zattrs", "input's list");
    make_dir(root, ".roifs");
    struct ns *ns = ns_new();
    ns_mirror(ns, NS_ROOT, root, ".roifs");
    int labels = ns_add_dir(ns, NS_ROOT, "labels");
    char *lp = path_join(root, "labels");
    ns_mirror(ns, labels, lp, NULL);
    free(lp);
    ns_add_file(ns, labels, ".zattrs", "the overlay's list");
    int seg = ns_add_dir(ns, labels, "seg"); /* the overlay's own: not mirrored */
    ns_add_file(ns, seg, ".zattrs", "{}");
    ns_add_dir(ns, NS_ROOT, ".roifs");
    char *got = list(ns, NS_INO_ROOT);
    CHECK_LISTED(got, ". .. labels .roifs .zattrs a.txt");
    free(got);
    uint64_t li = (uint64_t)labels + 1;
    got = list(ns, li);
    CHECK_LISTED(got, ". .. .zattrs seg old");
    free(got);
    struct ns_node n;
    CHECK(lookup(ns, li, ".zattrs", &n) && n.kind == NS_META && !n.live);
    CHECK(n.len == strlen("the overlay's list"));
    uint64_t a = lookup(ns, NS_INO_ROOT, "a.txt", &n);
    CHECK(a >= NS_INO_LIVE && n.kind == NS_INPUT && n.live && strstr(n.text, "/a.txt"));
    CHECK(ns_follows(ns, NS_INO_ROOT) && ns_follows(ns, li) && !ns_follows(ns, seg + 1));
    /* added while mounted: seen at the next look; the same name, the same inode */
    make_dir(root, "tables");
    put_text(root, "tables/t.csv", "x");
    got = list(ns, NS_INO_ROOT);
    CHECK_LISTED(got, ". .. labels .roifs .zattrs a.txt tables");
    free(got);
    uint64_t tables = lookup(ns, NS_INO_ROOT, "tables", &n);
    CHECK(tables && n.kind == NS_DIR && n.live && ns_follows(ns, tables));
    got = list(ns, tables);
    CHECK_LISTED(got, ". .. t.csv");
    free(got);
    CHECK_EQ_INT(dotdot(ns, tables), NS_INO_ROOT);
    CHECK_EQ_INT(lookup(ns, NS_INO_ROOT, "a.txt", NULL), a);
    /* removed: gone from lookups and listings; a file turned directory: a new inode */
    char *ap = path_join(root, "a.txt");
    CHECK_EQ_INT(unlink(ap), 0);
    CHECK_EQ_INT(lookup(ns, NS_INO_ROOT, "a.txt", NULL), 0);
    CHECK_EQ_INT(mkdir(ap, 0755), 0);
    uint64_t a2 = lookup(ns, NS_INO_ROOT, "a.txt", &n);
    CHECK(a2 && a2 != a && n.kind == NS_DIR);
    CHECK(ns_get(ns, a, &n) == 0 && n.kind == NS_INPUT);
    free(ap);
    /* the hidden name and names the overlay has are never the input's */
    CHECK_EQ_INT(lookup(ns, NS_INO_ROOT, ".roifs", &n),
                 (uint64_t)ns_child(ns, NS_ROOT, ".roifs") + 1);
    make_dir(root, "labels/seg");
    put_text(root, "labels/seg/extra", "x");
    got = list(ns, (uint64_t)seg + 1);
    CHECK_LISTED(got, ". .. .zattrs");
    free(got);
    CHECK_EQ_INT(lookup(ns, (uint64_t)seg + 1, "extra", NULL), 0);
    /* a link to a parent directory ends at the depth limit */
    char *loop = path_join(root, "labels/old/up");
    CHECK_EQ_INT(symlink("..", loop), 0);
    free(loop);
    uint64_t dir = lookup(ns, li, "old", NULL);
    int depth = 1;
    while (dir && depth < 3 * LIVE_MAX_DEPTH) {
        uint64_t next = lookup(ns, dir, "up", NULL);
        if (!next)
            break;
        dir = lookup(ns, next, "old", NULL);
        depth += 2;
    }
    CHECK(depth > LIVE_MAX_DEPTH - 2 && depth <= LIVE_MAX_DEPTH + 1);
    ns_free(ns);
    /* a name is kept while lookups of it are held, and its inode is the same after */
    ns = ns_new();
    ns_mirror(ns, NS_ROOT, root, NULL);
    uint64_t x = lookup(ns, NS_INO_ROOT, ".zattrs", NULL);
    CHECK(x && lookup(ns, NS_INO_ROOT, ".zattrs", NULL) == x);
    CHECK_EQ_INT(ns_live_count(ns), 1);
    ns_forget(ns, x, 1);
    CHECK(ns_get(ns, x, &n) == 0 && n.kind == NS_INPUT);
    ns_forget(ns, x, 1);
    CHECK(ns_get(ns, x, &n) == -ENOENT);
    CHECK_EQ_INT(ns_live_count(ns), 0);
    ns_forget(ns, x, 1); /* more forgets than lookups: nothing happens */
    CHECK_EQ_INT(lookup(ns, NS_INO_ROOT, ".zattrs", NULL), x);
    ns_free(ns);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK_EQ_INT(system(cmd), 0);
}

/* Two listings of a mirrored directory interleaved, files deleted between them: each goes on
 * from the names its own first call found, so the first, resumed after the second, lists
 * every name that was there throughout exactly once (a listing's offsets are its own). */
static void test_interleaved_listings(void)
{
    char root[] = "/tmp/roifs-ns-XXXXXX";
    CHECK(mkdtemp(root) != NULL);
    char name[32];
    for (int k = 0; k < 200; k++) {
        snprintf(name, sizeof name, "f%03d", k);
        put_text(root, name, "x");
    }
    struct ns *ns = ns_new();
    ns_mirror(ns, NS_ROOT, root, NULL);
    struct live_listing *first = NULL, *second = NULL;
    struct listing a = {0}, b = {0};
    CHECK_EQ_INT(ns_readdir(ns, NS_INO_ROOT, 0, &first, collect, &a), 0); /* . .. f000..f061 */
    CHECK_EQ_INT(a.n, 64);
    for (int k = 0; k < 100; k += 2) { /* even names below f100 go */
        snprintf(name, sizeof name, "%s/f%03d", root, k);
        CHECK_EQ_INT(unlink(name), 0);
    }
    CHECK_EQ_INT(ns_readdir(ns, NS_INO_ROOT, 0, &second, collect, &b), 0);
    CHECK(b.n == 64 && strcmp(b.names[2], "f001") == 0);
    int seen[200] = {0};
    for (int i = 2; i < a.n; i++)
        seen[atoi(a.names[i] + 1)]++;
    for (uint64_t off = a.offs[a.n - 1]; a.n == 64; off = a.offs[a.n - 1]) {
        memset(&a, 0, sizeof a);
        CHECK_EQ_INT(ns_readdir(ns, NS_INO_ROOT, off, &first, collect, &a), 0);
        for (int i = 0; i < a.n; i++)
            seen[atoi(a.names[i] + 1)]++;
    }
    int missed = 0, twice = 0;
    for (int k = 0; k < 200; k++) {
        missed += (k >= 100 || k % 2) && seen[k] == 0;
        twice += seen[k] > 1;
    }
    CHECK_EQ_INT(missed, 0);
    CHECK_EQ_INT(twice, 0);
    ns_listing_free(first);
    ns_listing_free(second);
    ns_free(ns);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK_EQ_INT(system(cmd), 0);
}

/* Readers listing (in pieces) and looking up a mirrored directory while its files come and go:
 * every name listed resolves to the inode listed or is gone, an inode looked up resolves
 * while held, and nothing is kept once every lookup is forgotten (run under
 * ThreadSanitizer by scripts/tsan.sh). */
struct churn {
    struct ns *ns;
    const char *root;
    int stop;
    int bad;
};

static int piece(void *ctx, const char *name, uint64_t ino, bool is_dir, uint64_t next_off)
{
    struct listing *l = ctx;
    (void)is_dir;
    if (l->n == 16)
        return 1;
    snprintf(l->names[l->n], sizeof l->names[l->n], "%s", name);
    l->inos[l->n] = ino;
    l->offs[l->n++] = next_off;
    return 0;
}

static void *churn_reader(void *arg)
{
    struct churn *c = arg;
    for (int round = 0; round < 40; round++) {
        uint64_t off = 0;
        struct live_listing *keep = NULL; /* this listing's own, as an open directory's */
        int kept = 0;                     /* names g000..g099 listed (never removed) */
        for (;;) {
            struct listing l = {0};
            if (ns_readdir(c->ns, NS_INO_ROOT, off, &keep, piece, &l) < 0)
                __atomic_add_fetch(&c->bad, 1, __ATOMIC_RELAXED);
            for (int i = off ? 0 : 2; i < l.n; i++)
                kept += l.names[i][0] == 'g';
            for (int i = 2; i < l.n; i++) { /* a name still there: the inode listed */
                struct ns_node n, again;
                if (ns_lookup(c->ns, NS_INO_ROOT, l.names[i], &n) < 0)
                    continue;
                if (n.ino != l.inos[i] || ns_get(c->ns, n.ino, &again) < 0 ||
                    strcmp(again.text, n.text) != 0)
                    __atomic_add_fetch(&c->bad, 1, __ATOMIC_RELAXED);
                ns_forget(c->ns, n.ino, 1);
            }
            if (l.n < 16)
                break;
            off = l.offs[l.n - 1];
        }
        ns_listing_free(keep);
        if (kept != 100) /* each name there throughout listed once, whatever other listings do */
            __atomic_add_fetch(&c->bad, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

static void *churn_writer(void *arg)
{
    struct churn *c = arg;
    char name[32];
    for (int k = 0; !__atomic_load_n(&c->stop, __ATOMIC_RELAXED); k++) {
        snprintf(name, sizeof name, "f%03d", k % 200);
        char *p = path_join(c->root, name);
        if (k % 400 < 200) { /* not put_text: CHECK counts are the main thread's */
            FILE *f = fopen(p, "w");
            if (f)
                fclose(f);
        } else {
            unlink(p);
        }
        free(p);
    }
    return NULL;
}

static void test_mirrored_directory_threads(void)
{
    char root[] = "/tmp/roifs-ns-XXXXXX";
    CHECK(mkdtemp(root) != NULL);
    for (int k = 0; k < 100; k++) {
        char name[32];
        snprintf(name, sizeof name, "g%03d", k);
        put_text(root, name, "x");
    }
    struct ns *ns = ns_new();
    ns_mirror(ns, NS_ROOT, root, NULL);
    struct churn c = {.ns = ns, .root = root};
    pthread_t w, r[3];
    CHECK_EQ_INT(pthread_create(&w, NULL, churn_writer, &c), 0);
    for (int i = 0; i < 3; i++)
        CHECK_EQ_INT(pthread_create(&r[i], NULL, churn_reader, &c), 0);
    for (int i = 0; i < 3; i++)
        pthread_join(r[i], NULL);
    __atomic_store_n(&c.stop, 1, __ATOMIC_RELAXED);
    pthread_join(w, NULL);
    CHECK_EQ_INT(c.bad, 0);
    CHECK_EQ_INT(ns_live_count(ns), 0); /* every lookup forgotten: nothing kept */
    ns_free(ns);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK_EQ_INT(system(cmd), 0);
}

/* ---- directories filled when first needed (a plate's images) ---- */

struct lazy_tree {
    struct ns *ns;
    int dirs[8];
    int fills[8]; /* calls that added the entries */
    pthread_mutex_t m;
    int bad;
};

/* ns_fill_fn: directory k gets "f" and 100 more entries (the tree's entries move meanwhile). */
static void fill_dir(void *ctx, uint64_t k, const char *name)
{
    (void)name; /* filled whole */
    struct lazy_tree *lt = ctx;
    pthread_mutex_lock(&lt->m);
    if (lt->fills[k] == 0) {
        ns_add_file(lt->ns, lt->dirs[k], "f", "text");
        for (int i = 0; i < 100; i++) {
            char name[16];
            snprintf(name, sizeof name, "e%d", i);
            ns_add_dir(lt->ns, lt->dirs[k], name);
        }
        ns_filled(lt->ns, lt->dirs[k]);
    }
    lt->fills[k]++;
    pthread_mutex_unlock(&lt->m);
}

static void *lazy_reader(void *arg)
{
    struct lazy_tree *lt = arg;
    for (int round = 0; round < 50; round++)
        for (int k = 0; k < 8; k++) {
            struct ns_node n;
            uint64_t dir = (uint64_t)lt->dirs[k] + 1;
            if (ns_lookup(lt->ns, dir, "f", &n) != 0 || n.kind != NS_META || n.len != 4 ||
                ns_lookup(lt->ns, dir, "e99", &n) != 0 || n.kind != NS_DIR)
                __atomic_add_fetch(&lt->bad, 1, __ATOMIC_RELAXED);
        }
    return NULL;
}

/* A lazy directory's entries are added by its filler before the first lookup or listing in
 * it, once (later looks do not call it), and never before: looks elsewhere do not fill it;
 * threads looking into every directory at once, while the tree grows, always find the
 * entries. */
static void test_lazy_directories(void)
{
    struct lazy_tree lt = {.ns = ns_new()};
    pthread_mutex_init(&lt.m, NULL);
    ns_set_filler(lt.ns, fill_dir, &lt);
    for (int k = 0; k < 8; k++) {
        char name[8];
        snprintf(name, sizeof name, "d%d", k);
        lt.dirs[k] = ns_add_dir(lt.ns, NS_ROOT, name);
        ns_set_lazy(lt.ns, lt.dirs[k], (uint64_t)k);
    }
    char *names = list(lt.ns, NS_INO_ROOT);
    CHECK(strcmp(names, ". .. d0 d1 d2 d3 d4 d5 d6 d7") == 0);
    free(names);
    CHECK_EQ_INT(lt.fills[0], 0); /* listing the root fills none of them */
    struct listing l = {0};
    CHECK_EQ_INT(ns_readdir(lt.ns, (uint64_t)lt.dirs[0] + 1, 0, NULL, collect, &l), 0);
    CHECK(l.n == 64 && strcmp(l.names[2], "f") == 0 && strcmp(l.names[3], "e0") == 0);
    CHECK_EQ_INT(lt.fills[0], 1);
    CHECK_EQ_INT(ns_readdir(lt.ns, (uint64_t)lt.dirs[0] + 1, 0, NULL, collect, &l), 0);
    CHECK_EQ_INT(lt.fills[0], 1); /* filled: not asked again */
    CHECK_EQ_INT(lt.fills[1], 0);
    pthread_t r[4];
    for (int i = 0; i < 4; i++)
        CHECK_EQ_INT(pthread_create(&r[i], NULL, lazy_reader, &lt), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(r[i], NULL);
    CHECK_EQ_INT(lt.bad, 0);
    for (int k = 1; k < 8; k++) /* filled once; the calls of threads that waited found it so */
        CHECK(lt.fills[k] >= 1 && lt.fills[k] <= 4);
    ns_free(lt.ns);
    pthread_mutex_destroy(&lt.m);
}

int main(void)
{
    RUN(test_flat_array);
    RUN(test_nested_v3);
    RUN(test_several_arrays);
    RUN(test_mirrored_directory);
    RUN(test_interleaved_listings);
    RUN(test_mirrored_directory_threads);
    RUN(test_lazy_directories);
    return check_done();
}
