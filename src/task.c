/* task.c: resolves a configuration against its input array and ROI list into everything a
 * mount, warm or export needs, checking each cross-cutting rule with file:line messages; and
 * builds the tasks of derived arrays (task_derived) from what their maker gives. */
#include "task.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "channel.h"
#include "codeid.h"
#include "labels/ids.h"
#include "mask.h"
#include "nd.h"
#include "plate/plate.h"
#include "provenance.h"
#include "task_measured.h"
#include "task_size.h"
#include "zarr/remote.h"

/* "FILE:LINE: message" with the line of section.key (config_error); returns -EINVAL. */
#define TASK_ERR(t, err, section, key, ...)                                                        \
    return config_error(&(t)->cfg, err, section, key, __VA_ARGS__)

/* ---- the input of a configured task: its Zarr array ---- */

/* The process's HTTP(S) client from the [input] keys of a remote input (before any request:
 * a plate's metadata is read before its images' tasks open). */
static int configure_remote(struct task *t, struct errbuf *err)
{
    struct errbuf e;
    struct remote_opts o = {t->cfg.remote_connections, t->cfg.remote_retries, t->cfg.remote_timeout,
                            t->cfg.remote_revalidate,  t->cfg.ca_file,        t->cfg.headers_file};
    if (remote_configure(&o, &e) < 0)
        TASK_ERR(t, err, "input", o.headers_file ? "headers_file" : "path", "%s", e.msg);
    return 0;
}

static int open_input(struct task *t, struct errbuf *err)
{
    struct errbuf e;
    int r = 0;
    if (remote_is_url(t->cfg.input_path)) {
        if (t->cfg.watch)
            TASK_ERR(t, err, "input", "watch",
                     "[input] watch: a remote input is revalidated instead (docs/remote.md)");
        if ((r = configure_remote(t, err)) < 0)
            return r;
    }
    r = ome_resolve(t->cfg.input_path, t->cfg.level, &t->ome, &e);
    if (r < 0) {
        bool level_err = t->cfg.level != 0 && strstr(e.msg, "level") != NULL;
        TASK_ERR(t, err, "input", level_err ? "level" : "path", "[input] %s: %s",
                 level_err ? "level" : "path", e.msg);
    }
    r = zarr_input_open(t->ome.array_path, 64u << 20, &t->reader, &e);
    if (r < 0)
        TASK_ERR(t, err, "input", "path", "[input] path: %s", e.msg);
    zarr_input_set_verify(t->reader, t->cfg.verify == 1);
    task_zarr_source(t->reader, &t->source);
    t->in_meta = t->source.meta;
    return 0;
}

/* [input] channel: the input without its c axis, a source wrapping the array's (channel.c); a
 * channel name is the index of that name in the image's omero.channels. */
static int view_channel(struct task *t, struct errbuf *err)
{
    if (t->cfg.channel_name) {
        struct errbuf e;
        if (!t->ome.found)
            TASK_ERR(t, err, "input", "channel",
                     "[input] channel = %s: a channel by name needs an OME-Zarr image's "
                     "omero.channels; %s is none",
                     t->cfg.channel_name, t->cfg.input_path);
        if (ome_channel_index(t->ome.group_path, t->cfg.channel_name, &t->cfg.channel, &e) < 0)
            TASK_ERR(t, err, "input", "channel", "[input] channel: %s", e.msg);
    }
    int r = channel_open(&t->cfg, &t->source, &t->ome, t->reader, &t->channel, err);
    if (r < 0 || !t->channel)
        return r;
    t->source = channel_source(t->channel);
    t->in_meta = t->source.meta;
    channel_ome(t->channel, &t->ome);
    return 0;
}

static int check_dims(struct task *t, const char *key, const char *section, int n,
                      struct errbuf *err)
{
    if (n != 0 && n != t->in_meta->ndim)
        TASK_ERR(t, err, section, key, "[%s] %s has %d entries, the input has %d dimensions",
                 section, key, n, t->in_meta->ndim);
    return 0;
}

