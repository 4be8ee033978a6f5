/* labels.h: the engine's side of [labels] (SPEC §9): ids are mapped when a ROI's result is
 * pasted into a chunk (the result store keeps the processor's values); ids = sequential
 * needs, per chunk, the number of distinct ids of every earlier ROI, kept as a small record
 * beside each result in the store. Used by compute.c, assemble.c and keys.c only. */
#ifndef ROIFS_ENGINE_LABELS_H
#define ROIFS_ENGINE_LABELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../key.h"
#include "../task.h"

struct engine;
struct chunk_job;

/* Validates a processor's output for ROI r (n elements of the output dtype): 0, or -EINVAL
 * with a message naming the offending value (the ROI then fails). */
int engine_labels_check(const struct task *t, const void *out, size_t n, struct errbuf *err);
/* True when every ROI must be computed under its result's lock and stored at once
 * (ids = sequential: chunks compute earlier ROIs that lie in other chunks). */
bool engine_labels_locked(const struct task *t);
/* Adds to chunk id's key what its ids depend on besides its ROIs' results. */
void engine_labels_chunk_key(const struct task *t, uint64_t id, struct keyhash *h);

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
/* Makes sure ROI s's result named *k is done (computing it on this thread, under its result
 * lock, when nobody else is; fresh: even when it is stored). On 0, *k names the result done,
 * which is of newer input than *k named when the input changed since *k was taken (or by
 * being read: a chunk of another roifs mount). 0, -EIO (it failed) or -ECANCELED (stopping),
 * with err. */
int engine_labels_ensure(struct engine *e, uint32_t s, struct key128 *k, bool fresh,
                         struct errbuf *err);

/* ---- stitch.c: stitch = iou ---- */

/* After ROI r's processor returned out over its read region [rstart, +rshape): stores the
 * parts of it in the zones shared with other ROIs' read regions (its "strips"), named after
 * its result key. */
void engine_stitch_strips(struct engine *e, uint32_t r, const void *out, const uint64_t *rstart,
                          const uint64_t *rshape, struct key128 key);
/* The key of ROI result k's strip record. */
struct key128 engine_stitch_strips_key(struct key128 k);
/* The key of the id mapping as the input is now (every ROI's result key, the threshold). */
struct key128 engine_stitch_map_key(const struct task *t, struct zarr_sigmemo *memo);
/* The id mapping (pairs id -> representative, sorted), made once: under its lock, from the
 * store, or by the global pass (every ROI computed first). The engine keeps it; 0 or -errno
 * with err. */
int engine_stitch_mapping(struct engine *e, const uint64_t **pairs, size_t *n, struct errbuf *err);
void engine_stitch_free(struct engine *e);

/* Adds to ks the label records that ROI result k (current) keeps alive: its id count, its
 * strips; and, with all_done, the stitching mapping (memo may be NULL). For garbage
 * collection, which would otherwise take them for unused results. */
struct keyset;
void engine_labels_live(const struct task *t, struct key128 k, struct keyset *ks);
void engine_labels_live_mapping(const struct task *t, struct zarr_sigmemo *memo, struct keyset *ks);

/* Frees what the engine kept (engine_destroy). */
void engine_labels_free(struct engine *e);

#endif
