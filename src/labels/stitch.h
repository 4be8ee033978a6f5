/* stitch.h: stitching by IoU (docs/labels.md, Stitching) as pure functions: the merges found in
 * one overlap zone, a union-find over global ids that keeps the smallest id of each merged
 * object, and the id mapping it yields, applied when pasting. No engine, no FUSE. */
#ifndef ROIFS_LABELS_STITCH_H
#define ROIFS_LABELS_STITCH_H

#include <stddef.h>
#include <stdint.h>

#include "../dtype.h"

/* Union-find over the ids that take part in a merge (memory grows with them only). */
struct stitch_uf;
struct stitch_uf *stitch_uf_new(void);
void stitch_uf_free(struct stitch_uf *uf);
/* Merges the objects x and y (global ids). */
void stitch_uf_union(struct stitch_uf *uf, uint64_t x, uint64_t y);
/* The mapping: pairs (id, smallest id of its object) for every id that changes, sorted by
 * id, as 2 * *n values (malloc'd, NULL when none). */
uint64_t *stitch_uf_mapping(struct stitch_uf *uf, size_t *n);

/* One overlap zone of n elements: a from the earlier ROI, b from the later (processor ids,
 * dtype dt, validated). Objects x of a and y of b with |x ∩ y| / |x ∪ y| >= threshold (all
 * counted in the zone) are merged as ids base_a + x and base_b + y. */
void stitch_zone(const struct dtype *dt, const void *a, const void *b, size_t n, double threshold,
                 uint64_t base_a, uint64_t base_b, struct stitch_uf *uf);

/* Maps n elements in place through pairs[0..2*npairs) (stitch_uf_mapping's layout). */
void stitch_map_apply(const struct dtype *dt, void *buf, size_t n, const uint64_t *pairs,
                      size_t npairs);

#endif
