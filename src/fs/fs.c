/* fs.c: the FUSE side (with open.c, versions.c and passthrough.c). It maps low-level requests
 * onto the namespace and the engine, mounts and serves until unmounted, and then stops within
 * a few seconds whatever runs: it answers the opens still waiting, unmounts, and stops the
 * engine (which kills the running processors). Opens of chunks pass through to the cache
 * files when the kernel allows it (passthrough.h); otherwise READs are served from them here. */
#include "fs_internal.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../arrays/otable.h"
#include "runfile.h"

/* How long the engine may take to stop after the unmount (an in-process computation cannot
 * be killed) before the daemon exits without it. */
#define STOP_GRACE_S 5

/* The FUSE device polling window (devio.h), in microseconds; off unless ROIFS_FUSE_POLL_US
 * asks for it: on a quiet machine a 1000 us window made warm reads slower, not faster
 * (bench/notes/fusepath.md, bench/RESULTS.md "Warm reads"). */
#define POLL_US_DEFAULT 0
#define POLL_US_MAX     100000

static struct fs *fs_of(fuse_req_t req)
{
    return fuse_req_userdata(req);
}

/* Size of chunk n as inode ino shows it; *timeout is how long the kernel may keep it, and
 * *made_ns (0: not computed) when the bytes it serves were made. That is its mtime: a reader
 * that knows a file by size and mtime, such as a second mount taking this one as its input
 * (input signatures: docs/operations.md, Editing a job) or rsync, then sees it unchanged across
 * remounts. */
static uint64_t chunk_size(struct fs *fs, const struct ns_node *n, uint64_t ino, double *timeout,
                           int64_t *made_ns)
{
    uint64_t base, size;
    if (vt_attr(fs->vt, ino, &base, &size, made_ns) == 1)
        return size;    /* the version this inode serves: fixed while it is open */
    bool known = false; /* an image of a plate not read yet: not known either */
    struct engine *e = arrayset_engine_get(fs->set, (size_t)n->array, false);
    if (e) {
        engine_chunk_size(e, n->chunk, &size, &known, made_ns);
        arrayset_engine_put(fs->set, (size_t)n->array);
    }
    if (known)
        return size;
    /* Not computed yet, and its encoded size depends on the data: an upper bound, which the
     * kernel must ask again for after the open (which computes it). A reader that trusts the
     * size seen before opening finds the file shorter and fails; none can copy a short or
     * empty chunk as if it were whole (docs/mounted-tree.md, "Size contract"). */
    *timeout = 0;
    if ((size_t)n->array >= fs->nbound) /* a plate's image opened since the start */
        return zarr_chunk_size_bound(&arrayset_array(fs->set, (size_t)n->array)->task->out);
    return fs->bound[n->array];
}

/* The input's owner and permissions, without write: the kernel (default_permissions) then
 * lets another user of a shared mount (allow_other) at an input file or directory only as
 * the input itself would. */
static void input_owner(struct stat *st, const struct stat *in)
{
    st->st_mode = (st->st_mode & S_IFMT) | (in->st_mode & 0555);
    st->st_uid = in->st_uid;
    st->st_gid = in->st_gid;
}

/* The input's attributes of path, as this thread's file system ids may see them: 1 with *in,
 * 0 when it is gone (a name the kernel still holds: shown as it was made), -EACCES (or
 * -EPERM) when they may not. */
static int input_stat(const char *path, struct stat *in)
{
    if (stat(path, in) == 0)
        return 1;
    return errno == EACCES || errno == EPERM ? -errno : 0;
}

/* Attributes of node n shown as inode ino to process pid; *timeout is how long the kernel
 * may keep them. 0, or -EACCES when n is the input's and the caller may not see it (see
 * caller.c: the input's nodes are looked at with the caller's ids). */
