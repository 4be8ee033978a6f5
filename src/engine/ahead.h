/* ahead.h: readahead and checks ahead (ahead.c). */
#ifndef ROIFS_ENGINE_AHEAD_H
#define ROIFS_ENGINE_AHEAD_H

#include <stdint.h>

struct engine;

/* After an open of chunk id: readahead and checks ahead (takes the lock). */
void engine_read_ahead(struct engine *e, uint64_t id);
/* For tests (NULL otherwise): called by engine_read_ahead for chunk id after its look at the
 * cache found id not made, before the lock under which it creates id's job. */
extern void (*engine_read_ahead_hook)(struct engine *e, uint64_t id);
/* Checks cached chunk id as an open would; makes it now when it is not current. */
void engine_verify_ahead(struct engine *e, uint64_t id);

#endif
