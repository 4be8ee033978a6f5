/* test_engine.c: the engine without FUSE: assembly order (later ROIs win), outside = input,
 * single-flight under concurrent opens, reuse of the cache across engines (remounts), ROIs
 * spanning chunks computed once, failures reported as EIO plus a status entry, a cache that
 * cannot be listed failing engine_create, opens under [cache] max_size evicting each other's
 * chunks without ever failing, input changes reported (as [input] watch does), the store
 * compacted while readers open, and two engines on one cache (two processes:
 * open-file-description locks conflict inside one process too) computing each ROI once
 * around a failure and a lock just let go; a job older than a result it shares uses it when
 * the input is still what the result was read from; read-ahead does not make again a chunk
 * that an open made while it looked. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "engine/gc.h"
#include "engine/ahead.h"
#include "engine/engine_internal.h"
#include "engine/jobs.h"
#include "engine_harness.h"

static char dir[256];

static void write_text(const char *name, const char *text)
{
    char *p = path_join(dir, name);
    FILE *f = fopen(p, "w");
    fputs(text, f);
    fclose(f);
    free(p);
}

/* An 8x8 <i4 input, chunks 4x4, uncompressed, value = 100*y + x; chunk (1,1) missing. */
static void make_input(void)
{
    char *p = path_join(dir, "in.zarr");
    mkdir_p(p, 0755);
    free(p);
    write_text("in.zarr/.zarray",
               "{\"zarr_format\": 2, \"shape\": [8, 8], \"chunks\": [4, 4], \"dtype\": \"<i4\","
               " \"compressor\": null, \"fill_value\": 7, \"order\": \"C\", \"filters\": null}");
    for (int cy = 0; cy < 2; cy++)
        for (int cx = 0; cx < 2; cx++) {
            if (cy == 1 && cx == 1)
                continue;
            int32_t v[16];
            for (int i = 0; i < 16; i++)
                v[i] = 100 * (cy * 4 + i / 4) + cx * 4 + i % 4;
            char name[320];
            snprintf(name, sizeof name, "%s/in.zarr/%d.%d", dir, cy, cx);
            FILE *f = fopen(name, "wb");
            fwrite(v, sizeof v, 1, f);
            fclose(f);
        }
}

static int32_t input_at(int y, int x)
{
    return y >= 4 && x >= 4 ? 7 : 100 * y + x;
}

/* Opens chunk id and reads its 16 int32 values; returns the open's error. */
static int read_chunk(struct engine *e, uint64_t id, int32_t *v)
{
    int fd, r = harness_open_wait(e, id, &fd);
    if (r)
        return r;
    ssize_t n = pread(fd, v, 64, 0);
    close(fd);
    return n == 64 ? 0 : -EIO;
}

static struct task *open_task(const char *ini)
{
    write_text("task.ini", ini);
    char *p = path_join(dir, "task.ini");
    struct task *t = NULL;
    struct errbuf err = {{0}};
    int r = task_open(p, &t, &err);
    if (r < 0)
        fprintf(stderr, "task_open: %s\n", err.msg);
    free(p);
    return t;
}

/* Writes task.ini and opens its rig: false (a failed check) when it cannot. */
static bool rig_open(struct harness_rig *g, const char *ini)
{
    write_text("task.ini", ini);
    char *p = path_join(dir, "task.ini");
    bool ok = harness_rig_open(g, p);
    free(p);
    return ok;
}

static const char value_cmd[] =
    "/usr/bin/python3 -c \"import os,sys,numpy as n;s=[int(v) for v in "
    "os.environ['ROIFS_IN_SHAPE'].split(',')];"
    "sys.stdout.buffer.write(n.full(s,int(os.environ['ROIFS_ROI'])+10,'<i4').tobytes())\"";

/* Reads the four 4x4 chunks of the 8x8 output and checks every element against want(y, x). */
static void check_every_chunk(struct engine *e, int (*want)(int y, int x))
{
    int32_t v[16];
    for (uint64_t id = 0; id < 4; id++) {
        CHECK_EQ_INT(read_chunk(e, id, v), 0);
        int cy = (int)id / 2, cx = (int)id % 2;
        for (int i = 0; i < 16; i++)
            CHECK_EQ_INT(v[i], want(cy * 4 + i / 4, cx * 4 + i % 4));
    }
}