/* The output's compressor; config.c checked the choice. */
static void resolve_compressor(const struct config *cfg, struct zarr_codec *c)
{
    memset(c, 0, sizeof *c);
    c->level = cfg->clevel;
    switch (cfg->compressor) {
    case COMPRESSOR_NONE:
        c->id = ZC_NONE;
        break;
    case COMPRESSOR_BLOSC:
        c->id = ZC_BLOSC;
        snprintf(c->cname, sizeof c->cname, "%s", cfg->cname ? cfg->cname : "lz4");
        c->shuffle = cfg->shuffle;
        break;
    case COMPRESSOR_ZSTD:
        c->id = ZC_ZSTD;
        break;
    case COMPRESSOR_GZIP:
        c->id = ZC_GZIP;
        break;
    case COMPRESSOR_ZLIB:
        c->id = ZC_ZLIB;
        break;
    }
}

/* Format 3: the codec chain (bytes in the output's byte order, then the compressor), and
 * with `shard` the sharding codec around it, whose shard shape becomes the chunk shape that
 * the engine and the mounted tree work in (the v3 chunk_grid is the shard grid). */
static int resolve_v3(struct task *t, struct errbuf *err)
{
    const struct config *cfg = &t->cfg;
    struct zarr_meta *o = &t->out;
    if (o->compressor.id == ZC_ZLIB)
        TASK_ERR(t, err, "output", "compressor",
                 "[output] compressor: zlib is not a Zarr v3 codec (use gzip, zstd or blosc)");
    o->key_prefix_c = true;
    /* "/" (c/0/1) unless the configuration asks for "." (c.0.1) */
    bool sep_set = config_line(cfg, "output", "dimension_separator") > 0;
    o->separator = sep_set && cfg->dimension_separator == '.' ? '.' : '/';
    struct zarr_chain ch = {.big_endian = o->dtype.big_endian && o->dtype.size > 1};
    if (o->compressor.id != ZC_NONE)
        ch.bb[ch.nbb++].c = o->compressor;
    if (!cfg->shard_ndim) {
        o->codecs = ch;
        return 0;
    }
    int r = check_dims(t, "shard", "output", cfg->shard_ndim, err);
    if (r < 0)
        return r;
    uint64_t n = 1, bytes = o->dtype.size;
    for (int d = 0; d < o->ndim; d++) {
        if (cfg->shard[d] == 0 || cfg->shard[d] % o->chunks[d] != 0)
            TASK_ERR(t, err, "output", "shard",
                     "[output] shard: entry %d (%llu) is not a multiple of chunks (%llu)", d + 1,
                     (unsigned long long)cfg->shard[d], (unsigned long long)o->chunks[d]);
        if (__builtin_mul_overflow(n, cfg->shard[d] / o->chunks[d], &n) ||
            __builtin_mul_overflow(bytes, cfg->shard[d], &bytes) || n > (1u << 24) ||
            bytes > (uint64_t)INT32_MAX)
            TASK_ERR(t, err, "output", "shard",
                     "[output] shard: too large (at most 2 GiB and 2^24 chunks per shard)");
    }
    o->sharded = true;
    memcpy(o->shard.inner, o->chunks, sizeof o->shard.inner);
    memcpy(o->chunks, cfg->shard, sizeof o->chunks);
    o->shard.codecs = ch;
    o->shard.index_codecs.nbb = 1;
    o->shard.index_codecs.bb[0].crc32c = true;
    return 0;
}

/* True when v is a list of n strings: dimension names a Zarr v2 reader (xarray) can use. */
static bool names_are_strings(const json_t *v, int n)
{
    if (!json_is_array(v) || json_array_size(v) != (size_t)n)
        return false;
    for (size_t i = 0; i < json_array_size(v); i++)
        if (!json_is_string(json_array_get(v, i)))
            return false;
    return true;
}

/* The presented array's dimension names. With ome, the names of the OME axes, since
 * OME-NGFF 0.5 requires every level's dimension_names to match them (and axes that break
 * OME-NGFF's rules are refused here). Otherwise the input's, from its zarr.json
 * dimension_names or its _ARRAY_DIMENSIONS attribute (xarray's Zarr v2 convention), so that
 * they survive a change of format. */
