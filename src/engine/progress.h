/* progress.h: what progress.c counts for the others. */
#ifndef ROIFS_ENGINE_PROGRESS_H
#define ROIFS_ENGINE_PROGRESS_H

#include <stdint.h>

struct engine;

/* Notes that a result made at made (seconds since the epoch) was there at the
 * start (lock held, or before the threads start). */
void engine_note_made(struct engine *e, uint32_t made);

#endif