/* test_assembly_order's output: ROI r writes r + 10, later ROIs win, fill -1 elsewhere. */
static int assembled_at(int y, int x)
{
    int want = -1;
    if (y < 4 && x < 4)
        want = 10;
    if (y >= 2 && y < 6 && x >= 2 && x < 6)
        want = 11;
    if (y >= 3 && y < 5 && x < 1)
        want = 12;
    return want;
}

/* test_outside_input's output: the input, plus 1000 inside the ROI. */
static int input_plus_roi_at(int y, int x)
{
    bool in_roi = y >= 1 && y < 3 && x >= 1 && x < 7;
    return input_at(y, x) + (in_roi ? 1000 : 0);
}

static void test_assembly_order(void)
{
    write_text("rois.txt", "0:4, 0:4\n2:6, 2:6\n3:5, 0:1\n");
    char ini[1024];
    snprintf(ini, sizeof ini,
             "[input]\npath = in.zarr\n[rois]\nfile = rois.txt\n[process]\ncommand = %s\n"
             "threads = 2\n[output]\nfill_value = -1\n[cache]\ndir = cache1\n",
             value_cmd);
    struct harness_rig g;
    if (!rig_open(&g, ini))
        return;
    check_every_chunk(g.e, assembled_at);
    CHECK_EQ_INT(g.t->proc->calls, 3);
    harness_rig_close(&g);
}

static void test_outside_input(void)
{
    write_text("rois2.txt", "1:3, 1:7\n");
    struct harness_rig g;
    if (!rig_open(&g, "[input]\npath = in.zarr\n[rois]\nfile = rois2.txt\n"
                      "[process]\nbuiltin = add\nparam.value = 1000\n"
                      "[output]\noutside = input\n[cache]\ndir = cache2\n"))
        return;
    check_every_chunk(g.e, input_plus_roi_at);
    harness_rig_close(&g);
}

/* Starts n threads of fn, thread i given the i-th of the args (size bytes each). */
static void start_all(pthread_t *th, int n, void *(*fn)(void *), void *args, size_t size)
{
    for (int i = 0; i < n; i++)
        pthread_create(&th[i], NULL, fn, (char *)args + (size_t)i * size);
}

static void join_all(pthread_t *th, int n)
{
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
}

/* What a reading thread is given (e, and id or seed) and reports (rc, or bad and reads). */
struct reader_arg {
    struct engine *e;
    uint64_t id;
    unsigned seed;
    int rc, bad, reads;
};

static void *reader(void *p)
{
    struct reader_arg *a = p;
    int32_t v[16];
    a->rc = read_chunk(a->e, a->id, v);
    return NULL;
}

/* 8 concurrent readers of all four chunks; ROIs span chunks; each ROI runs once, and a
 * second engine on the same cache (a remount) runs nothing. */
static void test_single_flight_and_remount(void)
{
    write_text("rois3.txt", "0:8, 0:8\n2:6, 2:6\n0:1, 0:8\n");
    const char *ini = "[input]\npath = in.zarr\n[rois]\nfile = rois3.txt\n[process]\n"
                      "builtin = add\nparam.delay = 0.2\nthreads = 3\n[cache]\ndir = cache3\n";
    for (int round = 0; round < 2; round++) {
        struct harness_rig g;
        if (!rig_open(&g, ini))
            return;
        pthread_t th[8];
        struct reader_arg args[8];
        for (int i = 0; i < 8; i++)
            args[i] = (struct reader_arg){.e = g.e, .id = (uint64_t)(i % 4)};
        start_all(th, 8, reader, args, sizeof *args);
        join_all(th, 8);
        for (int i = 0; i < 8; i++)
            CHECK_EQ_INT(args[i].rc, 0);
        CHECK_EQ_INT(g.t->proc->calls, round == 0 ? 3 : 0);
        char *status = harness_status(g.e);
        CHECK_STR_CONTAINS(status, "\"done\": 3");
        CHECK_STR_CONTAINS(status, "\"cached\": 4");
        free(status);
        harness_rig_close(&g);
    }
}