static int node_attr(struct fs *fs, const struct ns_node *n, uint64_t ino, pid_t pid,
                     struct stat *st, double *timeout)
{
    int r = 0;
    memset(st, 0, sizeof *st);
    st->st_ino = ino;
    st->st_uid = fs->uid;
    st->st_gid = fs->gid;
    st->st_atim = st->st_mtim = st->st_ctim = fs->mtime;
    st->st_blksize = 4096;
    st->st_nlink = 1;
    st->st_mode = S_IFREG | 0444;
    *timeout = LONG_TIMEOUT;
    switch (n->kind) {
    case NS_DIR: {
        st->st_mode = S_IFDIR | 0555;
        st->st_nlink = 2;
        struct stat in;
        if (n->live && (r = input_stat(n->text, &in)) == 1) { /* a directory of the input */
            input_owner(st, &in);
            *timeout = LIVE_TIMEOUT;
        }
        break;
    }
    case NS_META:
        st->st_size = (off_t)n->len;
        break;
    case NS_STATUS:
        /* Read with direct_io, a snapshot per open: its opener sees that snapshot's size,
         * others the document's size now (never 0, which archivers would store as empty). */
        st->st_size = (off_t)fs_status_size(fs, pid);
        *timeout = 0;
        break;
    case NS_CHUNK: {
        int64_t made = 0;
        uint64_t size = chunk_size(fs, n, ino, timeout, &made);
        st->st_size = size > INT64_MAX ? INT64_MAX : (off_t)size;
        /* Before it is computed: the mount's time. Opening it makes it (or finds it made) and
         * drops the kernel's attributes of it (open.c), so the change is seen. */
        if (made > 0) {
            st->st_mtim = ts_from_ns(made);
            st->st_ctim = st->st_mtim;
        }
        break;
    }
    case NS_INPUT: {    /* the input file as it is: short-lived, it is not ours */
        if (!n->live) { /* a remote image's file: its size as its HEAD (or metadata) gave */
            st->st_size = n->chunk > INT64_MAX ? INT64_MAX : (off_t)n->chunk;
            break;
        }
        struct stat in;
        if ((r = input_stat(n->text, &in)) == 1) {
            st->st_size = in.st_size;
            st->st_mtim = in.st_mtim;
            input_owner(st, &in);
        }
        *timeout = LIVE_TIMEOUT;
        break;
    }
    case NS_GEN: {  /* made from the input as it is now: every stat sees its size now */
        size_t len; /* 0 for a failed image's file of a plate, whose open fails */
        free(arrayset_generated(fs->set, n->chunk, &len));
        st->st_size = (off_t)len;
        *timeout = 0;
        break;
    }
    case NS_TABLE: { /* an upper bound until the table is computed (the size contract); the
                      * table is made again when the label image changed: a size for a
                      * second, the file opened dropping it (open.c) */
        bool exact;
        uint64_t size = arrayset_table_size(fs->set, n->chunk, &exact);
        st->st_size = size > INT64_MAX ? INT64_MAX : (off_t)size;
        *timeout = exact ? LIVE_TIMEOUT : 0;
        break;
    }
    }
    /* nothing is stored for a chunk not computed yet */
    st->st_blocks = *timeout == 0 && (n->kind == NS_CHUNK || n->kind == NS_TABLE)
                        ? 0
                        : (st->st_size + 511) / 512;
    return r < 0 ? r : 0;
}

/* node_attr as the process that made req would see it (caller.c) when n is made from the
 * input (ome = labels): a directory or file of it, or a list made from its files. */
static int node_attr_for(fuse_req_t req, const struct ns_node *n, uint64_t ino, struct stat *st,
                         double *timeout)
{
    struct fs *fs = fs_of(req);
    pid_t pid = fuse_req_ctx(req)->pid;
    if (!n->live && n->kind != NS_GEN)
        return node_attr(fs, n, ino, pid, st, timeout);
    struct caller_ids ids;
    int r = caller_enter(req, &ids);
    if (r == 0)
        r = node_attr(fs, n, ino, pid, st, timeout);
    caller_leave(&ids);
    return r;
}

