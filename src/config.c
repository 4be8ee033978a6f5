/* config.c: loads the task configuration file (SPEC §3) with inih, checking every section, key
 * and value, and remembering the line of each key so that later checks can name it. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "config.h"

#include <errno.h>
#include <ini.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* Where each key was set, "section" + "key" -> line. */
struct config_lines {
    struct line_entry {
        char *section, *key;
        int line;
    } * v;
    int n, cap;
};

/* The processor and ROI source keys: exactly one of each group must be given. */
enum key_group { GROUP_NONE, GROUP_ROIS, GROUP_PROC, NGROUPS };

struct loader {
    struct config *cfg;
    const char *name; /* the path as given, for messages */
    const char *text, *pos, *end;
    int lineno; /* line most recently handed to inih */
    bool failed;
    int fail_line; /* line of the first error found here (0: none or whole-file) */
    int code;
    struct errbuf *err;
    int section_line[9]; /* line of each known section's first header, 0 if absent */
    int group_count[NGROUPS];
    const char *group_key[NGROUPS][2];
    int group_line[NGROUPS][2];
    char short_line[256];
    char *long_value; /* the value of the current line when it is too long for inih */
};

/* What inih is shown instead of a value too long for its line buffer (see read_line). */
#define LONG_VALUE_TOKEN "\x01roifs-long-value\x01"

struct key_spec;
typedef int (*key_setter)(struct loader *ld, const struct key_spec *k, const char *value);

struct key_spec {
    const char *section, *key;
    key_setter set;
    size_t off;   /* field in struct config */
    size_t off_n; /* set_list: the field holding the number of entries */
    long min, max;
    const char *choices; /* "a|b|c" for set_choice_* */
    enum key_group group;
    int kind; /* rois_kind or proc_kind set when the key is given */
};

static const char *const sections[] = {"input",  "rois",  "process", "output",
                                       "labels", "slurm", "mount",   "cache"};
#define NSECTIONS (int)(sizeof sections / sizeof sections[0])

/* ---- messages ---- */

