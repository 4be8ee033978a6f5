/* test_time.c: util.h's time helpers: nanoseconds to and from timespecs (negative times
 * too), sums with a carry, seconds as a double, deadlines from a clock. */
#include <time.h>

#include "check.h"
#include "util.h"

static void test_ns(void)
{
    struct timespec t = {.tv_sec = 1700000000, .tv_nsec = 999999999};
    CHECK(ts_to_ns(t) == 1700000000999999999LL);
    struct timespec back = ts_from_ns(ts_to_ns(t));
    CHECK(back.tv_sec == t.tv_sec && back.tv_nsec == t.tv_nsec);
    struct timespec neg = ts_from_ns(-1); /* one nanosecond before the epoch */
    CHECK(neg.tv_sec == -1 && neg.tv_nsec == 999999999);
    CHECK(ts_to_ns(neg) == -1);
    struct timespec whole = ts_from_ns(-2 * NS_PER_SEC);
    CHECK(whole.tv_sec == -2 && whole.tv_nsec == 0);
}

static void test_add_and_seconds(void)
{
    struct timespec a = {5, 600000000}, b = {1, 500000000};
    struct timespec c = ts_add(a, b);
    CHECK(c.tv_sec == 7 && c.tv_nsec == 100000000);
    c = ts_add(a, (struct timespec){0, 399999999});
    CHECK(c.tv_sec == 5 && c.tv_nsec == 999999999);
    struct timespec s = ts_from_seconds(2.25);
    CHECK(s.tv_sec == 2 && s.tv_nsec == 250000000);
    s = ts_from_seconds(0);
    CHECK(s.tv_sec == 0 && s.tv_nsec == 0);
}

static void test_deadline(void)
{
    int64_t before = clock_ns(CLOCK_MONOTONIC);
    struct timespec d = deadline_in(CLOCK_MONOTONIC, ts_from_ns(3 * NS_PER_SEC / 2));
    int64_t after = clock_ns(CLOCK_MONOTONIC);
    CHECK(d.tv_nsec >= 0 && d.tv_nsec < NS_PER_SEC);
    CHECK(ts_to_ns(d) >= before + 3 * NS_PER_SEC / 2);
    CHECK(ts_to_ns(d) <= after + 3 * NS_PER_SEC / 2);
}

int main(void)
{
    test_ns();
    test_add_and_seconds();
    test_deadline();
    return check_done();
}
