/* config.c: loads the task configuration file (docs/configuration.md) with inih: its lines and
 * sections, the keys handed to config_keys.c, the whole-file checks, and the line of each key so
 * that later checks can name it. */
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

#include "config_internal.h"

/* ---- keys and where they were set ---- */

static void lines_add(struct config *cfg, const char *section, const char *key, int line)
{
    struct config_lines *cl = cfg->lines;
    if (cl->n == cl->cap) {
        cl->cap = cl->cap ? 2 * cl->cap : 32;
        cl->v = xrealloc(cl->v, sizeof *cl->v * (size_t)cl->cap);
    }
    cl->v[cl->n++] = (struct line_entry){xstrdup(section), xstrdup(key), line};
}

static int add_param(struct loader *ld, const char *name, const char *value)
{
    struct config *cfg = ld->cfg;
    bool ok = *name != '\0';
    for (const char *s = name; *s; s++)
        ok = ok && (strchr("_.-", *s) || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
                    (*s >= '0' && *s <= '9'));
    if (!ok)
        return config_fail(
            ld, ld->lineno,
            "[process] param.%s: invalid name (letters, digits, '_', '.' and '-' only)", name);
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
        return config_bad_value(ld, k, "only one of %s may be given ('%s' is set on line %d)",
                                members[g], ld->group_key[g][0], ld->group_line[g][0]);
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
        return config_fail(ld, ld->lineno, "key '%s' outside of any section", name), 0;
    if (config_section_index(section, strlen(section)) < 0)
        return config_unknown_section(ld, section, (int)strlen(section)), 0;
    bool param = strcmp(section, "process") == 0 && strncmp(name, "param.", 6) == 0;
    const struct key_spec *k = param ? NULL : config_find_key(section, name);
    if (!param && !k)
        return config_unknown_key(ld, section, name), 0;
    int prev = config_line(ld->cfg, section, name);
    if (prev)
        return config_fail(ld, ld->lineno, "duplicate key '%s' in [%s] (first set on line %d)",
                           name, section, prev),
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
        config_fail(ld, ld->lineno, "line too long (at most %d characters)", num - 1);
        return NULL;
    }
    if (ld->lineno == 1 && stop - s >= 3 && memcmp(s, "\xef\xbb\xbf", 3) == 0)
        s += 3; /* UTF-8 byte order mark */
    while (s < stop && (*s == ' ' || *s == '\t'))
        s++;
    const char *close = s < stop && *s == '[' ? memchr(s, ']', (size_t)(stop - s)) : NULL;
    if (close) {
        int i = config_section_index(s + 1, (size_t)(close - s - 1));
        if (i < 0) {
            config_unknown_section(ld, s + 1, (int)(close - s - 1));
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
        config_fail(ld, line, "syntax error: section header without ']': '%.*s'", len, s);
    else
        config_fail(ld, line, "syntax error: expected 'key = value': '%.*s'", len, s);
}

/* ---- whole-file checks ---- */

/* [measure] labels = NAME (docs/measurements.md): the label image labels/NAME of the input is
 * measured, nothing computed: no [process], [rois] nor [labels]. The mount is an ome = labels
 * overlay whose label level is the builtin copy of that label image's level, over its chunks. */
static int check_measure_only(struct loader *ld)
{
    struct config *cfg = ld->cfg;
    static const struct {
        int section;
        const char *name;
    } no[] = {{1, "rois"}, {2, "process"}, {4, "labels"}};
    for (int i = 0; i < 3; i++)
        if (ld->section_line[no[i].section])
            return config_fail(ld, ld->section_line[no[i].section],
                               "[%s]: a mount with [measure] labels measures the input's label "
                               "image '%s' and computes nothing (remove [%s], or [measure] labels "
                               "to measure this mount's computed labels)",
                               no[i].name, cfg->measure_labels, no[i].name);
    if (config_line(cfg, "output", "ome") && !cfg->ome_labels)
        return config_fail(ld, config_line(cfg, "output", "ome"),
                           "[output] ome: a mount with [measure] labels is an ome = labels mount");
    if (config_line(cfg, "output", "label_name"))
        return config_fail(ld, config_line(cfg, "output", "label_name"),
                           "[output] label_name: the label image is [measure] labels");
    if (cfg->dtype)
        return config_fail(ld, config_line(cfg, "output", "dtype"),
                           "[output] dtype: the label image measured keeps its own");
    cfg->ome_labels = true;
    cfg->label_name = xstrdup(cfg->measure_labels);
    cfg->proc_kind = PROC_BUILTIN;
    free(cfg->proc_value);
    cfg->proc_value = xstrdup("copy");
    cfg->rois_kind = ROIS_GRID; /* task.c: the label image's chunks */
    return 0;
}

static int check_required(struct loader *ld)
{
    struct config *cfg = ld->cfg;
    if (!cfg->input_path)
        return config_fail(ld, ld->section_line[0], "[input] path is required");
    if (cfg->measure_labels && ld->section_line[8]) /* the mount only measures */
        return check_measure_only(ld);
    if (cfg->rois_kind == ROIS_NONE)
        return config_fail(ld, ld->section_line[1], "[rois] needs one of file, grid or table");
    if (cfg->proc_kind == PROC_NONE)
        return config_fail(ld, ld->section_line[2],
                           "[process] needs one of builtin, command, worker, plugin or python");
    if (cfg->interpreter && cfg->proc_kind != PROC_PYTHON)
        return config_fail(ld, config_line(cfg, "process", "interpreter"),
                           "[process] interpreter: only for a python processor");
    if (cfg->executor == EXECUTOR_SLURM &&
        (cfg->proc_kind == PROC_BUILTIN || cfg->proc_kind == PROC_PLUGIN))
        return config_fail(
            ld, config_line(cfg, "process", "executor"),
            "[process] executor: slurm runs only command, worker and python processors");
    return 0;
}

/* [measure] (docs/measurements.md): its table is the label overlay's one table. */
static int check_measure(struct loader *ld)
{
    struct config *cfg = ld->cfg;
    if (!ld->section_line[8])
        return 0;
    int line = ld->section_line[8];
    if (!cfg->measure_table_name)
        return config_fail(ld, line, "[measure] table_name is required");
    if (!cfg->ome_labels)
        return config_fail(ld, line, "[measure] needs [output] ome = labels");
    if (cfg->table_name && strcmp(cfg->table_name, cfg->measure_table_name) == 0)
        return config_fail(ld, config_line(cfg, "output", "table_name"),
                           "[output] table_name: '%s' is [measure] table_name's; the masking "
                           "table needs a name of its own",
                           cfg->table_name);
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
            return config_fail(
                ld, config_line(cfg, lists[i].section, lists[i].key),
                "[%s] %s: %d entries, but [%s] %s on line %d has %d", lists[i].section,
                lists[i].key, *lists[i].ndim, lists[first].section, lists[first].key,
                config_line(cfg, lists[first].section, lists[first].key), *lists[first].ndim);
    }
    return 0;
}