static void test_failure_then_retry(void)
{
    write_text("rois4.txt", "0:4, 0:4\n4:8, 4:8\n");
    char *flag = path_join(dir, "fail.flag");
    write_text("fail.flag", "x");
    char ini[1024];
    snprintf(ini, sizeof ini,
             "[input]\npath = in.zarr\n[rois]\nfile = rois4.txt\n[process]\n"
             "command = if [ $ROIFS_ROI = 1 ] && [ -e fail.flag ]; then echo boom >&2; exit 3;"
             " fi; cat\n[cache]\ndir = cache4\n");
    struct harness_rig g;
    if (!rig_open(&g, ini)) {
        free(flag);
        return;
    }
    int32_t v[16];
    CHECK_EQ_INT(read_chunk(g.e, 0, v), 0);
    CHECK_EQ_INT(v[5], input_at(1, 1));
    CHECK_EQ_INT(read_chunk(g.e, 3, v), -EIO);
    char *status = harness_status(g.e);
    CHECK_STR_CONTAINS(status, "\"failed\": 1");
    CHECK_STR_CONTAINS(status, "boom");
    free(status);
    unlink(flag);
    CHECK_EQ_INT(read_chunk(g.e, 3, v), 0);
    CHECK_EQ_INT(v[0], 7);
    status = harness_status(g.e);
    CHECK_STR_CONTAINS(status, "\"failed\": 0");
    free(status);
    harness_rig_close(&g);
    free(flag);
}

/* engine_create looks at what the cache holds; when it cannot list the chunk files (here: no
 * descriptor left) it fails with the reason, rather than start counting nothing cached. */
static void test_unlistable_cache_fails_create(void)
{
    write_text("rois5.txt", "0:4, 0:4\n");
    struct task *t = open_task("[input]\npath = in.zarr\n[rois]\nfile = rois5.txt\n"
                               "[process]\nbuiltin = copy\n[cache]\ndir = cache5\n");
    CHECK(t != NULL);
    if (!t)
        return;
    struct cache *c = NULL;
    struct engine *e = NULL;
    struct errbuf err = {{0}};
    CHECK_EQ_INT(cache_open(t->cache_dir, t->cfg.path, task_version(t), &c, &err), 0);
    struct engine_opts o = harness_opts(t);
    struct rlimit saved, low;
    getrlimit(RLIMIT_NOFILE, &saved);
    low = saved;
    low.rlim_cur = 256;
    CHECK_EQ_INT(setrlimit(RLIMIT_NOFILE, &low), 0);
    int fds[256], n = 0;
    while (n < 256 && (fds[n] = dup(0)) >= 0)
        n++;
    int r = engine_create(t, c, &o, &e, &err);
    while (n > 0)
        close(fds[--n]);
    setrlimit(RLIMIT_NOFILE, &saved);
    CHECK_EQ_INT(r, -EMFILE);
    CHECK_STR_CONTAINS(err.msg, "cannot list the cached chunks");
    cache_close(c);
    task_close(t); /* the failed engine stopped its processor */
}

/* Reads all 64 chunks of the 32x32 array, in an order of its own, three times. */
static void *evict_read_all(void *p)
{
    struct reader_arg *a = p;
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < 64; i++) {
            uint64_t id = (uint64_t)((i * 17 + (int)a->seed * 5 + round) % 64);
            int32_t v[16];
            if (read_chunk(a->e, id, v) != 0) {
                a->bad++;
                continue;
            }
            int cy = (int)id / 8, cx = (int)id % 8;
            for (int k = 0; k < 16; k++)
                if (v[k] != 1000 * (cy * 4 + k / 4) + cx * 4 + k % 4)
                    a->bad++;
        }
    return NULL;
}

/* With a max_size below one chunk every assembly evicts the chunks made before it, also those
 * whose readers have not been answered yet: a reader still gets its chunk (a descriptor of
 * the file made for it, never one opened again by name after the eviction). */
