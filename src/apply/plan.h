/* plan.h: the order and the dependencies of `roifs apply`: which output chunks replace input
 * files, in what order they are asked for (so that few wait at once), and when each may
 * replace its input file: once every ROI that writes it and every ROI that reads it (halo
 * included) has its result. Also which stored results are still needed (the scratch). */
#ifndef ROIFS_APPLY_PLAN_H
#define ROIFS_APPLY_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../key.h"
#include "../task.h"

enum plan_chunk { PC_UNTOUCHED, PC_PENDING, PC_ASSEMBLED, PC_REPLACED };

struct apply_plan {
    const struct task *t;
    uint64_t nchunks;
    uint8_t *cstate;        /* per chunk: enum plan_chunk */
    uint32_t *readers_left; /* per chunk: ROIs reading it whose result is not made yet */
    uint8_t *roi_done;      /* per ROI: its result exists */
    uint32_t *write_left;   /* per ROI: chunks it writes still PC_PENDING */
    struct key128 *roikey;  /* per ROI: the key of its result from the original input */
    uint32_t *by_key;       /* ROIs sorted by key */
    uint64_t *order;        /* the chunks to ask for, in that order */
    size_t norder;
    uint64_t nwritten, nreplaced; /* chunks that replace input files; of them, done */
};

/* Builds the plan of t (its input's identities pinned to the original ones): replaced[id]
 * says which input files already hold their result (the journal), stored[r] which ROI results
 * exist. */
void plan_build(struct apply_plan *p, const struct task *t, const uint8_t *replaced,
                const struct key128 *roikey, const bool *stored);
void plan_free(struct apply_plan *p);

/* Chunk id was assembled (its ROIs' results exist). Appends to ready[*nready] (room for
 * every chunk) the chunks that may now replace their input file. */
void plan_assembled(struct apply_plan *p, uint64_t id, uint64_t *ready, size_t *nready);
/* Chunk id's input file now holds its result. */
void plan_replaced(struct apply_plan *p, uint64_t id);
/* Whether the result named k may still be needed: some ROI of that key writes a chunk not
 * assembled yet. */
bool plan_result_live(const struct apply_plan *p, struct key128 k);
/* True when some ROI writing chunk id has no result (stored[] at build time) while it reads
 * an input file already replaced: only the chunk's assembled copy can make it then. */
bool plan_needs_assembled(const struct apply_plan *p, uint64_t id, const bool *stored);

#endif