static int resolve_dimension_names(struct task *t, struct errbuf *err)
{
    json_t *names = NULL;
    const char *text = t->channel ? channel_dimension_names(t->channel)
                                  : zarr_input_dimension_names_text(t->reader);
    if (t->cfg.ome || t->cfg.ome_labels) {
        struct errbuf e;
        json_t *axes = ome_output_axes(&t->ome, t->out.ndim, &e);
        if (!axes)
            TASK_ERR(t, err, "output", "ome", "[output] ome = true: %s", e.msg);
        names = ome_axes_names(axes);
        json_decref(axes);
    } else if (text) {
        names = json_loads(text, 0, NULL);
    } else if (!t->channel && (text = zarr_input_zattrs_text(t->reader))) {
        json_t *attrs = json_loads(text, 0, NULL);
        json_t *a = json_object_get(attrs, "_ARRAY_DIMENSIONS");
        if (names_are_strings(a, t->out.ndim))
            names = json_incref(a);
        json_decref(attrs);
    }
    t->dimension_names = names ? json_dumps(names, JSON_COMPACT) : NULL;
    json_decref(names);
    return 0;
}

/* ---- sizes (issue 14.4): every buffer size computed from the configuration or the metadata
 * is checked for overflow and against a limit here, so that the engine never allocates from a
 * wrapped or absurd number (the checks themselves: task_size.c). ---- */

static const char *rois_key(const struct config *cfg)
{
    return cfg->rois_kind == ROIS_GRID ? "grid" : cfg->rois_kind == ROIS_TABLE ? "table" : "file";
}

static int resolve_output(struct task *t, struct errbuf *err)
{
    const struct config *cfg = &t->cfg;
    struct zarr_meta *o = &t->out;
    int r;
    memset(o, 0, sizeof *o);
    o->format = cfg->format == 3 ? 3 : 2;
    if (cfg->ome_labels) { /* the label image is part of the input image: its format */
        if (config_line(cfg, "output", "format") > 0 && cfg->format != t->in_meta->format)
            TASK_ERR(t, err, "output", "format",
                     "[output] format = %d: ome = labels presents the input image, whose format "
                     "is %d (leave format out)",
                     cfg->format, t->in_meta->format);
        o->format = t->in_meta->format;
    }
    if (cfg->shard_ndim && o->format != 3)
        TASK_ERR(t, err, "output", "shard", "[output] shard needs format = 3");
    o->ndim = t->in_meta->ndim;
    memcpy(o->shape, t->in_meta->shape, sizeof o->shape);
    r = check_dims(t, "chunks", "output", cfg->chunks_ndim, err);
    if (r < 0)
        return r;
    /* by default the chunks a reader of the input decodes (inner chunks when sharded) */
    memcpy(o->chunks, cfg->chunks_ndim ? cfg->chunks : zarr_meta_read_chunks(t->in_meta),
           sizeof o->chunks);
    if (cfg->dtype) {
        struct errbuf e;
        if (dtype_parse(cfg->dtype, &o->dtype, &e) < 0)
            TASK_ERR(t, err, "output", "dtype", "[output] dtype: %s", e.msg);
    } else {
        o->dtype = t->in_meta->dtype; /* byte order too: processors still see little-endian */
    }
    t->outside = cfg->outside;
    if (cfg->outside == OUTSIDE_INPUT && !dtype_equal_ignoring_order(&o->dtype, &t->in_meta->dtype))
        TASK_ERR(t, err, "output", "outside",
                 "[output] outside = input needs the output dtype to equal the input's");
    struct errbuf e;
    if (dtype_parse_value(&o->dtype, cfg->fill_value ? cfg->fill_value : "0", o->fill, &e) < 0)
        TASK_ERR(t, err, "output", "fill_value", "[output] fill_value: %s", e.msg);
    o->separator = cfg->dimension_separator ? cfg->dimension_separator : '.';
    resolve_compressor(cfg, &o->compressor);
    if (o->format == 3 && (r = resolve_v3(t, err)) < 0)
        return r;
    if ((r = task_check_chunk_bytes(t, err)) < 0)
        return r;
    zarr_meta_grid(o, t->grid);
    t->nchunks = 1;
    for (int d = 0; d < o->ndim; d++) {
        if (t->grid[d] && t->nchunks > UINT64_MAX / 2 / t->grid[d])
            TASK_ERR(t, err, "output", "chunks", "[output] chunks: too many chunks");
        t->nchunks *= t->grid[d];
    }
    t->chunk_nbytes = zarr_meta_chunk_nbytes(o);
    t->chunk_fixed_size = zarr_chunk_fixed_size(o);
    return resolve_dimension_names(t, err);
}