static void test_eviction_never_fails_an_open(void)
{
    char *p = path_join(dir, "big.zarr");
    mkdir_p(p, 0755);
    free(p);
    write_text("big.zarr/.zarray",
               "{\"zarr_format\": 2, \"shape\": [32, 32], \"chunks\": [32, 32], \"dtype\": "
               "\"<i4\", \"compressor\": null, \"fill_value\": 0, \"order\": \"C\", "
               "\"filters\": null}");
    int32_t *in = xmalloc(32 * 32 * sizeof *in);
    for (int i = 0; i < 32 * 32; i++)
        in[i] = 1000 * (i / 32) + i % 32;
    char *name = path_join(dir, "big.zarr/0.0");
    FILE *f = fopen(name, "wb");
    CHECK(f && fwrite(in, sizeof *in, 32 * 32, f) == 32 * 32);
    if (f)
        fclose(f);
    free(name);
    free(in);
    struct harness_rig g;
    if (!rig_open(&g, "[input]\npath = big.zarr\n[rois]\ngrid = 4,4\n[process]\n"
                      "builtin = copy\nthreads = 4\n[output]\nchunks = 4,4\n"
                      "[cache]\ndir = cache6\nmax_size = 1\n"))
        return;
    pthread_t th[8];
    struct reader_arg args[8];
    for (int i = 0; i < 8; i++)
        args[i] = (struct reader_arg){.e = g.e, .seed = (unsigned)i};
    start_all(th, 8, evict_read_all, args, sizeof *args);
    join_all(th, 8);
    int bad = 0;
    for (int i = 0; i < 8; i++)
        bad += args[i].bad;
    CHECK_EQ_INT(bad, 0);
    harness_rig_close(&g);
}

/* Writes input chunk 0.0 as version k (value 100 * y + x + 1000 * k), by rename. */
static void write_version(int k)
{
    int32_t v[16];
    for (int i = 0; i < 16; i++)
        v[i] = 100 * (i / 4) + i % 4 + 1000 * k;
    char tmp[320], name[320];
    snprintf(tmp, sizeof tmp, "%s/in.zarr/.0.0.tmp", dir);
    snprintf(name, sizeof name, "%s/in.zarr/0.0", dir);
    FILE *f = fopen(tmp, "wb");
    fwrite(v, sizeof v, 1, f);
    fclose(f);
    rename(tmp, name);
}

static void *churn_reader(void *p)
{
    struct reader_arg *a = p;
    for (int i = 0; i < 60; i++) {
        int32_t v[16];
        uint64_t id = (uint64_t)(i % 4);
        if (read_chunk(a->e, id, v) != 0) {
            a->bad++;
            continue;
        }
        a->reads++;
        /* chunk 0's first element is in ROI 0: input + 1, of one version of the input */
        if (id == 0 && (v[0] - 1) % 1000 != 0)
            a->bad++;
    }
    return NULL;
}

/* Input chunk 0.0 rewritten ten times and reported (as [input] watch does), and the result
 * store compacted ([cache] max_size), while four threads open chunks: every read is of one
 * version, the last one afterwards; nothing races (this test runs under ThreadSanitizer). */
static void test_changes_under_readers(void)
{
    write_text("rois5.txt", "0:4, 0:4\n0:8, 2:6\n4:8, 0:4\n");
    const char *ini = "[input]\npath = in.zarr\n[rois]\nfile = rois5.txt\n[process]\n"
                      "builtin = add\nthreads = 2\n[cache]\ndir = cache5\n";
    write_version(0);
    struct harness_rig g;
    if (!rig_open(&g, ini))
        return;
    struct errbuf err;
    pthread_t th[4];
    struct reader_arg args[4];
    for (int i = 0; i < 4; i++)
        args[i] = (struct reader_arg){.e = g.e};
    start_all(th, 4, churn_reader, args, sizeof *args);
    /* input chunk 0.0, the box [0, 4) x [0, 4) of the input */
    const uint64_t lo[2] = {0, 0}, hi[2] = {4, 4};
    uint64_t *stale = NULL;
    for (int k = 1; k <= 10; k++) {
        usleep(5000);
        write_version(k);
        engine_input_changed(g.e, lo, hi, 1, false, &stale);
        free(stale);
        if (k % 3 == 0) {
            struct keyset *live = keyset_new(g.t->rois.n);
            gc_current_results(g.t, NULL, live);
            struct gc_report rep;
            CHECK_EQ_INT(gc_collect(g.t, g.c, live, false, &rep, &err), 0);
            keyset_free(live);
        }
    }
    join_all(th, 4);
    for (int i = 0; i < 4; i++) {
        CHECK_EQ_INT(args[i].bad, 0);
        CHECK(args[i].reads > 0);
    }
    int32_t v[16];
    CHECK_EQ_INT(read_chunk(g.e, 0, v), 0);
    CHECK_EQ_INT(v[0], 10001);
    /* reported, nothing read since: ROIs 0 and 1 read 0.0 and count as not done */
    size_t n = engine_input_changed(g.e, lo, hi, 1, false, &stale);
    CHECK_EQ_INT(n, 4); /* the chunks ROIs 0 and 1 touch: all four (ROI 2 reads 4:8 only) */
    free(stale);
    struct engine_progress pr;
    engine_progress(g.e, &pr);
    CHECK_EQ_INT(pr.rois_done, 1);
    harness_rig_close(&g);
    make_input(); /* the other tests' input */
}

