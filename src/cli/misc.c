/* misc.c: `check`, `status` and `clean`, and what every command shares (messages, loading
 * the task, -j). */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../engine/engine.h"
#include "../engine/store.h"
#include "cli.h"

#define FUSE_SUPER_MAGIC 0x65735546

int cli_usage_error(const char *fmt, const char *arg)
{
    fputs("roifs: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs("\n(see roifs --help)\n", stderr);
    return EXIT_USAGE;
}

int cli_load_task(const char *path, struct task **t)
{
    return cli_load_task_flags(path, 0, t);
}

int cli_load_task_flags(const char *path, unsigned flags, struct task **t)
{
    struct errbuf err = {{0}};
    if (task_open_flags(path, flags, t, &err) < 0) {
        fprintf(stderr, "roifs: %s\n", err.msg);
        return EXIT_USAGE;
    }
    return 0;
}

int cli_open_cache(const struct task *t, struct cache **c)
{
    struct errbuf err = {{0}};
    int r = cache_open(t, c, &err);
    if (r < 0) {
        fprintf(stderr, "roifs: %s\n", err.msg);
        return r == -EINVAL ? EXIT_USAGE : EXIT_RUNTIME;
    }
    return 0;
}

int cli_parse_threads(const char *cmd, const char *arg, int *threads)
{
    uint64_t j;
    if (parse_u64(arg, &j) < 0 || j == 0 || j > 1024) {
        fprintf(stderr,
                "roifs: %s: -j needs a number of threads from 1 to 1024, not '%s'\n"
                "(see roifs --help)\n",
                cmd, arg);
        return EXIT_USAGE;
    }
    *threads = (int)j;
    return 0;
}

void cli_set_threads(struct task *t, int threads)
{
    if (threads <= 0)
        return;
    /* readahead left to its default follows the number of threads, as in the file. */
    if (config_line(&t->cfg, "process", "readahead") == 0)
        t->cfg.readahead = threads;
    t->cfg.threads = threads;
}

/* ---- check ---- */

static void print_dims(const char *label, const uint64_t *v, int n)
{
    printf("%s[", label);
    for (int d = 0; d < n; d++)
        printf("%s%llu", d ? ", " : "", (unsigned long long)v[d]);
    printf("]");
}

static const char *codec_name(const struct zarr_codec *c)
{
    static const char *const names[] = {"none", "blosc", "zlib", "gzip", "zstd"};
    return names[c->id];
}

/* The text of dir/name (a small regular file), or NULL. */
static char *read_marker(const char *dir, const char *name)
{
    char *path = path_join(dir, name), *text = NULL;
    struct stat st;
    if (lstat(path, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > 4096 ||
        file_read_all(path, &text, NULL) < 0)
        text = NULL;
    free(path);
    return text;
}

/* "cache 2", "cache 1" (an older roifs's layout) or NULL: what dir holds. */
static const char *cache_layout(const char *dir)
{
    char *format = read_marker(dir, "format"), *manifest = NULL;
    const char *what = NULL;
    if (format && strcmp(format, "roifs-cache 2\n") == 0)
        what = "cache 2";
    else if ((manifest = read_marker(dir, "manifest")) && strncmp(manifest, "roifs-", 6) == 0)
        what = "cache 1";
    free(format);
    free(manifest);
    return what;
}

/* How much of t's cache is current: chunk files and ROI results made from the input and
 * configuration as they are now. Creates nothing in a directory that is not a cache.
 * Returns 0, or EXIT_USAGE when roifs may not use the directory (printed). */
static int print_cache_state(const struct task *t)
{
    struct stat st;
    printf("cache:     %s", t->cache_dir);
    if (stat(t->cache_dir, &st) < 0) {
        printf(" (empty)\n");
        return 0;
    }
    struct errbuf err = {{0}};
    const char *layout = cache_layout(t->cache_dir);
    int r = cache_check_trusted(t->cache_dir, &err);
    if (r == 0 && layout && strcmp(layout, "cache 1") == 0) {
        printf(" (made by an older roifs; it will be emptied at the next mount)\n");
        return 0;
    }
    struct cache *c;
    if (r == 0)
        r = cache_open(t, &c, &err);
    if (r < 0) {
        printf(" (not usable)\n");
        fflush(stdout);
        fprintf(stderr, "roifs: %s\n", err.msg);
        return r == -EINVAL ? EXIT_USAGE : 0;
    }
    cli_print_census(t, c);
    cache_close(c);
    return 0;
}

int cmd_check(int argc, char **argv)
{
    if (argc != 2)
        return cli_usage_error("check needs exactly one CONFIG%s", "");
    struct task *t;
    int r = cli_load_task(argv[1], &t);
    if (r)
        return r;
    char dt[8];
    printf("config:    %s\n", t->cfg.path);
    if (t->ome.is_group)
        printf("input:     %s (level %d: %s) ", t->cfg.input_path, t->ome.level, t->ome.array_path);
    else
        printf("input:     %s ", t->cfg.input_path);
    print_dims("shape ", t->in->shape, t->in->ndim);
    print_dims(" chunks ", t->in->chunks, t->in->ndim);
    printf(" dtype %s compressor %s\n", dtype_typestr(&t->in->dtype, dt),
           codec_name(&t->in->compressor));
    printf("output:    ");
    print_dims("shape ", t->out.shape, t->out.ndim);
    print_dims(" chunks ", t->out.chunks, t->out.ndim);
    printf(" dtype %s compressor %s format %d\n", dtype_typestr(&t->out.dtype, dt),
           codec_name(&t->out.compressor), t->out.format);
    printf("rois:      %zu\n", t->rois.n);
    printf("chunks:    %zu of %llu touched by ROIs (%zu ROI-chunk contacts)\n",
           roi_index_nchunks(t->index), (unsigned long long)t->nchunks,
           roi_index_ncontacts(t->index));
    printf("processor: %s %s, %d threads%s, readahead %d\n", proc_kind_name(t->cfg.proc_kind),
           t->cfg.proc_value, t->cfg.threads,
           config_line(&t->cfg, "process", "threads") ? "" : " (the default: one per CPU)",
           t->cfg.readahead);
    r = print_cache_state(t);
    task_close(t);
    return r;
}

/* ---- status ---- */

static long long json_count(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return json_is_integer(v) ? (long long)json_integer_value(v) : 0;
}

/* Reads MNT/.roifs/status if mnt is a live roifs mount: 0 and *doc, or an exit status. */
static int read_status_doc(const char *mnt, json_t **doc)
{
    struct statfs sf;
    if (statfs(mnt, &sf) < 0) {
        if (errno == ENOTCONN)
            fprintf(stderr,
                    "roifs: %s: the roifs process serving it is gone (%s); "
                    "`roifs unmount %s` clears it\n",
                    mnt, strerror(errno), mnt);
        else
            fprintf(stderr, "roifs: %s: %s\n", mnt, strerror(errno));
        return EXIT_RUNTIME;
    }
    char *path = path_join(mnt, ".roifs/status"), *text = NULL;
    int r = sf.f_type == FUSE_SUPER_MAGIC ? file_read_all(path, &text, NULL) : -ENOENT;
    json_error_t je;
    *doc = r == 0 ? json_loads(text, 0, &je) : NULL;
    free(text);
    free(path);
    if (r < 0 && r != -ENOENT) {
        fprintf(stderr, "roifs: %s/.roifs/status: %s\n", mnt, strerror(-r));
        return EXIT_RUNTIME;
    }
    if (!*doc || !json_is_object(json_object_get(*doc, "rois"))) {
        fprintf(stderr, "roifs: %s: not a roifs mount\n", mnt);
        json_decref(*doc);
        return EXIT_RUNTIME;
    }
    return 0;
}

/* The recent failures, one line per ROI (its latest message), at most 20. */
static void print_failures(json_t *errors)
{
    size_t n = json_array_size(errors), shown = 0, i;
    long long *seen = xcalloc(n ? n : 1, sizeof *seen);
    for (i = n; i-- > 0;) {
        json_t *er = json_array_get(errors, i);
        long long roi = json_count(er, "roi");
        bool dup = false;
        for (size_t j = 0; j < shown && !dup; j++)
            dup = seen[j] == roi;
        if (dup)
            continue;
        if (shown == 0)
            printf("recent failures (latest first):\n");
        seen[shown++] = roi;
        if (shown <= 20) {
            const char *msg = json_string_value(json_object_get(er, "message"));
            printf("  roi %lld: %s\n", roi, msg ? msg : "?");
        }
    }
    if (shown > 20)
        printf("  ... and %zu more ROIs\n", shown - 20);
    free(seen);
}

int cmd_status(int argc, char **argv)
{
    if (argc != 2)
        return cli_usage_error("status needs exactly one MOUNTPOINT%s", "");
    json_t *doc;
    int r = read_status_doc(argv[1], &doc);
    if (r)
        return r;
    json_t *rois = json_object_get(doc, "rois"), *chunks = json_object_get(doc, "chunks");
    long long total = json_count(rois, "total"), done = json_count(rois, "done"),
              failed = json_count(rois, "failed"), running = json_count(rois, "running"),
              pending = json_count(rois, "pending"), calls = json_count(doc, "calls");
    json_t *up = json_object_get(doc, "uptime");
    double uptime = json_is_number(up) ? json_number_value(up) : -1;
    char took[24];
    cli_format_duration(uptime, took, sizeof took);
    printf("mount:   %s%s%s%s\n", argv[1], uptime >= 0 ? " (up " : "", uptime >= 0 ? took : "",
           uptime >= 0 ? ")" : "");
    printf("ROIs:    %lld of %lld done (%d%%), %lld running, %lld pending, %lld failed\n", done,
           total, total ? (int)(100 * done / total) : 100, running, pending, failed);
    if (uptime > 0) {
        double rate = (double)calls / uptime;
        printf("rate:    %.2f ROIs/s since the mount (%lld processor calls)", rate, calls);
        if (rate > 0 && pending + running > 0) {
            char left[24];
            cli_format_duration((double)(pending + running) / rate, left, sizeof left);
            printf(", about %s left for the rest", left);
        }
        printf("\n");
    }
    printf("chunks:  %lld of %lld computed (%lld in the grid)\n", json_count(chunks, "cached"),
           json_count(chunks, "present"), json_count(chunks, "total"));
    json_t *res = json_object_get(doc, "results");
    if (json_is_object(res))
        printf("results: %lld reused from the cache (not computed again), %lld computed by this "
               "mount, %lld stored\n",
               json_count(res, "reused"), json_count(res, "computed"), json_count(res, "stored"));
    print_failures(json_object_get(doc, "errors"));
    json_decref(doc);
    return 0;
}

/* ---- clean ---- */

static int remove_tree(const char *path)
{
    pid_t pid = fork();
    if (pid == 0) {
        execlp("rm", "rm", "-rf", "--", path, (char *)NULL);
        _exit(127);
    }
    int status;
    return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
                   WEXITSTATUS(status) == 0
               ? 0
               : -1;
}

int cmd_clean(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--unused") == 0)
        return cli_clean_unused(argv[2]);
    if (argc != 2)
        return cli_usage_error("clean needs exactly one CONFIG%s", "");
    struct task *t;
    int r = cli_load_task_flags(argv[1], TASK_NO_PROC, &t);
    if (r)
        return r;
    struct stat st;
    if (stat(t->cache_dir, &st) < 0) {
        printf("nothing to delete: no cache at %s\n", t->cache_dir);
    } else if (!cache_layout(t->cache_dir)) {
        fprintf(stderr,
                "roifs: %s: not a roifs cache directory (no roifs format marker); not deleting "
                "it\n",
                t->cache_dir);
        r = EXIT_RUNTIME;
    } else if (remove_tree(t->cache_dir) < 0) {
        fprintf(stderr, "roifs: %s: cannot delete\n", t->cache_dir);
        r = EXIT_RUNTIME;
    } else {
        printf("deleted %s\n", t->cache_dir);
    }
    task_close(t);
    return r;
}
