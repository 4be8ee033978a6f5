/* watch.c: the input array's files followed with inotify (see watch.h). One thread reads the
 * events, keeps the table of watched directories (only it touches it once started) and
 * reports what changed, a batch per read. */
#include "watch.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../nd.h"

#define DIR_MASK                                                                                   \
    (IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_CREATE | IN_DELETE_SELF |       \
     IN_MOVE_SELF | IN_ONLYDIR | IN_EXCL_UNLINK)
#define LOOK_AGAIN_MS 500
/* the parent's: the array's directory (by name) removed, moved away or made again */
#define PARENT_MASK                                                                                \
    (IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF |         \
     IN_ONLYDIR | IN_EXCL_UNLINK)

struct wdir {
    char *rel; /* relative to the array: "" for it, "c", "c/1", "1/2", ... */
    int depth;
};

struct watch {
    int fd, stop[2];
    char *path;
    char *parent, *name; /* of path: the parent is watched for the array's directory */
    int parent_wd;
    bool parent_warned;
    bool there; /* a directory is at path, of root_dev, root_ino, watched */
    uint64_t root_dev, root_ino;
    struct zarr_meta m;
    int max_depth; /* of the directories that hold chunk files */
    const char *meta_name;
    struct watch_ops ops;
    void *ctx;
    pthread_t thread;
    bool started;
    struct wdir *dirs; /* by watch descriptor */
    int ndirs;         /* slots in dirs */
    _Atomic size_t nwatched, unwatched;
    _Atomic uint64_t events, overflows;
    bool warned;
    char warning[1024]; /* written once, before has_warning is set */
    _Atomic bool has_warning;
    /* the batch being gathered */
    uint64_t *sids;
    size_t nsids, capsids;
    bool meta, everything;
    bool moved; /* the array's directory, or its parent, removed, moved or made */
};

/* ---- chunk keys ---- */

/* A canonical decimal (no sign, no leading zero) below limit. */
static bool parse_index(const char *s, size_t len, uint64_t limit, uint64_t *out)
{
    if (len == 0 || len > 20 || (len > 1 && s[0] == '0'))
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9' || v > (UINT64_MAX - 9) / 10)
            return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *out = v;
    return v < limit;
}

int watch_parse_key(const struct zarr_meta *m, const char *rel, uint64_t *sid)
{
    uint64_t grid[ROIFS_MAX_DIM], idx[ROIFS_MAX_DIM];
    zarr_meta_grid(m, grid);
    if (m->ndim == 0) {
        *sid = 0;
        return strcmp(rel, m->key_prefix_c ? "c" : "0") == 0 ? 0 : -1;
    }
    const char *p = rel;
    if (m->key_prefix_c) {
        if (p[0] != 'c' || p[1] != m->separator)
            return -1;
        p += 2;
    }
    for (int d = 0; d < m->ndim; d++) {
        const char *end = strchr(p, m->separator);
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if ((d < m->ndim - 1) != (end != NULL) || !parse_index(p, len, grid[d], &idx[d]))
            return -1;
        p += len + 1;
    }
    *sid = nd_linear(idx, grid, m->ndim);
    return 0;
}

/* ---- the table of watched directories ---- */

static void note(struct watch *w, uint64_t sid)
{
    if (w->nsids == w->capsids) {
        w->capsids = w->capsids ? 2 * w->capsids : 64;
        w->sids = xrealloc(w->sids, w->capsids * sizeof *w->sids);
    }
    w->sids[w->nsids++] = sid;
}

static char *child_rel(const char *rel, const char *name)
{
    return rel[0] ? xasprintf("%s/%s", rel, name) : xstrdup(name);
}

/* Whether a directory called name at depth (1 = in the array's directory) may hold keys. */
static bool key_dir(const struct watch *w, const char *name, int depth)
{
    if (depth > w->max_depth)
        return false;
    if (w->m.key_prefix_c && depth == 1)
        return strcmp(name, "c") == 0;
    for (const char *p = name; *p; p++)
        if (*p < '0' || *p > '9')
            return false;
    return name[0] != '\0';
}