/* [rois] table: micrometers to indices with the pixel size of the input's OME metadata. */
static int load_table(struct task *t, char **region, struct errbuf *err)
{
    const struct ome_image *o = &t->ome;
    if (!o->found)
        TASK_ERR(t, err, "rois", "table",
                 "[rois] table: the pixel size is unknown: [input] path %s is neither an "
                 "OME-Zarr image group nor one of its datasets",
                 t->cfg.input_path);
    if (o->ndim != t->in_meta->ndim)
        TASK_ERR(t, err, "rois", "table",
                 "[rois] table: the multiscales of %s have %d axes, the array %d dimensions",
                 o->group_path, o->ndim, t->in_meta->ndim);
    if (o->axis_y < 0 || o->axis_x < 0)
        TASK_ERR(t, err, "rois", "table", "[rois] table: the image %s has no y and x axes",
                 o->group_path);
    struct roi_pixels px = {.axis = {o->axis_z, o->axis_y, o->axis_x}};
    for (int a = 0; a < 3; a++)
        px.size[a] = px.axis[a] >= 0 ? o->scale[px.axis[a]] : 1.0;
    struct roi_table tab;
    struct errbuf e;
    if (!strchr(t->cfg.rois_table, '/')) { /* a bare name: the image's tables list */
        char *found;
        if (roi_table_find(o->group_path, t->cfg.rois_table, &found, &e) < 0)
            TASK_ERR(t, err, "rois", "table", "[rois] table: %s", e.msg);
        free(t->cfg.rois_table);
        t->cfg.rois_table = found;
    }
    int r = roi_table_read(t->cfg.rois_table, &tab, &e);
    if (r < 0)
        TASK_ERR(t, err, "rois", "table", "[rois] table: %s", e.msg);
    enum roi_rounding rounding =
        t->cfg.rounding == ROUNDING_NGIO ? ROI_ROUND_NGIO : ROI_ROUND_FRACTAL;
    r = roi_table_to_set(t->cfg.rois_table, &tab, &px, rounding, t->in_meta->ndim,
                         t->in_meta->shape, &t->rois, &e);
    *region = tab.region; /* a masking table's label image */
    tab.region = NULL;
    roi_table_free(&tab);
    if (r < 0)
        TASK_ERR(t, err, "rois", "table", "[rois] table: %s", e.msg);
    return 0;
}

/* The ROIs of [rois] file, grid or table; *region gets a masking table's label image (NULL
 * otherwise, and on failure). */
static int load_rois(struct task *t, char **region, struct errbuf *err)
{
    const struct config *cfg = &t->cfg;
    int r;
    int nd = t->in_meta->ndim;
    *region = NULL;
    if (cfg->rois_kind == ROIS_FILE) {
        struct errbuf e;
        unsigned flags = cfg->mask ? ROI_PARSE_LABELS : 0; /* `@ L` needs a mask */
        r = roi_parse_file_flags(cfg->rois_file, nd, t->in_meta->shape, flags, &t->rois, &e);
        if (r == -EINVAL)
            return err_set(err, r, "%s", e.msg); /* names the ROI file and its line */
        if (r < 0)
            TASK_ERR(t, err, "rois", "file", "[rois] file: %s", e.msg);
    } else if (cfg->rois_kind == ROIS_GRID) {
        if ((r = check_dims(t, "grid", "rois", cfg->grid_ndim, err)) < 0)
            return r;
        struct errbuf e; /* [measure] labels: the label image's chunks */
        r = roi_grid(t->measured ? zarr_meta_read_chunks(t->in_meta) : cfg->grid, nd,
                     t->in_meta->shape, &t->rois, &e);
        if (r < 0)
            TASK_ERR(t, err, "rois", "grid", "[rois] grid: %s", e.msg);
    } else if ((r = load_table(t, region, err)) < 0) {
        free(*region);
        *region = NULL;
        return r;
    }
    return 0;
}