static void fs_init(void *userdata, struct fuse_conn_info *conn)
{
    struct fs *fs = userdata;
    conn->max_background = 64;
    conn->congestion_threshold = 48;
    if (conn->capable & FUSE_CAP_SPLICE_WRITE)
        conn->want &= ~FUSE_CAP_SPLICE_WRITE;
    if (fs->ready_fd >= 0) {
        if (write(fs->ready_fd, "R", 1) < 0)
            log_warn("cannot notify the parent process: %s", strerror(errno));
        close(fs->ready_fd);
        fs->ready_fd = -1;
    }
}

static void fs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct fs *fs = fs_of(req);
    struct ns_node n;
    struct fuse_entry_param e;
    memset(&e, 0, sizeof e);
    /* in a directory of the input: as the caller would find it there (caller.c) */
    struct caller_ids ids = {0};
    bool mirror = ns_follows(fs->ns, parent);
    int r = mirror ? caller_enter(req, &ids) : 0;
    if (r == 0)
        r = ns_lookup(fs->ns, parent, name, &n);
    if (mirror)
        caller_leave(&ids);
    log_debug("lookup %llu/%s: %s", (unsigned long long)parent, name, r ? strerror(-r) : "ok");
    if (r == -ENOENT) {
        /* negative entry: the tree never changes, so cache the miss; but a directory of the
         * input read through (ome = labels) may get the name any time */
        e.ino = 0;
        e.entry_timeout = ns_follows(fs->ns, parent) ? LIVE_TIMEOUT : LONG_TIMEOUT;
        fuse_reply_entry(req, &e);
        return;
    }
    if (r < 0) {
        fuse_reply_err(req, -r);
        return;
    }
    e.ino = n.kind == NS_CHUNK ? vt_current(fs->vt, n.ino) : n.ino;
    e.generation = 1;
    if ((r = node_attr_for(req, &n, e.ino, &e.attr, &e.attr_timeout)) < 0) {
        if (n.live)
            ns_forget(fs->ns, n.ino, 1);
        fuse_reply_err(req, -r);
        return;
    }
    e.entry_timeout = n.live ? LIVE_TIMEOUT : LONG_TIMEOUT; /* the input's: it may go away */
    if (fuse_reply_entry(req, &e) != 0 && n.live)           /* the kernel never got it: not held */
        ns_forget(fs->ns, n.ino, 1);
}

/* The kernel dropped an inode: a name of the input read through goes with its last lookup
 * (the static tree keeps its nodes, which lookups never count). */
static void fs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
    ns_forget(fs_of(req)->ns, ino, nlookup);
    fuse_reply_none(req);
}

static void fs_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
    struct fs *fs = fs_of(req);
    for (size_t i = 0; i < count; i++)
        ns_forget(fs->ns, forgets[i].ino, forgets[i].nlookup);
    fuse_reply_none(req);
}

static void fs_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)fi;
    struct fs *fs = fs_of(req);
    struct ns_node n;
    if (fs_node(fs, ino, &n) < 0) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    struct stat st;
    double timeout;
    int r = node_attr_for(req, &n, ino, &st, &timeout);
    if (r < 0) {
        fuse_reply_err(req, -r);
        return;
    }
    log_debug("getattr %llu: size %lld", (unsigned long long)ino, (long long)st.st_size);
    fuse_reply_attr(req, &st, timeout);
}

struct dirbuf {
    fuse_req_t req;
    struct vt *vt;
    char *buf;
    size_t size, len;
};

static int dir_emit(void *ctx, const char *name, uint64_t ino, bool is_dir, uint64_t next_off)
{
    struct dirbuf *db = ctx;
    struct stat st;
    memset(&st, 0, sizeof st);
    st.st_ino = is_dir ? ino : vt_current(db->vt, ino); /* as a lookup would answer */
    st.st_mode = is_dir ? S_IFDIR : S_IFREG;
    size_t need = fuse_add_direntry(db->req, NULL, 0, name, NULL, 0);
    if (db->len + need > db->size)
        return 1;
    fuse_add_direntry(db->req, db->buf + db->len, db->size - db->len, name, &st, (off_t)next_off);
    db->len += need;
    return 0;
}