/* Two engines (two mounts) of one configuration on one cache. */
struct pair {
    struct harness_rig r[2];
};

static bool pair_open(struct pair *p, const char *ini)
{
    memset(p, 0, sizeof *p);
    for (int i = 0; i < 2; i++)
        if (!rig_open(&p->r[i], ini))
            return false;
    return true;
}

static void pair_close(struct pair *p)
{
    for (int i = 0; i < 2; i++)
        harness_rig_close(&p->r[i]);
}

/* Waits (up to 20 s) until no ROI of e is queued or running. */
static void settle(struct engine *e)
{
    for (int i = 0; i < 2000; i++) {
        bool busy = false;
        pthread_mutex_lock(&e->lock);
        for (size_t r = 0; r < e->f.t->rois.n; r++)
            busy = busy || e->s.rois[r].state == RS_QUEUED || e->s.rois[r].state == RS_RUNNING;
        pthread_mutex_unlock(&e->lock);
        if (!busy)
            return;
        usleep(10000);
    }
    fprintf(stderr, "the engine did not settle within 20 s\n");
    CHECK(false);
}

/* ROI 0 fails at once (while fail.flag exists); ROIs 1 to 3, in the same chunk, take 0.3 s
 * each on one thread, so the chunk fails while they still run. */
static const char failing_ini[] =
    "[input]\npath = in.zarr\n[rois]\nfile = rois5.txt\n[process]\n"
    "command = if [ $ROIFS_ROI = 0 ] && [ -e fail.flag ]; then exit 3; fi; sleep 0.3; cat\n"
    "threads = 1\n[cache]\ndir = %s\n";

/* Two engines on the configuration failing_ini with cache directory `cache`, the failing ROI
 * failing (its flag file written). */
static bool pair_open_failing(struct pair *p, const char *cache)
{
    write_text("fail.flag", "x");
    char ini[512];
    snprintf(ini, sizeof ini, failing_ini, cache);
    return pair_open(p, ini);
}

/* Opens chunk id through a job made of the keys of an earlier look (as engine_open_chunk
 * makes one: look's keys go to the job), waiting for the answer: its error, *fd the file. */
static int open_from_look(struct engine *e, uint64_t id, struct chunk_keys *look, int *fd)
{
    struct harness_open o = {
        .m = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .fd = -1};
    struct waiter *w = xmalloc(sizeof *w);
    *w = (struct waiter){.cb = harness_on_open, .ctx = &o, .began = clock_ns(CLOCK_MONOTONIC)};
    pthread_mutex_lock(&e->lock);
    struct chunk_job *job = engine_job_create(e, id, true, false, look, clock_ns(CLOCK_MONOTONIC));
    w->next = job->waiters;
    job->waiters = w;
    pthread_mutex_unlock(&e->lock);
    pthread_mutex_lock(&o.m);
    while (!o.done)
        pthread_cond_wait(&o.cv, &o.m);
    pthread_mutex_unlock(&o.m);
    *fd = o.fd;
    return o.err;
}

/* The chunk's lock stays with the first engine until those ROIs are stored, so the second
 * one takes them from the store instead of computing them again (it used to get the lock at
 * once and run all four). */
static void test_failed_chunk_keeps_its_lock(void)
{
    write_text("rois5.txt", "0:2, 0:2\n0:4, 0:2\n2:4, 2:4\n1:3, 1:3\n");
    struct pair p;
    if (pair_open_failing(&p, "cache5")) {
        int32_t v[16];
        CHECK_EQ_INT(read_chunk(p.r[0].e, 0, v), -EIO);
        CHECK_EQ_INT(read_chunk(p.r[1].e, 0, v), -EIO);
        settle(p.r[0].e);
        settle(p.r[1].e);
        CHECK_EQ_INT(p.r[0].t->proc->calls, 4);
        CHECK_EQ_INT(p.r[1].t->proc->calls, 1); /* only the failed ROI, tried again */
    }
    pair_close(&p);
}

