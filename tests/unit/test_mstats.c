/* test_mstats.c: src/measure/mstats.c's partials against a long double two-pass reference: a
 * piece measured whole equals the same piece cut into random pieces measured apart and merged in
 * random order (counts, coordinate sums and boxes exactly; means and stds to 1e-12) with
 * intensities of 4e9 plus noise, where the raw formula sqrt(E[x^2] - E[x]^2) is far off; and
 * measure.c's record of partials read back as written, a damaged one refused. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "measure/measure.h"
#include "measure/mstats.h"

#define N    6000
#define NLAB 7
#define NCH  2

static uint64_t rng = 0x2545F4914F6CDD1DULL;

static uint32_t labels[N];
static double inten[NCH][N];

struct src {
    uint64_t off;
};

static void load(void *ctx, int c, uint64_t e0, size_t n, double *dst)
{
    memcpy(dst, inten[c] + ((struct src *)ctx)->off + e0, n * sizeof *dst);
}

static const struct dtype u32 = {.kind = DT_UINT, .size = 4};

/* The partials of elements [a, b) of the 1-D image, measured as one piece. */
static void piece(struct mstats *s, uint64_t a, uint64_t b)
{
    struct src src = {a};
    uint64_t origin[1] = {a}, shape[1] = {b - a};
    mstats_piece(s, &u32, labels + a, origin, shape, load, &src);
}

static bool close_to(double got, long double want, double rtol)
{
    return fabsl((long double)got - want) <= rtol * fabsl(want) + 1e-300;
}

static void fill(void)
{
    for (size_t i = 0; i < N; i++) {
        uint64_t r = check_xorshift(&rng);
        labels[i] = r % 5 == 0 ? 0 : (uint32_t)(1 + (r >> 8) % NLAB);
        inten[0][i] = (double)((r >> 20) % 1000);
        inten[1][i] = 4e9 + (double)((r >> 32) % 100000);
    }
}

static void test_pieces_merge_to_the_whole(void)
{
    fill();
    struct mstats whole;
    mstats_init(&whole, 1, NCH);
    piece(&whole, 0, N);
    bool raw_off = false;
    for (int round = 0; round < 20; round++) {
        uint64_t cuts[12];
        int nc = 1 + (int)(check_xorshift(&rng) % 10);
        cuts[0] = 0;
        for (int i = 1; i <= nc; i++)
            cuts[i] = check_xorshift(&rng) % N;
        cuts[nc + 1] = N;
        for (int i = 1; i <= nc + 1; i++) /* sorted */
            for (int j = i; j > 0 && cuts[j] < cuts[j - 1]; j--) {
                uint64_t t = cuts[j];
                cuts[j] = cuts[j - 1];
                cuts[j - 1] = t;
            }
        struct mstats merged;
        mstats_init(&merged, 1, NCH);
        int order[12];
        for (int i = 0; i <= nc; i++)
            order[i] = i;
        for (int i = nc; i > 0; i--) { /* a random order of merging */
            int j = (int)(check_xorshift(&rng) % (uint64_t)(i + 1)), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        for (int i = 0; i <= nc; i++) {
            struct mstats p;
            mstats_init(&p, 1, NCH);
            piece(&p, cuts[order[i]], cuts[order[i] + 1]);
            mstats_merge(&merged, &p);
            mstats_destroy(&p);
        }
        CHECK(merged.n == whole.n);
        for (uint32_t id = 1; id <= NLAB; id++) {
            const struct mobj *a = mstats_get(&merged, id), *w = mstats_get(&whole, id);
            CHECK(a && w);
            if (!a || !w)
                continue;
            long double sum[NCH] = {0}, m2[NCH] = {0};
            uint64_t n = 0, csum = 0, lo = UINT64_MAX, hi = 0;
            for (size_t i = 0; i < N; i++)
                if (labels[i] == id) {
                    n++;
                    csum += i;
                    lo = i < lo ? i : lo;
                    hi = i > hi ? i : hi;
                    for (int c = 0; c < NCH; c++)
                        sum[c] += inten[c][i];
                }
            CHECK(a->n == n && w->n == n && a->csum[0] == csum && a->lo[0] == lo && a->hi[0] == hi);
            for (int c = 0; c < NCH; c++) {
                long double mean = sum[c] / n;
                for (size_t i = 0; i < N; i++)
                    if (labels[i] == id) {
                        long double d = inten[c][i] - mean;
                        m2[c] += d * d;
                    }
                const struct mchan *ch = mstats_chan((struct mobj *)a, c);
                CHECK(close_to(ch->mean, mean, 1e-12));
                CHECK(close_to(sqrt(ch->m2 / (double)n), sqrtl(m2[c] / n), 1e-12));
                CHECK(close_to(ch->sum, sum[c], 1e-12));
                /* the raw formula in double, for the test to show it would fail */
                double ex2 = 0, ex = 0;
                for (size_t i = 0; i < N; i++)
                    if (labels[i] == id) {
                        ex2 += inten[c][i] * inten[c][i];
                        ex += inten[c][i];
                    }
                double raw = ex2 / n - (ex / n) * (ex / n);
                raw_off = raw_off || !close_to(sqrt(raw > 0 ? raw : 0), sqrtl(m2[c] / n), 1e-9);
            }
        }
        mstats_destroy(&merged);
    }
    CHECK(raw_off);
    mstats_destroy(&whole);
}

static void test_record_round_trip(void)
{
    fill();
    struct mstats s;
    mstats_init(&s, 1, NCH);
    piece(&s, 0, N);
    char dir[] = "/tmp/roifs-test-mstats-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    CHECK(measure_record_write(&s, dfd, "p.rows") == 0);
    char *path = xasprintf("%s/p.rows", dir);
    struct mstats back;
    mstats_init(&back, 1, NCH);
    CHECK(measure_record_read(&back, path) == 0);
    CHECK(back.n == s.n);
    for (size_t i = 0; i < s.n; i++) {
        const struct mobj *b = mstats_get(&back, s.ids[i]);
        CHECK(b && memcmp(b, mstats_obj(&s, i), s.rec) == 0);
    }
    mstats_destroy(&back);
    struct mstats other; /* other channels: refused */
    mstats_init(&other, 1, NCH - 1);
    CHECK(measure_record_read(&other, path) == -EIO);
    mstats_destroy(&other);
    int fd = open(path, O_RDWR); /* one byte flipped: refused */
    unsigned char byte;
    CHECK(pread(fd, &byte, 1, 60) == 1);
    byte ^= 1;
    CHECK(pwrite(fd, &byte, 1, 60) == 1);
    close(fd);
    mstats_init(&back, 1, NCH);
    CHECK(measure_record_read(&back, path) == -EIO);
    mstats_destroy(&back);
    unlink(path);
    CHECK(measure_record_read(&back, path) == -ENOENT);
    free(path);
    close(dfd);
    rmdir(dir);
    mstats_destroy(&s);
}

int main(void)
{
    RUN(test_pieces_merge_to_the_whole);
    RUN(test_record_round_trip);
    return check_done();
}
