/* compute.h: ROIs on the pool (compute.c; no engine lock held). */
#ifndef ROIFS_ENGINE_COMPUTE_H
#define ROIFS_ENGINE_COMPUTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../key.h"
#include "../util.h"

struct engine;

/* Computes ROI r (asked for as key want), stores its result and publishes it. */
void engine_run_roi(struct engine *e, uint32_t r, struct key128 want);
/* The same, computing it even when its result is stored (labels.c: a lost strip record). */
void engine_run_roi_fresh(struct engine *e, uint32_t r, struct key128 want);
/* Computes n batchable ROIs in one processor call and publishes each. */
void engine_run_rois(struct engine *e, const uint32_t *rs, size_t n);
/* Makes sure ROI s's result named *k is done (computing it on this thread, under its result
 * lock, when nobody else is; fresh: even when it is stored), for results that others depend
 * on ([labels]: id counts, strip records). On 0, *k names the result done, which is of newer
 * input than *k named when the input changed since *k was taken (or by being read: a chunk
 * of another roifs mount). 0, -EIO (it failed, or failed less than [process] retry_after
 * seconds ago: not tried again) or -ECANCELED (stopping), with err. */
int engine_roi_ensure(struct engine *e, uint32_t s, struct key128 *k, bool fresh,
                      struct errbuf *err);

#endif
