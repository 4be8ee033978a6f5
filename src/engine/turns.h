/* turns.h: a budget of ROIs running at once shared by several engines (an HCS plate's images,
 * docs/plates.md: `[process] threads` for the whole plate), granted round-robin between the
 * engines that wait for one: a turn given back goes to the next engine, after the one last
 * served, that has a thread waiting, so that no engine waits for another's queue to drain.
 * Each engine keeps its own threads; a thread takes a turn before it takes a ROI (or a batch
 * of them) from its queue and gives it back when the ROI is done. FUSE-free. */
#ifndef ROIFS_ENGINE_TURNS_H
#define ROIFS_ENGINE_TURNS_H

#include <stddef.h>

struct turns;

/* n turns (at least 1) among nclients engines, numbered 0 .. nclients - 1. */
struct turns *turns_new(int n, size_t nclients);
void turns_free(struct turns *t);
/* Blocks until client c (an engine's thread) holds a turn. */
void turns_take(struct turns *t, size_t c);
/* Gives a turn back: the next waiting client gets it. */
void turns_give(struct turns *t);

#endif
