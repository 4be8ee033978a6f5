/* scratch.h: buffers kept per compute thread (scratch.c), for compute.c and assemble.c. */
#ifndef ROIFS_ENGINE_SCRATCH_H
#define ROIFS_ENGINE_SCRATCH_H

#include <stddef.h>

enum scratch_slot { SCRATCH_IN, SCRATCH_OUT, SCRATCH_CHUNK, SCRATCH_READ, SCRATCH_NSLOTS };
/* This thread's buffer of at least n bytes for slot (contents undefined), or a fresh one when
 * the slot is in use already; give it back with engine_scratch_put (which frees what is not
 * the thread's, and what is too large to keep). */
void *engine_scratch_get(enum scratch_slot slot, size_t n);
void engine_scratch_put(enum scratch_slot slot, void *p);

#endif