/* A sysctl's value, or -1. */
static long read_limit(const char *path)
{
    FILE *f = fopen(path, "r");
    long v = -1;
    if (f) {
        if (fscanf(f, "%ld", &v) != 1)
            v = -1;
        fclose(f);
    }
    return v;
}

static void warn_limit(struct watch *w, const char *full, int e)
{
    w->unwatched++;
    if (w->warned)
        return;
    w->warned = true;
    /* the limit of the user namespace, when lower, is the one that was reached */
    long global = read_limit("/proc/sys/fs/inotify/max_user_watches");
    long ns = read_limit("/proc/sys/user/max_inotify_watches");
    bool inner = ns >= 0 && (global < 0 || ns < global);
    snprintf(w->warning, sizeof w->warning,
             "cannot watch %s: %s (%s = %ld); changes under it are still found when a chunk is "
             "opened, but the kernel's cached pages and sizes of the chunks that depend on them "
             "are not dropped: raise the limit (sysctl %s=N) and mount again",
             full, strerror(e), inner ? "user.max_inotify_watches" : "fs.inotify.max_user_watches",
             inner ? ns : global,
             inner ? "user.max_inotify_watches" : "fs.inotify.max_user_watches");
    atomic_store(&w->has_warning, true);
    log_warn("[input] watch: %s", w->warning);
}

/* Watches directory rel (at depth) and those under it that may hold keys; with report, the
 * chunk files found are noted as changed (they may have been written before the watch). */
static void add_tree(struct watch *w, const char *rel, int depth, bool report)
{
    char *full = rel[0] ? xasprintf("%s/%s", w->path, rel) : xstrdup(w->path);
    int wd = inotify_add_watch(w->fd, full, DIR_MASK);
    if (wd < 0) {
        if (errno == ENOSPC || errno == ENOMEM)
            warn_limit(w, full, errno);
        free(full);
        return;
    }
    if (wd >= w->ndirs) {
        int n = wd + 64;
        w->dirs = xrealloc(w->dirs, (size_t)n * sizeof *w->dirs);
        memset(w->dirs + w->ndirs, 0, (size_t)(n - w->ndirs) * sizeof *w->dirs);
        w->ndirs = n;
    }
    if (!w->dirs[wd].rel) {
        w->dirs[wd] = (struct wdir){xstrdup(rel), depth};
        w->nwatched++;
    }
    DIR *d = opendir(full);
    free(full);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char *sub = child_rel(rel, de->d_name);
        bool isdir = de->d_type == DT_DIR;
        if (de->d_type == DT_UNKNOWN) {
            struct stat st;
            char *p = xasprintf("%s/%s", w->path, sub);
            isdir = lstat(p, &st) == 0 && S_ISDIR(st.st_mode);
            free(p);
        }
        uint64_t sid;
        if (isdir && key_dir(w, de->d_name, depth + 1))
            add_tree(w, sub, depth + 1, report);
        else if (!isdir && report && watch_parse_key(&w->m, sub, &sid) == 0)
            note(w, sid);
        free(sub);
    }
    if (d)
        closedir(d);
}

static void forget_dir(struct watch *w, int wd)
{
    if (wd >= 0 && wd < w->ndirs && w->dirs[wd].rel) {
        free(w->dirs[wd].rel);
        w->dirs[wd].rel = NULL;
        w->nwatched--;
    }
}

/* ---- events ---- */

