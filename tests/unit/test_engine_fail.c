/* test_engine_fail.c: when an open tries a failed ROI again (docs/reliability.md): only a
 * failure older than the open is retried; one that came while the open was in flight (its
 * look at the keys, slow for input written under 2 s ago) answers it with EIO; and none
 * within [process] retry_after seconds of the failure, which the status's retry_at names, also
 * for a ROI whose result the ids of other chunks need. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "engine/engine_internal.h"
#include "engine_harness.h"
#include "scratch.h"

static char dir[256];

/* A 4x8 <i4 input in two 4x4 chunks, zeros. */
static void make_input(void)
{
    scratch_zarray_i4(dir, "in.zarr", 4, 8, 4, 4);
    int32_t zeros[16] = {0};
    scratch_write_file(dir, "in.zarr/0.0", zeros, sizeof zeros);
    scratch_write_file(dir, "in.zarr/0.1", zeros, sizeof zeros);
}

/* One ROI over both chunks; it writes `NAME.started`, waits (at most 10 s) for `NAME.go`, writes
 * `NAME.ended` and fails. */
static bool rig_open_failing(struct harness_rig *g, const char *name, const char *extra)
{
    scratch_write_file(dir, "rois.txt", "0:4, 0:8\n", 9);
    char ini[1024];
    snprintf(ini, sizeof ini,
             "[input]\npath = in.zarr\n[rois]\nfile = rois.txt\n[process]\n"
             "command = touch %s.started; n=0; while [ ! -e %s.go ] && [ $n -lt 1000 ]; do "
             "sleep 0.01; n=$((n+1)); done; touch %s.ended; echo boom >&2; exit 3\n"
             "threads = 2\nreadahead = 0\n%s[cache]\ndir = cache-%s\n",
             name, name, name, extra, name);
    char *p = scratch_task_ini(dir, ini);
    bool ok = harness_rig_open(g, p);
    free(p);
    return ok;
}

/* The open's error, once it is answered. */
static int open_end(struct harness_open *o)
{
    harness_open_end(o);
    if (o->fd >= 0)
        close(o->fd);
    return o->err;
}

struct late_open {
    struct engine *e;
    struct harness_open o;
    atomic_bool entered;
};

static void *late_open_main(void *arg)
{
    struct late_open *l = arg;
    atomic_store(&l->entered, true);
    harness_open_start(&l->o, l->e, 1);
    return NULL;
}

/* Chunk 0's open runs the ROI; chunk 1's open begins while it runs, and looks for the chunk's
 * job only after the ROI failed (held here on the engine's lock, as a slow look at the keys
 * holds it in a real open). It gets the failure, EIO, and the ROI runs once: the engine used
 * to queue the failed ROI again for it. Three rounds, each on a cache of its own. */
static void test_open_in_flight_gets_the_failure(void)
{
    for (int round = 0; round < 3; round++) {
        char name[32], started[48], ended[48], go[48];
        snprintf(name, sizeof name, "inflight%d", round);
        snprintf(started, sizeof started, "%s.started", name);
        snprintf(ended, sizeof ended, "%s.ended", name);
        snprintf(go, sizeof go, "%s.go", name);
        struct harness_rig g;
        if (!rig_open_failing(&g, name, ""))
            return;
        struct harness_open first;
        harness_open_start(&first, g.e, 0);
        bool ok = scratch_wait_for(dir, started);
        struct late_open late = {.e = g.e};
        pthread_t th;
        pthread_mutex_lock(&g.e->lock);
        CHECK_EQ_INT(pthread_create(&th, NULL, late_open_main, &late), 0);
        while (!atomic_load(&late.entered))
            usleep(1000);
        usleep(100000); /* its open has begun, and waits for the lock */
        scratch_write_file(dir, go, "", 0);
        ok = ok && scratch_wait_for(dir, ended);
        usleep(200000); /* the ROI's failure waits for the lock too */
        pthread_mutex_unlock(&g.e->lock);
        CHECK_EQ_INT(open_end(&first), -EIO);
        pthread_join(th, NULL);
        CHECK_EQ_INT(open_end(&late.o), -EIO);
        CHECK_EQ_INT(g.t->proc->calls, 1);
        /* an open that begins after the failure tries the ROI again */
        struct harness_open again;
        harness_open_start(&again, g.e, 1);
        CHECK_EQ_INT(open_end(&again), -EIO);
        CHECK_EQ_INT(g.t->proc->calls, 2);
        harness_rig_close(&g);
        if (!ok)
            return;
    }
}

