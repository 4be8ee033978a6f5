/* test_versions.c: unit tests of the table of chunk versions per inode (src/fs/versions.c):
 * one inode serves one cache file while it is open, a new version moves the chunk to a new
 * inode then, takes the old inode's place otherwise, and passthrough backing ids follow the
 * open counts; plus a threaded run for ThreadSanitizer. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>

#include "check.h"
#include "fs/versions.h"

static _Atomic int backings_open, next_backing = 100;

static int32_t bo(void *ctx, int fd)
{
    (void)ctx, (void)fd;
    backings_open++;
    return next_backing++;
}

static void bc(void *ctx, int32_t id)
{
    (void)ctx;
    backings_open -= id >= 100 ? 1 : 1000; /* (CHECK is not thread-safe) */
}

static struct vt_file file(uint64_t ino, uint64_t size, int64_t ctime)
{
    struct vt_file f = {
        .dev = 7, .ino = ino, .size = size, .ctime_ns = ctime, .mtime_ns = 1000 + ctime};
    return f;
}

static void test_one_version_per_open_inode(void)
{
    struct vt *vt = vt_new(bo, bc, NULL);
    const uint64_t X = 20;
    struct vt_grant g;
    uint64_t base, size;
    CHECK_EQ_INT(vt_attr(vt, X, &base, &size, NULL), 0); /* nothing served: ask the engine */
    CHECK_EQ_INT(vt_current(vt, X), X);

    struct vt_file a = file(1000, 500, 1), b = file(1001, 300, 2);
    a.fresh = true;
    CHECK_EQ_INT(vt_open(vt, X, X, 3, &a, &g), 0);
    CHECK(g.keep_cache && g.inval_attrs && g.backing == 100);
    a.fresh = false;
    CHECK_EQ_INT(vt_open(vt, X, X, 3, &a, &g), 0); /* a second open shares the backing */
    CHECK(g.keep_cache && !g.inval_attrs && g.backing == 100);
    CHECK_EQ_INT(backings_open, 1);
    CHECK_EQ_INT(vt_attr(vt, X, &base, &size, NULL), 1);
    CHECK_EQ_INT(size, 500);

    /* A new version while X is open: refused, and the chunk moves to a new inode. */
    CHECK_EQ_INT(vt_open(vt, X, X, 4, &b, &g), -ESTALE);
    uint64_t Y = vt_current(vt, X);
    CHECK(Y != X && (Y & VT_INO_BIT));
    int64_t mtime = 0;
    CHECK_EQ_INT(vt_attr(vt, X, &base, &size, &mtime), 1);
    CHECK_EQ_INT(size, 500); /* X keeps the size (and mtime) of the version open on it */
    CHECK_EQ_INT(mtime, 1001);
    CHECK_EQ_INT(vt_attr(vt, Y, &base, &size, &mtime), 1);
    CHECK_EQ_INT(base, X);
    CHECK_EQ_INT(size, 300);
    CHECK_EQ_INT(mtime, 1002);
    CHECK_EQ_INT(vt_open(vt, X, X, 4, &a, &g), -ESTALE); /* superseded, even with its file */
    CHECK_EQ_INT(vt_open(vt, Y, X, 4, &b, &g), 0);
    CHECK(g.backing == 101);
    CHECK_EQ_INT(backings_open, 2);

    vt_release(vt, X);
    vt_release(vt, X);
    CHECK_EQ_INT(backings_open, 1);
    vt_release(vt, X); /* one too many: ignored */
    vt_release(vt, Y);
    CHECK_EQ_INT(backings_open, 0);

    /* Nothing open on Y: a newer version takes its place, dropping pages and attributes. */
    struct vt_file c = file(1002, 250, 3);
    CHECK_EQ_INT(vt_open(vt, Y, X, 5, &c, &g), 0);
    CHECK(!g.keep_cache && g.inval_attrs);
    CHECK_EQ_INT(vt_current(vt, X), Y);
    CHECK_EQ_INT(vt_attr(vt, Y, &base, &size, NULL), 1);
    CHECK_EQ_INT(size, 250);
    vt_release(vt, Y);

    /* The same inode number reused for a new file (the old one was deleted): still new. */
    struct vt_file reuse = file(1002, 250, 4);
    CHECK_EQ_INT(vt_open(vt, Y, X, 5, &reuse, &g), 0);
    CHECK(!g.keep_cache && g.inval_attrs);
    vt_release(vt, Y);

    CHECK_EQ_INT(vt_open(vt, VT_INO_BIT | 999, X, 5, &c, &g), -ESTALE);
    CHECK_EQ_INT(vt_attr(vt, VT_INO_BIT | 999, &base, &size, NULL), -ENOENT);
    struct vt_stats st;
    vt_stats(vt, &st);
    CHECK_EQ_INT(st.records, 2);
    CHECK_EQ_INT(st.superseded, 1);
    CHECK_EQ_INT(st.replaced_in_place, 2);
    vt_free(vt);
}

static void test_without_passthrough(void)
{
    struct vt *vt = vt_new(NULL, NULL, NULL);
    struct vt_grant g;
    struct vt_file a = file(1, 10, 1);
    CHECK_EQ_INT(vt_open(vt, 30, 30, 3, &a, &g), 0);
    CHECK_EQ_INT(g.backing, 0);
    vt_release(vt, 30);
    CHECK_EQ_INT(vt_current(vt, 31), 31); /* other chunks: untouched */
    vt_free(vt);
}

/* ---- threads: opens and releases of a few chunks while their versions change ---- */

struct shared {
    struct vt *vt;
    _Atomic int64_t version[4];       /* the current cache file of each chunk */
    _Atomic int stale, served, wrong; /* (CHECK itself is not thread-safe) */
};

static uint64_t rnd(uint64_t *s)
{
    return check_xorshift(s);
}

static void *worker(void *arg)
{
    struct shared *sh = arg;
    uint64_t seed = (uint64_t)(uintptr_t)&seed | 1;
    uint64_t held[8];
    int nheld = 0;
    for (int i = 0; i < 20000; i++) {
        unsigned k = (unsigned)(rnd(&seed) % 4);
        if (rnd(&seed) % 16 == 0)
            sh->version[k]++;
        int64_t v = sh->version[k];
        struct vt_file f = file(5000 + k * 100000 + (uint64_t)v, 100 + (uint64_t)v, v);
        uint64_t base = 40 + k, ino = vt_current(sh->vt, base);
        struct vt_grant g;
        int r = vt_open(sh->vt, ino, base, 3, &f, &g);
        if (r == 0) {
            sh->served++;
            uint64_t b, size;
            if (vt_attr(sh->vt, ino, &b, &size, NULL) != 1 || b != base)
                sh->wrong++;
            if (nheld == 8)
                vt_release(sh->vt, held[--nheld]);
            held[nheld++] = ino;
        } else {
            sh->wrong += r != -ESTALE;
            sh->stale++;
        }
        if (nheld && rnd(&seed) % 2)
            vt_release(sh->vt, held[--nheld]);
    }
    while (nheld)
        vt_release(sh->vt, held[--nheld]);
    return NULL;
}

static void test_threads(void)
{
    struct shared sh = {.vt = vt_new(bo, bc, NULL)};
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, worker, &sh);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    CHECK(sh.served > 0 && sh.stale > 0);
    CHECK_EQ_INT(sh.wrong, 0);
    CHECK_EQ_INT(backings_open, 0); /* every open backing closed at its inode's last release */
    vt_free(sh.vt);
}

int main(void)
{
    RUN(test_one_version_per_open_inode);
    RUN(test_without_passthrough);
    RUN(test_threads);
    return check_done();
}