static void on_event(struct watch *w, const struct inotify_event *ev)
{
    if (ev->mask & IN_Q_OVERFLOW) {
        w->overflows++;
        w->everything = true;
        return;
    }
    if (ev->wd == w->parent_wd) {
        if (ev->mask & IN_IGNORED)
            w->parent_wd = -1;
        if ((ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)) ||
            (ev->len && strcmp(ev->name, w->name) == 0))
            w->moved = true;
        return;
    }
    if (ev->wd < 0 || ev->wd >= w->ndirs || !w->dirs[ev->wd].rel)
        return;
    const struct wdir *dir = &w->dirs[ev->wd];
    if (ev->mask & IN_IGNORED) {
        forget_dir(w, ev->wd);
        return;
    }
    if (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF)) {
        w->moved = w->moved || dir->depth == 0;
        return;
    }
    if (!ev->len || ev->name[0] == '\0')
        return;
    if (ev->mask & IN_ISDIR) {
        if ((ev->mask & (IN_CREATE | IN_MOVED_TO)) && key_dir(w, ev->name, dir->depth + 1)) {
            char *sub = child_rel(dir->rel, ev->name);
            add_tree(w, sub, dir->depth + 1, true);
            free(sub);
        } else if (ev->mask & IN_MOVED_FROM) {
            w->everything = true; /* its files went with it, unseen */
        }
        return;
    }
    if (!(ev->mask & (IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE)))
        return;
    if (dir->depth == 0 && strcmp(ev->name, w->meta_name) == 0) {
        w->meta = true;
        return;
    }
    char *rel = child_rel(dir->rel, ev->name);
    uint64_t sid;
    if (watch_parse_key(&w->m, rel, &sid) == 0)
        note(w, sid);
    free(rel);
}