/* An open directory: its handle keeps what its listing goes on from (ns_readdir), so that
 * listings of one directory at once never share offsets. */
static void fs_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    struct fs *fs = fs_of(req);
    struct handle *h = handle_new(NS_DIR);
    handle_add(fs, h);
    fi->fh = (uint64_t)(uintptr_t)h;
    if (fuse_reply_open(req, fi) == -ENOENT)
        handle_free(fs, h);
}

static void fs_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    struct handle *h = (struct handle *)(uintptr_t)fi->fh;
    if (h)
        handle_free(fs_of(req), h);
    fuse_reply_err(req, 0);
}

/* The kernel sends one READDIR of an open directory at a time (its readdir lock), so the
 * handle's listing needs no lock of its own. A directory of the input is listed as the
 * caller (caller.c). */
static void fs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
    struct fs *fs = fs_of(req);
    struct handle *h = (struct handle *)(uintptr_t)fi->fh;
    struct dirbuf db = {.req = req, .vt = fs->vt, .buf = xmalloc(size), .size = size};
    struct caller_ids ids = {0};
    bool mirror = ns_follows(fs->ns, ino);
    int r = mirror ? caller_enter(req, &ids) : 0;
    if (r == 0)
        r = ns_readdir(fs->ns, ino, (uint64_t)off, h ? &h->listing : NULL, dir_emit, &db);
    if (mirror)
        caller_leave(&ids);
    if (r < 0)
        fuse_reply_err(req, -r);
    else
        fuse_reply_buf(req, db.buf, db.len);
    free(db.buf);
}

static void fs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    (void)ino;
    struct handle *h = (struct handle *)(uintptr_t)fi->fh;
    if (h->kind != NS_CHUNK && h->kind != NS_INPUT) {
        const char *data = h->buf ? h->buf : h->text;
        size_t o = (size_t)off < h->len ? (size_t)off : h->len;
        size_t n = h->len - o < size ? h->len - o : size;
        /* Reply from a copy: once the kernel has the reply, the reader may close the file and
         * a RELEASE on another thread free h while fuse_reply_buf is still returning. */
        char *copy = xmalloc(n ? n : 1);
        memcpy(copy, data + o, n);
        fuse_reply_buf(req, copy, n);
        free(copy);
        return;
    }
    atomic_fetch_add_explicit(h->kind == NS_CHUNK ? &fs_of(req)->chunk_reads
                                                  : &fs_of(req)->input_reads,
                              1, memory_order_relaxed);
    char *buf = xmalloc(size);
    size_t got = 0;
    int r = pread_full(h->fd, buf, size, (uint64_t)off, &got);
    if (r < 0)
        fuse_reply_err(req, -r);
    else
        fuse_reply_buf(req, buf, got);
    free(buf);
}

static void fs_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    struct handle *h = (struct handle *)(uintptr_t)fi->fh;
    if (h)
        handle_free(fs_of(req), h);
    fuse_reply_err(req, 0);
}

static void fs_statfs(fuse_req_t req, fuse_ino_t ino)
{
    (void)ino;
    struct statvfs sv;
    memset(&sv, 0, sizeof sv);
    sv.f_bsize = sv.f_frsize = 4096;
    sv.f_namemax = 255;
    fuse_reply_statfs(req, &sv);
}

/* ---- everything that would change the tree ---- */

static void ro_entry(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
    (void)parent, (void)name, (void)mode;
    fuse_reply_err(req, EROFS);
}

static void ro_mknod(fuse_req_t req, fuse_ino_t p, const char *n, mode_t m, dev_t d)
{
    (void)d;
    ro_entry(req, p, n, m);
}

static void ro_name(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    ro_entry(req, parent, name, 0);
}

