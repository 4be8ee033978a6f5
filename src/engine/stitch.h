/* stitch.h: the global pass of stitch = iou (stitch.c): the id mapping, made once across
 * processes from every ROI's strip record (strips.h) and kept by the engine. */
#ifndef ROIFS_ENGINE_STITCH_H
#define ROIFS_ENGINE_STITCH_H

#include <stddef.h>
#include <stdint.h>

#include "../util.h"

struct engine;

/* The id mapping (pairs id -> representative, sorted), made once: under its lock, from the
 * store, or by the global pass (every ROI computed first). The engine keeps it; 0 or -errno
 * with err. */
int engine_stitch_mapping(struct engine *e, const uint64_t **pairs, size_t *n, struct errbuf *err);
void engine_stitch_free(struct engine *e);

#endif