static int fail(struct loader *ld, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Records the first error as "FILE:LINE: message" (or "FILE: message" for line 0). */
static int fail(struct loader *ld, int line, const char *fmt, ...)
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

static int bad_value(struct loader *ld, const struct key_spec *k, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A value error: "FILE:LINE: [section] key: message". */
static int bad_value(struct loader *ld, const struct key_spec *k, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return fail(ld, ld->lineno, "[%s] %s: %s", k->section, k->key, msg);
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
        return bad_value(ld, k, "empty value");
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
        return bad_value(ld, k, "empty value");
    char **p = field(ld, k->off);
    char *joined = path_join(ld->cfg->dir, v);
    free(*p);
    *p = path_absolute(joined);
    free(joined);
    return 0;
}

static int set_int(struct loader *ld, const struct key_spec *k, const char *v)
{
    int64_t x;
    int r = parse_i64(v, &x);
    if (r == -EINVAL)
        return bad_value(ld, k, "'%s' is not an integer", v);
    if (r < 0 || x < k->min || x > k->max) {
        if (k->max == INT_MAX)
            return bad_value(ld, k, "%s is out of range (expected at least %ld)", v, k->min);
        if (k->max == k->min + 1)
            return bad_value(ld, k, "%s is out of range (expected %ld or %ld)", v, k->min, k->max);
        return bad_value(ld, k, "%s is out of range (expected %ld to %ld)", v, k->min, k->max);
    }
    *(int *)field(ld, k->off) = (int)x;
    return 0;
}

static int set_seconds(struct loader *ld, const struct key_spec *k, const char *v)
{
    double x;
    if (parse_double(v, &x) < 0 || !isfinite(x))
        return bad_value(ld, k, "'%s' is not a number of seconds", v);
    if (x < 0)
        return bad_value(ld, k, "%s is negative (0 means no limit)", v);
    *(double *)field(ld, k->off) = x;
    return 0;
}

static int set_size(struct loader *ld, const struct key_spec *k, const char *v)
{
    if (parse_size(v, (uint64_t *)field(ld, k->off)) < 0)
        return bad_value(ld, k, "'%s' is not a size (bytes, with an optional K, M, G or T)", v);
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
        return bad_value(ld, k, "more than %d dimensions", ROIFS_MAX_DIM);
    int r = parse_u64_list(v, out, ROIFS_MAX_DIM);
    if (r < 0) {
        *n = 0;
        return bad_value(ld, k, "'%s' is not a comma-separated list of non-negative integers", v);
    }
    *n = r;
    for (int i = 0; i < r; i++)
        if (out[i] < (uint64_t)k->min)
            return bad_value(ld, k, "entry %d is %llu (every entry must be at least %ld)", i + 1,
                             (unsigned long long)out[i], k->min);
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
    return bad_value(ld, k, "unknown value '%s' (expected %s)", v, list);
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
    return bad_value(ld, k, "unknown value '%s' (expected true or false)", v);
}

/* [labels] block: a positive 64-bit count (task.c checks it against the dtype). */
static int set_u64(struct loader *ld, const struct key_spec *k, const char *v)
{
    uint64_t x;
    if (parse_u64(v, &x) < 0 || x < (uint64_t)k->min)
        return bad_value(ld, k, "'%s' is not an integer of at least %ld", v, k->min);
    *(uint64_t *)field(ld, k->off) = x;
    return 0;
}

/* [labels] stitch_iou: a fraction in (0, 1]. */
static int set_fraction(struct loader *ld, const struct key_spec *k, const char *v)
{
    double x;
    if (parse_double(v, &x) < 0 || !(x > 0 && x <= 1))
        return bad_value(ld, k, "'%s' is not a number above 0 and at most 1", v);
    *(double *)field(ld, k->off) = x;
    return 0;
}

static int set_separator(struct loader *ld, const struct key_spec *k, const char *v)
{
    if (strcmp(v, ".") != 0 && strcmp(v, "/") != 0)
        return bad_value(ld, k, "unknown value '%s' (expected . or /)", v);
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
    return bad_value(ld, k, "unknown value '%s' (expected false, true, image or labels)", v);
}

/* label_name, table_name: one name of a Zarr node, a path component. */
static int set_name(struct loader *ld, const struct key_spec *k, const char *v)
{
    if (!v[0] || strchr(v, '/') || strcmp(v, ".") == 0 || strcmp(v, "..") == 0 ||
        strncmp(v, ".z", 2) == 0 || strcmp(v, "zarr.json") == 0)
        return bad_value(ld, k, "'%s' is not a name of a Zarr node (one path component)", v);
    return set_str(ld, k, v);
}

#define F(name) offsetof(struct config, name)

/* Every key of SPEC §3: adding a key is one line here plus its field in struct config. */
static const struct key_spec keys[] = {
    {"input", "path", .set = set_path, .off = F(input_path)},
    {"input", "level", .set = set_int, .off = F(level), .min = 0, .max = INT_MAX},
    {"input", "watch", .set = set_bool, .off = F(watch)},
    {"input", "channel", .set = set_int, .off = F(channel), .min = 0, .max = INT_MAX},
    {"rois", "file", .set = set_path, .off = F(rois_file), .group = GROUP_ROIS, .kind = ROIS_FILE},
    {"rois", "grid", .set = set_list, .off = F(grid), .off_n = F(grid_ndim), .min = 1,
     .group = GROUP_ROIS, .kind = ROIS_GRID},
    {"rois", "table", .set = set_path, .off = F(rois_table), .group = GROUP_ROIS,
     .kind = ROIS_TABLE},
    {"rois", "halo", .set = set_list, .off = F(halo), .off_n = F(halo_ndim), .min = 0},
    {"rois", "rounding", .set = set_choice_int, .off = F(rounding), .choices = "fractal|ngio"},
    {"rois", "mask", .set = set_path, .off = F(mask)},
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
    {"process", "readahead", .set = set_int, .off = F(readahead), .min = -1, .max = INT_MAX},
    {"process", "timeout", .set = set_seconds, .off = F(timeout)},
    {"process", "retries", .set = set_int, .off = F(retries), .min = 0, .max = INT_MAX},
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
};
#define NKEYS (sizeof keys / sizeof keys[0])

#undef F

/* ---- keys and where they were set ---- */

static int section_index(const char *name, size_t len)
{
    for (int i = 0; i < NSECTIONS; i++)
        if (strlen(sections[i]) == len && memcmp(sections[i], name, len) == 0)
            return i;
    return -1;
}

static const struct key_spec *find_key(const char *section, const char *key)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (strcmp(keys[i].section, section) == 0 && strcmp(keys[i].key, key) == 0)
            return &keys[i];
    return NULL;
}

static void lines_add(struct config *cfg, const char *section, const char *key, int line)
{
    struct config_lines *cl = cfg->lines;
    if (cl->n == cl->cap) {
        cl->cap = cl->cap ? 2 * cl->cap : 32;
        cl->v = xrealloc(cl->v, sizeof *cl->v * (size_t)cl->cap);
    }
    cl->v[cl->n++] = (struct line_entry){xstrdup(section), xstrdup(key), line};
}

static int unknown_key(struct loader *ld, const char *section, const char *key)
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
        return fail(ld, ld->lineno, "unknown key '%s' in [%s] (did you mean '%s'?)", key, section,
                    best);
    return fail(ld, ld->lineno, "unknown key '%s' in [%s]", key, section);
}

