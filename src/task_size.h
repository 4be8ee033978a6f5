/* task_size.h: a configured task's sizes checked against what a chunk may have and what this
 * machine's memory holds, refused with the configuration key to blame (task_open). */
#ifndef ROIFS_TASK_SIZE_H
#define ROIFS_TASK_SIZE_H

#include "task.h"

/* An output chunk within the 2 GiB a chunk may have: 0, or -EINVAL with "FILE:LINE: ...". */
int task_check_chunk_bytes(struct task *t, struct errbuf *err);

/* Every ROI's read region and box within this machine's memory: 0, or -EINVAL likewise. */
int task_check_roi_bytes(struct task *t, struct errbuf *err);

#endif
