/* channel.h: [input] channel (docs/labels.md, One channel of an image): a view of one channel of an
 * input with a c axis, so that the ROIs, the processor and the output see the other axes only: an
 * input source that wraps the input's, a value task.c composes (it edits no task). */
#ifndef ROIFS_CHANNEL_H
#define ROIFS_CHANNEL_H

#include "input_source.h"
#include "util.h"

struct config;
struct ome_image;
struct zarr_input;
struct channel_view;

/* With cfg->channel set: finds the c axis of the input (inner, whose array reader names its
 * dimensions: the OME axes of ome, Zarr v3 dimension_names or the _ARRAY_DIMENSIONS
 * attribute), checks the index, and *out gets the view (channel_source). -EINVAL with
 * "FILE:LINE: [input] channel: ..." when the input has no c axis or the index is out of
 * range. Without channel: 0 and *out NULL. The view reads through a copy of inner, whose ctx
 * must outlive it. */
int channel_open(const struct config *cfg, const struct input_source *inner,
                 const struct ome_image *ome, const struct zarr_input *reader,
                 struct channel_view **out, struct errbuf *err);
/* The view as an input source: boxes of the input's other axes, read from channel N of inner
 * (its metadata: the input's without c). */
struct input_source channel_source(struct channel_view *v);
/* The OME description of the view: ome's axes, scales and spatial indices without c. */
void channel_ome(const struct channel_view *v, struct ome_image *ome);
/* The view's dimension names without c (JSON list text), or NULL (v NULL, or none). */
const char *channel_dimension_names(const struct channel_view *v);
/* The c axis among the input's dimensions ([measure] reads every channel around it). */
int channel_axis(const struct channel_view *v);
void channel_close(struct channel_view *v);

#endif