static void ro_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
    (void)link;
    ro_entry(req, parent, name, 0);
}

static void ro_rename(fuse_req_t req, fuse_ino_t p, const char *n, fuse_ino_t np, const char *nn,
                      unsigned int flags)
{
    (void)np, (void)nn, (void)flags;
    ro_entry(req, p, n, 0);
}

static void ro_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t np, const char *nn)
{
    (void)ino;
    ro_entry(req, np, nn, 0);
}

static void ro_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                       struct fuse_file_info *fi)
{
    (void)ino, (void)attr, (void)to_set, (void)fi;
    fuse_reply_err(req, EROFS);
}

static void ro_create(fuse_req_t req, fuse_ino_t p, const char *n, mode_t m,
                      struct fuse_file_info *fi)
{
    (void)fi;
    ro_entry(req, p, n, m);
}

static void ro_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                        size_t size, int flags)
{
    (void)ino, (void)name, (void)value, (void)size, (void)flags;
    fuse_reply_err(req, EROFS);
}

static void ro_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
    (void)ino, (void)name;
    fuse_reply_err(req, EROFS);
}

static const struct fuse_lowlevel_ops fs_ops = {
    .init = fs_init,
    .lookup = fs_lookup,
    .forget = fs_forget,
    .forget_multi = fs_forget_multi,
    .getattr = fs_getattr,
    .opendir = fs_opendir,
    .readdir = fs_readdir,
    .releasedir = fs_releasedir,
    .open = fs_open,
    .read = fs_read,
    .release = fs_release,
    .statfs = fs_statfs,
    .mknod = ro_mknod,
    .mkdir = ro_entry,
    .unlink = ro_name,
    .rmdir = ro_name,
    .symlink = ro_symlink,
    .rename = ro_rename,
    .link = ro_link,
    .setattr = ro_setattr,
    .create = ro_create,
    .setxattr = ro_setxattr,
    .removexattr = ro_removexattr,
};

static struct fuse_session *new_session(struct fs *fs, const struct fs_options *o,
                                        struct errbuf *err)
{
    struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
    /* "ro" last, so that no -o option can make the kernel mount writable. */
    char *opts = xasprintf("default_permissions,fsname=roifs,subtype=roifs%s%s,ro",
                           o->fuse_opts ? "," : "", o->fuse_opts ? o->fuse_opts : "");
    fuse_opt_add_arg(&args, "roifs");
    fuse_opt_add_arg(&args, "-o");
    fuse_opt_add_arg(&args, opts);
    free(opts);
    struct fuse_session *se = fuse_session_new(&args, &fs_ops, sizeof fs_ops, fs);
    fuse_opt_free_args(&args);
    if (!se)
        err_set(err, -EINVAL, "cannot create the FUSE session (bad -o options?)");
    return se;
}

static ssize_t io_read(int fd, void *buf, size_t len, void *userdata)
{
    return devio_on_read(((struct fs *)userdata)->dio, fd, buf, len);
}

static ssize_t io_writev(int fd, struct iovec *iov, int count, void *userdata)
{
    return devio_on_writev(((struct fs *)userdata)->dio, fd, iov, count);
}

static int32_t backing_open(void *ctx, int fd)
{
    return pt_backing_open(ctx, fd);
}

static void backing_close(void *ctx, int32_t id)
{
    pt_backing_close(ctx, id);
}

/* The device polling window (devio.h): ROIFS_FUSE_POLL_US, else POLL_US_DEFAULT. */
static unsigned poll_window_us(void)
{
    const char *e = getenv("ROIFS_FUSE_POLL_US");
    if (!e || !*e)
        return POLL_US_DEFAULT;
    char *end;
    unsigned long v = strtoul(e, &end, 10);
    if (*end || v > POLL_US_MAX) {
        log_warn("ROIFS_FUSE_POLL_US=%s ignored (0 to %d microseconds)", e, POLL_US_MAX);
        return POLL_US_DEFAULT;
    }
    return (unsigned)v;
}

