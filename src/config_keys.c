/* config_keys.c: every key of the configuration file (docs/configuration.md), the parsing and
 * checking of its value into struct config, and the messages for bad values, keys and sections. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "config_internal.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <strings.h>

static const char *const sections[] = {"input", "rois",  "process", "output", "labels",
                                       "slurm", "mount", "cache",   "measure"};
#define NSECTIONS (int)(sizeof sections / sizeof sections[0])

/* ---- messages ---- */

/* Records the first error as "FILE:LINE: message" (or "FILE: message" for line 0). */
int config_fail(struct loader *ld, int line, const char *fmt, ...)
{
    if (ld->failed)
        return -EINVAL;
    va_list ap;
    va_start(ap, fmt);
    err_vat(ld->err, -EINVAL, ld->name, line, fmt, ap);
    va_end(ap);
    ld->failed = true;
    ld->fail_line = line;
    ld->code = -EINVAL;
    return -EINVAL;
}

/* A value error: "FILE:LINE: [section] key: message". */
int config_bad_value(struct loader *ld, const struct key_spec *k, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return config_fail(ld, ld->lineno, "[%s] %s: %s", k->section, k->key, msg);
}

/* Edit distance, for "did you mean" hints; large for long strings. */
static int edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return 99;
    int row[64], prev[64];
    for (size_t j = 0; j <= lb; j++)
        prev[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            int del = prev[j] + 1, ins = row[j - 1] + 1;
            row[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, row, sizeof(int) * (lb + 1));
    }
    return prev[lb];
}

/* ---- setters: one per kind of value ---- */

static void *field(struct loader *ld, size_t off)
{
    return (char *)ld->cfg + off;
}

static int set_str(struct loader *ld, const struct key_spec *k, const char *v)
{
    if (!*v)
        return config_bad_value(ld, k, "empty value");
    char **p = field(ld, k->off);
    free(*p);
    *p = xstrdup(v);
    return 0;
}

/* Optional text ([slurm]): an empty value leaves the option unset. */
static int set_opt_str(struct loader *ld, const struct key_spec *k, const char *v)
{
    char **p = field(ld, k->off);
    free(*p);
    *p = *v ? xstrdup(v) : NULL;
    return 0;
}

/* A path relative to the configuration file's directory, stored absolute. */
static int set_path(struct loader *ld, const struct key_spec *k, const char *v)
{
    if (!*v)
        return config_bad_value(ld, k, "empty value");
    char **p = field(ld, k->off);
    if (strncmp(v, "http://", 7) == 0 || strncmp(v, "https://", 8) == 0) {
        const char *host = strstr(v, "://") + 3;
        if (k->off != offsetof(struct config, input_path) &&
            k->off != offsetof(struct config, rois_table) &&
            k->off != offsetof(struct config, mask))
            return config_bad_value(ld, k,
                                    "'%s': a URL is taken only by [input] path and by "
                                    "[rois] table and mask (docs/remote.md)",
                                    v);
        if (!*host || *host == '/')
            return config_bad_value(ld, k, "'%s' names no host", v);
        free(*p); /* a remote input or table (docs/remote.md) */
        *p = xstrdup(v);
        return 0;
    }
    char *joined = path_join(ld->cfg->dir, v);
    free(*p);
    *p = path_absolute(joined);
    free(joined);
    return 0;
}

/* [rois] table: a bare name (no '/') is looked up in the image's tables list (task.c), unless
 * the configuration's directory holds a table of that name; else a path or URL. */
static int set_table(struct loader *ld, const struct key_spec *k, const char *v)
{
    int r = set_path(ld, k, v);
    struct stat st;
    char **p = field(ld, k->off);
    if (r == 0 && *v && !strchr(v, '/') && strcmp(v, ".") != 0 && strcmp(v, "..") != 0 &&
        stat(*p, &st) < 0) {
        free(*p);
        *p = xstrdup(v);
    }
    return r;
}

