/* label_rules.h: what [labels] (SPEC §9) asks of every part of the engine, from the task's
 * resolved rules alone (t->labels, struct label_rules; the engine reads no configuration):
 * whether ids are mapped, counted (ids = sequential) or stitched (stitch = iou), whether ROIs
 * are computed under their result's lock, and the check of a processor's output. */
#ifndef ROIFS_ENGINE_LABEL_RULES_H
#define ROIFS_ENGINE_LABEL_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../task.h"

/* ids are mapped when pasted (unique or sequential). */
bool engine_labels_mapping(const struct task *t);
/* ids = sequential. */
bool engine_labels_sequential(const struct task *t);
/* ids are mapped and ids = unique. */
bool engine_labels_unique(const struct task *t);
/* [labels] block (ids = unique: ROI r's ids are r * block + v), and stitch_iou. */
uint64_t engine_labels_block(const struct task *t);
double engine_labels_iou(const struct task *t);
/* ids are mapped and stitch = iou. */
bool engine_labels_stitching(const struct task *t);
/* Validates a processor's output for ROI r (n elements of the output dtype): 0, or -EINVAL
 * with a message naming the offending value (the ROI then fails). */
int engine_labels_check(const struct task *t, const void *out, size_t n, struct errbuf *err);
/* True when every ROI must be computed under its result's lock and stored at once
 * (ids = sequential: chunks compute earlier ROIs that lie in other chunks). */
bool engine_labels_locked(const struct task *t);
/* The largest of rois[0..n) (0 when n is 0). */
uint32_t engine_rois_last(const uint32_t *rois, size_t n);

#endif
