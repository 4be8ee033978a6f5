/* codeid.c: the files a processor runs, for the processor identity and for the check around
 * each run (codeid.h; docs/design.md "Code edited while mounted").
 *
 * Code is read when a process starts (a command for each ROI, a worker or a python fork
 * server when it starts or restarts) or when the processor is made (the plugin's dlopen, the
 * first fork server): always during a run, between code_files_begin and code_files_end, or
 * while the processor is made, which counts as a run. A file is remembered by its status
 * (device, inode, size, modification and change times); every look at it (a begin or an end)
 * compares that status. A run that a change overlapped fails; a begin that finds a changed
 * file hashes it again and lets runs go on when its contents are still the identity's (a
 * touch, the same file written again), unless, for processes that outlive runs (worker,
 * python), some run was in flight during the change: one of them may have started a process
 * on other code, which would serve later runs. A loaded plugin is the exception: what runs is
 * what the file it loaded (kept open) holds, so each run looks at that file once, at its end,
 * and a change of the path (a new build renamed over it) changes nothing. */
#include "codeid.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "key.h"

/* Files larger than this count by their size and modification time, not their contents. */
#define IDENTITY_MAX_CONTENT (256ULL << 20)

struct code_stat {
    uint64_t dev, ino, size;
    int64_t mtime_ns, ctime_ns;
};

struct code_file {
    char *path;
    struct key128 hash;    /* the contents the identity names */
    struct code_stat seen; /* the status last seen with those contents */
};

struct code_files {
    pthread_mutex_t lock;
    struct code_file *f;
    size_t n;
    struct strbuf lines;
    bool lasting;     /* the processor's processes or library outlive a run */
    uint64_t gen;     /* counts the changes of status let through */
    size_t moved;     /* the file of the last one */
    unsigned running; /* runs between begin and end (the processor's start is one) */
    char *stale;      /* lasting: why every run fails from now on, or NULL */
    /* plugin: the file dlopen loaded, open; once it is loaded (the first code_files_end) a run
     * looks at that file alone, at its end: replacing the path changes nothing that runs,
     * writing the file in place changes the library's pages */
    int fd;
    bool loaded;
    struct code_stat bad; /* fd's status last found with other contents (not hashed again) */
};

static void stat_of(const struct stat *st, struct code_stat *cs)
{
    *cs = (struct code_stat){
        .dev = (uint64_t)st->st_dev,
        .ino = (uint64_t)st->st_ino,
        .size = (uint64_t)st->st_size,
        .mtime_ns = ts_to_ns(st->st_mtim),
        .ctime_ns = ts_to_ns(st->st_ctim),
    };
}

static bool same_stat(const struct code_stat *a, const struct code_stat *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime_ns == b->mtime_ns && a->ctime_ns == b->ctime_ns;
}

/* The key of fd's contents (st its status): XXH3-128 of the bytes alone, so that the hash the
 * provenance attributes show is what `xxh128sum FILE` prints; of a huge file, a key of its
 * size and modification time. */
static struct key128 hash_fd(int fd, const struct stat *st)
{
    if ((uint64_t)st->st_size > IDENTITY_MAX_CONTENT) {
        struct keyhash h;
        key_init(&h, "roifs file");
        key_add_u64(&h, (uint64_t)st->st_mtim.tv_sec);
        key_add_u64(&h, (uint64_t)st->st_mtim.tv_nsec);
        return key_final(&h);
    }
    XXH3_state_t xs;
    XXH3_128bits_reset(&xs);
    char *buf = xmalloc(1 << 20);
    ssize_t n;
    off_t off = 0;
    while ((n = pread(fd, buf, 1 << 20, off)) > 0) {
        XXH3_128bits_update(&xs, buf, (size_t)n);
        off += n;
    }
    free(buf);
    XXH128_hash_t d = XXH3_128bits_digest(&xs);
    return (struct key128){.lo = d.low64, .hi = d.high64};
}

/* Hashes the regular file at path: 0 with its key and its status before it was read (taken
 * again when it changed while being read, a few times), or -errno (-EISDIR: not a regular
 * file). *st: its stat. */
static int hash_path(const char *path, struct stat *st, struct key128 *key, struct code_stat *cs)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = 0;
    for (int attempt = 0; attempt < 3; attempt++) {
        struct stat after;
        if (fstat(fd, st) < 0) {
            rc = -errno;
            break;
        }
        if (!S_ISREG(st->st_mode)) {
            rc = -EISDIR;
            break;
        }
        *key = hash_fd(fd, st);
        stat_of(st, cs);
        struct code_stat now;
        if (fstat(fd, &after) < 0) {
            rc = -errno;
            break;
        }
        stat_of(&after, &now);
        if (same_stat(cs, &now))
            break;
    }
    close(fd);
    return rc;
}

