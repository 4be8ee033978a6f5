/* task.h: one array to compute: a configuration resolved against its input (the output
 * array's metadata, the ROI list and index, the processor, the fingerprint of everything the
 * output depends on and the cache directory: everything `check`, `mount`, `warm` and `export`
 * validate before doing any work), or a derived array whose maker gives all of that
 * (task_derived). */
#ifndef ROIFS_TASK_H
#define ROIFS_TASK_H

#include <stdint.h>

#include <stdbool.h>

#include "config.h"
#include "input_source.h"
#include "key.h"
#include "labels/ids.h"
#include "ome.h"
#include "proc/proc.h"
#include "roi.h"
#include "zarr/zarr.h"

struct channel_view;
struct code_files;
struct plate;
struct plate_image;

struct task {
    /* The configuration file a configured task was resolved from. A derived task
     * (task_derived) has none (zeroed but for path): everything that defines it is below. */
    struct config cfg;
    /* [labels] resolved into values (labels/ids.h): what the engine asks (label_rules.h) */
    struct label_rules labels;
    struct ome_image ome;            /* the array [input] path resolves to, and its OME metadata */
    struct zarr_input *reader;       /* configured task: the input array's reader (derived: NULL) */
    struct input_source source;      /* the input, for reads and signatures */
    const struct zarr_meta *in_meta; /* the input's metadata (source.meta) */
    struct zarr_meta out;            /* the presented array */
    enum outside_mode outside;       /* what elements inside no ROI are */
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
    char *manifest;       /* configured task: canonical description of what defines the result */
    uint64_t fingerprint; /* of the manifest (provenance; the cache is named by the job) */
    /* What every ROI result depends on besides its box and input (docs/design.md "What
     * the processor identity covers"): the processor, its params and the contents of the files it
     * runs, the output dtype, the halo, the input's path; and what every chunk's encoding depends
     * on (the served array metadata without attributes, outside). */
    char *result_identity;
    struct key128 result_id, encoding_id;
    /* configured task: the files the processor runs, checked around each run (codeid.h);
     * derived: NULL */
    struct code_files *code;
    char *cache_dir;              /* absolute */
    struct channel_view *channel; /* [input] channel: the view source reads (channel.c), or NULL */
    struct mask *mask;            /* masked ROIs' label image (mask.c), or NULL */
    /* the presented array's dimension names (a JSON list; NULL: none): in zarr.json for
     * format 3, as the _ARRAY_DIMENSIONS attribute for format 2 */
    char *dimension_names;
    /* [input] path is an HCS plate (docs/plates.md): the task holds only cfg and this, and
     * each image is a task of its own (task_open_image), NULL otherwise */
    struct plate *plate;
    /* [measure] labels: the reader of the input image's label image measured (its level
     * [input] level), which source then reads (the copy's ROIs are its chunks); reader stays
     * the intensities'. NULL otherwise. */
    struct zarr_input *measured;
};

/* Reads a box of the input; *sig (when not NULL) gets the signature of what was read. */
static inline int task_input_read(const struct task *t, const uint64_t *start,
                                  const uint64_t *shape, void *dst, uint64_t *sig,
                                  struct errbuf *err)
{
    return t->source.read(t->source.ctx, start, shape, dst, sig, err);
}
/* The signature of a box of the input as it is now. */
static inline int task_input_signature(const struct task *t, const uint64_t *start,
                                       const uint64_t *shape, struct zarr_sigmemo *memo,
                                       uint64_t *sig)
{
    return t->source.signature(t->source.ctx, start, shape, memo, sig);
}

/* Loads the configuration at path, opens the input, parses the ROIs and builds the index and
 * the processor. Errors are -EINVAL (bad configuration, input or ROI list: exit status 2)
 * with err->msg = "FILE[:LINE]: ..." naming the offending key or value. */
int task_open(const char *config_path, struct task **out, struct errbuf *err);
/* task_open without the processor (t->proc NULL), for commands that only need the cache's
 * place and keys (`clean`): a `python` processor would start interpreters, a plugin load. */
#define TASK_NO_PROC 1u
int task_open_flags(const char *config_path, unsigned flags, struct task **out, struct errbuf *err);
void task_close(struct task *t);
/* The task of one image of a plate task's plate (docs/plates.md): the configuration at
 * config_path applied to the image at im->dir, a bare [rois] table name resolved as
 * IMAGE/tables/NAME and a relative [rois] table or mask relative to the image; with [cache]
 * dir, its cache is DIR/PATH_IN_PLATE. Errors as task_open_flags. */
int task_open_image(const char *config_path, const struct plate_image *im, unsigned flags,
                    struct task **out, struct errbuf *err);

/* A derived array: one computed from another array of the mount (a pyramid level) rather
 * than from a configuration file. What it is made of, all given by its maker: */
struct task_derived_spec {
    struct zarr_meta out;        /* the presented array (format, shape, chunks, dtype, codecs) */
    struct roi_set rois;         /* its ROIs (taken over, also on failure) */
    struct input_source source;  /* its input (its ctx stays the maker's) */
    struct proc *proc;           /* its processor (taken over, also on failure) */
    const char *result_identity; /* what every result depends on besides its box and input */
    const char *cache_dir;       /* its own cache directory */
    const char *dimension_names; /* a JSON list, or NULL */
};

/* Builds the task of a derived array: chunk grid, ROI index, served metadata (attributes:
 * the dimension names only) and identity keys. Elements inside no ROI are the fill value;
 * no halo. parent is the task whose configuration file it comes from (its path names it in
 * messages). 0 or -EINVAL (with err set). */
int task_derived(const struct task *parent, struct task_derived_spec *spec, struct task **out,
                 struct errbuf *err);

/* True when an output chunk with this linear id exists in the presented tree. */
bool task_chunk_present(const struct task *t, uint64_t chunk_id);
/* The version of the configuration t serves (its manifest and processor identity): what its
 * cache registration names (cache_open), so that collecting garbage keeps what another
 * version, served by another process, may need. */
uint64_t task_version(const struct task *t);
/* How many do: every chunk of the grid with outside = input, else those ROIs touch. */
uint64_t task_chunks_present(const struct task *t);

#endif
