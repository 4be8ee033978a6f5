/* ids.h: label outputs (SPEC §9, [labels]): the checks of a configuration's ids against its
 * output dtype, the validation of a processor's values, and the id mappings of ids = unique
 * (r * block + v) and ids = sequential (offset + rank of v among the ROI's distinct values).
 * Pure functions of buffers: no engine, no FUSE. */
#ifndef ROIFS_LABELS_IDS_H
#define ROIFS_LABELS_IDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../dtype.h"
#include "../util.h"

struct config;

/* [labels] resolved into plain values at task creation (labels_rules_of): all that the engine
 * and the validation of results ask, so that nothing after task_open reads the configuration.
 * Zeroed: no [labels] (a derived array, a pyramid level). */
struct label_rules {
    bool on;         /* [labels] is set */
    bool unique;     /* ids = unique */
    bool sequential; /* ids = sequential (neither: ids = keep) */
    bool stitch;     /* stitch = iou */
    uint64_t block;  /* block, as configured (ids = unique: ROI r's ids are r * block + v) */
    double iou;      /* stitch_iou, as configured */
};
void labels_rules_of(const struct config *cfg, struct label_rules *out);

/* The checks of check and mount: an integer output dtype; with ids = unique, a block whose
 * largest id ((n_rois - 1) * block + block - 1) fits the dtype; stitch = iou only with
 * ids = unique. -EINVAL with "FILE:LINE: [labels] KEY: ..." (config_error). */
int labels_check_config(const struct config *cfg, const struct dtype *out, size_t n_rois,
                        struct errbuf *err);
/* What the validation of results depends on, for the processor identity ("" without
 * [labels]): a result validated for one mode must not be taken for another's. */
void labels_identity(const struct label_rules *lr, struct strbuf *sb);

/* Validates a processor's output (n elements of dt, native order): every value >= 0 and,
 * with ids = unique, < block. -EINVAL with a message naming the value and its position. */
int labels_check_values(const struct label_rules *lr, const struct dtype *dt, const void *buf,
                        size_t n, struct errbuf *err);

/* The sorted distinct nonzero values of n elements (validated: non-negative). Returns their
 * number; *vals (malloc'd, NULL when there are none) gets them. */
size_t labels_distinct(const struct dtype *dt, const void *buf, size_t n, uint64_t **vals);

/* Element i of an integer buffer (0 for a negative one), and its store. */
uint64_t labels_get(const struct dtype *dt, const void *buf, size_t i);
void labels_put(const struct dtype *dt, void *buf, size_t i, uint64_t v);

/* Maps n elements in place: nonzero v becomes base + v (ids = unique: base = r * block). */
void labels_map_offset(const struct dtype *dt, void *buf, size_t n, uint64_t base);
/* Maps n elements in place: nonzero v becomes base + (rank of v in vals[0..nv), from 1).
 * Every nonzero v must be among vals. */
void labels_map_rank(const struct dtype *dt, void *buf, size_t n, uint64_t base,
                     const uint64_t *vals, size_t nv);

#endif