static int set_int(struct loader *ld, const struct key_spec *k, const char *v);

/* [input] channel: an index, or a name of the image's omero.channels (docs/plates.md). */
static int set_channel(struct loader *ld, const struct key_spec *k, const char *v)
{
    bool digits = *v != '\0';
    for (const char *c = v; *c; c++)
        digits = digits && *c >= '0' && *c <= '9';
    if (digits || !*v || *v == '-' || *v == '+')
        return set_int(ld, k, v);
    free(ld->cfg->channel_name);
    ld->cfg->channel_name = xstrdup(v);
    return 0;
}

/* [rois] table and mask: the path, and the value as written (a plate resolves a bare name
 * inside each image, docs/plates.md). */
static int set_path_kept(struct loader *ld, const struct key_spec *k, const char *v)
{
    int r = set_path(ld, k, v);
    if (r < 0)
        return r;
    char **arg = field(ld, k->off == offsetof(struct config, mask)
                               ? offsetof(struct config, mask_arg)
                               : offsetof(struct config, rois_table_arg));
    free(*arg);
    *arg = xstrdup(v);
    return 0;
}

/* [rois] table: set_table's value, and the value as written for a plate (set_path_kept). */
static int set_table_kept(struct loader *ld, const struct key_spec *k, const char *v)
{
    int r = set_table(ld, k, v);
    if (r < 0)
        return r;
    char **arg = field(ld, offsetof(struct config, rois_table_arg));
    free(*arg);
    *arg = xstrdup(v);
    return 0;
}

static int set_int(struct loader *ld, const struct key_spec *k, const char *v)
{
    int64_t x;
    int r = parse_i64(v, &x);
    if (r == -EINVAL)
        return config_bad_value(ld, k, "'%s' is not an integer", v);
    if (r < 0 || x < k->min || x > k->max) {
        if (k->max == INT_MAX)
            return config_bad_value(ld, k, "%s is out of range (expected at least %ld)", v, k->min);
        if (k->max == k->min + 1)
            return config_bad_value(ld, k, "%s is out of range (expected %ld or %ld)", v, k->min,
                                    k->max);
        return config_bad_value(ld, k, "%s is out of range (expected %ld to %ld)", v, k->min,
                                k->max);
    }
    *(int *)field(ld, k->off) = (int)x;
    return 0;
}

/* A count of chunks, -1 (as many as threads) or auto. */
static int set_readahead(struct loader *ld, const struct key_spec *k, const char *v)
{
    if (strcmp(v, "auto") == 0) {
        *(int *)field(ld, k->off) = READAHEAD_AUTO;
        return 0;
    }
    int64_t x;
    if (parse_i64(v, &x) == -EINVAL)
        return config_bad_value(ld, k, "'%s' is not a number of chunks, -1 or auto", v);
    return set_int(ld, k, v);
}

static int set_seconds(struct loader *ld, const struct key_spec *k, const char *v)
{
    double x;
    if (parse_double(v, &x) < 0 || !isfinite(x))
        return config_bad_value(ld, k, "'%s' is not a number of seconds", v);
    if (x < 0)
        return config_bad_value(ld, k, "%s is negative (0 means %s)", v,
                                k->off == offsetof(struct config, retry_after) ? "at once"
                                                                               : "no limit");
    *(double *)field(ld, k->off) = x;
    return 0;
}

static int set_size(struct loader *ld, const struct key_spec *k, const char *v)
{
    if (parse_size(v, (uint64_t *)field(ld, k->off)) < 0)
        return config_bad_value(ld, k, "'%s' is not a size (bytes, with an optional K, M, G or T)",
                                v);
    return 0;
}