/* The halo, the checks of the ROIs' sizes and the ROI index over the output's chunks. */
static int index_rois(struct task *t, struct errbuf *err)
{
    const struct config *cfg = &t->cfg;
    int r;
    if ((r = check_dims(t, "halo", "rois", cfg->halo_ndim, err)) < 0)
        return r;
    if (cfg->halo_ndim)
        memcpy(t->halo, cfg->halo, sizeof t->halo);
    if ((r = task_check_roi_bytes(t, err)) < 0)
        return r;
    struct errbuf e;
    r = roi_index_build(&t->rois, t->out.shape, t->out.chunks, &t->index, &e);
    if (r < 0) {
        const char *key = cfg->chunks_ndim ? "chunks" : rois_key(cfg);
        TASK_ERR(t, err, cfg->chunks_ndim ? "output" : "rois", key, "[%s] %s: %s",
                 cfg->chunks_ndim ? "output" : "rois", key, e.msg);
    }
    return 0;
}

static void task_identity_keys(struct task *t)
{
    struct keyhash h;
    key_init(&h, "roifs result identity");
    key_add_str(&h, t->result_identity);
    t->result_id = key_final(&h);
    key_init(&h, "roifs chunk encoding");
    key_add_str(&h, t->out.format == 3 ? t->zarr_json : t->zarray_json);
    key_add_u64(&h, (uint64_t)t->outside);
    t->encoding_id = key_final(&h);
}

/* What every ROI result depends on besides its box and its input (CACHE.md). */
static void build_result_identity(struct task *t)
{
    const struct config *cfg = &t->cfg;
    struct strbuf sb = {0};
    char dt[8];
    sb_printf(&sb, "roifs-result 2\nroifs %s\ninput %s\n", ROIFS_VERSION, t->ome.array_path);
    sb_printf(&sb, "process %d %s\n", (int)cfg->proc_kind, cfg->proc_value);
    if (t->measured)
        sb_printf(&sb, "measured %s\n", cfg->measure_labels);
    sb_printf(&sb, "%s", code_files_lines(t->code));
    for (int i = 0; i < cfg->nparams; i++)
        sb_printf(&sb, "param %s=%s\n", cfg->params[i].name, cfg->params[i].value);
    sb_printf(&sb, "halo");
    for (int d = 0; d < t->in_meta->ndim; d++)
        sb_printf(&sb, " %llu", (unsigned long long)t->halo[d]);
    sb_printf(&sb, "\ndtype %s\n", dtype_typestr(&t->out.dtype, dt));
    if (cfg->channel >= 0)
        sb_printf(&sb, "channel %d\n", cfg->channel);
    labels_identity(&t->labels, &sb); /* results are validated for their ids mode */
    mask_identity(t->mask, &sb);
    t->result_identity = sb.buf;
    task_identity_keys(t);
}

/* The canonical text of everything that defines the output bytes. */
static void build_manifest(struct task *t)
{
    const struct config *cfg = &t->cfg;
    struct strbuf sb = {0};
    char dt[8];
    sb_printf(&sb, "roifs-cache 1\ninput %s\n", t->ome.array_path);
    sb_printf(&sb, "input.zarray %s\n", zarr_input_zarray_text(t->reader));
    if (t->measured)
        sb_printf(&sb, "measured %s\n%s\n", cfg->measure_labels,
                  zarr_input_zarray_text(t->measured));
    sb_printf(&sb, "process %d %s\n", (int)cfg->proc_kind, cfg->proc_value);
    for (int i = 0; i < cfg->nparams; i++)
        sb_printf(&sb, "param %s=%s\n", cfg->params[i].name, cfg->params[i].value);
    sb_printf(&sb, "halo");
    for (int d = 0; d < t->in_meta->ndim; d++)
        sb_printf(&sb, " %llu", (unsigned long long)t->halo[d]);
    sb_printf(&sb, "\noutput %s outside=%d\n", dtype_typestr(&t->out.dtype, dt), (int)cfg->outside);
    if (cfg->channel >= 0)
        sb_printf(&sb, "channel %d\n", cfg->channel);
    labels_identity(&t->labels, &sb);
    if (t->out.format == 3) /* without attributes: they hold the fingerprint */
        sb_printf(&sb, "output.zarr.json %s\n", t->zarr_json);
    else
        sb_printf(&sb, "output.zarray %s\n", t->zarray_json);
    sb_printf(&sb, "rois %zu\n", t->rois.n);
    for (size_t i = 0; i < t->rois.n; i++) {
        for (int d = 0; d < t->rois.ndim; d++) { /* "%s%llu:%llu", without printf's cost */
            if (d)
                sb_append(&sb, ",", 1);
            sb_add_u64(&sb, t->rois.start[i * t->rois.ndim + d]);
            sb_append(&sb, ":", 1);
            sb_add_u64(&sb, t->rois.stop[i * t->rois.ndim + d]);
        }
        if (roi_label(&t->rois, i)) {
            sb_append(&sb, " @", 2);
            sb_add_u64(&sb, roi_label(&t->rois, i));
        }
        sb_append(&sb, "\n", 1);
    }
    t->manifest = sb.buf;
    t->fingerprint = hash64(HASH64_INIT, sb.buf, sb.len);
    build_result_identity(t);
}