static void state_init(struct fs *fs, struct arrayset *set, const struct fs_options *o)
{
    memset(fs, 0, sizeof *fs);
    fs->set = set;
    fs->ns = arrayset_tree(set);
    fs->uid = getuid();
    fs->gid = getgid();
    fs->ready_fd = o->ready_fd;
    pthread_mutex_init(&fs->handles_lock, NULL);
    pthread_mutex_init(&fs->pending_lock, NULL);
    fs->handles.next = fs->handles.prev = &fs->handles;
    fs->status.next = fs->status.prev = &fs->status;
    clock_gettime(CLOCK_REALTIME, &fs->mtime);
    fs->started_ns = ts_to_ns(fs->mtime);
    fs->pt = pt_new(arrayset_array(set, 0)->task->cfg.passthrough);
    fs->dio = devio_new(fs->pt, poll_window_us());
    fs->vt = vt_new(backing_open, backing_close, fs->pt);
    size_t n = arrayset_count(set);
    fs->bound = xcalloc(n, sizeof *fs->bound);
    fs->nbound = n;
    for (size_t i = 0; i < n; i++)
        fs->bound[i] = zarr_chunk_size_bound(&arrayset_array(set, i)->task->out);
}

/* After the session: handles of files still open (the kernel will never release them) go
 * with it, without a word to the closed FUSE device. */
static void state_free(struct fs *fs)
{
    vt_free(fs->vt);
    fs->vt = NULL;
    while (fs->handles.next != &fs->handles)
        handle_free(fs, fs->handles.next);
    while (fs->status.next != &fs->status)
        handle_free(fs, fs->status.next);
    devio_free(fs->dio);
    pt_free(fs->pt);
    free(fs->bound);
    pthread_mutex_destroy(&fs->handles_lock);
    pthread_mutex_destroy(&fs->pending_lock);
}

/* The engines' threads must not take the stop signals, which must reach the session loop's
 * waiting thread (libfuse's own threads block every signal). */
static int start_engines(struct fs *fs, struct errbuf *err)
{
    sigset_t stop, old;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &stop, &old);
    int r = arrayset_start(fs->set, err);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return r;
}

/* ---- stopping ---- */

struct stopper {
    pthread_mutex_t lock;
    pthread_cond_t cv; /* CLOCK_MONOTONIC */
    bool done;
    long minor; /* of the mount's run file, or -1 */
};

/* Exits the process when the engines have not stopped STOP_GRACE_S after the unmount: what
 * still runs is an in-process computation (builtin or plugin) that cannot be killed, and the
 * mount is gone already. Results not stored yet are computed again by a later mount. */
static void *stop_watch(void *arg)
{
    struct stopper *s = arg;
    struct timespec deadline = deadline_in(CLOCK_MONOTONIC, (struct timespec){STOP_GRACE_S, 0});
    pthread_mutex_lock(&s->lock);
    while (!s->done)
        if (pthread_cond_timedwait(&s->cv, &s->lock, &deadline) == ETIMEDOUT)
            break;
    bool done = s->done;
    pthread_mutex_unlock(&s->lock);
    if (!done) {
        log_warn("computations still running %d s after the unmount; exiting without them",
                 STOP_GRACE_S);
        if (s->minor >= 0)
            runfile_remove((unsigned)s->minor);
        /* exit_group itself: leaving that thread behind is the point, so the sanitizers'
         * _exit hooks (which would report it as leaked) are skipped */
        syscall(SYS_exit_group, 0);
    }
    return NULL;
}

/* Stops the engines (killing the running processors), within STOP_GRACE_S. */
static void stop_engines(struct arrayset *set, long minor)
{
    struct stopper s = {.minor = minor};
    pthread_mutex_init(&s.lock, NULL);
    cond_init_monotonic(&s.cv);
    pthread_t th;
    bool watching = pthread_create(&th, NULL, stop_watch, &s) == 0;
    arrayset_stop(set);
    pthread_mutex_lock(&s.lock);
    s.done = true;
    pthread_cond_signal(&s.cv);
    pthread_mutex_unlock(&s.lock);
    if (watching)
        pthread_join(th, NULL);
    pthread_cond_destroy(&s.cv);
    pthread_mutex_destroy(&s.lock);
}

