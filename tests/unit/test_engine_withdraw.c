/* test_engine_withdraw.c: engine_withdraw_chunk, a reader that goes away (docs/serve.md): its
 * callback is never called; a chunk nobody waits for any more whose ROIs have not started is
 * not made, and its ROIs are not computed; one still waited for by another reader, or whose
 * ROI runs, is made as before. */
#include <errno.h>
#include <pthread.h>
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

/* The ROIs the processor was called for, in the order of the calls (`calls`, one a line). */
static void read_calls(const char *name, char *out, size_t size)
{
    char *path = path_join(dir, name);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(out, 1, size - 1, f) : 0;
    out[n] = '\0';
    if (f)
        fclose(f);
    free(path);
}

/* A 4x12 <i4 input in three 4x4 chunks, one ROI each; one compute thread, no read-ahead. ROI 0
 * writes `NAME.started` and waits (at most 10 s) for `NAME.go`; every call appends its ROI
 * to `NAME.calls`; the result is the input. */
static bool rig_open(struct harness_rig *g, const char *name)
{
    scratch_zarray_i4(dir, "in.zarr", 4, 12, 4, 4);
    int32_t v[16];
    for (int c = 0; c < 3; c++) {
        char chunk[32];
        for (int i = 0; i < 16; i++)
            v[i] = 100 * c + i;
        snprintf(chunk, sizeof chunk, "in.zarr/0.%d", c);
        scratch_write_file(dir, chunk, v, sizeof v);
    }
    scratch_write_file(dir, "rois.txt", "0:4, 0:4\n0:4, 4:8\n0:4, 8:12\n", 27);
    char ini[1024];
    snprintf(ini, sizeof ini,
             "[input]\npath = in.zarr\n[rois]\nfile = rois.txt\n[process]\n"
             "command = echo $ROIFS_ROI >> %s.calls; if [ $ROIFS_ROI = 0 ]; then touch "
             "%s.started; n=0; while [ ! -e %s.go ] && [ $n -lt 1000 ]; do sleep 0.01; "
             "n=$((n+1)); done; fi; cat\n"
             "threads = 1\nreadahead = 0\n[cache]\ndir = cache-%s\n",
             name, name, name, name);
    char *p = scratch_task_ini(dir, ini);
    bool ok = harness_rig_open(g, p);
    free(p);
    return ok;
}

/* The open's error once it is answered, after a check of its first value (100 * chunk). */
static int open_end(struct harness_open *o, uint64_t id)
{
    harness_open_end(o);
    if (o->fd >= 0) {
        int32_t v = -1;
        CHECK_EQ_INT(pread(o->fd, &v, sizeof v, 0), (int)sizeof v);
        CHECK_EQ_INT(v, (int)(100 * id));
        close(o->fd);
    }
    return o->err;
}

static bool answered(struct harness_open *o)
{
    pthread_mutex_lock(&o->m);
    bool done = o->done;
    pthread_mutex_unlock(&o->m);
    return done;
}

static size_t jobs_now(struct engine *e)
{
    pthread_mutex_lock(&e->lock);
    size_t n = map_count(&e->s.jobs);
    pthread_mutex_unlock(&e->lock);
    return n;
}

/* ROI 0 runs; chunk 1 and then chunk 2 are asked for behind it; chunk 1's reader withdraws.
 * Chunk 1's job is dropped at once, its callback never called, and ROI 1 is not computed: ROI
 * 0, then ROI 2. Asked again later, chunk 1 is made. */
static void test_withdrawn_chunk_is_not_made(void)
{
    struct harness_rig g;
    if (!rig_open(&g, "drop"))
        return;
    struct harness_open a, b, c;
    harness_open_start(&a, g.e, 0);
    scratch_wait_for(dir, "drop.started");
    harness_open_start(&b, g.e, 1);
    harness_open_start(&c, g.e, 2);
    CHECK_EQ_INT(jobs_now(g.e), 3);
    CHECK(engine_withdraw_chunk(g.e, 1, harness_on_open, &b));
    CHECK_EQ_INT(jobs_now(g.e), 2);
    CHECK(!engine_withdraw_chunk(g.e, 1, harness_on_open, &b)); /* once */
    scratch_write_file(dir, "drop.go", "", 0);
    CHECK_EQ_INT(open_end(&a, 0), 0);
    CHECK_EQ_INT(open_end(&c, 2), 0);
    CHECK(!answered(&b));
    CHECK_EQ_INT(g.t->proc->calls, 2);
    char calls[64];
    read_calls("drop.calls", calls, sizeof calls);
    CHECK(strcmp(calls, "0\n2\n") == 0);
    CHECK(!engine_withdraw_chunk(g.e, 2, harness_on_open, &c)); /* answered already */
    pthread_mutex_destroy(&b.m);
    pthread_cond_destroy(&b.cv);
    harness_open_start(&b, g.e, 1);
    CHECK_EQ_INT(open_end(&b, 1), 0);
    CHECK_EQ_INT(g.t->proc->calls, 3);
    harness_rig_close(&g);
}

/* A chunk another reader still waits for, and one whose ROI has started, are made as before:
 * only the withdrawn reader is not called back. */
static void test_wanted_or_started_chunk_is_made(void)
{
    struct harness_rig g;
    if (!rig_open(&g, "keep"))
        return;
    struct harness_open a, b1, b2;
    harness_open_start(&a, g.e, 0);
    scratch_wait_for(dir, "keep.started");
    harness_open_start(&b1, g.e, 1);
    harness_open_start(&b2, g.e, 1);
    CHECK(engine_withdraw_chunk(g.e, 1, harness_on_open, &b1));
    CHECK(engine_withdraw_chunk(g.e, 0, harness_on_open, &a)); /* ROI 0 runs */
    CHECK_EQ_INT(jobs_now(g.e), 2);
    scratch_write_file(dir, "keep.go", "", 0);
    CHECK_EQ_INT(open_end(&b2, 1), 0);
    CHECK(!answered(&a) && !answered(&b1));
    CHECK_EQ_INT(g.t->proc->calls, 2);
    /* chunk 0 was made all the same: served from the cache */
    struct harness_open again;
    harness_open_start(&again, g.e, 0);
    CHECK_EQ_INT(open_end(&again, 0), 0);
    CHECK_EQ_INT(g.t->proc->calls, 2);
    pthread_mutex_destroy(&a.m);
    pthread_cond_destroy(&a.cv);
    pthread_mutex_destroy(&b1.m);
    pthread_cond_destroy(&b1.cv);
    harness_rig_close(&g);
}

int main(void)
{
    if (check_mkdtemp(dir, sizeof dir, "engine_withdraw"))
        return 1;
    log_open_stderr(false);
    RUN(test_withdrawn_chunk_is_not_made);
    RUN(test_wanted_or_started_chunk_is_made);
    check_rmtree(dir);
    return check_done();
}