/* An open that comes while a failed chunk's other ROIs still run gets an attempt of its own
 * once they are done, not the failure it came after. */
static void test_open_while_a_failed_chunk_settles(void)
{
    struct pair p;
    if (pair_open_failing(&p, "cache7")) {
        int32_t v[16];
        CHECK_EQ_INT(read_chunk(p.r[0].e, 0, v), -EIO);
        char *flag = path_join(dir, "fail.flag");
        unlink(flag);
        free(flag);
        CHECK_EQ_INT(read_chunk(p.r[0].e, 0, v), 0);
        CHECK_EQ_INT(v[0], input_at(0, 0));
        CHECK_EQ_INT(p.r[0].t->proc->calls, 5);
    }
    pair_close(&p);
}

/* A job whose lock another process let go after storing the chunk's results, created by a
 * caller that looked in the store before (as an open or readahead does, before the engine's
 * lock): it finds them once the lock is its own, and computes nothing. */
static void test_lock_taken_after_another_stored(void)
{
    write_text("rois6.txt", "0:2, 0:2\n1:4, 1:3\n");
    struct pair p;
    if (pair_open(&p, "[input]\npath = in.zarr\n[rois]\nfile = rois6.txt\n[process]\n"
                      "builtin = add\nparam.value = 5\n[cache]\ndir = cache6\n")) {
        int32_t v[16];
        CHECK_EQ_INT(read_chunk(p.r[0].e, 0, v), 0);
        CHECK_EQ_INT(p.r[0].t->proc->calls, 2);
        struct engine *e = p.r[1].e; /* its store index is from before */
        struct chunk_keys keys;
        engine_chunk_keys_now(p.r[1].t, 0, NULL, &keys);
        int fd;
        CHECK_EQ_INT(open_from_look(e, 0, &keys, &fd), 0);
        chunk_keys_free(&keys);
        if (fd >= 0) {
            CHECK_EQ_INT(pread(fd, v, 64, 0), 64);
            CHECK_EQ_INT(v[0], input_at(0, 0) + 5);
            close(fd);
        }
        CHECK_EQ_INT(p.r[1].t->proc->calls, 0);
    }
    pair_close(&p);
}

/* Writes input chunk 0.0 again, same values, as a new file renamed into place: its identity
 * (inode, mtime) changes, as a changed input's does. */
static void rewrite_input_chunk(int32_t add)
{
    int32_t v[16];
    for (int i = 0; i < 16; i++)
        v[i] = input_at(i / 4, i % 4) + add;
    char *tmp = path_join(dir, "in.zarr/0.0.new"), *name = path_join(dir, "in.zarr/0.0");
    FILE *f = fopen(tmp, "wb");
    fwrite(v, sizeof v, 1, f);
    fclose(f);
    CHECK_EQ_INT(rename(tmp, name), 0);
    free(tmp);
    free(name);
}

/* A chunk job whose look at the input came before the read of a ROI it shares (so the look
 * saw other files than the read: with a chained mount, the first mount's chunk files change
 * size and mtime when they are computed) pastes that ROI's result when the input is still
 * what the read saw, without computing it again; when the input changed after the read, the
 * ROI runs again. */
static void test_job_older_than_a_result_uses_it(void)
{
    write_text("rois7.txt", "0:8, 0:8\n");
    struct harness_rig g;
    if (!rig_open(&g, "[input]\npath = in.zarr\n[rois]\nfile = rois7.txt\n[process]\n"
                      "builtin = add\nthreads = 1\nreadahead = 0\n[cache]\ndir = cache7\n"))
        return;
    struct chunk_keys look;
    engine_chunk_keys_now(g.t, 1, NULL, &look);
    rewrite_input_chunk(1); /* other bytes: results are named by content */
    int32_t v[16];
    CHECK_EQ_INT(read_chunk(g.e, 0, v), 0); /* the ROI, read from the input as it is now */
    CHECK_EQ_INT(g.t->proc->calls, 1);

    /* chunk 1's job made of the earlier look, as engine_open_chunk makes one */
    int fd;
    CHECK_EQ_INT(open_from_look(g.e, 1, &look, &fd), 0);
    CHECK_EQ_INT(pread(fd, v, 64, 0), 64);
    close(fd);
    CHECK_EQ_INT(v[5], input_at(1, 5) + 1);
    CHECK_EQ_INT(g.t->proc->calls, 1);

    rewrite_input_chunk(2); /* a change after the read: computed again, once */
    CHECK_EQ_INT(read_chunk(g.e, 2, v), 0);
    CHECK_EQ_INT(v[0], input_at(4, 0) + 1);
    CHECK_EQ_INT(g.t->proc->calls, 2);
    chunk_keys_free(&look);
    harness_rig_close(&g);
    rewrite_input_chunk(0); /* the input of the tests that follow */
}

