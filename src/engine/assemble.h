/* assemble.h: the assembly of one chunk (assemble.c), for jobs.c: no engine lock but to
 * take a result's reference. */
#ifndef ROIFS_ENGINE_ASSEMBLE_H
#define ROIFS_ENGINE_ASSEMBLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../key.h"
#include "../util.h"

struct engine;
struct chunk_job;
struct roi_result;

/* Builds and encodes chunk job->id from the results named job->use (in memory or stored),
 * over the fill value or the input; *key gets the key of what it was made of. *out is
 * malloc'd, or (*hold not NULL) the bytes of a result, which roi_result_unref(*hold) lets go.
 * On -ENOENT, *bad names the index (in job->rois) of a result that is missing or damaged. */
int engine_assemble(struct engine *e, const struct chunk_job *job, void **out, size_t *out_len,
                    struct roi_result **hold, struct key128 *key, size_t *bad, struct errbuf *err);

#endif
