/* check.h: a minimal assertion harness for the C unit tests (TAP-like output). */
#ifndef ROIFS_CHECK_H
#define ROIFS_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_failures;
static int check_count;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        check_count++;                                                                             \
        if (!(cond)) {                                                                             \
            check_failures++;                                                                      \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                         \
    do {                                                                                           \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);                            \
        check_count++;                                                                             \
        if (check_a_ != check_b_) {                                                                \
            check_failures++;                                                                      \
            fprintf(stderr, "%s:%d: %s == %lld, expected %s == %lld\n", __FILE__, __LINE__, #a,    \
                    check_a_, #b, check_b_);                                                       \
        }                                                                                          \
    } while (0)

#define CHECK_STR_CONTAINS(hay, needle)                                                            \
    do {                                                                                           \
        check_count++;                                                                             \
        if (!strstr((hay), (needle))) {                                                            \
            check_failures++;                                                                      \
            fprintf(stderr, "%s:%d: \"%s\" does not contain \"%s\"\n", __FILE__, __LINE__, (hay),  \
                    (needle));                                                                     \
        }                                                                                          \
    } while (0)

#define RUN(test)                                                                                  \
    do {                                                                                           \
        int check_before_ = check_failures;                                                        \
        test();                                                                                    \
        printf("%s %s\n", check_failures == check_before_ ? "ok" : "not ok", #test);               \
    } while (0)

/* One step of Marsaglia's xorshift64 over *s (never 0): the tests' repeatable random
 * numbers. */
static inline uint64_t check_xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* A fresh scratch directory /tmp/roifs-test-NAME-XXXXXX in dir (cap bytes). 0, or 1 (the
 * exit status) after a message. */
static inline int check_mkdtemp(char *dir, size_t cap, const char *name)
{
    snprintf(dir, cap, "/tmp/roifs-test-%s-XXXXXX", name);
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    return 0;
}

/* Removes dir and everything below it; a failure is reported, not counted. */
static inline void check_rmtree(const char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

static inline int check_done(void)
{
    printf("%d checks, %d failed\n", check_count, check_failures);
    return check_failures ? 1 : 0;
}

#endif
