/* main.c: the roifs command line (SPEC §2): mount, unmount, check, warm, status, clean.
 * Exit status: 0 success, 1 failure at run time, 2 bad usage, configuration or input. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/cache.h"
#include "engine/engine.h"
#include "fs/fs.h"
#include "task.h"

#define EXIT_RUNTIME 1
#define EXIT_USAGE   2

static const char usage_text[] =
    "usage: roifs mount [-f] [-d] [-o FUSE_OPTIONS] CONFIG MOUNTPOINT\n"
    "       roifs unmount MOUNTPOINT\n"
    "       roifs check CONFIG        validate; print shape, ROI count, chunks, cache state\n"
    "       roifs warm [-j N] CONFIG  compute everything into the cache\n"
    "       roifs status MOUNTPOINT   summary of MOUNTPOINT/.roifs/status\n"
    "       roifs clean CONFIG        delete the cache of CONFIG\n"
    "       roifs --help | --version\n"
    "\n"
    "roifs presents out[roi] = f(in[roi]) over a list of regions of interest as a read-only\n"
    "Zarr array, computing each ROI once, in parallel, when a reader first opens a chunk.\n";

static int usage_error(const char *fmt, const char *arg)
{
    fputs("roifs: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs("\n(see roifs --help)\n", stderr);
    return EXIT_USAGE;
}

static int load_task(const char *path, struct task **t)
{
    struct errbuf err = {{0}};
    if (task_open(path, t, &err) < 0) {
        fprintf(stderr, "roifs: %s\n", err.msg);
        return EXIT_USAGE;
    }
    return 0;
}

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

/* How much of t's cache exists, without creating or changing anything. */
static void print_cache_state(const struct task *t)
{
    char *path = path_join(t->cache_dir, "manifest"), *manifest = NULL;
    int r = file_read_all(path, &manifest, NULL);
    free(path);
    printf("cache:     %s", t->cache_dir);
    if (r < 0) {
        printf(" (empty)\n");
        return;
    }
    if (strcmp(manifest, t->manifest) != 0) {
        printf(" (made for another configuration; it will be emptied at mount)\n");
        free(manifest);
        return;
    }
    free(manifest);
    struct cache *c;
    struct errbuf err;
    size_t cached = 0;
    if (cache_open(t, &c, &err) == 0) {
        for (size_t k = 0; k < roi_index_nchunks(t->index); k++)
            cached += cache_chunk_exists(c, roi_index_chunk_id(t->index, k));
        cache_close(c);
    }
    printf(" (%zu of %zu touched chunks computed)\n", cached, roi_index_nchunks(t->index));
}

static int cmd_check(int argc, char **argv)
{
    if (argc != 2)
        return usage_error("check needs exactly one CONFIG%s", "");
    struct task *t;
    int r = load_task(argv[1], &t);
    if (r)
        return r;
    char dt[8];
    printf("config:    %s\n", t->cfg.path);
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
    printf("processor: %s, %d threads, readahead %d\n", t->cfg.proc_value, t->cfg.threads,
           t->cfg.readahead);
    print_cache_state(t);
    task_close(t);
    return 0;
}

/* ---- mount ---- */

struct mount_args {
    bool foreground, debug;
    char *fuse_opts;
    const char *config, *mountpoint;
};

static int parse_mount_args(int argc, char **argv, struct mount_args *a)
{
    int i = 1;
    for (; i < argc && argv[i][0] == '-' && argv[i][1]; i++) {
        if (strcmp(argv[i], "-f") == 0) {
            a->foreground = true;
        } else if (strcmp(argv[i], "-d") == 0) {
            a->debug = true;
        } else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
            char *o =
                a->fuse_opts ? xasprintf("%s,%s", a->fuse_opts, argv[++i]) : xstrdup(argv[++i]);
            free(a->fuse_opts);
            a->fuse_opts = o;
        } else {
            return usage_error("mount: unknown option '%s'", argv[i]);
        }
    }
    if (argc - i != 2)
        return usage_error("mount needs CONFIG and MOUNTPOINT%s", "");
    a->config = argv[i];
    a->mountpoint = argv[i + 1];
    return 0;
}

static int check_mountpoint(const char *mnt)
{
    struct stat st;
    if (stat(mnt, &st) < 0) {
        fprintf(stderr, "roifs: %s: %s\n", mnt, strerror(errno));
        return EXIT_USAGE;
    }
    if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "roifs: %s: not a directory\n", mnt);
        return EXIT_USAGE;
    }
    return 0;
}

