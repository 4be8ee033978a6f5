/* test_evict.c: unit tests of the least-recently-used order behind [cache] max_size
 * (src/cache/evict.c), against a plain array model under random operations. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cache/cache.h"

/* The model: ids from least to most recently used, with their sizes. */
struct model {
    uint64_t id[4096], size[4096];
    size_t n;
    uint64_t usage, evicted;
};

static long model_find(const struct model *m, uint64_t id)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->id[i] == id)
            return (long)i;
    return -1;
}

static void model_take(struct model *m, size_t i)
{
    m->usage -= m->size[i];
    memmove(&m->id[i], &m->id[i + 1], (m->n - i - 1) * sizeof m->id[0]);
    memmove(&m->size[i], &m->size[i + 1], (m->n - i - 1) * sizeof m->size[0]);
    m->n--;
}

static void model_add(struct model *m, uint64_t id, uint64_t size)
{
    long i = model_find(m, id);
    if (i >= 0)
        model_take(m, (size_t)i);
    m->id[m->n] = id;
    m->size[m->n++] = size;
    m->usage += size;
}

static void model_touch(struct model *m, uint64_t id)
{
    long i = model_find(m, id);
    if (i >= 0) {
        uint64_t size = m->size[i];
        model_take(m, (size_t)i);
        model_add(m, id, size);
    }
}

static size_t model_victims(struct model *m, uint64_t max, uint64_t keep, uint64_t *out)
{
    size_t k = 0, i = 0;
    while (m->usage > max && i < m->n) {
        if (m->id[i] == keep) {
            i++;
            continue;
        }
        out[k++] = m->id[i];
        model_take(m, i);
        m->evicted++;
    }
    return k;
}

/* The ids of n victims (into out), checking that each carries the inode it was added with
 * (its id times 7, in these tests). */
static uint64_t *victim_ids(const struct evict_victim *v, size_t n, uint64_t *out)
{
    for (size_t i = 0; i < n; i++) {
        out[i] = v[i].id;
        CHECK(v[i].ino == v[i].id * 7);
    }
    return out;
}

static void test_basic_order(void)
{
    struct evict *ev = evict_new(300);
    evict_add(ev, 1, 100, 1 * 7);
    evict_add(ev, 2, 100, 2 * 7);
    evict_add(ev, 3, 100, 3 * 7);
    struct evict_victim *v;
    uint64_t ids[8];
    CHECK_EQ_INT(evict_victims(ev, 3, &v), 0); /* 300 fits */
    free(v);
    evict_touch(ev, 1);           /* order now 2, 3, 1 */
    evict_add(ev, 4, 150, 4 * 7); /* 450: 2 and 3 go, in that order */
    size_t n = evict_victims(ev, 4, &v);
    CHECK_EQ_INT(n, 2);
    if (n == 2) {
        victim_ids(v, n, ids);
        CHECK_EQ_INT(ids[0], 2);
        CHECK_EQ_INT(ids[1], 3);
    }
    free(v);
    uint64_t usage, max, evicted;
    evict_stats(ev, &usage, &max, &evicted);
    CHECK_EQ_INT(usage, 250);
    CHECK_EQ_INT(max, 300);
    CHECK_EQ_INT(evicted, 2);
    /* The kept chunk stays even when it alone is over the limit. */
    evict_add(ev, 5, 1000, 5 * 7);
    n = evict_victims(ev, 5, &v);
    CHECK_EQ_INT(n, 2); /* 1 and 4 */
    free(v);
    evict_stats(ev, &usage, &max, &evicted);
    CHECK_EQ_INT(usage, 1000);
    /* Re-adding updates the size; removing an unknown id is harmless. */
    evict_add(ev, 5, 10, 5 * 7);
    evict_remove(ev, 99);
    evict_stats(ev, &usage, &max, &evicted);
    CHECK_EQ_INT(usage, 10);
    evict_remove(ev, 5);
    evict_stats(ev, &usage, &max, &evicted);
    CHECK_EQ_INT(usage, 0);
    CHECK_EQ_INT(evict_victims(ev, UINT64_MAX, &v), 0);
    free(v);
    evict_free(ev);
}

static void test_random_against_model(void)
{
    static struct model m;
    memset(&m, 0, sizeof m);
    const uint64_t max = 50000;
    struct evict *ev = evict_new(max);
    srand(7);
    int mismatches = 0;
    for (int step = 0; step < 200000; step++) {
        /* Ids spread over a wide range, so that the table grows and chains collide. */
        uint64_t id = (uint64_t)(rand() % 3000) * 1000003u;
        int op = rand() % 10;
        if (op < 5) {
            uint64_t size = 1 + (uint64_t)(rand() % 500);
            evict_add(ev, id, size, id * 7);
            model_add(&m, id, size);
            struct evict_victim *v;
            static uint64_t vid[4096], mv[4096];
            size_t n = evict_victims(ev, id, &v);
            size_t k = model_victims(&m, max, id, mv);
            if (n != k || (n && memcmp(victim_ids(v, n, vid), mv, n * sizeof *mv) != 0))
                mismatches++;
            free(v);
        } else if (op < 8) {
            evict_touch(ev, id);
            model_touch(&m, id);
        } else {
            evict_remove(ev, id);
            long i = model_find(&m, id);
            if (i >= 0)
                model_take(&m, (size_t)i);
        }
        uint64_t usage, mx, evicted;
        evict_stats(ev, &usage, &mx, &evicted);
        if (usage != m.usage || evicted != m.evicted)
            mismatches++;
    }
    CHECK_EQ_INT(mismatches, 0);
    /* Everything still held comes out in least-recently-used order. */
    struct evict *probe = ev;
    struct evict_victim *v;
    size_t n = 0;
    {
        /* Lower the bar to zero by adding a huge kept chunk, then compare the order. */
        static uint64_t vid[4096], mv[4096];
        evict_add(probe, UINT64_MAX - 1, max + 1, (UINT64_MAX - 1) * 7);
        model_add(&m, UINT64_MAX - 1, max + 1);
        n = evict_victims(probe, UINT64_MAX - 1, &v);
        size_t k = model_victims(&m, max, UINT64_MAX - 1, mv);
        CHECK_EQ_INT(n, k);
        CHECK(n == k && memcmp(victim_ids(v, n, vid), mv, n * sizeof *mv) == 0);
        CHECK(n > 50);
    }
    free(v);
    evict_free(ev);
}

int main(void)
{
    RUN(test_basic_order);
    RUN(test_random_against_model);
    return check_done();
}
