/* config.h: the task configuration file (docs/configuration.md), parsed with inih.
 * config_load() checks syntax, known sections/keys and value forms; checks that need the
 * input array (dimensions, dtype compatibility) happen in task.c, which uses config_line()
 * to name the offending line. */
#ifndef ROIFS_CONFIG_H
#define ROIFS_CONFIG_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#include "util.h"

enum rois_kind { ROIS_NONE, ROIS_FILE, ROIS_GRID, ROIS_TABLE };
enum proc_kind { PROC_NONE, PROC_BUILTIN, PROC_COMMAND, PROC_WORKER, PROC_PLUGIN, PROC_PYTHON };
enum outside_mode { OUTSIDE_FILL, OUTSIDE_INPUT };
/* Choices parsed once, in the order config.c lists them ("fractal|ngio", ...). */
enum rounding_mode { ROUNDING_FRACTAL, ROUNDING_NGIO };
enum executor_kind { EXECUTOR_LOCAL, EXECUTOR_SLURM };
enum out_compressor {
    COMPRESSOR_NONE,
    COMPRESSOR_BLOSC,
    COMPRESSOR_ZSTD,
    COMPRESSOR_GZIP,
    COMPRESSOR_ZLIB
};
enum downsample_mode { DOWNSAMPLE_MEAN, DOWNSAMPLE_NEAREST };
enum label_ids { LABEL_IDS_KEEP, LABEL_IDS_UNIQUE, LABEL_IDS_SEQUENTIAL };
enum label_stitch { LABEL_STITCH_NONE, LABEL_STITCH_IOU };
enum mask_input { MASK_INPUT_ZERO, MASK_INPUT_KEEP };
/* [measure] features (docs/measurements.md) */
#define MEASURE_AREA      1u
#define MEASURE_CENTROID  2u
#define MEASURE_BBOX      4u
#define MEASURE_INTENSITY 8u
#define MEASURE_ALL       15u

/* [process] readahead = auto: as deep as keeps the compute threads busy (the engine's
 * ENGINE_READAHEAD_AUTO). */
#define READAHEAD_AUTO (-2)

struct config_param {
    char *name; /* as written after "param." */
    char *value;
    int line;
};

struct config {
    char *path; /* absolute path of the configuration file */
    char *dir;  /* its directory: base of relative paths, cwd of commands */

    /* [input] */
    char *input_path; /* absolute */
    int level;
    bool watch;  /* follow the input's changes while mounted (inotify) */
    int verify;  /* 0 identity: a file whose identity did not change is not read again; 1
                  * content: every look hashes the input's files (docs/reliability.md) */
    int channel; /* index along the input's c axis, -1: none (docs/labels.md) */
    /* a remote input (http://, https://): docs/remote.md */
    int remote_connections, remote_retries, remote_timeout, remote_revalidate;
    char *ca_file, *headers_file; /* absolute, or NULL */

    /* [rois] */
    enum rois_kind rois_kind;
    char *rois_file;  /* absolute (file) */
    char *rois_table; /* absolute (table), a URL, or a bare name of the image's tables list */
    uint64_t grid[ROIFS_MAX_DIM];
    int grid_ndim;
    uint64_t halo[ROIFS_MAX_DIM];
    int halo_ndim;               /* 0: no halo given (0 in every dimension) */
    enum rounding_mode rounding; /* fractal (default) or ngio */
    char *mask;                  /* absolute, or NULL: the label image of masked ROIs (mask.c) */
    enum mask_input mask_input;  /* what a masked ROI's processor sees outside its object */

    /* [process] */
    enum proc_kind proc_kind;
    /* builtin name, command line, worker command line, plugin path or FILE.py:FUNCTION */
    char *proc_value;
    /* python: the interpreter, NULL for /usr/bin/python3 */
    char *interpreter;
    int threads;   /* resolved: 0 in the file becomes the number of online CPUs */
    int readahead; /* resolved: -1 in the file becomes threads; READAHEAD_AUTO (default) stays */
    bool readahead_is_threads; /* -1 in the file: follows a command line's -j too */
    double timeout;            /* seconds, 0 = none */
    int retries;
    double retry_after; /* seconds before a failed ROI is tried again on demand; -1: unset (the
                         * command's default: arrayset_opts.retry_after_unset) */
    enum executor_kind executor;
    struct config_param *params;
    int nparams;