static int unknown_section(struct loader *ld, const char *name, int len)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%.*s", len, name);
    for (int i = 0; i < NSECTIONS; i++)
        if (edit_distance(buf, sections[i]) <= 2)
            return fail(ld, ld->lineno, "unknown section [%.*s] (did you mean [%s]?)", len, name,
                        sections[i]);
    return fail(ld, ld->lineno, "unknown section [%.*s]", len, name);
}

static int add_param(struct loader *ld, const char *name, const char *value)
{
    struct config *cfg = ld->cfg;
    bool ok = *name != '\0';
    for (const char *s = name; *s; s++)
        ok = ok && (strchr("_.-", *s) || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
                    (*s >= '0' && *s <= '9'));
    if (!ok)
        return fail(ld, ld->lineno,
                    "[process] param.%s: invalid name (letters, digits, '_', '.' and '-' only)",
                    name);
    cfg->params = xrealloc(cfg->params, sizeof *cfg->params * (size_t)(cfg->nparams + 1));
    cfg->params[cfg->nparams++] = (struct config_param){xstrdup(name), xstrdup(value), ld->lineno};
    return 0;
}

/* The second key of a group (processor, ROI source) is an error at its own line. */
static int claim_group(struct loader *ld, const struct key_spec *k)
{
    static const char *const members[NGROUPS] = {
        [GROUP_ROIS] = "file, grid or table",
        [GROUP_PROC] = "builtin, command, worker, plugin or python",
    };
    int g = k->group;
    if (ld->group_count[g]++ > 0)
        return bad_value(ld, k, "only one of %s may be given ('%s' is set on line %d)", members[g],
                         ld->group_key[g][0], ld->group_line[g][0]);
    ld->group_key[g][0] = k->key;
    ld->group_line[g][0] = ld->lineno;
    if (g == GROUP_ROIS)
        ld->cfg->rois_kind = k->kind;
    else
        ld->cfg->proc_kind = k->kind;
    return 0;
}

/* inih handler: one key = value pair on line ld->lineno. Returns 1 to go on, 0 on error. */
static int on_key(void *user, const char *section, const char *name, const char *value)
{
    struct loader *ld = user;
    if (ld->failed)
        return 0;
    if (ld->long_value && strcmp(value, LONG_VALUE_TOKEN) == 0)
        value = ld->long_value;
    if (!*section)
        return fail(ld, ld->lineno, "key '%s' outside of any section", name), 0;
    if (section_index(section, strlen(section)) < 0)
        return unknown_section(ld, section, (int)strlen(section)), 0;
    bool param = strcmp(section, "process") == 0 && strncmp(name, "param.", 6) == 0;
    const struct key_spec *k = param ? NULL : find_key(section, name);
    if (!param && !k)
        return unknown_key(ld, section, name), 0;
    int prev = config_line(ld->cfg, section, name);
    if (prev)
        return fail(ld, ld->lineno, "duplicate key '%s' in [%s] (first set on line %d)", name,
                    section, prev),
               0;
    lines_add(ld->cfg, section, name, ld->lineno);
    if (param)
        return add_param(ld, name + 6, value) == 0;
    if (k->group != GROUP_NONE && claim_group(ld, k) < 0)
        return 0;
    return k->set(ld, k, value) == 0;
}

