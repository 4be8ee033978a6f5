/* array.h: one array of an array set (arrayset.h): its task, cache, engine and engine options,
 * and its place among the set's levels and images. Apart from arrayset.h so that the set's
 * parts (arrayset_state.h, arrayset_plate.c) name it without the set's interface. */
#ifndef ROIFS_ARRAY_H
#define ROIFS_ARRAY_H

#include <stdbool.h>

#include "../cache/cache.h"
#include "../engine/engine.h"
#include "../task.h"

struct array {
    struct task *task;       /* array 0: the caller's task; the others: the pyramid's */
    struct cache *cache;     /* its own cache directory */
    struct engine *engine;   /* from arrayset_start to arrayset_stop, else NULL */
    struct engine_opts opts; /* its own */
    int level;               /* its pyramid level (0: the configured array) */
    bool level_k;            /* a plate: an image's configured array (its label image's level k) */
    int image;               /* a plate: the image it belongs to (arrayset_engine starts it) */
};

#endif
