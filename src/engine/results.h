/* results.h: ROI results in memory and their way to the store (results.c). */
#ifndef ROIFS_ENGINE_RESULTS_H
#define ROIFS_ENGINE_RESULTS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../key.h"
#include "../task.h"

struct engine;
struct chunk_job;

/* A ROI's result (its box, without the halo) in memory, shared by the slot and assemblies
 * that paste it; freed by the last reference. key, len, crc and data never change once
 * published, so a holder of a reference reads them without the lock. */
struct roi_result {
    _Atomic int refs;
    struct key128 key; /* what it was made from: never changed after */
    size_t len;
    uint32_t crc; /* crc32c of data */
    /* aligned as malloc's: processors (a plugin too) may write their output into it */
    _Alignas(max_align_t) unsigned char data[];
};

struct roi_result *roi_result_new(struct key128 key, size_t len);
void roi_result_unref(struct roi_result *res);
/* Lets go of ROI r's in-memory result once no job will paste it: dropped when stored, else
 * queued for engine_flush_unstored (lock held). */
void slot_settle(struct engine *e, uint32_t r);
/* Forgets done ROI r's result (of another key, or missing from the store) (lock held). */
void slot_forget(struct engine *e, uint32_t r);
/* Stores the job's results that are not stored yet, in one write (takes the lock). */
void engine_store_job_results(struct engine *e, const struct chunk_job *job);
/* Stores what slot_settle queued (takes the lock). */
void engine_flush_unstored(struct engine *e);
/* Bytes of ROI r's result values (its box, without the halo). */
size_t engine_roi_box_nbytes(const struct task *t, size_t r);
/* Bytes of ROI r's result: its values, and for a masked ROI its selection after them (one
 * byte per element, 1 where the mask is its label: the pixels it writes). */
size_t engine_roi_result_nbytes(const struct task *t, size_t r);
/* True when ROI r may run in a batch (engine_run_rois): the processor takes batches, the ROI
 * lies in one chunk (no result lock) and is small (PROC_BATCH_BYTES). */
bool engine_roi_batchable(const struct engine *e, uint32_t r);

#endif
