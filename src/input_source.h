/* input_source.h: where a task's input comes from, as a value: the Zarr array of [input] path
 * for a configured task, a view of it (channel.c wraps it), or (a derived task) whatever its
 * maker gives, e.g. another array of the mount read through its engine (pyramid.c). */
#ifndef ROIFS_INPUT_SOURCE_H
#define ROIFS_INPUT_SOURCE_H

#include <stdint.h>

#include "util.h"
#include "zarr/zarr.h"

/* read fills a box (C order, native byte order, meta's dtype) and gives (sig not NULL) the
 * signature of exactly what it read; signature gives that of the input as it is now, through
 * memo (which only the Zarr reader uses). Whoever holds the source does not own ctx. */
struct input_source {
    const struct zarr_meta *meta; /* the input array's metadata */
    int (*read)(void *ctx, const uint64_t *start, const uint64_t *shape, void *dst, uint64_t *sig,
                struct errbuf *err);
    int (*signature)(void *ctx, const uint64_t *start, const uint64_t *shape,
                     struct zarr_sigmemo *memo, uint64_t *sig);
    void *ctx;
};

#endif