/* Runs the mount in this process; reports a failure to ready_fd (background) or stderr. */
static int serve(struct task *t, struct cache *c, const struct mount_args *a, int ready_fd)
{
    struct fs_options o = {.mountpoint = a->mountpoint,
                           .fuse_opts = a->fuse_opts,
                           .debug = a->debug,
                           .ready_fd = ready_fd};
    struct errbuf err = {{0}};
    int r = fs_run(t, c, &o, &err);
    if (r < 0) {
        log_error("%s", err.msg);
        if (ready_fd >= 0) {
            char *msg = xasprintf("E%s", err.msg);
            if (write(ready_fd, msg, strlen(msg)) < 0)
                log_error("cannot report to the parent: %s", strerror(errno));
            free(msg);
        } else {
            fprintf(stderr, "roifs: %s\n", err.msg);
        }
        return EXIT_RUNTIME;
    }
    return 0;
}

static int setup_log(const struct task *t, const struct mount_args *a)
{
    if (t->cfg.log_path) {
        if (log_open_file(t->cfg.log_path, a->debug) < 0) {
            fprintf(stderr, "roifs: %s: cannot open the log: %s\n", t->cfg.log_path,
                    strerror(errno));
            return EXIT_USAGE;
        }
    } else if (a->foreground) {
        log_open_stderr(a->debug);
    } else {
        log_open_syslog(a->debug);
    }
    return 0;
}

/* Forks the daemon and returns once the mount answers (or failed). */
static int mount_background(struct task *t, struct cache *c, const struct mount_args *a)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) {
        fprintf(stderr, "roifs: pipe: %s\n", strerror(errno));
        return EXIT_RUNTIME;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "roifs: fork: %s\n", strerror(errno));
        return EXIT_RUNTIME;
    }
    if (pid == 0) {
        close(p[0]);
        setsid();
        int null = open("/dev/null", O_RDWR);
        if (null >= 0) {
            dup2(null, 0);
            dup2(null, 1);
            dup2(null, 2);
            if (null > 2)
                close(null);
        }
        int r = serve(t, c, a, p[1]);
        cache_close(c);
        task_close(t);
        _exit(r);
    }
    close(p[1]);
    char buf[1100];
    size_t n = 0;
    ssize_t got;
    while (n < sizeof buf - 1 && (got = read(p[0], buf + n, sizeof buf - 1 - n)) != 0) {
        if (got < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        n += (size_t)got;
        if (buf[0] == 'R')
            break;
    }
    close(p[0]);
    buf[n] = '\0';
    if (n > 0 && buf[0] == 'R')
        return 0;
    int status;
    waitpid(pid, &status, 0);
    fprintf(stderr, "roifs: %s\n",
            n > 1 ? buf + 1 : "the daemon exited before the mount was ready");
    return EXIT_RUNTIME;
}

static int cmd_mount(int argc, char **argv)
{
    struct mount_args a = {0};
    int r = parse_mount_args(argc, argv, &a);
    struct task *t = NULL;
    struct cache *c = NULL;
    if (r || (r = load_task(a.config, &t)) || (r = check_mountpoint(a.mountpoint)))
        goto out;
    struct errbuf err = {{0}};
    if (cache_open(t, &c, &err) < 0) {
        fprintf(stderr, "roifs: %s\n", err.msg);
        r = EXIT_RUNTIME;
        goto out;
    }
    if ((r = setup_log(t, &a)))
        goto out;
    r = a.foreground ? serve(t, c, &a, -1) : mount_background(t, c, &a);
out:
    cache_close(c);
    task_close(t);
    free(a.fuse_opts);
    return r;
}

/* ---- unmount, status, clean, warm ---- */

static int cmd_unmount(int argc, char **argv)
{
    if (argc != 2)
        return usage_error("unmount needs exactly one MOUNTPOINT%s", "");
    const char *mnt = argv[1];
    if (umount2(mnt, 0) == 0)
        return 0;
    int e = errno;
    if (e == ENOTCONN || e == EBUSY) {
        /* A dead daemon ("Transport endpoint is not connected") or busy files: detach. */
        if (umount2(mnt, MNT_DETACH) == 0)
            return 0;
        e = errno;
    }
    if (e == EPERM) {
        pid_t pid = fork();
        if (pid == 0) {
            execlp("fusermount3", "fusermount3", "-u", mnt, (char *)NULL);
            _exit(127);
        }
        int status;
        if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
            WEXITSTATUS(status) == 0)
            return 0;
    }
    fprintf(stderr, "roifs: %s: cannot unmount: %s\n", mnt,
            e == EINVAL ? "not a mount point" : strerror(e));
    return EXIT_RUNTIME;
}