/* A comma-separated list of non-negative integers, each at least k->min. */
static int set_list(struct loader *ld, const struct key_spec *k, const char *v)
{
    uint64_t *out = field(ld, k->off);
    int *n = field(ld, k->off_n);
    int commas = 0;
    for (const char *s = v; *s; s++)
        commas += *s == ',';
    if (commas >= ROIFS_MAX_DIM)
        return config_bad_value(ld, k, "more than %d dimensions", ROIFS_MAX_DIM);
    int r = parse_u64_list(v, out, ROIFS_MAX_DIM);
    if (r < 0) {
        *n = 0;
        return config_bad_value(ld, k,
                                "'%s' is not a comma-separated list of non-negative integers", v);
    }
    *n = r;
    for (int i = 0; i < r; i++)
        if (out[i] < (uint64_t)k->min)
            return config_bad_value(ld, k, "entry %d is %llu (every entry must be at least %ld)",
                                    i + 1, (unsigned long long)out[i], k->min);
    return 0;
}

/* Index of v among the '|'-separated choices, or -1. */
static int choice_index(const char *choices, const char *v)
{
    size_t lv = strlen(v);
    int i = 0;
    for (const char *s = choices;; i++) {
        const char *bar = strchr(s, '|');
        size_t len = bar ? (size_t)(bar - s) : strlen(s);
        if (len == lv && memcmp(s, v, lv) == 0)
            return i;
        if (!bar)
            return -1;
        s = bar + 1;
    }
}

static int bad_choice(struct loader *ld, const struct key_spec *k, const char *v)
{
    int total = 1;
    for (const char *s = k->choices; *s; s++)
        total += *s == '|';
    char list[256];
    size_t n = 0;
    const char *s = k->choices;
    for (int i = 0; i < total && n < sizeof list; i++) {
        const char *bar = strchr(s, '|');
        int len = bar ? (int)(bar - s) : (int)strlen(s);
        const char *sep = i == 0 ? "" : i == total - 1 ? " or " : ", ";
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%.*s", sep, len, s);
        s += len + (bar != NULL);
    }
    return config_bad_value(ld, k, "unknown value '%s' (expected %s)", v, list);
}

static int set_choice_str(struct loader *ld, const struct key_spec *k, const char *v)
{
    if (choice_index(k->choices, v) < 0)
        return bad_choice(ld, k, v);
    return set_str(ld, k, v);
}

static int set_choice_int(struct loader *ld, const struct key_spec *k, const char *v)
{
    int i = choice_index(k->choices, v);
    if (i < 0)
        return bad_choice(ld, k, v);
    *(int *)field(ld, k->off) = i;
    return 0;
}

static int set_bool(struct loader *ld, const struct key_spec *k, const char *v)
{
    static const char *const yes[] = {"true", "yes", "1", "on"};
    static const char *const no[] = {"false", "no", "0", "off"};
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(v, yes[i]) == 0 || strcasecmp(v, no[i]) == 0) {
            *(bool *)field(ld, k->off) = strcasecmp(v, yes[i]) == 0;
            return 0;
        }
    }
    return config_bad_value(ld, k, "unknown value '%s' (expected true or false)", v);
}

/* [labels] block: a positive 64-bit count (task.c checks it against the dtype). */
static int set_u64(struct loader *ld, const struct key_spec *k, const char *v)
{
    uint64_t x;
    if (parse_u64(v, &x) < 0 || x < (uint64_t)k->min)
        return config_bad_value(ld, k, "'%s' is not an integer of at least %ld", v, k->min);
    *(uint64_t *)field(ld, k->off) = x;
    return 0;
}

/* [labels] stitch_iou: a fraction in (0, 1]. */
static int set_fraction(struct loader *ld, const struct key_spec *k, const char *v)
{
    double x;
    if (parse_double(v, &x) < 0 || !(x > 0 && x <= 1))
        return config_bad_value(ld, k, "'%s' is not a number above 0 and at most 1", v);
    *(double *)field(ld, k->off) = x;
    return 0;
}