static int check_output(struct loader *ld)
{
    struct config *cfg = ld->cfg;
    int shard_line = config_line(cfg, "output", "shard");
    if (cfg->shard_ndim && cfg->format != 3)
        return config_fail(ld, shard_line, "[output] shard: needs format = 3");
    for (int d = 0; d < cfg->shard_ndim && d < cfg->chunks_ndim; d++)
        if (cfg->shard[d] % cfg->chunks[d] != 0)
            return config_fail(ld, shard_line,
                               "[output] shard: entry %d (%llu) is not a multiple of chunks (%llu)",
                               d + 1, (unsigned long long)cfg->shard[d],
                               (unsigned long long)cfg->chunks[d]);
    if (cfg->clevel > 9 && cfg->compressor != COMPRESSOR_ZSTD)
        return config_fail(ld, config_line(cfg, "output", "clevel"),
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
    cfg->readahead = READAHEAD_AUTO; /* measured: bench/scaling.py, docs/performance.md */
    cfg->retry_after = -1;           /* unset: 0 for mounts, warm and export, 10 for serve */
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
    cfg->cache_lease = 30;
    cfg->channel = -1;
    cfg->remote_connections = 8;
    cfg->remote_retries = 5;
    cfg->remote_timeout = 30;
    cfg->remote_revalidate = 60;
    cfg->label_block = 65536;
    cfg->stitch_iou = 0.5;
    cfg->acquisition = -1;
    cfg->images_open = 32;
}

static void resolve_defaults(struct config *cfg)
{
    if (cfg->threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        cfg->threads = n < 1 ? 1 : n > 1024 ? 1024 : (int)n;
    }
    if (cfg->readahead == -1) {
        cfg->readahead = cfg->threads;
        cfg->readahead_is_threads = true;
    }
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
    if (!ld.failed && check_required(&ld) == 0 && check_lists(&ld) == 0 && check_measure(&ld) == 0)
        check_output(&ld);
    free(text);
    if (ld.failed) {
        config_free(cfg);
        return ld.code;
    }
    cfg->labels = ld.section_line[4] != 0; /* [labels], even empty: the output is labels */
    if ((cfg->measure = ld.section_line[8] != 0)) {
        if (!cfg->measure_features)
            cfg->measure_features = MEASURE_ALL;
        cfg->mask_table_name = cfg->table_name; /* [output] table_name: the masking table */
        cfg->mask_table_format = cfg->table_format;
        cfg->table_name = xstrdup(cfg->measure_table_name);
        cfg->table_format = cfg->measure_table_format;
    }
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
    free(cfg->measure_intensity);
    free(cfg->measure_table_name);
    free(cfg->measure_labels);
    free(cfg->mask_table_name);
    free(cfg->measure_python);
    free(cfg->mask);
    free(cfg->ca_file);
    free(cfg->headers_file);
    free(cfg->wells);
    free(cfg->channel_name);
    free(cfg->rois_table_arg);
    free(cfg->mask_arg);
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