static int cmd_status(int argc, char **argv)
{
    if (argc != 2)
        return usage_error("status needs exactly one MOUNTPOINT%s", "");
    char *path = path_join(argv[1], ".roifs/status"), *text = NULL;
    int r = file_read_all(path, &text, NULL);
    if (r < 0) {
        fprintf(stderr, "roifs: %s: %s\n", path, strerror(-r));
        free(path);
        return EXIT_RUNTIME;
    }
    json_error_t je;
    json_t *doc = json_loads(text, 0, &je);
    json_int_t total = 0, pending = 0, running = 0, done = 0, failed = 0, ct = 0, cp = 0, cc = 0,
               calls = 0;
    json_t *errors = NULL;
    if (!doc || json_unpack(doc, "{s:{s:I,s:I,s:I,s:I,s:I},s:{s:I,s:I,s:I},s:I,s:o}", "rois",
                            "total", &total, "pending", &pending, "running", &running, "done",
                            &done, "failed", &failed, "chunks", "total", &ct, "present", &cp,
                            "cached", &cc, "calls", &calls, "errors", &errors) < 0) {
        fprintf(stderr, "roifs: %s: not a roifs status document\n", path);
        json_decref(doc);
        free(text);
        free(path);
        return EXIT_RUNTIME;
    }
    printf("ROIs:   %lld done, %lld running, %lld pending, %lld failed (of %lld)\n",
           (long long)done, (long long)running, (long long)pending, (long long)failed,
           (long long)total);
    printf("chunks: %lld computed of %lld present (%lld in the grid)\n", (long long)cc,
           (long long)cp, (long long)ct);
    printf("calls:  %lld\n", (long long)calls);
    size_t i;
    json_t *er;
    json_array_foreach(errors, i, er)
    {
        printf("error:  roi %lld: %s\n", (long long)json_integer_value(json_object_get(er, "roi")),
               json_string_value(json_object_get(er, "message")));
    }
    json_decref(doc);
    free(text);
    free(path);
    return 0;
}

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

static int cmd_clean(int argc, char **argv)
{
    if (argc != 2)
        return usage_error("clean needs exactly one CONFIG%s", "");
    struct task *t;
    int r = load_task(argv[1], &t);
    if (r)
        return r;
    char *manifest = path_join(t->cache_dir, "manifest");
    struct stat st;
    if (stat(t->cache_dir, &st) < 0) {
        printf("roifs: %s: no cache to delete\n", t->cache_dir);
    } else if (access(manifest, F_OK) < 0) {
        fprintf(stderr, "roifs: %s: not a roifs cache directory; not deleting it\n", t->cache_dir);
        r = EXIT_RUNTIME;
    } else if (remove_tree(t->cache_dir) < 0) {
        fprintf(stderr, "roifs: %s: cannot delete\n", t->cache_dir);
        r = EXIT_RUNTIME;
    } else {
        printf("deleted %s\n", t->cache_dir);
    }
    free(manifest);
    task_close(t);
    return r;
}

static void warm_progress(void *ctx, size_t done, size_t total)
{
    (void)ctx;
    fprintf(stderr, "roifs: %zu of %zu chunks\n", done, total);
}

static int cmd_warm(int argc, char **argv)
{
    int threads = 0, i = 1;
    if (argc > 2 && strcmp(argv[1], "-j") == 0) {
        uint64_t j;
        if (parse_u64(argv[2], &j) < 0 || j == 0 || j > 1024)
            return usage_error("warm: -j needs a number of threads, not '%s'", argv[2]);
        threads = (int)j;
        i = 3;
    }
    if (argc - i != 1)
        return usage_error("warm needs exactly one CONFIG%s", "");
    struct task *t;
    int r = load_task(argv[i], &t);
    if (r)
        return r;
    if (threads)
        t->cfg.threads = threads;
    log_open_stderr(false);
    struct cache *c = NULL;
    struct engine *e = NULL;
    struct errbuf err = {{0}};
    if (cache_open(t, &c, &err) < 0 || engine_create(t, c, &e, &err) < 0) {
        fprintf(stderr, "roifs: %s\n", err.msg);
        r = EXIT_RUNTIME;
    } else if (engine_compute_all(e, warm_progress, NULL) < 0) {
        fprintf(stderr, "roifs: some chunks failed; see the messages above\n");
        r = EXIT_RUNTIME;
    }
    if (e)
        engine_destroy(e);
    cache_close(c);
    task_close(t);
    return r;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc < 2)
        return usage_error("missing command%s", "");
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("roifs %s\n", ROIFS_VERSION);
        return 0;
    }
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } cmds[] = {{"mount", cmd_mount}, {"unmount", cmd_unmount}, {"umount", cmd_unmount},
                {"check", cmd_check}, {"warm", cmd_warm},       {"status", cmd_status},
                {"clean", cmd_clean}};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (strcmp(cmd, cmds[i].name) == 0)
            return cmds[i].fn(argc - 1, argv + 1);
    return usage_error("unknown command '%s'", cmd);
}