/* Records this process as the mount's daemon (runfile.h); the device minor, or -1. */
static long record_daemon(const char *abs_mountpoint)
{
    struct mount_entry me;
    if (!abs_mountpoint || mountinfo_find(abs_mountpoint, &me) < 0 ||
        strcmp(me.fstype, "fuse.roifs") != 0)
        return -1;
    int r = runfile_write(me.minor);
    if (r < 0) {
        log_warn("cannot record the daemon for `roifs unmount`: %s", strerror(-r));
        return -1;
    }
    return me.minor;
}

static int mount_session(struct fs *fs, const struct fs_options *o, struct errbuf *err)
{
    fs->se = new_session(fs, o, err);
    if (!fs->se)
        return -EINVAL;
    if (fuse_set_signal_handlers(fs->se) != 0 || fuse_session_mount(fs->se, o->mountpoint) != 0) {
        fuse_remove_signal_handlers(fs->se);
        fuse_session_destroy(fs->se);
        return err_set(err, -EIO, "%s: cannot mount", o->mountpoint);
    }
    pt_set_device(fs->pt, fuse_session_fd(fs->se));
    int r = devio_attach(fs->dio, fs->se, io_read, io_writev);
    if (r < 0)
        log_warn("FUSE passthrough off: cannot hook the FUSE device: %s", strerror(-r));
    return 0;
}

int fs_run(struct arrayset *set, const struct fs_options *o, struct errbuf *err)
{
    struct fs fs;
    state_init(&fs, set, o);
    int r = start_engines(&fs, err);
    if (r < 0) {
        state_free(&fs);
        return r;
    }
    fs.ns = arrayset_tree(set);
    /* resolved before mounting: afterwards the path would ask this very process */
    char *abs = realpath(o->mountpoint, NULL);
    if ((r = mount_session(&fs, o, err)) < 0) {
        arrayset_stop(set);
        state_free(&fs);
        free(abs);
        return r;
    }
    long minor = record_daemon(abs);
    free(abs);
    const struct array *a0 = arrayset_array(set, 0);
    struct errbuf werr = {{0}};
    if (a0->task->cfg.watch && fs_follow_start(&fs, &werr) < 0)
        log_warn("%s; changes of the input are found when a chunk is opened, and the kernel "
                 "may serve pages and sizes cached before them",
                 werr.msg);
    log_info("mounted %s at %s (%zu ROIs, %d threads, cache %s)", a0->task->cfg.path, o->mountpoint,
             a0->task->rois.n, a0->opts.threads,
             a0->cache ? cache_path(a0->cache) : "of each image of the plate, when it starts");
    struct fuse_loop_config *lc = fuse_loop_cfg_create();
    fuse_loop_cfg_set_max_threads(lc, 64);
    r = fuse_session_loop_mt(fs.se, lc);
    fuse_loop_cfg_destroy(lc);
    /* Unmounted, or a stop signal: readers waiting for a chunk are answered now, the mount goes,
     * then the computations stop. Files still open fail once the session is gone. */
    fs_follow_stop(&fs); /* it notifies the kernel through the session: stopped first */
    fs_answer_pending(&fs, EIO);
    fuse_session_unmount(fs.se);
    stop_engines(set, minor);
    fuse_remove_signal_handlers(fs.se);
    fuse_session_destroy(fs.se);
    state_free(&fs);
    if (minor >= 0)
        runfile_remove((unsigned)minor);
    if (fs.ready_fd >= 0)
        close(fs.ready_fd);
    log_info("unmounted %s", o->mountpoint);
    return r < 0 ? err_set(err, -EIO, "the FUSE loop failed: %s", strerror(-r)) : 0;
}