static int set_separator(struct loader *ld, const struct key_spec *k, const char *v)
{
    if (strcmp(v, ".") != 0 && strcmp(v, "/") != 0)
        return config_bad_value(ld, k, "unknown value '%s' (expected . or /)", v);
    *(char *)field(ld, k->off) = v[0];
    return 0;
}

/* [output] ome: a boolean (true = image), image or labels. */
static int set_ome(struct loader *ld, const struct key_spec *k, const char *v)
{
    ld->cfg->ome_labels = strcmp(v, "labels") == 0;
    ld->cfg->ome = strcmp(v, "image") == 0;
    if (ld->cfg->ome_labels || ld->cfg->ome)
        return 0;
    static const char *const words[] = {"true", "yes", "1", "on", "false", "no", "0", "off"};
    for (int i = 0; i < 8; i++)
        if (strcasecmp(v, words[i]) == 0)
            return set_bool(ld, k, v);
    return config_bad_value(ld, k, "unknown value '%s' (expected false, true, image or labels)", v);
}

/* label_name, table_name: one name of a Zarr node, a path component. */
static int set_name(struct loader *ld, const struct key_spec *k, const char *v)
{
    if (!v[0] || strchr(v, '/') || strcmp(v, ".") == 0 || strcmp(v, "..") == 0 ||
        strncmp(v, ".z", 2) == 0 || strcmp(v, "zarr.json") == 0)
        return config_bad_value(ld, k, "'%s' is not a name of a Zarr node (one path component)", v);
    return set_str(ld, k, v);
}

/* [measure] features: a comma list of area, centroid, bbox, intensity. */
static int set_features(struct loader *ld, const struct key_spec *k, const char *v)
{
    static const char *const names[] = {"area", "centroid", "bbox", "intensity"};
    unsigned bits = 0;
    char *copy = xstrdup(v), *save = NULL;
    for (char *w = strtok_r(copy, ", ", &save); w; w = strtok_r(NULL, ", ", &save)) {
        int i = 0;
        while (i < 4 && strcmp(w, names[i]) != 0)
            i++;
        if (i == 4) {
            int r = config_bad_value(ld, k,
                                     "unknown feature '%s' (expected area, centroid, bbox or "
                                     "intensity)",
                                     w);
            free(copy);
            return r;
        }
        bits |= 1u << i;
    }
    free(copy);
    if (!bits)
        return config_bad_value(ld, k, "no feature");
    *(unsigned *)field(ld, k->off) = bits;
    return 0;
}

#define F(name) offsetof(struct config, name)

/* Every key of docs/configuration.md: adding a key is one line here plus its field in struct
 * config. */
