/* budget.h: [cache] max_size over chunk files and results (budget.c; no lock held). */
#ifndef ROIFS_ENGINE_BUDGET_H
#define ROIFS_ENGINE_BUDGET_H

#include <stdint.h>

struct engine;
struct keyset;

/* At the start, after the scans: unused results first (live: the keys of every ROI now), then
 * the least recently used chunks, until the cache is within the limit. */
void engine_budget_start(struct engine *e, struct keyset *live);
/* After chunk keep was written: the same, never evicting keep. */
void engine_budget_check(struct engine *e, uint64_t keep);

#endif
