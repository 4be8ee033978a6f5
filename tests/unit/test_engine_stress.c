/* test_engine_stress.c: many threads against one engine, for ThreadSanitizer (scripts/tsan.sh)
 * as much as for correctness: readers opening every chunk in their own orders while others
 * poll the status, over 300 overlapping ROIs (most spanning chunks, so results go through the
 * cache), for 4 random ROI lists, each twice (the second engine is a remount that computes
 * nothing), and once more across a change of one input chunk. Every chunk must equal the
 * reference and every ROI must run exactly once per version of its input. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "engine_harness.h"
#include "nd.h"
#include "scratch.h"

#define SIDE    96 /* a SIDE x SIDE <u2 input */
#define IN_CH   16 /* input chunks */
#define OUT_CH  12 /* output chunks: a 8 x 8 grid, not aligned with the input's */
#define GRID    (SIDE / OUT_CH)
#define NROIS   300
#define READERS 8
#define POLLERS 2
#define FILL    9
#define LAYOUTS 4 /* different random ROI lists, each in a fresh cache */

static char dir[256];
static uint16_t ref[SIDE][SIDE];
static bool present[GRID * GRID];
static uint64_t rng_state = 0x2545F4914F6CDD1DULL;

static uint64_t rnd(uint64_t n)
{
    return check_xorshift(&rng_state) % n;
}

static int bumped_cy = -1, bumped_cx = -1; /* the input chunk rewritten with other values */

static uint16_t input_at(int y, int x)
{
    int bump = y / IN_CH == bumped_cy && x / IN_CH == bumped_cx ? 1000 : 0;
    return (uint16_t)(y * 131 + x * 7 + 3 + bump);
}

/* Writes input chunk (cy, cx) by rename of a complete file (a new inode: a new signature). */
static void write_input_chunk(int cy, int cx)
{
    struct zarr_codec codec = {.id = ZC_BLOSC, .level = 5, .shuffle = 1};
    snprintf(codec.cname, sizeof codec.cname, "lz4");
    uint16_t v[IN_CH * IN_CH];
    for (int i = 0; i < IN_CH * IN_CH; i++)
        v[i] = input_at(cy * IN_CH + i / IN_CH, cx * IN_CH + i % IN_CH);
    void *enc;
    size_t n;
    struct errbuf err;
    CHECK_EQ_INT(zarr_codec_encode(&codec, v, sizeof v, 2, &enc, &n, &err), 0);
    char name[64], tmp[80];
    snprintf(name, sizeof name, "in.zarr/%d.%d", cy, cx);
    snprintf(tmp, sizeof tmp, "%s.tmp", name);
    scratch_write_file(dir, tmp, enc, n);
    free(enc);
    char *from = path_join(dir, tmp), *to = path_join(dir, name);
    CHECK_EQ_INT(rename(from, to), 0);
    free(from);
    free(to);
}

/* The input: blosc, so that decoding happens under contention. */
static void make_input(void)
{
    char *p = path_join(dir, "in.zarr");
    mkdir_p(p, 0755);
    free(p);
    const char *zarray = "{\"zarr_format\": 2, \"shape\": [96, 96], \"chunks\": [16, 16], "
                         "\"dtype\": \"<u2\", \"compressor\": {\"id\": \"blosc\", \"cname\": "
                         "\"lz4\", \"clevel\": 5, \"shuffle\": 1, \"blocksize\": 0}, "
                         "\"fill_value\": 0, \"order\": \"C\", \"filters\": null}";
    scratch_write_file(dir, "in.zarr/.zarray", zarray, strlen(zarray));
    for (int cy = 0; cy < SIDE / IN_CH; cy++)
        for (int cx = 0; cx < SIDE / IN_CH; cx++)
            write_input_chunk(cy, cx);
}

static int boxes[NROIS][4]; /* y0, y1, x0, x1 of each ROI of the layout */

/* The reference of the layout over the input as it is (builtin add 1 is pointwise, so
 * overlapping ROIs agree). */
