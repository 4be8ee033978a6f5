/* task.h: a configuration resolved against its input: the output array's metadata, the ROI
 * list and index, the processor, the fingerprint of everything the output depends on and the
 * cache directory. Everything `check`, `mount`, `warm` and `export` validate first. */
#ifndef ROIFS_TASK_H
#define ROIFS_TASK_H

#include <stdint.h>

#include <stdbool.h>

#include "config.h"
#include "key.h"
#include "ome.h"
#include "proc/proc.h"
#include "roi.h"
#include "zarr/zarr.h"

/* Where a task's input comes from when it is not a Zarr array on disk (pyramid levels:
 * the level above, read through its engine). NULL read: t->input. read gives (sig not NULL)
 * the signature of what it read; signature that of the input as it is now, through memo
 * (which only the Zarr input at the bottom uses). */
struct input_source {
    int (*read)(void *ctx, const uint64_t *start, const uint64_t *shape, void *dst, uint64_t *sig,
                struct errbuf *err);
    int (*signature)(void *ctx, const uint64_t *start, const uint64_t *shape,
                     struct zarr_sigmemo *memo, uint64_t *sig);
    void *ctx;
};

#define TASK_MAX_LEVELS 64

struct engine;

struct task {
    struct config cfg;
    struct ome_image ome; /* the array [input] path resolves to, and its OME metadata */
    struct zarr_input *input;
    const struct zarr_meta *in; /* the input's metadata */
    struct zarr_meta out;       /* the presented array */
    struct roi_set rois;
    struct roi_index *index;
    uint64_t halo[ROIFS_MAX_DIM];
    uint64_t grid[ROIFS_MAX_DIM]; /* output chunk grid */
    uint64_t nchunks;             /* product of grid */
    size_t chunk_nbytes;          /* decoded bytes of one output chunk */
    int64_t chunk_fixed_size;     /* encoded size when known in advance, else -1 */
    struct proc *proc;
    char *zarray_json;    /* format 2: served as .zarray (NULL for format 3) */
    char *zattrs_json;    /* format 2: served as .zattrs; format 3: the attributes in zarr.json */
    char *zarr_json;      /* format 3: served as zarr.json (NULL for format 2) */
    char *manifest;       /* canonical description of everything that defines the result */
    uint64_t fingerprint; /* of the manifest (provenance; the cache is named by the job) */
    /* What every ROI result depends on besides its box and input (CACHE.md "processor
     * identity"): the processor, its params and the contents of the files it runs, the
     * output dtype, the halo, the input's path; and what every chunk's encoding depends on
     * (the served array metadata without attributes, outside). */
    char *result_identity;
    struct key128 result_id, encoding_id;
    char *cache_dir; /* absolute */
    /* the presented array's dimension names (a JSON list; NULL: none): in zarr.json for
     * format 3, as the _ARRAY_DIMENSIONS attribute for format 2 */
    char *dimension_names;
    /* ---- [output] ome = true: an image group of nlevels arrays (pyramid.c) ---- */
    struct input_source src;              /* level >= 1: reads level-1 through up_engine */
    int level;                            /* this task's pyramid level (0: the computed array) */
    int nlevels;                          /* level 0 with ome: number of levels, else 0 */
    struct task *levels[TASK_MAX_LEVELS]; /* level 0: levels[0] = itself, then sub-tasks */
    const struct task *up;                /* level >= 1: the level above */
    struct engine *up_engine;             /* level >= 1: its engine (set by engine_create) */
    struct zarr_meta level_in;            /* level >= 1: what t->in points to */
    int axis_y, axis_x;                   /* the halved dimensions */
    bool nearest;                         /* downsample = nearest */
    char *group_meta_json;                /* level 0 with ome: .zgroup, or zarr.json (format 3) */
    char *group_zattrs_json;              /* level 0 with ome, format 2: the group's .zattrs */
};

/* Reads a box of the input; *sig (when not NULL) gets the signature of what was read. */
static inline int task_input_read(const struct task *t, const uint64_t *start,
                                  const uint64_t *shape, void *dst, uint64_t *sig,
                                  struct errbuf *err)
{
    if (t->src.read)
        return t->src.read(t->src.ctx, start, shape, dst, sig, err);
    return sig ? zarr_input_read_sig(t->input, start, shape, dst, sig, err)
               : zarr_input_read(t->input, start, shape, dst, err);
}
/* The signature of a box of the input as it is now. */
static inline int task_input_signature(const struct task *t, const uint64_t *start,
                                       const uint64_t *shape, struct zarr_sigmemo *memo,
                                       uint64_t *sig)
{
    return t->src.signature ? t->src.signature(t->src.ctx, start, shape, memo, sig)
                            : zarr_input_signature_memo(t->input, start, shape, memo, sig);
}

/* pyramid.c: builds levels 1..cfg.levels-1 and the group metadata of an ome task (level 0
 * fully resolved). 0 or -EINVAL. */
int pyramid_build(struct task *t, struct errbuf *err);
void pyramid_free(struct task *t);

/* Loads the configuration at path, opens the input, parses the ROIs and builds the index and
 * the processor. Errors are -EINVAL (bad configuration, input or ROI list: exit status 2)
 * with err->msg = "FILE[:LINE]: ..." naming the offending key or value. */
int task_open(const char *config_path, struct task **out, struct errbuf *err);
/* task_open without the processor (t->proc NULL), for commands that only need the cache's
 * place and keys (`clean`): a `python` processor would start interpreters, a plugin load. */
#define TASK_NO_PROC 1u
int task_open_flags(const char *config_path, unsigned flags, struct task **out, struct errbuf *err);
void task_close(struct task *t);

/* Computes result_id and encoding_id from result_identity and the served metadata. */
void task_identity_keys(struct task *t);

/* True when an output chunk with this linear id exists in the presented tree. */
bool task_chunk_present(const struct task *t, uint64_t chunk_id);

#endif