/* With [process] retry_after = 1, a failed ROI is not tried again for a second: opens of its
 * chunks get EIO at once, and the status says when it will be tried (retry_at); a second
 * later an open runs it again. */
static void test_retry_after_holds_a_failure(void)
{
    scratch_write_file(dir, "hold.go", "", 0); /* the ROI fails at once */
    struct harness_rig g;
    if (!rig_open_failing(&g, "hold", "retry_after = 1\n"))
        return;
    struct harness_open o;
    harness_open_start(&o, g.e, 0);
    CHECK_EQ_INT(open_end(&o), -EIO);
    int64_t failed = clock_ns(CLOCK_REALTIME);
    for (uint64_t id = 0; id < 2; id++) {
        harness_open_start(&o, g.e, id);
        CHECK_EQ_INT(open_end(&o), -EIO);
    }
    CHECK_EQ_INT(g.t->proc->calls, 1);
    json_t *doc = engine_status(g.e);
    json_t *er = json_array_get(json_object_get(doc, "errors"), 0);
    double at = json_number_value(json_object_get(er, "retry_at"));
    CHECK(at > (double)failed / 1e9 + 0.5 && at < (double)failed / 1e9 + 1.1);
    json_decref(doc);
    while ((double)clock_ns(CLOCK_REALTIME) / 1e9 < at + 0.05)
        usleep(10000);
    harness_open_start(&o, g.e, 1);
    CHECK_EQ_INT(open_end(&o), -EIO);
    CHECK_EQ_INT(g.t->proc->calls, 2);
    harness_rig_close(&g);
}

/* [labels] ids = sequential: chunk 1's ids depend on ROI 0 (in chunk 0), which fails. Within
 * retry_after an open of chunk 1 gets EIO without running ROI 0 again (the count of its ids
 * used to run it at every open, retry_after or not). */
static void test_retry_after_holds_ids_depending_on_a_failure(void)
{
    scratch_write_file(dir, "rois2.txt", "0:4, 0:4\n0:4, 4:8\n", 18);
    static const char ini[] = "[input]\npath = in.zarr\n[rois]\nfile = rois2.txt\n[process]\n"
                              "command = if [ $ROIFS_ROI = 0 ]; then exit 3; fi; cat\n"
                              "threads = 1\nreadahead = 0\nretry_after = 30\n"
                              "[labels]\nids = sequential\n[cache]\ndir = cache-ids\n";
    char *p = scratch_task_ini(dir, ini);
    struct harness_rig g;
    bool ok = harness_rig_open(&g, p);
    free(p);
    if (!ok)
        return;
    struct harness_open o;
    for (int i = 0; i < 3; i++) {
        harness_open_start(&o, g.e, 1);
        CHECK_EQ_INT(open_end(&o), -EIO);
    }
    CHECK_EQ_INT(g.t->proc->calls, 2); /* ROI 1, and ROI 0 once */
    harness_rig_close(&g);
}

int main(void)
{
    if (check_mkdtemp(dir, sizeof dir, "engine_fail"))
        return 1;
    log_open_stderr(false);
    make_input();
    RUN(test_open_in_flight_gets_the_failure);
    RUN(test_retry_after_holds_a_failure);
    RUN(test_retry_after_holds_ids_depending_on_a_failure);
    check_rmtree(dir);
    return check_done();
}