static void make_reference(void)
{
    memset(present, 0, sizeof present);
    for (int y = 0; y < SIDE; y++)
        for (int x = 0; x < SIDE; x++)
            ref[y][x] = FILL;
    for (int i = 0; i < NROIS; i++)
        for (int y = boxes[i][0]; y < boxes[i][1]; y++)
            for (int x = boxes[i][2]; x < boxes[i][3]; x++) {
                ref[y][x] = (uint16_t)(input_at(y, x) + 1);
                present[(y / OUT_CH) * GRID + x / OUT_CH] = true;
            }
}

/* A new random ROI list, its reference and a configuration using cache directory cache<n>. */
static void make_layout(int n)
{
    struct strbuf rois = {0};
    for (int i = 0; i < NROIS; i++) {
        int h = 1 + (int)rnd(30), w = 1 + (int)rnd(30);
        int y0 = (int)rnd(SIDE - h + 1), x0 = (int)rnd(SIDE - w + 1);
        sb_printf(&rois, "%d:%d, %d:%d\n", y0, y0 + h, x0, x0 + w);
        boxes[i][0] = y0, boxes[i][1] = y0 + h, boxes[i][2] = x0, boxes[i][3] = x0 + w;
    }
    make_reference();
    scratch_write_file(dir, "rois.txt", rois.buf, rois.len);
    sb_free(&rois);
    char ini[512];
    snprintf(ini, sizeof ini,
             "[input]\npath = in.zarr\n[rois]\nfile = rois.txt\n[process]\nbuiltin = add\n"
             "threads = 4\nreadahead = 3\n[output]\nchunks = 12,12\nfill_value = 9\n[cache]\n"
             "dir = cache%d\n",
             n);
    scratch_write_file(dir, "task.ini", ini, strlen(ini));
}

/* Opens chunk id, reads it and compares it with the reference: 0, or what went wrong. */
static int check_chunk(struct engine *e, uint64_t id)
{
    int fd, r = harness_open_wait(e, id, &fd);
    if (r)
        return r;
    uint16_t v[OUT_CH * OUT_CH];
    ssize_t n = pread(fd, v, sizeof v, 0);
    close(fd);
    if (n != (ssize_t)sizeof v)
        return -EIO;
    int cy = (int)(id / GRID), cx = (int)(id % GRID);
    for (int i = 0; i < OUT_CH * OUT_CH; i++)
        if (v[i] != ref[cy * OUT_CH + i / OUT_CH][cx * OUT_CH + i % OUT_CH])
            return -EBADMSG;
    return 0;
}

struct reader {
    pthread_t th;
    struct engine *e;
    pthread_barrier_t *start;
    unsigned seed;
    int bad;
};

