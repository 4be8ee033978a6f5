/* task_measured.h: [measure] labels = NAME (docs/measurements.md) as task.c resolves it: the
 * input image's label image opened beside the intensities, the image's level of its shape, and
 * the task's input switched to it. Internal to task.c and task_measured.c. */
#ifndef ROIFS_TASK_MEASURED_H
#define ROIFS_TASK_MEASURED_H

#include "task.h"

/* The source reading the Zarr array r (task.c's configured input, the label image here). */
void task_zarr_source(struct zarr_input *r, struct input_source *s);
/* After open_input: with [measure] labels, opens the label image's level [input] level into
 * t->measured and moves t->reader to the image's level of its shape; a c axis makes [input]
 * channel 0 unless set. Nothing without. 0 or -EINVAL "FILE:LINE: [measure] labels: ...". */
int task_open_measured(struct task *t, struct errbuf *err);
/* After the channel view: the task's input becomes the label image (its ROIs, its chunks,
 * are copied), so that every chunk's key follows the label image's content. */
void task_read_measured(struct task *t);

#endif
