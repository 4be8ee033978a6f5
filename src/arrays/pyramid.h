/* pyramid.h: [output] ome = true: the image pyramid over the computed array, a client stacked
 * on the engine. Level 0 is the configured task; level L (1 <= L < levels) is a derived task
 * (task_derived) whose ROIs are its chunks, whose processor copies its input, and whose input
 * is level L-1 read through level L-1's engine and downsampled by 2 in y and x
 * (downsample.h). Neither task.c nor the engine knows of levels; the array set (arrayset.h)
 * creates one engine per level and tells the pyramid which engine serves each. */
#ifndef ROIFS_PYRAMID_H
#define ROIFS_PYRAMID_H

#include "../engine/engine.h"
#include "../task.h"

#define PYRAMID_MAX_LEVELS 64 /* [output] levels allows no more */

struct pyramid;

/* Builds levels 1..cfg.levels-1 over t0 (a configured task with ome = true; borrowed, it
 * must outlive the pyramid) and the image group's metadata. Level L's cache is
 * <t0's cache>/L<L>. 0 or -EINVAL with err set. */
int pyramid_build(struct task *t0, struct pyramid **out, struct errbuf *err);
/* Frees the level tasks (after their engines are gone). */
void pyramid_free(struct pyramid *p);

int pyramid_nlevels(const struct pyramid *p);
/* The task of level L (level 0: t0). */
struct task *pyramid_level(const struct pyramid *p, int level);
/* The image group's metadata: .zgroup (format 2) or zarr.json (format 3); and its .zattrs
 * (format 2; NULL for format 3). */
const char *pyramid_group_meta(const struct pyramid *p);
const char *pyramid_group_attrs(const struct pyramid *p);

/* The boxes of level `level` (>= 1) that reduce the chunks up_ids[0..n) of the level above,
 * in the level's own coordinates (those of its input: pyramid.c's sources read the level
 * above through them): where the level above changing reaches. n boxes of ndim coordinates
 * each in *lo and *hi (malloc'd). */
size_t pyramid_changed_boxes(const struct pyramid *p, int level, const uint64_t *up_ids, size_t n,
                             uint64_t **lo, uint64_t **hi);

/* Level L is served by engine e (NULL: no more): level L+1 reads it through e. Set before
 * level L+1's engine is created, cleared after it is destroyed. */
void pyramid_set_engine(struct pyramid *p, int level, struct engine *e);

#endif