/* inih's line buffer is small (200 bytes in Debian's build), but command lines and paths can
 * be long: a "key = value" line that does not fit is handed to inih with a placeholder value,
 * and the real value (inline comment and surrounding blanks removed) kept in ld->long_value.
 * Returns the start of the line to hand over (in ld->short_line), or NULL when it cannot. */
static const char *shorten_long_line(struct loader *ld, const char *s, const char **stop, int num)
{
    const char *p = s;
    while (p < *stop && (*p == ' ' || *p == '\t'))
        p++;
    if (p == *stop || *p == ';' || *p == '#' || *p == '[')
        return NULL;
    const char *delim = p;
    while (delim < *stop && *delim != '=' && *delim != ':')
        delim++;
    if (delim == *stop)
        return NULL;
    const char *v = delim + 1, *end = *stop;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    for (const char *c = v; c < end; c++)
        if (*c == ';' && c > v && (c[-1] == ' ' || c[-1] == '\t')) {
            end = c;
            break;
        }
    while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    int keylen = (int)(delim - p);
    if (keylen + 3 + (int)strlen(LONG_VALUE_TOKEN) > num - 1)
        return NULL;
    ld->long_value = strndup(v, (size_t)(end - v));
    snprintf(ld->short_line, sizeof ld->short_line, "%.*s= %s", keylen, p, LONG_VALUE_TOKEN);
    *stop = ld->short_line + strlen(ld->short_line);
    return ld->short_line;
}

/* inih reader: hands over one line per call so that ld->lineno is the line of each handler
 * call. Leading blanks are removed so that an indented key is not taken for the
 * continuation of the previous value. Section headers are checked here, because inih calls
 * no handler for a section without keys. */
static char *read_line(char *str, int num, void *stream)
{
    struct loader *ld = stream;
    if (ld->failed || ld->pos >= ld->end)
        return NULL;
    const char *s = ld->pos;
    const char *eol = memchr(s, '\n', (size_t)(ld->end - s));
    const char *stop = eol ? eol : ld->end;
    ld->pos = eol ? eol + 1 : ld->end;
    ld->lineno++;
    if (stop > s && stop[-1] == '\r')
        stop--;
    free(ld->long_value);
    ld->long_value = NULL;
    if (stop - s > num - 1 && !(s = shorten_long_line(ld, s, &stop, num))) {
        fail(ld, ld->lineno, "line too long (at most %d characters)", num - 1);
        return NULL;
    }
    if (ld->lineno == 1 && stop - s >= 3 && memcmp(s, "\xef\xbb\xbf", 3) == 0)
        s += 3; /* UTF-8 byte order mark */
    while (s < stop && (*s == ' ' || *s == '\t'))
        s++;
    const char *close = s < stop && *s == '[' ? memchr(s, ']', (size_t)(stop - s)) : NULL;
    if (close) {
        int i = section_index(s + 1, (size_t)(close - s - 1));
        if (i < 0) {
            unknown_section(ld, s + 1, (int)(close - s - 1));
            return NULL;
        }
        if (!ld->section_line[i])
            ld->section_line[i] = ld->lineno;
    }
    memcpy(str, s, (size_t)(stop - s));
    str[stop - s] = '\0';
    return str;
}

/* inih reported a malformed line; describe it. */
static void syntax_error(struct loader *ld, int line)
{
    const char *s = ld->text;
    for (int i = 1; i < line && s < ld->end; i++) {
        const char *eol = memchr(s, '\n', (size_t)(ld->end - s));
        s = eol ? eol + 1 : ld->end;
    }
    while (s < ld->end && (*s == ' ' || *s == '\t'))
        s++;
    const char *eol = memchr(s, '\n', (size_t)(ld->end - s));
    int len = (int)((eol ? eol : ld->end) - s);
    if (len > 0 && s[len - 1] == '\r')
        len--;
    if (len > 80)
        len = 80;
    ld->failed = false;
    if (*s == '[')
        fail(ld, line, "syntax error: section header without ']': '%.*s'", len, s);
    else
        fail(ld, line, "syntax error: expected 'key = value': '%.*s'", len, s);
}

/* ---- whole-file checks ---- */

