/* fuzz.h: what the libFuzzer harnesses share: FUZZ_ASSERT (each harness defines FUZZ_NAME
 * before including this) and buffers that end at an inaccessible page. */
#ifndef ROIFS_FUZZ_H
#define ROIFS_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef FUZZ_NAME
#error "define FUZZ_NAME (the harness's name, for messages) before including fuzz.h"
#endif

/* A broken invariant: says which, then aborts so that libFuzzer keeps the input. */
#define FUZZ_ASSERT(cond, ...)                                                                     \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, FUZZ_NAME ": %s: ", #cond);                                            \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* A region of cap bytes followed by an inaccessible guard page; returns its end. The codec
 * libraries are not instrumented, so an overrun past data placed just before it faults. */
static inline uint8_t *fuzz_guarded_end(size_t cap)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    cap = (cap + page - 1) / page * page;
    uint8_t *p = mmap(NULL, cap + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED || mprotect(p + cap, page, PROT_NONE) < 0)
        abort();
    return p + cap;
}

#endif