static int by_value(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Watches the directory at the path (its tree) and its parent. */
static void arm(struct watch *w)
{
    struct stat st;
    w->there = stat(w->path, &st) == 0 && S_ISDIR(st.st_mode);
    w->root_dev = w->there ? (uint64_t)st.st_dev : 0;
    w->root_ino = w->there ? (uint64_t)st.st_ino : 0;
    if (w->there)
        add_tree(w, "", 0, false);
    int wd = inotify_add_watch(w->fd, w->parent, PARENT_MASK);
    if (wd != w->parent_wd && w->parent_wd >= 0) /* the parent is another directory now */
        inotify_rm_watch(w->fd, w->parent_wd);
    if (wd < 0 && w->there && !w->parent_warned) { /* not counted: no chunk file is there */
        w->parent_warned = true;
        log_warn("[input] watch: cannot watch %s: %s; another directory at %s is found at the "
                 "next open of a chunk, but the kernel's cached pages and sizes are not dropped",
                 w->parent, strerror(errno), w->path);
    }
    w->parent_wd = wd;
}

/* After an event on the array's directory itself or its name: true when the directory at the
 * path is another one now, or none, whose watches then replace the old one's. */
static bool rearm(struct watch *w)
{
    struct stat st;
    bool there = stat(w->path, &st) == 0 && S_ISDIR(st.st_mode);
    if (there == w->there &&
        (!there || ((uint64_t)st.st_dev == w->root_dev && (uint64_t)st.st_ino == w->root_ino))) {
        if (w->parent_wd < 0)
            arm(w); /* moved away and back, say: the parent may be another one */
        return false;
    }
    for (int wd = 0; wd < w->ndirs; wd++)
        if (w->dirs[wd].rel) {
            inotify_rm_watch(w->fd, wd);
            forget_dir(w, wd);
        }
    arm(w);
    return true;
}

/* Reports the batch gathered. */
static void flush(struct watch *w)
{
    bool replaced = w->moved && rearm(w);
    if (replaced) {
        w->everything = false; /* the new directory is watched whole, and all of it reported */
        w->ops.dir_changed(w->ctx, w->there);
    }
    if (w->everything) {
        add_tree(w, "", 0, false); /* directories made while events were lost */
        w->ops.everything_changed(w->ctx);
    } else if (w->nsids && !replaced) {
        qsort(w->sids, w->nsids, sizeof *w->sids, by_value);
        size_t n = 0;
        for (size_t i = 0; i < w->nsids; i++)
            if (n == 0 || w->sids[n - 1] != w->sids[i])
                w->sids[n++] = w->sids[i];
        w->events += n;
        w->ops.chunks_changed(w->ctx, w->sids, n);
    }
    if (w->meta && !replaced) /* dir_changed looked at the new one's */
        w->ops.metadata_changed(w->ctx);
    w->nsids = 0;
    w->meta = w->everything = w->moved = false;
}

static void *watch_main(void *arg)
{
    struct watch *w = arg;
    /* aligned for struct inotify_event */
    char buf[64 * 1024] __attribute__((aligned(__alignof__(struct inotify_event))));
    for (;;) {
        struct pollfd p[2] = {{w->fd, POLLIN, 0}, {w->stop[0], POLLIN, 0}};
        /* No directory at the path, or its parent not watched (gone too, say): no event
         * tells when one is there again, so look twice a second. */
        int n = poll(p, 2, w->there && w->parent_wd >= 0 ? -1 : LOOK_AGAIN_MS);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (p[1].revents)
            break;
        w->moved = w->moved || n == 0;
        /* everything there is now, then one report */
        for (;;) {
            ssize_t n = read(w->fd, buf, sizeof buf);
            if (n <= 0)
                break;
            for (char *q = buf; q < buf + n;) {
                const struct inotify_event *ev = (const struct inotify_event *)q;
                on_event(w, ev);
                q += sizeof *ev + ev->len;
            }
        }
        flush(w);
    }
    return NULL;
}

int watch_start(const char *path, const struct zarr_meta *m, const struct watch_ops *ops, void *ctx,
                struct watch **out, struct errbuf *err)
{
    struct watch *w = xcalloc(1, sizeof *w);
    w->path = xstrdup(path);
    w->m = *m;
    w->ops = *ops;
    w->ctx = ctx;
    w->meta_name = m->format == 3 ? "zarr.json" : ".zarray";
    w->max_depth = m->separator == '/' && m->ndim > 0 ? (m->key_prefix_c ? 1 : 0) + m->ndim - 1 : 0;
    w->stop[0] = w->stop[1] = -1;
    w->parent_wd = -1;
    size_t len = strlen(w->path);
    while (len > 1 && w->path[len - 1] == '/')
        w->path[--len] = '\0';
    char *slash = strrchr(w->path, '/');
    w->parent = slash ? xasprintf("%.*s", slash == w->path ? 1 : (int)(slash - w->path), w->path)
                      : xstrdup(".");
    w->name = xstrdup(slash ? slash + 1 : w->path);
    w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (w->fd < 0) {
        int e = errno;
        watch_stop(w);
        return err_set(err, -e, "[input] watch: cannot start inotify: %s%s", strerror(e),
                       e == EMFILE ? " (the limit fs.inotify.max_user_instances is reached)" : "");
    }
    if (pipe2(w->stop, O_CLOEXEC) < 0) {
        int e = errno;
        watch_stop(w);
        return err_set(err, -e, "[input] watch: %s", strerror(e));
    }
    arm(w);
    if (w->nwatched == 0) {
        watch_stop(w);
        return err_set(err, -ENOSPC, "[input] watch: cannot watch %s", path);
    }
    w->nsids = 0; /* what was there before the watch is the input as the mount found it */
    int rc = pthread_create(&w->thread, NULL, watch_main, w);
    if (rc != 0) {
        watch_stop(w);
        return err_set(err, -rc, "[input] watch: cannot start a thread: %s", strerror(rc));
    }
    w->started = true;
    *out = w;
    return 0;
}

void watch_stop(struct watch *w)
{
    if (!w)
        return;
    if (w->started) {
        if (write(w->stop[1], "x", 1) < 0)
            log_warn("[input] watch: cannot stop its thread: %s", strerror(errno));
        pthread_join(w->thread, NULL);
    }
    for (int i = 0; i < w->ndirs; i++)
        free(w->dirs[i].rel);
    free(w->dirs);
    free(w->sids);
    if (w->fd >= 0)
        close(w->fd);
    for (int i = 0; i < 2; i++)
        if (w->stop[i] >= 0)
            close(w->stop[i]);
    free(w->path);
    free(w->parent);
    free(w->name);
    free(w);
}

void watch_get_stats(struct watch *w, struct watch_stats *st)
{
    st->dirs = w->nwatched;
    st->unwatched = w->unwatched;
    st->events = w->events;
    st->overflows = w->overflows;
    st->warning = atomic_load(&w->has_warning) ? w->warning : NULL;
}