static int check_required(struct loader *ld)
{
    struct config *cfg = ld->cfg;
    if (!cfg->input_path)
        return fail(ld, ld->section_line[0], "[input] path is required");
    if (cfg->rois_kind == ROIS_NONE)
        return fail(ld, ld->section_line[1], "[rois] needs one of file, grid or table");
    if (cfg->proc_kind == PROC_NONE)
        return fail(ld, ld->section_line[2],
                    "[process] needs one of builtin, command, worker, plugin or python");
    if (cfg->interpreter && cfg->proc_kind != PROC_PYTHON)
        return fail(ld, config_line(cfg, "process", "interpreter"),
                    "[process] interpreter: only for a python processor");
    if (cfg->executor == EXECUTOR_SLURM &&
        (cfg->proc_kind == PROC_BUILTIN || cfg->proc_kind == PROC_PLUGIN))
        return fail(ld, config_line(cfg, "process", "executor"),
                    "[process] executor: slurm runs only command, worker and python processors");
    return 0;
}

/* The per-dimension lists must agree on the number of dimensions. */
static int check_lists(struct loader *ld)
{
    struct config *cfg = ld->cfg;
    const struct {
        const char *section, *key;
        const int *ndim;
    } lists[] = {{"rois", "grid", &cfg->grid_ndim},
                 {"rois", "halo", &cfg->halo_ndim},
                 {"output", "chunks", &cfg->chunks_ndim},
                 {"output", "shard", &cfg->shard_ndim}};
    int first = -1;
    for (int i = 0; i < 4; i++) {
        if (*lists[i].ndim == 0)
            continue;
        if (first < 0) {
            first = i;
            continue;
        }
        if (*lists[i].ndim != *lists[first].ndim)
            return fail(ld, config_line(cfg, lists[i].section, lists[i].key),
                        "[%s] %s: %d entries, but [%s] %s on line %d has %d", lists[i].section,
                        lists[i].key, *lists[i].ndim, lists[first].section, lists[first].key,
                        config_line(cfg, lists[first].section, lists[first].key),
                        *lists[first].ndim);
    }
    return 0;
}

static int check_output(struct loader *ld)
{
    struct config *cfg = ld->cfg;
    int shard_line = config_line(cfg, "output", "shard");
    if (cfg->shard_ndim && cfg->format != 3)
        return fail(ld, shard_line, "[output] shard: needs format = 3");
    for (int d = 0; d < cfg->shard_ndim && d < cfg->chunks_ndim; d++)
        if (cfg->shard[d] % cfg->chunks[d] != 0)
            return fail(ld, shard_line,
                        "[output] shard: entry %d (%llu) is not a multiple of chunks (%llu)", d + 1,
                        (unsigned long long)cfg->shard[d], (unsigned long long)cfg->chunks[d]);
    if (cfg->clevel > 9 && cfg->compressor != COMPRESSOR_ZSTD)
        return fail(ld, config_line(cfg, "output", "clevel"),
                    "[output] clevel: %d is out of range (expected 0 to 9; up to 22 with "
                    "compressor = zstd)",
                    cfg->clevel);
    return 0;
}

/* ---- loading ---- */

static void set_defaults(struct config *cfg)
{
    cfg->lines = xcalloc(1, sizeof *cfg->lines);
    cfg->rounding = ROUNDING_FRACTAL;
    cfg->readahead = -1;
    cfg->executor = EXECUTOR_LOCAL;
    cfg->format = 2;
    cfg->fill_value = xstrdup("0");
    cfg->outside = OUTSIDE_FILL;
    cfg->compressor = COMPRESSOR_NONE;
    cfg->clevel = 5;
    cfg->cname = xstrdup("lz4");
    cfg->shuffle = 1;
    cfg->dimension_separator = '.';
    cfg->levels = 4;
    cfg->passthrough = true;
    cfg->downsample = DOWNSAMPLE_MEAN;
    cfg->slurm_cpus_per_task = 1;
    cfg->channel = -1;
    cfg->label_block = 65536;
    cfg->stitch_iou = 0.5;
}

static void resolve_defaults(struct config *cfg)
{
    if (cfg->threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        cfg->threads = n < 1 ? 1 : n > 1024 ? 1024 : (int)n;
    }
    if (cfg->readahead < 0)
        cfg->readahead = cfg->threads;
}

