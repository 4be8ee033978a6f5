/* strips.h: the strip records of stitch = iou (strips.c): what compute.c stores after each
 * ROI and the global pass (stitch.c) reads. */
#ifndef ROIFS_ENGINE_STRIPS_H
#define ROIFS_ENGINE_STRIPS_H

#include <stdbool.h>
#include <stdint.h>

#include "../key.h"
#include "../task.h"

struct engine;

/* After ROI r's processor returned out over its read region [rstart, +rshape): stores the
 * parts of it in the zones shared with other ROIs' read regions (its "strips"), named after
 * its result key. */
void engine_stitch_strips(struct engine *e, uint32_t r, const void *out, const uint64_t *rstart,
                          const uint64_t *rshape, struct key128 key);
/* The key of ROI result k's strip record. */
struct key128 engine_stitch_strips_key(struct key128 k);
/* Zone of ROIs r and s: the intersection of their read regions [z0, z1); false when empty. */
bool engine_stitch_zone(const struct task *t, uint32_t r, uint32_t s, uint64_t *z0, uint64_t *z1);
/* Elements of zone [z0, z1). */
uint64_t engine_stitch_zone_elems(int nd, const uint64_t *z0, const uint64_t *z1);

#endif
