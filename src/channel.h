/* channel.h: [input] channel (docs/labels.md, One channel of an image): a view of one channel of an
 * input with a c axis, so that the ROIs, the processor and the output see the other axes only. */
#ifndef ROIFS_CHANNEL_H
#define ROIFS_CHANNEL_H

#include "util.h"

struct task;

/* With cfg.channel set: finds the input's c axis (OME axes, Zarr v3 dimension_names or the
 * _ARRAY_DIMENSIONS attribute), checks the index, and replaces t->source (reads of the
 * channel, with the input's metadata without c), t->in_meta and t->ome (its axes without c).
 * -EINVAL with "FILE:LINE: [input] channel: ..." when the input has no c axis or the index is out
 * of range. Without channel: 0 and nothing changes. */
int channel_resolve(struct task *t, struct errbuf *err);
/* The view's dimension names without c (JSON list text), or NULL (no channel, or none). */
const char *channel_dimension_names(const struct task *t);
void channel_free(struct task *t);

#endif