/* The configuration file's name without .ini: the label image's name by default. */
static char *default_label_name(const char *path)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    size_t n = strlen(b);
    if (n > 4 && strcmp(b + n - 4, ".ini") == 0)
        n -= 4;
    char *name = xmalloc(n + 1);
    memcpy(name, b, n);
    name[n] = '\0';
    return name;
}

int config_load(const char *path, struct config *cfg, struct errbuf *err)
{
    memset(cfg, 0, sizeof *cfg);
    char *text;
    size_t len;
    int r = file_read_all(path, &text, &len);
    if (r < 0)
        return err_set(err, r, "%s: cannot read: %s", path, file_strerror(r));
    /* inih stops at a NUL: "builtin = add\0junk" would be taken for "add" */
    const char *nul = memchr(text, '\0', len);
    if (nul) {
        int line = 1;
        for (const char *c = text; c < nul; c++)
            line += *c == '\n';
        free(text);
        return err_at(err, -EINVAL, path, line, "NUL byte (not a text file?)");
    }
    set_defaults(cfg);
    cfg->path = path_absolute(path);
    cfg->dir = path_dirname(cfg->path);
    struct loader ld = {
        .cfg = cfg, .name = path, .text = text, .pos = text, .end = text + len, .err = err};
    r = ini_parse_stream(read_line, &ld, on_key, &ld);
    free(ld.long_value);
    if (r < 0 && !ld.failed) {
        err_set(err, -ENOMEM, "%s: cannot parse: out of memory", path);
        ld.failed = true;
        ld.code = -ENOMEM;
    } else if (r > 0 && (!ld.failed || r < ld.fail_line)) {
        syntax_error(&ld, r);
    }
    if (!ld.failed && check_required(&ld) == 0 && check_lists(&ld) == 0)
        check_output(&ld);
    free(text);
    if (ld.failed) {
        config_free(cfg);
        return ld.code;
    }
    cfg->labels = ld.section_line[4] != 0; /* [labels], even empty: the output is labels */
    if (!cfg->label_name)
        cfg->label_name = default_label_name(cfg->path);
    resolve_defaults(cfg);
    return 0;
}

int config_line(const struct config *cfg, const char *section, const char *key)
{
    if (!cfg->lines)
        return 0;
    for (int i = 0; i < cfg->lines->n; i++) {
        const struct line_entry *e = &cfg->lines->v[i];
        if (strcmp(e->section, section) == 0 && strcmp(e->key, key) == 0)
            return e->line;
    }
    return 0;
}

int config_verror(const struct config *cfg, struct errbuf *err, const char *section,
                  const char *key, const char *fmt, va_list ap)
{
    return err_vat(err, -EINVAL, cfg->path, config_line(cfg, section, key), fmt, ap);
}

int config_error(const struct config *cfg, struct errbuf *err, const char *section, const char *key,
                 const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    config_verror(cfg, err, section, key, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

const struct config_param *config_param(const struct config *cfg, const char *name)
{
    for (int i = 0; i < cfg->nparams; i++)
        if (strcmp(cfg->params[i].name, name) == 0)
            return &cfg->params[i];
    return NULL;
}

void config_free(struct config *cfg)
{
    char **strings[] = {
        &cfg->path,       &cfg->dir,         &cfg->input_path,      &cfg->rois_file,
        &cfg->rois_table, &cfg->proc_value,  &cfg->dtype,           &cfg->fill_value,
        &cfg->cname,      &cfg->slurm_mem,   &cfg->slurm_partition, &cfg->slurm_gres,
        &cfg->slurm_time, &cfg->slurm_extra, &cfg->log_path,        &cfg->cache_dir,
    };
    for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++)
        free(*strings[i]);
    free(cfg->interpreter);
    free(cfg->label_name);
    free(cfg->table_name);
    free(cfg->mask);
    for (int i = 0; i < cfg->nparams; i++) {
        free(cfg->params[i].name);
        free(cfg->params[i].value);
    }
    free(cfg->params);
    if (cfg->lines) {
        for (int i = 0; i < cfg->lines->n; i++) {
            free(cfg->lines->v[i].section);
            free(cfg->lines->v[i].key);
        }
        free(cfg->lines->v);
        free(cfg->lines);
    }
    memset(cfg, 0, sizeof *cfg);
}
