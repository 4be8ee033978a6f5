/* outcome.h: how a ROI's outcome is published (jobtable.c), for those that make ROIs
 * (compute.c) or find them missing (assemble.c), and whether a failure stands for an open
 * (jobs.c, compute.c, status.c). */
#ifndef ROIFS_ENGINE_OUTCOME_H
#define ROIFS_ENGINE_OUTCOME_H

#include <stdbool.h>
#include <stdint.h>

struct engine;
struct roi_result;

/* Publishes ROI r's outcome (takes the lock): ok with its result (the slot takes the
 * reference), or failed with errmsg, which fails every chunk job waiting for it. */
void engine_roi_finish(struct engine *e, uint32_t r, struct roi_result *res, bool stored,
                       bool reused, const char *errmsg);

/* True when ROI r failed and its failure answers an open that began at `began`
 * (CLOCK_MONOTONIC ns) with EIO instead of a new attempt: it failed after the open began
 * (while the open looked at the keys, say), or less than [process] retry_after seconds ago
 * (engine_opts.retry_after). An open retries only a failure older than itself, and not within
 * retry_after (lock held). */
bool engine_failure_stands(struct engine *e, uint32_t r, int64_t began);
/* When failed ROI r is tried again on demand: its failure plus retry_after, in
 * CLOCK_REALTIME ns (lock held). */
int64_t engine_retry_at_ns(struct engine *e, uint32_t r);

#endif