static void *read_all(void *p)
{
    struct reader *r = p;
    uint64_t order[GRID * GRID];
    int n = 0;
    for (int id = 0; id < GRID * GRID; id++)
        if (present[id])
            order[n++] = (uint64_t)id;
    unsigned s = r->seed; /* each reader its own order: shuffled, or C order reversed */
    for (int i = n - 1; i > 0 && s % 3 != 0; i--) {
        int j = (int)(rand_r(&s) % (unsigned)(i + 1));
        uint64_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    if (r->seed % 3 == 0)
        for (int i = 0; i < n / 2; i++) {
            uint64_t t = order[i];
            order[i] = order[n - 1 - i];
            order[n - 1 - i] = t;
        }
    pthread_barrier_wait(r->start);
    for (int i = 0; i < n; i++) {
        int rc = check_chunk(r->e, order[i]);
        if (rc != 0) {
            fprintf(stderr, "reader %u: chunk %llu: %s\n", r->seed, (unsigned long long)order[i],
                    rc == -EBADMSG ? "wrong data" : strerror(-rc));
            r->bad++;
        }
    }
    return NULL;
}

struct poller {
    pthread_t th;
    struct engine *e;
    atomic_bool *stop;
    int polls;
};

static void *poll_status(void *p)
{
    struct poller *q = p;
    while (!atomic_load(q->stop)) {
        char *s = harness_status(q->e);
        struct engine_progress pr;
        engine_progress(q->e, &pr);
        uint64_t size;
        bool known;
        engine_chunk_size(q->e, (uint64_t)(q->polls % (GRID * GRID)), &size, &known, NULL);
        free(s);
        q->polls++;
    }
    return NULL;
}

/* READERS readers of the whole array and POLLERS status pollers at once; the readers'
 * mismatches. */
static int read_concurrently(struct engine *e)
{
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, READERS);
    struct reader readers[READERS];
    struct poller pollers[POLLERS];
    atomic_bool stop = false;
    for (int i = 0; i < POLLERS; i++) {
        pollers[i] = (struct poller){.e = e, .stop = &stop};
        pthread_create(&pollers[i].th, NULL, poll_status, &pollers[i]);
    }
    for (int i = 0; i < READERS; i++) {
        readers[i] = (struct reader){.e = e, .start = &start, .seed = (unsigned)i};
        pthread_create(&readers[i].th, NULL, read_all, &readers[i]);
    }
    int bad = 0;
    for (int i = 0; i < READERS; i++) {
        pthread_join(readers[i].th, NULL);
        bad += readers[i].bad;
    }
    atomic_store(&stop, true);
    for (int i = 0; i < POLLERS; i++)
        pthread_join(pollers[i].th, NULL);
    pthread_barrier_destroy(&start);
    return bad;
}

/* The rig of task.ini: false (a failed check) when it cannot be opened. */
static bool start(struct harness_rig *g)
{
    char *path = path_join(dir, "task.ini");
    bool ok = harness_rig_open(g, path);
    free(path);
    return ok;
}

static void test_concurrent_readers(void)
{
    for (int round = 0; round < 2 * LAYOUTS; round++) {
        if (round % 2 == 0)
            make_layout(round / 2);
        struct harness_rig g;
        if (!start(&g))
            return;
        CHECK_EQ_INT(read_concurrently(g.e), 0);
        /* each ROI once in the first engine; the remount finds everything in the cache */
        CHECK_EQ_INT(g.t->proc->calls, round % 2 == 0 ? NROIS : 0);
        struct engine_progress pr;
        engine_progress(g.e, &pr);
        CHECK_EQ_INT(pr.rois_failed, 0);
        harness_rig_close(&g);
    }
}

/* A ROI made again after its input changed replaces its slot's result (under the engine's
 * lock) while other chunks are assembled and pasted from results in memory and in the store:
 * readers of the whole array in one engine, before and after one input chunk is rewritten,
 * get the reference of the input as it is, and only the ROIs whose box touches the changed
 * chunk run again (the ROIs have no halo). */
static void test_input_change_under_readers(void)
{
    make_layout(LAYOUTS);
    struct harness_rig g;
    if (!start(&g))
        return;
    CHECK_EQ_INT(read_concurrently(g.e), 0);
    CHECK_EQ_INT(g.t->proc->calls, NROIS);
    bumped_cy = 2, bumped_cx = 3;
    write_input_chunk(bumped_cy, bumped_cx);
    make_reference();
    int touching = 0;
    for (int i = 0; i < NROIS; i++)
        touching += boxes[i][0] < (bumped_cy + 1) * IN_CH && boxes[i][1] > bumped_cy * IN_CH &&
                    boxes[i][2] < (bumped_cx + 1) * IN_CH && boxes[i][3] > bumped_cx * IN_CH;
    CHECK(touching > 0);
    CHECK_EQ_INT(read_concurrently(g.e), 0);
    CHECK_EQ_INT(g.t->proc->calls, NROIS + touching);
    harness_rig_close(&g);
    bumped_cy = bumped_cx = -1;
    make_input();
}

int main(void)
{
    if (check_mkdtemp(dir, sizeof dir, "engine-stress"))
        return 1;
    log_open_stderr(false);
    make_input();
    RUN(test_concurrent_readers);
    RUN(test_input_change_under_readers);
    check_rmtree(dir);
    return check_done();
}
