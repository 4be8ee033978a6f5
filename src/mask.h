/* mask.h: the label image of masked ROIs (SPEC §10): [rois] mask or a masking table's region,
 * an integer Zarr array or an OME-Zarr label image (its level by scale), read at the output's
 * shape by nearest neighbour; and the selections (mask == L) the engine reads and pastes by. */
#ifndef ROIFS_MASK_H
#define ROIFS_MASK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

struct config;
struct ome_image;
struct zarr_meta;
struct zarr_sigmemo;
struct strbuf;
struct mask;

/* The mask of masked ROIs, a value task_open composes once its ROIs are loaded: *mask gets
 * [rois] mask, else region (a masking table's label image, may be NULL), opened for an output
 * of metadata out (its level chosen by the input's OME scales in in_ome); NULL when no ROI has
 * a label (labelled false). Checks what masked ROIs cannot do (no mask, a mask of another
 * number of dimensions or not of an integer dtype, watch, stitch). 0 or -EINVAL
 * "FILE:LINE: ..." (exit 2), *mask NULL. */
int mask_open(const struct config *cfg, bool labelled, const struct ome_image *in_ome,
              const struct zarr_meta *out, const char *region, struct mask **mask,
              struct errbuf *err);
void mask_close(struct mask *m);
/* The array read (an OME label image's chosen level) and its shape (the output's ndim). */
const char *mask_array_path(const struct mask *m);
const uint64_t *mask_shape(const struct mask *m);
/* Whether a masked ROI's processor sees 0 outside its object (mask_input = zero), its
 * selection then covering its read region, else its box (engine_mask_region). */
bool mask_zeroes_input(const struct mask *m);
/* Adds to a result identity what masked results depend on besides their label and mask
 * content (the mask's path and mask_input); nothing without a mask (m NULL). */
void mask_identity(const struct mask *m, struct strbuf *sb);

/* sel[i] = 1 where the mask (scaled to the output) equals label over the output box
 * [start, start + shape), else 0; *sig gets the signature of the mask chunks read. 0 or -EIO
 * with err. */
int mask_select(struct mask *m, uint64_t label, const uint64_t *start, const uint64_t *shape,
                uint8_t *sel, uint64_t *sig, struct errbuf *err);
/* The signature of the mask chunks under the output box as they are now. */
uint64_t mask_signature(struct mask *m, const uint64_t *start, const uint64_t *shape);
/* A masked ROI's input signature: that of its input, its label and its mask's. */
uint64_t mask_mix_sig(uint64_t input_sig, uint64_t label, uint64_t mask_sig);

/* Sets the n elements of buf (itemsize bytes each) where sel is 0 to zero bytes. */
void mask_zero_outside(void *buf, const uint8_t *sel, size_t n, size_t itemsize);
/* Puts back saved (shape ext, C order) into the sub-box [off, off + ext) of buf (shape
 * buf_shape) where the selection sel (shape sel_shape, read from sel_off) is 0: what a paste
 * of the whole box wrote over the pixels outside the object. */
void mask_restore(void *buf, const uint64_t *buf_shape, const uint64_t *off, const void *saved,
                  const uint8_t *sel, const uint64_t *sel_shape, const uint64_t *sel_off,
                  const uint64_t *ext, int nd, size_t itemsize);

#endif
