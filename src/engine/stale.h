/* stale.h: the chunks an input change made stale, which changes.c keeps (s.stale, under
 * the engine's lock), as the rest of the engine asks about them. */
#ifndef ROIFS_ENGINE_STALE_H
#define ROIFS_ENGINE_STALE_H

#include <stdbool.h>
#include <stdint.h>

struct engine;

/* Lock held: takes chunk id out of the stale ones; true when its file was taken
 * out of n_cached then (to count again once it is current). */
bool engine_stale_take(struct engine *e, uint64_t id);
bool engine_is_stale(struct engine *e, uint64_t id);
void engine_stale_free(struct engine *e);

#endif