/* The read-ahead hook of test_read_ahead_makes_a_chunk_once: the first time read-ahead is
 * about to make chunk 1, chunk 1 is opened and made first, as another reader would. */
static uint64_t ahead_made_ino;

static void open_before_read_ahead(struct engine *e, uint64_t id)
{
    if (id != 1 || ahead_made_ino)
        return;
    ahead_made_ino = 1; /* not again from the open below's own read-ahead */
    int fd;
    struct stat st;
    if (harness_open_wait(e, 1, &fd) == 0 && fstat(fd, &st) == 0)
        ahead_made_ino = (uint64_t)st.st_ino;
    close(fd);
}

static size_t jobs_now(struct engine *e)
{
    pthread_mutex_lock(&e->lock);
    size_t n = map_count(&e->s.jobs);
    pthread_mutex_unlock(&e->lock);
    return n;
}

/* Read-ahead looks at the cache, then creates the job: a chunk that another open made
 * meanwhile is not made again (its file replaced, which a second mount knowing it by size and
 * mtime takes for new input). */
static void test_read_ahead_makes_a_chunk_once(void)
{
    write_text("rois8.txt", "0:4, 0:4\n0:4, 4:8\n4:8, 0:4\n4:8, 4:8\n");
    struct harness_rig g;
    if (!rig_open(&g, "[input]\npath = in.zarr\n[rois]\nfile = rois8.txt\n[process]\n"
                      "builtin = add\nthreads = 2\nreadahead = 1\n[cache]\ndir = cache8\n"))
        return;
    engine_read_ahead_hook = open_before_read_ahead;
    int32_t v[16];
    CHECK_EQ_INT(read_chunk(g.e, 0, v), 0);
    engine_read_ahead_hook = NULL;
    CHECK(ahead_made_ino > 1);
    for (int i = 0; i < 2; i++) { /* served the file the open made, now and once jobs settle */
        int fd;
        struct stat st;
        CHECK_EQ_INT(harness_open_wait(g.e, 1, &fd), 0);
        CHECK_EQ_INT(fstat(fd, &st), 0);
        close(fd);
        CHECK_EQ_INT((long long)st.st_ino, (long long)ahead_made_ino);
        for (int k = 0; k < 200 && jobs_now(g.e); k++)
            usleep(10000);
    }
    CHECK_EQ_INT(g.t->proc->calls, 3); /* chunks 0, 1 and 2 (read ahead of 1) */
    harness_rig_close(&g);
}

/* Waits (up to 5 s) until no chunk job is left. */
static void settle_jobs(struct engine *e)
{
    for (int k = 0; k < 500 && jobs_now(e); k++)
        usleep(10000);
}

/* readahead = auto: cheap ROIs in small chunks are read ahead further than one chunk per
 * thread (what the default, -1, queues), up to ENGINE_AUTO_AHEAD_MAX chunks; expensive ones
 * one chunk per thread. 64 ROIs of 1x1 in 32 chunks of 1x2, 2 threads. The time of a ROI is
 * measured (checked), then set, so that the depth does not depend on this machine's speed. */