/* The served metadata of t's array with the attributes attrs (taken): the dimension names go
 * into zarr.json for format 3 (and out of the attributes), into _ARRAY_DIMENSIONS for format 2
 * (xarray's convention, when they are strings). */
static void emit_metadata(struct task *t, json_t *attrs)
{
    json_t *names = t->dimension_names ? json_loads(t->dimension_names, 0, NULL) : NULL;
    if (t->out.format == 3 && names)
        json_object_del(attrs, "_ARRAY_DIMENSIONS");
    else if (names_are_strings(names, t->out.ndim))
        json_object_set(attrs, "_ARRAY_DIMENSIONS", names);
    json_decref(names);
    t->zattrs_json = json_dumps(attrs, JSON_INDENT(4) | JSON_SORT_KEYS);
    json_decref(attrs);
    free(t->zarr_json);
    free(t->zarray_json);
    t->zarr_json = t->zarray_json = NULL;
    if (t->out.format == 3)
        t->zarr_json = zarr_meta_emit_v3(&t->out, t->zattrs_json, t->dimension_names);
    else
        t->zarray_json = zarr_meta_emit_v2(&t->out);
}

/* The input's attributes, plus "roifs": the provenance of the array. */
static json_t *configured_attrs(const struct task *t)
{
    const char *text = zarr_input_zattrs_text(t->reader);
    json_t *attrs = text ? json_loads(text, 0, NULL) : NULL;
    if (!json_is_object(attrs)) {
        json_decref(attrs);
        attrs = json_object();
    }
    struct provenance_of o = {.cfg = &t->cfg,
                              .result_identity = t->result_identity,
                              .result_id = t->result_id,
                              .fingerprint = t->fingerprint,
                              .nrois = t->rois.n};
    json_object_set_new(attrs, "roifs", provenance_new(&o));
    return attrs;
}

static void resolve_cache_dir(struct task *t)
{
    if (t->cfg.cache_dir) {
        t->cache_dir = xstrdup(t->cfg.cache_dir);
        return;
    }
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    char *base =
        xdg && xdg[0] == '/' ? xstrdup(xdg) : path_join(home && home[0] ? home : "/tmp", ".cache");
    /* Named by the job, not by its manifest: the same directory after an edit of the ROI
     * list, the params or the processor, whose results keys keep apart (design.md). */
    char *config = path_absolute(t->cfg.path), *input = path_absolute(t->ome.array_path);
    char *job = xasprintf("roifs-job 1\nconfig %s\ninput %s\n", config, input);
    t->cache_dir = xasprintf("%s/roifs/%016llx", base,
                             (unsigned long long)fnv64(FNV64_INIT, job, strlen(job)));
    free(job);
    free(config);
    free(input);
    free(base);
}

int task_open(const char *config_path, struct task **out, struct errbuf *err)
{
    return task_open_flags(config_path, 0, out, err);
}