/* True when path, a regular file, is code a processor runs: executable, or a script or
 * library by its name. Data and output files named on a command line (a log the command
 * appends to, a counter) are not: a change of them must not look like new code. */
static bool is_code(const char *path, const struct stat *st)
{
    static const char *const ext[] = {".py",     ".sh",  ".bash", ".R",     ".r",   ".jl", ".pl",
                                      ".pm",     ".rb",  ".js",   ".mjs",   ".lua", ".m",  ".ijm",
                                      ".groovy", ".jar", ".so",   ".ipynb", ".awk", ".tcl"};
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    const char *dot = strrchr(base, '.');
    if ((st->st_mode & 0111) || strstr(base, ".so.")) /* libfoo.so.1 */
        return true;
    for (size_t i = 0; dot && i < sizeof ext / sizeof ext[0]; i++)
        if (strcmp(dot, ext[i]) == 0)
            return true;
    return false;
}

/* Adds path when it is code (is_code): its line "file PATH SIZE HASH" (the contents' key, or
 * for a huge file its size and modification time) and what it is. always: the plugin or the
 * python file, whatever its name. */
static void add_file(struct code_files *cf, const char *path, bool always)
{
    struct stat st;
    struct code_file f = {0};
    if (hash_path(path, &st, &f.hash, &f.seen) < 0 || (!always && !is_code(path, &st)))
        return;
    char hex[33];
    key_hex(f.hash, hex);
    sb_printf(&cf->lines, "file %s %lld %s\n", path, (long long)st.st_size, hex);
    f.path = xstrdup(path);
    cf->f = xrealloc(cf->f, (cf->n + 1) * sizeof *cf->f);
    cf->f[cf->n++] = f;
}

/* The files a processor runs: the plugin, a python processor's file and interpreter, and
 * every word of a command or worker line that names code (is_code; relative to the
 * configuration's directory, or absolute), except the targets of output redirections (> FILE,
 * >> FILE), which the command writes. Quotes are dropped; ; & | ( ) ` < separate words as
 * spaces do. */
static void add_processor_files(struct code_files *cf, const struct config *cfg)
{
    if (cfg->proc_kind == PROC_PLUGIN) {
        add_file(cf, cfg->proc_value, true);
        return;
    }
    if (cfg->proc_kind == PROC_PYTHON) { /* FILE.py:FUNCTION (a MODULE names no file) */
        add_file(cf, cfg->interpreter ? cfg->interpreter : "/usr/bin/python3", false);
        const char *colon = strrchr(cfg->proc_value, ':');
        char *file = xasprintf("%.*s", colon ? (int)(colon - cfg->proc_value) : 0, cfg->proc_value);
        char *path = path_join(cfg->dir, file);
        add_file(cf, path, true);
        free(path);
        free(file);
        return;
    }
    if (cfg->proc_kind != PROC_COMMAND && cfg->proc_kind != PROC_WORKER)
        return;
    const char *p = cfg->proc_value;
    char *word = xmalloc(strlen(p) + 1);
    bool output = false; /* the next word is written, not run */
    while (*p) {
        size_t n = 0;
        while (*p && !strchr(" \t\n;&|()`<>", *p)) {
            if (*p != '\'' && *p != '"')
                word[n++] = *p;
            p++;
        }
        word[n] = '\0';
        if (n && !output) {
            char *path = path_join(cfg->dir, word);
            add_file(cf, path, false);
            free(path);
        }
        if (n)
            output = false;
        if (*p == '>')
            output = true;
        if (*p)
            p++;
    }
    free(word);
}

struct code_files *code_files_new(const struct config *cfg)
{
    struct code_files *cf = xcalloc(1, sizeof *cf);
    pthread_mutex_init(&cf->lock, NULL);
    cf->lasting = cfg->proc_kind == PROC_WORKER || cfg->proc_kind == PROC_PYTHON ||
                  cfg->proc_kind == PROC_PLUGIN;
    cf->running = 1; /* the processor's start */
    cf->fd = -1;
    add_processor_files(cf, cfg);
    if (cfg->proc_kind == PROC_PLUGIN && cf->n == 1)
        cf->fd = open(cf->f[0].path, O_RDONLY | O_CLOEXEC);
    return cf;
}

const char *code_files_lines(const struct code_files *cf)
{
    return cf->lines.buf ? cf->lines.buf : "";
}

void code_files_free(struct code_files *cf)
{
    if (!cf)
        return;
    for (size_t i = 0; i < cf->n; i++)
        free(cf->f[i].path);
    free(cf->f);
    sb_free(&cf->lines);
    free(cf->stale);
    if (cf->fd >= 0)
        close(cf->fd);
    pthread_mutex_destroy(&cf->lock);
    free(cf);
}