static const struct key_spec keys[] = {
    {"input", "path", .set = set_path, .off = F(input_path)},
    {"input", "level", .set = set_int, .off = F(level), .min = 0, .max = INT_MAX},
    {"input", "watch", .set = set_bool, .off = F(watch)},
    {"input", "verify", .set = set_choice_int, .off = F(verify), .choices = "identity|content"},
    {"input", "channel", .set = set_channel, .off = F(channel), .min = 0, .max = INT_MAX},
    {"input", "connections", .set = set_int, .off = F(remote_connections), .min = 1, .max = 256},
    {"input", "retries", .set = set_int, .off = F(remote_retries), .min = 0, .max = 100},
    {"input", "request_timeout", .set = set_int, .off = F(remote_timeout), .min = 1, .max = 86400},
    {"input", "revalidate", .set = set_int, .off = F(remote_revalidate), .min = 0, .max = INT_MAX},
    {"input", "ca_file", .set = set_path, .off = F(ca_file)},
    {"input", "headers_file", .set = set_path, .off = F(headers_file)},
    {"rois", "file", .set = set_path, .off = F(rois_file), .group = GROUP_ROIS, .kind = ROIS_FILE},
    {"rois", "grid", .set = set_list, .off = F(grid), .off_n = F(grid_ndim), .min = 1,
     .group = GROUP_ROIS, .kind = ROIS_GRID},
    {"rois", "table", .set = set_table_kept, .off = F(rois_table), .group = GROUP_ROIS,
     .kind = ROIS_TABLE},
    {"rois", "halo", .set = set_list, .off = F(halo), .off_n = F(halo_ndim), .min = 0},
    {"rois", "rounding", .set = set_choice_int, .off = F(rounding), .choices = "fractal|ngio"},
    {"rois", "mask", .set = set_path_kept, .off = F(mask)},
    {"rois", "mask_input", .set = set_choice_int, .off = F(mask_input), .choices = "zero|keep"},
    {"process", "builtin", .set = set_str, .off = F(proc_value), .group = GROUP_PROC,
     .kind = PROC_BUILTIN},
    {"process", "command", .set = set_str, .off = F(proc_value), .group = GROUP_PROC,
     .kind = PROC_COMMAND},
    {"process", "worker", .set = set_str, .off = F(proc_value), .group = GROUP_PROC,
     .kind = PROC_WORKER},
    {"process", "plugin", .set = set_path, .off = F(proc_value), .group = GROUP_PROC,
     .kind = PROC_PLUGIN},
    {"process", "python", .set = set_str, .off = F(proc_value), .group = GROUP_PROC,
     .kind = PROC_PYTHON},
    {"process", "interpreter", .set = set_str, .off = F(interpreter)},
    {"process", "threads", .set = set_int, .off = F(threads), .min = 0, .max = 1024},
    {"process", "readahead", .set = set_readahead, .off = F(readahead), .min = -1, .max = INT_MAX},
    {"process", "timeout", .set = set_seconds, .off = F(timeout)},
    {"process", "retries", .set = set_int, .off = F(retries), .min = 0, .max = INT_MAX},
    {"process", "retry_after", .set = set_seconds, .off = F(retry_after)},
    {"process", "executor", .set = set_choice_int, .off = F(executor), .choices = "local|slurm"},
    {"output", "format", .set = set_int, .off = F(format), .min = 2, .max = 3},
    {"output", "dtype", .set = set_str, .off = F(dtype)},
    {"output", "chunks", .set = set_list, .off = F(chunks), .off_n = F(chunks_ndim), .min = 1},
    {"output", "fill_value", .set = set_str, .off = F(fill_value)},
    {"output", "outside", .set = set_choice_int, .off = F(outside), .choices = "fill|input"},
    {"output", "compressor", .set = set_choice_int, .off = F(compressor),
     .choices = "none|blosc|zstd|gzip|zlib"},
    /* 0..9, or up to 22 with compressor = zstd (checked once the whole file is read) */
    {"output", "clevel", .set = set_int, .off = F(clevel), .min = 0, .max = 22},
    {"output", "cname", .set = set_choice_str, .off = F(cname),
     .choices = "lz4|lz4hc|zstd|blosclz|zlib"},
    {"output", "shuffle", .set = set_choice_int, .off = F(shuffle),
     .choices = "noshuffle|shuffle|bitshuffle"},
    {"output", "dimension_separator", .set = set_separator, .off = F(dimension_separator)},
    {"output", "shard", .set = set_list, .off = F(shard), .off_n = F(shard_ndim), .min = 1},
    {"output", "ome", .set = set_ome, .off = F(ome)},
    {"output", "label_name", .set = set_name, .off = F(label_name)},
    {"output", "table_name", .set = set_name, .off = F(table_name)},
    {"output", "table_format", .set = set_choice_int, .off = F(table_format),
     .choices = "anndata|csv"},
    {"output", "levels", .set = set_int, .off = F(levels), .min = 1, .max = 64},
    {"output", "downsample", .set = set_choice_int, .off = F(downsample),
     .choices = "mean|nearest"},
    {"labels", "ids", .set = set_choice_int, .off = F(label_ids),
     .choices = "keep|unique|sequential"},
    {"labels", "block", .set = set_u64, .off = F(label_block), .min = 1},
    {"labels", "stitch", .set = set_choice_int, .off = F(label_stitch), .choices = "none|iou"},
    {"labels", "stitch_iou", .set = set_fraction, .off = F(stitch_iou)},
    {"slurm", "partition", .set = set_opt_str, .off = F(slurm_partition)},
    {"slurm", "cpus_per_task", .set = set_int, .off = F(slurm_cpus_per_task), .min = 1,
     .max = INT_MAX},
    {"slurm", "mem", .set = set_opt_str, .off = F(slurm_mem)},
    {"slurm", "gres", .set = set_opt_str, .off = F(slurm_gres)},
    {"slurm", "time", .set = set_opt_str, .off = F(slurm_time)},
    {"slurm", "extra", .set = set_opt_str, .off = F(slurm_extra)},
    {"mount", "log", .set = set_path, .off = F(log_path)},
    {"mount", "passthrough", .set = set_bool, .off = F(passthrough)},
    {"cache", "dir", .set = set_path, .off = F(cache_dir)},
    {"cache", "max_size", .set = set_size, .off = F(max_size)},
    {"measure", "intensity", .set = set_str, .off = F(measure_intensity)},
    {"measure", "features", .set = set_features, .off = F(measure_features)},
    {"measure", "table_name", .set = set_name, .off = F(measure_table_name)},
    {"measure", "table_format", .set = set_choice_int, .off = F(measure_table_format),
     .choices = "anndata|csv"},
    {"input", "wells", .set = set_str, .off = F(wells)},
    {"mount", "images_open", .set = set_int, .off = F(images_open), .min = 1, .max = 1 << 20},
    {"input", "acquisition", .set = set_int, .off = F(acquisition), .min = 0, .max = INT_MAX},
    {"cache", "lease", .set = set_int, .off = F(cache_lease), .min = 5, .max = 86400},
    {"measure", "labels", .set = set_name, .off = F(measure_labels)},
    {"measure", "python", .set = set_str, .off = F(measure_python)},
    {"measure", "halo", .set = set_list, .off = F(measure_halo), .off_n = F(measure_halo_ndim),
     .min = 0},
};
#define NKEYS (sizeof keys / sizeof keys[0])

