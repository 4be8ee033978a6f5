/* engine_fixed.h: what an engine is given, or sets up, before engine_create returns and never
 * changes until engine_destroy: struct engine's field f (its first). Any thread reads it
 * without the engine's lock. */
#ifndef ROIFS_ENGINE_FIXED_H
#define ROIFS_ENGINE_FIXED_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine.h"

struct engine_fixed {
    struct task *t;          /* the array computed (its input, ROIs, processor) */
    struct cache *c;         /* where its chunks and results are kept */
    struct engine_opts opts; /* as given, with opts.threads at least 1 */
    double started;          /* now_monotonic() at engine_create */
    int64_t started_at;      /* the same, seconds since the epoch (the status's "started") */
    pthread_t *threads;      /* the compute pool (engine.c) */
    int nthreads;            /* how many started: counted up while engine_create starts them,
                                before any ROI can be queued */
    pthread_t poller_thread; /* polls the locks other processes hold (engine_poller_main) */
    bool poller_started;
};

/* e's fixed part, for a file that reads nothing else of the engine and so includes this
 * header alone: struct engine begins with it (engine_internal.h checks that). */
static inline const struct engine_fixed *engine_fixed(const struct engine *e)
{
    return (const struct engine_fixed *)(const void *)e;
}

#endif
