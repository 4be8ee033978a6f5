/* outcome.h: how a ROI's outcome is published (jobtable.c), for those that make ROIs
 * (compute.c) or find them missing (assemble.c). */
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

#endif
