/* test_map.c: src/map.c against a plain array as reference over random operations (adds,
 * updates, deletions, lookups, iteration), through growth and back to empty, with keys that
 * share home slots so that backward shifts wrap around the table's end. */
#include <stdbool.h>
#include <stdint.h>

#include "check.h"
#include "map.h"
#include "util.h"

struct ref {
    struct map_key k;
    uint64_t v;
    bool in;
};

static uint64_t rng = 88172645463325252ULL;
static uint64_t next_rand(void)
{
    return check_xorshift(&rng);
}

static struct ref *ref_find(struct ref *r, size_t n, struct map_key k)
{
    for (size_t i = 0; i < n; i++)
        if (r[i].k.lo == k.lo && r[i].k.hi == k.hi)
            return &r[i];
    return NULL;
}

/* Every key of the reference, in or not, answers as it should; iteration meets each key in
 * exactly once and nothing else. */
static void check_same(const struct map *m, struct ref *r, size_t nr)
{
    size_t in = 0;
    bool ok = true;
    for (size_t i = 0; i < nr; i++) {
        uint64_t *v = map_get(m, r[i].k.lo, r[i].k.hi);
        if (r[i].in) {
            in++;
            ok = ok && v && *v == r[i].v;
        } else {
            ok = ok && !v;
        }
    }
    CHECK(ok);
    CHECK_EQ_INT(map_count(m), in);
    size_t it = 0, seen = 0;
    struct map_key k;
    void *v;
    bool iter_ok = true;
    while (map_next(m, &it, &k, &v)) {
        struct ref *e = ref_find(r, nr, k);
        iter_ok = iter_ok && e && e->in && *(uint64_t *)v == e->v;
        seen++;
    }
    CHECK(iter_ok);
    CHECK_EQ_INT(seen, in);
}

/* nkeys distinct keys drawn from a space of `space` (small: many home slots shared). */
static void random_ops(size_t space, size_t nops, bool wide)
{
    struct ref *r = xcalloc(space, sizeof *r);
    for (size_t i = 0; i < space; i++)
        r[i].k = (struct map_key){wide ? next_rand() : i * 64, wide ? next_rand() : 0};
    struct map m;
    map_init(&m, sizeof(uint64_t), 0);
    for (size_t op = 0; op < nops; op++) {
        struct ref *e = &r[next_rand() % space];
        unsigned what = (unsigned)(next_rand() % 8);
        if (what < 4) { /* put */
            bool added;
            uint64_t *v = map_put(&m, e->k.lo, e->k.hi, &added);
            CHECK(added == !e->in);
            if (added)
                CHECK(*v == 0);
            e->v = next_rand();
            *v = e->v;
            e->in = true;
        } else if (what < 7) { /* delete */
            uint64_t out = 0;
            bool was = map_del(&m, e->k.lo, e->k.hi, &out);
            CHECK(was == e->in);
            if (was)
                CHECK(out == e->v);
            e->in = false;
        } else { /* get */
            uint64_t *v = map_get(&m, e->k.lo, e->k.hi);
            CHECK(e->in ? v && *v == e->v : !v);
        }
        if (op % 97 == 0)
            check_same(&m, r, space);
    }
    check_same(&m, r, space);
    /* every key out again: the table is empty and every lookup misses */
    for (size_t i = 0; i < space; i++) {
        CHECK(map_del(&m, r[i].k.lo, r[i].k.hi, NULL) == r[i].in);
        r[i].in = false;
    }
    check_same(&m, r, space);
    map_destroy(&m);
    free(r);
}

/* Growth from the first slot to many thousands, then half out, then emptied and used again. */
static void test_growth(void)
{
    struct map m;
    map_init(&m, sizeof(uint64_t), 10);
    CHECK(map_get(&m, 1, 0) == NULL);
    CHECK(!map_del(&m, 1, 0, NULL));
    CHECK_EQ_INT(m.cap, 0);
    const size_t n = 20000;
    for (uint64_t i = 1; i <= n; i++)
        *(uint64_t *)map_put(&m, i, i >> 3, NULL) = i * 7;
    CHECK_EQ_INT(map_count(&m), n);
    CHECK(m.cap >= 2 * n && m.cap < 8 * n);
    bool ok = true;
    for (uint64_t i = 1; i <= n; i++) {
        uint64_t *v = map_get(&m, i, i >> 3);
        ok = ok && v && *v == i * 7 && !map_get(&m, i, (i >> 3) + 1);
    }
    CHECK(ok);
    for (uint64_t i = 1; i <= n; i += 2)
        CHECK(map_del(&m, i, i >> 3, NULL));
    ok = true;
    for (uint64_t i = 1; i <= n; i++)
        ok = ok && (map_get(&m, i, i >> 3) != NULL) == (i % 2 == 0);
    CHECK(ok);
    map_destroy(&m);
    CHECK_EQ_INT(map_count(&m), 0);
    CHECK(map_get(&m, 2, 0) == NULL);
    *(uint64_t *)map_put(&m, 2, 0, NULL) = 5;
    CHECK(*(uint64_t *)map_get(&m, 2, 0) == 5);
    map_destroy(&m);
}

/* A set (no values) and a table of pointers. */
static void test_set_and_pointers(void)
{
    struct map s;
    map_init(&s, 0, 0);
    bool added;
    map_put(&s, 3, 4, &added);
    CHECK(added);
    map_put(&s, 3, 4, &added);
    CHECK(!added);
    CHECK(map_get(&s, 3, 4) != NULL);
    CHECK(map_get(&s, 4, 3) == NULL);
    CHECK(map_del(&s, 3, 4, NULL));
    CHECK(map_get(&s, 3, 4) == NULL);
    map_destroy(&s);

    struct map p;
    map_init(&p, sizeof(void *), 0);
    int a, b;
    *(void **)map_put(&p, 1, 0, NULL) = &a;
    *(void **)map_put(&p, 2, 0, NULL) = &b;
    CHECK(map_get_ptr(&p, 1, 0) == &a);
    CHECK(map_get_ptr(&p, 2, 0) == &b);
    CHECK(map_get_ptr(&p, 3, 0) == NULL);
    map_destroy(&p);
}

int main(void)
{
    test_growth();
    test_set_and_pointers();
    random_ops(40, 20000, false);   /* small table: many shared homes, wrap-around shifts */
    random_ops(3000, 60000, false); /* growth and shrinking by deletions */
    random_ops(3000, 60000, true);  /* 128-bit keys */
    return check_done();
}