#undef F

/* ---- keys and where they were set ---- */

int config_section_index(const char *name, size_t len)
{
    for (int i = 0; i < NSECTIONS; i++)
        if (strlen(sections[i]) == len && memcmp(sections[i], name, len) == 0)
            return i;
    return -1;
}

const struct key_spec *config_find_key(const char *section, const char *key)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (strcmp(keys[i].section, section) == 0 && strcmp(keys[i].key, key) == 0)
            return &keys[i];
    return NULL;
}

int config_unknown_key(struct loader *ld, const char *section, const char *key)
{
    const char *best = NULL;
    int best_d = 3;
    for (size_t i = 0; i < NKEYS; i++) {
        int d = edit_distance(key, keys[i].key);
        if (strcmp(keys[i].section, section) == 0 && d < best_d) {
            best = keys[i].key;
            best_d = d;
        }
    }
    if (best)
        return config_fail(ld, ld->lineno, "unknown key '%s' in [%s] (did you mean '%s'?)", key,
                           section, best);
    return config_fail(ld, ld->lineno, "unknown key '%s' in [%s]", key, section);
}

int config_unknown_section(struct loader *ld, const char *name, int len)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%.*s", len, name);
    for (int i = 0; i < NSECTIONS; i++)
        if (edit_distance(buf, sections[i]) <= 2)
            return config_fail(ld, ld->lineno, "unknown section [%.*s] (did you mean [%s]?)", len,
                               name, sections[i]);
    return config_fail(ld, ld->lineno, "unknown section [%.*s]", len, name);
}