static void test_read_ahead_auto_follows_the_time_of_a_roi(void)
{
    struct harness_rig g;
    if (!rig_open(&g, "[input]\npath = in.zarr\n[rois]\ngrid = 1,1\n[process]\n"
                      "builtin = add\nthreads = 2\nreadahead = auto\n[output]\nchunks = 1,2\n"
                      "[cache]\ndir = cache10\n"))
        return;
    int fd;
    CHECK_EQ_INT(harness_open_wait(g.e, 0, &fd), 0);
    close(fd);
    settle_jobs(g.e);
    CHECK(atomic_load(&g.e->roi_ns) > 0);
    /* 10 us a ROI, 2 ROIs a chunk on 2 threads: 4 ms are 400 chunks, so the most, 16 */
    atomic_store(&g.e->roi_ns, 10000);
    CHECK_EQ_INT(harness_open_wait(g.e, 1, &fd), 0);
    close(fd);
    settle_jobs(g.e);
    CHECK_EQ_INT(g.t->proc->calls, 2 * (2 + ENGINE_AUTO_AHEAD_MAX)); /* chunks 0 to 17 */
    /* 100 ms a ROI: one chunk per thread, as the default */
    atomic_store(&g.e->roi_ns, 100000000);
    CHECK_EQ_INT(harness_open_wait(g.e, 20, &fd), 0);
    close(fd);
    settle_jobs(g.e);
    CHECK_EQ_INT(g.t->proc->calls, 2 * (2 + ENGINE_AUTO_AHEAD_MAX) + 2 * 3); /* 20, 21, 22 */
    harness_rig_close(&g);
}

/* Another process makes a chunk and lets its lock go between this one's look at the cache
 * and its taking of the lock (engine_job_create is given the job of that earlier look): the
 * file the other process made is served, not made again (which changed its inode and mtime,
 * and a second mount knowing it by them computed its ROIs again after a remount). */
static void test_chunk_made_elsewhere_before_the_lock(void)
{
    write_text("rois9.txt", "0:2, 0:2\n1:4, 1:3\n");
    struct pair p;
    if (pair_open(&p, "[input]\npath = in.zarr\n[rois]\nfile = rois9.txt\n[process]\n"
                      "builtin = add\nparam.value = 5\nreadahead = 0\n[cache]\ndir = cache9\n")) {
        struct engine *e = p.r[1].e;
        struct chunk_keys keys;
        engine_chunk_keys_now(p.r[1].t, 0, NULL, &keys); /* the look: nothing there yet */
        int fd;
        struct stat made, served;
        CHECK_EQ_INT(harness_open_wait(p.r[0].e, 0, &fd), 0); /* the other process */
        CHECK_EQ_INT(fstat(fd, &made), 0);
        close(fd);
        for (int k = 0; k < 200 && jobs_now(p.r[0].e); k++) /* its lock let go */
            usleep(10000);
        CHECK_EQ_INT((int)jobs_now(p.r[0].e), 0);
        CHECK_EQ_INT(open_from_look(e, 0, &keys, &fd), 0);
        chunk_keys_free(&keys);
        if (fd >= 0) {
            int32_t v[16];
            CHECK_EQ_INT(pread(fd, v, 64, 0), 64);
            CHECK_EQ_INT(v[0], input_at(0, 0) + 5);
            CHECK_EQ_INT(fstat(fd, &served), 0);
            close(fd);
            CHECK_EQ_INT((long long)served.st_ino, (long long)made.st_ino);
            CHECK_EQ_INT((long long)served.st_mtim.tv_nsec, (long long)made.st_mtim.tv_nsec);
        }
        CHECK_EQ_INT(p.r[1].t->proc->calls, 0);
    }
    pair_close(&p);
}

int main(void)
{
    if (check_mkdtemp(dir, sizeof dir, "engine"))
        return 1;
    log_open_stderr(false);
    make_input();
    RUN(test_assembly_order);
    RUN(test_outside_input);
    RUN(test_single_flight_and_remount);
    RUN(test_failure_then_retry);
    RUN(test_unlistable_cache_fails_create);
    RUN(test_eviction_never_fails_an_open);
    RUN(test_changes_under_readers);
    RUN(test_failed_chunk_keeps_its_lock);
    RUN(test_open_while_a_failed_chunk_settles);
    RUN(test_lock_taken_after_another_stored);
    RUN(test_job_older_than_a_result_uses_it);
    RUN(test_read_ahead_makes_a_chunk_once);
    RUN(test_chunk_made_elsewhere_before_the_lock);
    RUN(test_read_ahead_auto_follows_the_time_of_a_roi);
    check_rmtree(dir);
    return check_done();
}