    /* [output] */
    int format;  /* 2 or 3 */
    char *dtype; /* NULL: the input's */
    uint64_t chunks[ROIFS_MAX_DIM];
    int chunks_ndim;  /* 0: the input's */
    char *fill_value; /* text, "0" by default */
    enum outside_mode outside;
    enum out_compressor compressor;
    int clevel;
    char *cname;              /* lz4 | zstd | blosclz | zlib */
    int shuffle;              /* 0 noshuffle, 1 shuffle, 2 bitshuffle */
    char dimension_separator; /* '.' or '/' */
    uint64_t shard[ROIFS_MAX_DIM];
    int shard_ndim;
    bool ome;         /* ome = true | image: the pyramid image group (docs/ome-fractal.md) */
    bool ome_labels;  /* ome = labels: the overlay of the input image (docs/mounted-tree.md) */
    char *label_name; /* ome = labels: the name under labels/ (default: the file's name) */
    char *table_name; /* ome = labels: tables/NAME, or NULL */
    int table_format; /* 0 anndata, 1 csv */
    int levels;
    enum downsample_mode downsample;

    /* [labels] (docs/labels.md): labels is true when the section is present */
    bool labels;
    enum label_ids label_ids;
    uint64_t label_block;
    enum label_stitch label_stitch;
    double stitch_iou;

    /* [measure] (docs/measurements.md): measure is true when the section is present; its
     * table_name and table_format become the mount's table's (table_name above) */
    bool measure;
    char *measure_intensity;   /* "all" (NULL) or a comma list of channel indices or names */
    unsigned measure_features; /* MEASURE_* bits; 0 in the file: all of them */
    char *measure_table_name;
    int measure_table_format; /* 0 anndata, 1 csv */
    /* [measure] labels: the name of the input image's label image measured (labels/NAME), or
     * NULL (this mount's computed labels). Set, the mount has no [process] nor [rois]: it is an
     * ome = labels mount whose level is a copy of that label image's (docs/measurements.md) */
    char *measure_labels;
    /* [measure] python = FILE.py:FUNCTION (NULL: none) and halo (one number for every
     * dimension, or one per dimension; measure_halo_ndim 0: none) */
    char *measure_python;
    uint64_t measure_halo[ROIFS_MAX_DIM];
    int measure_halo_ndim;
    /* [output] table_name with [measure]: the masking table presented beside the feature table
     * (table_name is then the feature table's), and its [output] table_format; NULL: none */
    char *mask_table_name;
    int mask_table_format;

    /* [slurm] */
    char *slurm_partition, *slurm_mem, *slurm_gres, *slurm_time, *slurm_extra;
    int slurm_cpus_per_task;

    /* [mount] */
    char *log_path;   /* absolute, or NULL */
    bool passthrough; /* use FUSE passthrough when the kernel allows (default true) */

    /* [cache] */
    char *cache_dir; /* absolute, or NULL for the default location */
    uint64_t max_size;
    int cache_lease; /* seconds a claim on work lasts unless renewed (default 30, at least 5) */

    /* HCS plates (docs/plates.md): [input] wells (as written, NULL: every well), acquisition
     * (-1: every image); [rois] table and mask as written, which a plate resolves inside each
     * image when they are bare names */
    char *wells;
    int acquisition;
    int images_open; /* [mount] images_open: a plate's images holding working state at once */
    /* [input] channel given as a name: matched against the image's omero.channels[].label,
     * then wavelength_id, by task_open (which sets channel); NULL for an index */
    char *channel_name;
    char *rois_table_arg, *mask_arg;

    /* Where each key was set: "section.key" -> line (private to config.c). */
    struct config_lines *lines;
};

/* Loads and checks path. On error returns -EINVAL (or -errno when the file cannot be
 * read) with err->msg = "FILE:LINE: ..." naming the key (no "roifs: " prefix). */
int config_load(const char *path, struct config *cfg, struct errbuf *err);
/* Line on which section.key was set, or 0 when it was not set (then use 0 in messages:
 * the caller prints "FILE: ..." without a line). */
int config_line(const struct config *cfg, const char *section, const char *key);
/* An error about section.key found after loading (by task.c, the processors): "FILE:LINE:
 * message" with the key's line, "FILE: message" when the key was not set. -EINVAL. */
int config_error(const struct config *cfg, struct errbuf *err, const char *section, const char *key,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
int config_verror(const struct config *cfg, struct errbuf *err, const char *section,
                  const char *key, const char *fmt, va_list ap)
    __attribute__((format(printf, 5, 0)));
/* Looks up param.NAME; NULL when absent. */
const struct config_param *config_param(const struct config *cfg, const char *name);
void config_free(struct config *cfg);

#endif