static int changed(const char *path, struct errbuf *err)
{
    return err_set(err, -EIO, "the processor's code %s changed while mounted; remount to use it",
                   path);
}

/* Called with cf->lock held: lasting processes may have started on other code, for good. */
static void go_stale(struct code_files *cf, const char *path)
{
    if (cf->lasting && !cf->stale)
        cf->stale = xasprintf("the processor's code %s changed while mounted, while a ROI ran "
                              "(its processes may have loaded it); remount to use it",
                              path);
}

int code_files_begin(struct code_files *cf, uint64_t *gen, struct errbuf *err)
{
    *gen = 0;
    if (!cf || cf->n == 0)
        return 0;
    int rc = 0;
    pthread_mutex_lock(&cf->lock);
    for (size_t i = 0; i < cf->n && !rc && !cf->stale && !cf->loaded; i++) {
        struct code_file *f = &cf->f[i];
        struct stat st;
        struct code_stat now;
        if (stat(f->path, &st) == 0) {
            stat_of(&st, &now);
            if (same_stat(&now, &f->seen))
                continue;
        }
        if (cf->running) /* some run may have read it as it changed */
            go_stale(cf, f->path);
        struct key128 key;
        if (hash_path(f->path, &st, &key, &now) < 0 || !key_eq(key, f->hash)) {
            rc = changed(f->path, err);
        } else if (!cf->stale) { /* the same contents: touched, or written again */
            f->seen = now;
            cf->gen++;
            cf->moved = i;
        }
    }
    if (!rc && cf->stale)
        rc = err_set(err, -EIO, "%s", cf->stale);
    if (!rc) {
        cf->running++;
        *gen = cf->gen;
    }
    pthread_mutex_unlock(&cf->lock);
    return rc;
}

/* The status of the loaded plugin's file but its change time (seen's): a new build renamed
 * over the path unlinks the file, which changes that; a write changes the modification time.
 * 0, or -errno. */
static int plugin_stat(const struct code_files *cf, struct stat *st, struct code_stat *now)
{
    if (fstat(cf->fd, st) < 0)
        return -errno;
    stat_of(st, now);
    now->ctime_ns = cf->f[0].seen.ctime_ns;
    return 0;
}

/* Called with cf->lock held, for a loaded plugin: whether its file has changed since it was
 * seen with the identity's contents (hashed again when its status is new). */
static bool plugin_changed(struct code_files *cf)
{
    struct code_file *f = &cf->f[0];
    struct stat st;
    struct code_stat now = {0}, after = {0};
    if (plugin_stat(cf, &st, &now) < 0)
        return true;
    if (same_stat(&now, &f->seen))
        return false;
    if (same_stat(&now, &cf->bad))
        return true;
    struct key128 key = hash_fd(cf->fd, &st);
    if (plugin_stat(cf, &st, &after) == 0 && same_stat(&now, &after) && key_eq(key, f->hash)) {
        f->seen = now; /* written again, the same: later runs go on */
        cf->gen++;
        cf->moved = 0;
    } else {
        cf->bad = now;
    }
    return true;
}

int code_files_end(struct code_files *cf, uint64_t gen, struct errbuf *err)
{
    if (!cf || cf->n == 0)
        return 0;
    pthread_mutex_lock(&cf->lock);
    cf->running--;
    const char *path = NULL;
    if (cf->loaded && plugin_changed(cf))
        path = cf->f[0].path;
    if (cf->fd >= 0 && !cf->loaded) { /* the start: dlopen loaded the file hashed */
        struct stat st;
        struct code_stat now = {0};
        if (fstat(cf->fd, &st) == 0)
            stat_of(&st, &now);
        if (!same_stat(&now, &cf->f[0].seen))
            path = cf->f[0].path;
    }
    for (size_t i = 0; i < cf->n && !path && !cf->loaded; i++) {
        struct stat st;
        struct code_stat now = {0};
        bool there = stat(cf->f[i].path, &st) == 0;
        if (there)
            stat_of(&st, &now);
        if (!there || !same_stat(&now, &cf->f[i].seen))
            path = cf->f[i].path;
    }
    if (!path && gen != cf->gen) /* changed, and let through by a begin since */
        path = cf->f[cf->moved].path;
    int rc = 0;
    if (path) {
        if (!cf->loaded) /* a loaded plugin runs what its file holds now: no process to fear */
            go_stale(cf, path);
        rc = err_set(err, -EIO,
                     "the processor's code %s changed while this ROI ran; its result is not kept",
                     path);
    } else if (cf->stale) {
        rc = err_set(err, -EIO, "%s", cf->stale);
    }
    if (cf->fd >= 0)
        cf->loaded = true;
    pthread_mutex_unlock(&cf->lock);
    return rc;
}
