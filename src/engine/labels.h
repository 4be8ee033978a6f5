/* labels.h: the engine's side of [labels] (docs/labels.md, How ids are numbered): ids are mapped
 * when a ROI's result is pasted into a chunk (the result store keeps the processor's values); ids =
 * sequential needs, per chunk, the number of distinct ids of every earlier ROI, kept as a small
 * record beside each result in the store. Used by assemble.c, gc.c and engine.c. */
#ifndef ROIFS_ENGINE_LABELS_H
#define ROIFS_ENGINE_LABELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../key.h"
#include "../task.h"

struct engine;
struct chunk_job;

/* What pasting a chunk's ROIs needs (NULL without id mapping). */
struct labels_paste;
/* Before assembling job: with ids = sequential, the id offset of each of its ROIs (every
 * earlier ROI is computed now if it is not yet, each once). 0 or -errno with err. */
int engine_labels_prepare(struct engine *e, const struct chunk_job *job, struct labels_paste **lp,
                          struct errbuf *err);
/* Pastes sub-box [src_off, src_off + ext) of job ROI i's box result src (shape bshape) into
 * the chunk buffer at dst_off, mapping its ids. 0 or -ERANGE when an id does not fit. */
int engine_labels_paste(const struct labels_paste *lp, size_t i, void *buf, const uint64_t *dst_off,
                        const void *src, const uint64_t *bshape, const uint64_t *src_off,
                        const uint64_t *ext, struct errbuf *err);
void engine_labels_paste_free(struct labels_paste *lp);
/* Adds to ks the label records that ROI result k (current) keeps alive: its id count, its
 * strips; and, with all_done, the stitching mapping (memo may be NULL). For garbage
 * collection, which would otherwise take them for unused results. */
struct keyset;
void engine_labels_live(const struct task *t, struct key128 k, struct keyset *ks);
void engine_labels_live_mapping(const struct task *t, struct zarr_sigmemo *memo, struct keyset *ks);

/* Frees what the engine kept (engine_destroy). */
void engine_labels_free(struct engine *e);

#endif