/* [input] path names a plate: the plate's metadata and selection only (docs/plates.md). */
static int open_plate(struct task *t, struct errbuf *err)
{
    const struct config *c = &t->cfg;
    if (!c->ome && !c->ome_labels)
        return config_error(c, err, "output", "ome",
                            "[output] ome = false: the input %s is an HCS plate, which is "
                            "presented with ome = labels or ome = true (docs/plates.md)",
                            c->input_path);
    if (c->watch)
        return config_error(c, err, "input", "watch",
                            "[input] watch: not supported with an HCS plate input");
    struct errbuf e;
    int r = plate_open(c->input_path, c->wells, c->acquisition, &t->plate, &e);
    if (r < 0)
        return config_error(c, err, "input", c->wells ? "wells" : "path", "%s", e.msg);
    if (c->ome && config_line(c, "output", "format") && c->format != t->plate->format)
        return config_error(c, err, "output", "format",
                            "[output] format = %d: the new plate's images are in the plate's "
                            "format, Zarr v%d (leave format out)",
                            c->format, t->plate->format);
    return 0;
}

/* The configuration's plate keys on an input that is no plate. */
static int check_not_plate(const struct config *c, struct errbuf *err)
{
    if (c->wells)
        return config_error(c, err, "input", "wells",
                            "[input] wells: only for an HCS plate input (%s is not one)",
                            c->input_path);
    if (c->acquisition >= 0)
        return config_error(c, err, "input", "acquisition",
                            "[input] acquisition: only for an HCS plate input (%s is not one)",
                            c->input_path);
    return 0;
}

static int task_open_loaded(struct task *t, unsigned flags, struct task **out, struct errbuf *err);

int task_open_flags(const char *config_path, unsigned flags, struct task **out, struct errbuf *err)
{
    struct task *t = xcalloc(1, sizeof *t);
    int r = config_load(config_path, &t->cfg, err);
    if (r < 0) {
        free(t);
        return r;
    }
    if (remote_is_url(t->cfg.input_path) && (r = configure_remote(t, err)) < 0) {
        task_close(t);
        return r;
    }
    if (plate_detect(t->cfg.input_path) == 1) {
        if ((r = open_plate(t, err)) < 0) {
            task_close(t);
            return r;
        }
        *out = t;
        return 0;
    }
    if ((r = check_not_plate(&t->cfg, err)) < 0) {
        task_close(t);
        return r;
    }
    return task_open_loaded(t, flags, out, err);
}

/* A path of the configuration for one image: a bare name (with tables: IMAGE/tables/NAME),
 * a relative path inside the image, an absolute one as it is. */
static void path_in_image(char **field, const char *arg, const char *image, bool tables)
{
    if (!arg || arg[0] == '/')
        return;
    free(*field);
    *field =
        tables && !strchr(arg, '/') ? xasprintf("%s/tables/%s", image, arg) : path_join(image, arg);
}

int task_open_image(const char *config_path, const struct plate_image *im, unsigned flags,
                    struct task **out, struct errbuf *err)
{
    struct task *t = xcalloc(1, sizeof *t);
    int r = config_load(config_path, &t->cfg, err);
    if (r < 0) {
        free(t);
        return r;
    }
    struct config *c = &t->cfg;
    free(c->input_path);
    c->input_path = xstrdup(im->dir);
    path_in_image(&c->rois_table, c->rois_table_arg, im->dir, true);
    path_in_image(&c->mask, c->mask_arg, im->dir, false);
    if (c->ome) /* ome = true: the new plate's images in the plate's format */
        c->format = im->plate_format;
    if (c->cache_dir) {
        char *d = path_join(c->cache_dir, im->path_in_plate);
        free(c->cache_dir);
        c->cache_dir = d;
    }
    return task_open_loaded(t, flags, out, err);
}

static int task_open_loaded(struct task *t, unsigned flags, struct task **out, struct errbuf *err)
{
    int r;
    labels_rules_of(&t->cfg, &t->labels); /* the engine asks these, never the configuration */
    char *region = NULL;                  /* a masking table's label image */
    if ((r = open_input(t, err)) < 0 || (r = task_open_measured(t, err)) < 0 ||
        (r = view_channel(t, err)) < 0)
        goto fail;
    task_read_measured(t);
    if ((r = resolve_output(t, err)) < 0 || (r = load_rois(t, &region, err)) < 0)
        goto fail;
    r = mask_open(&t->cfg, t->rois.label != NULL, &t->ome, &t->out, region, &t->mask, err);
    free(region);
    if (r < 0 || (r = index_rois(t, err)) < 0 ||
        (r = labels_check_config(&t->cfg, &t->out.dtype, t->rois.n, err)) < 0)
        goto fail;
    /* Hashed before the processor starts, which may load the code (a plugin, the python fork
     * server): a change until it has started shows at its end (codeid.h). */
    t->code = code_files_new(&t->cfg);
    if (!(flags & TASK_NO_PROC) && (r = proc_create(&t->cfg, &t->proc, err)) < 0)
        goto fail;
    struct errbuf cerr; /* a change: every run fails, saying so (a plugin, python) */
    (void)code_files_end(t->code, 0, &cerr);
    /* the manifest names the metadata without attributes: they hold its fingerprint */
    if (t->out.format == 3)
        t->zarr_json = zarr_meta_emit_v3(&t->out, NULL, t->dimension_names);
    else
        t->zarray_json = zarr_meta_emit_v2(&t->out);
    build_manifest(t);
    emit_metadata(t, configured_attrs(t));
    resolve_cache_dir(t);
    *out = t;
    return 0;
fail:
    task_close(t);
    return r;
}

bool task_chunk_present(const struct task *t, uint64_t chunk_id)
{
    if (chunk_id >= t->nchunks)
        return false;
    return t->outside == OUTSIDE_INPUT || roi_index_find(t->index, chunk_id) >= 0;
}

uint64_t task_version(const struct task *t)
{
    return t->fingerprint ^ t->result_id.lo ^ t->result_id.hi;
}

uint64_t task_chunks_present(const struct task *t)
{
    return t->outside == OUTSIDE_INPUT ? t->nchunks : (uint64_t)roi_index_nchunks(t->index);
}

void task_close(struct task *t)
{
    if (!t)
        return;
    if (t->proc)
        proc_destroy(t->proc);
    roi_index_free(t->index);
    roi_set_free(&t->rois);
    mask_close(t->mask);
    if (t->reader)
        zarr_input_close(t->reader);
    if (t->measured)
        zarr_input_close(t->measured);
    ome_image_free(&t->ome);
    channel_close(t->channel);
    free(t->zarray_json);
    free(t->zattrs_json);
    free(t->zarr_json);
    free(t->dimension_names);
    free(t->manifest);
    free(t->result_identity);
    code_files_free(t->code);
    free(t->cache_dir);
    plate_free(t->plate);
    config_free(&t->cfg);
    free(t);
}

/* ---- derived arrays ---- */

int task_derived(const struct task *parent, struct task_derived_spec *spec, struct task **out,
                 struct errbuf *err)
{
    struct task *t = xcalloc(1, sizeof *t);
    t->cfg.path = xstrdup(parent->cfg.path);
    t->rois = spec->rois;
    t->proc = spec->proc;
    spec->rois = (struct roi_set){0};
    spec->proc = NULL;
    t->source = spec->source;
    t->in_meta = t->source.meta;
    t->out = spec->out;
    t->outside = OUTSIDE_FILL;
    const struct zarr_meta *o = &t->out;
    zarr_meta_grid(o, t->grid);
    t->nchunks = 1;
    for (int d = 0; d < o->ndim; d++)
        t->nchunks *= t->grid[d]; /* at most the parent's: a derived array is no larger */
    t->chunk_nbytes = zarr_meta_chunk_nbytes(o);
    t->chunk_fixed_size = zarr_chunk_fixed_size(o);
    int r = roi_index_build(&t->rois, o->shape, o->chunks, &t->index, err);
    if (r < 0) {
        task_close(t);
        return r;
    }
    t->dimension_names = spec->dimension_names ? xstrdup(spec->dimension_names) : NULL;
    emit_metadata(t, json_object());
    t->result_identity = xstrdup(spec->result_identity);
    task_identity_keys(t);
    t->cache_dir = xstrdup(spec->cache_dir);
    *out = t;
    return 0;
}
