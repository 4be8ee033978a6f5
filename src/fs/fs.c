/* fs.c: the FUSE side (with passthrough.c). It maps low-level requests onto the namespace and
 * the engine; opens of uncomputed chunks are answered later from a compute thread, so FUSE
 * threads never wait on computation. Opens of chunks pass through to the cache files when
 * the kernel allows it (passthrough.h); otherwise READs are served from them here. */
#define FUSE_USE_VERSION 312
#include "fs.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <fuse_lowlevel.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../engine/engine.h"
#include "namespace.h"
#include "passthrough.h"

#define LONG_TIMEOUT 86400.0
/* How long an open of a recomputed chunk waits for earlier opens of its previous version,
 * which pass through to the previous cache file, to be closed (passthrough.h). */
#define PT_WAIT_MS 2000

/* What an open file handle refers to. Handles are listed so that those the kernel never
 * released (files still open at unmount) are freed too. */
struct handle {
    struct handle *prev, *next;
    enum ns_kind kind;
    int fd;  /* NS_CHUNK: the cached chunk */
    bool pt; /* NS_CHUNK: opened with passthrough to fd (pt_release(ino) when freed) */
    fuse_ino_t ino;
    char *buf; /* NS_STATUS: a snapshot taken at open */
    size_t len;
    const char *text; /* NS_META */
};

struct fs {
    struct task *t;
    struct engine *e;
    struct ns ns;
    struct timespec mtime;
    uid_t uid;
    gid_t gid;
    int ready_fd;
    struct fuse_session *se;
    struct pt *pt;
    _Atomic uint64_t chunk_reads; /* READ requests for chunks answered here */
    pthread_mutex_t handles_lock;
    struct handle handles; /* list head */
};

static struct handle *handle_new(struct fs *fs, enum ns_kind kind)
{
    struct handle *h = xcalloc(1, sizeof *h);
    h->kind = kind;
    h->fd = -1;
    pthread_mutex_lock(&fs->handles_lock);
    h->next = fs->handles.next;
    h->prev = &fs->handles;
    h->next->prev = h;
    fs->handles.next = h;
    pthread_mutex_unlock(&fs->handles_lock);
    return h;
}

static void handle_free(struct fs *fs, struct handle *h)
{
    pthread_mutex_lock(&fs->handles_lock);
    h->prev->next = h->next;
    h->next->prev = h->prev;
    pthread_mutex_unlock(&fs->handles_lock);
    if (h->pt)
        pt_release(fs->pt, h->ino);
    if (h->fd >= 0)
        close(h->fd);
    free(h->buf);
    free(h);
}

struct pending_open {
    fuse_req_t req;
    struct fuse_file_info fi;
    uint64_t id;
    fuse_ino_t ino;
    struct fs *fs;
};

static struct fs *fs_of(fuse_req_t req)
{
    return fuse_req_userdata(req);
}

/* Attributes of node n; *timeout is how long the kernel may keep them. */
static void node_attr(struct fs *fs, const struct ns_node *n, struct stat *st, double *timeout)
{
    memset(st, 0, sizeof *st);
    st->st_ino = n->ino;
    st->st_uid = fs->uid;
    st->st_gid = fs->gid;
    st->st_atim = st->st_mtim = st->st_ctim = fs->mtime;
    st->st_blksize = 4096;
    *timeout = LONG_TIMEOUT;
    switch (n->kind) {
    case NS_DIR:
        st->st_mode = S_IFDIR | 0555;
        st->st_nlink = 2;
        break;
    case NS_META:
        st->st_mode = S_IFREG | 0444;
        st->st_nlink = 1;
        st->st_size = (off_t)n->len;
        break;
    case NS_STATUS:
        st->st_mode = S_IFREG | 0444;
        st->st_nlink = 1;
        *timeout = 0; /* served with direct_io: size 0, content current at every open */
        break;
    case NS_CHUNK: {
        uint64_t size;
        bool known;
        engine_chunk_size(engine_level(fs->e, n->level), n->prefix, &size, &known);
        st->st_mode = S_IFREG | 0444;
        st->st_nlink = 1;
        st->st_size = (off_t)size;
        /* Until it is computed, size 0 that the kernel must ask again for after open. */
        if (!known)
            *timeout = 0;
        break;
    }
    }
    st->st_blocks = (st->st_size + 511) / 512;
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
    int r = ns_lookup(&fs->ns, parent, name, &n);
    log_debug("lookup %llu/%s: %s", (unsigned long long)parent, name, r ? strerror(-r) : "ok");
    if (r == -ENOENT) {
        e.ino = 0; /* negative entry: the tree never changes, so cache the miss */
        e.entry_timeout = LONG_TIMEOUT;
        fuse_reply_entry(req, &e);
        return;
    }
    if (r < 0) {
        fuse_reply_err(req, -r);
        return;
    }
    e.ino = n.ino;
    e.generation = 1;
    node_attr(fs, &n, &e.attr, &e.attr_timeout);
    e.entry_timeout = LONG_TIMEOUT;
    fuse_reply_entry(req, &e);
}

static void fs_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)fi;
    struct fs *fs = fs_of(req);
    struct ns_node n;
    if (ns_get(&fs->ns, ino, &n) < 0) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    struct stat st;
    double timeout;
    node_attr(fs, &n, &st, &timeout);
    log_debug("getattr %llu: size %lld", (unsigned long long)ino, (long long)st.st_size);
    fuse_reply_attr(req, &st, timeout);
}

struct dirbuf {
    fuse_req_t req;
    char *buf;
    size_t size, len;
};

static int dir_emit(void *ctx, const char *name, uint64_t ino, bool is_dir, uint64_t next_off)
{
    struct dirbuf *db = ctx;
    struct stat st;
    memset(&st, 0, sizeof st);
    st.st_ino = ino;
    st.st_mode = is_dir ? S_IFDIR : S_IFREG;
    size_t need = fuse_add_direntry(db->req, NULL, 0, name, NULL, 0);
    if (db->len + need > db->size)
        return 1;
    fuse_add_direntry(db->req, db->buf + db->len, db->size - db->len, name, &st, (off_t)next_off);
    db->len += need;
    return 0;
}

static void fs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
    (void)fi;
    struct fs *fs = fs_of(req);
    struct dirbuf db = {.req = req, .buf = xmalloc(size), .size = size};
    int r = ns_readdir(&fs->ns, ino, (uint64_t)off, dir_emit, &db);
    if (r < 0)
        fuse_reply_err(req, -r);
    else
        fuse_reply_buf(req, db.buf, db.len);
    free(db.buf);
}

/* Called by the engine (on a compute thread, or inline when the chunk is cached). */
static void chunk_opened(void *ctx, int err, int fd, int flags)
{
    struct pending_open *po = ctx;
    log_debug("open chunk %llu: %s", (unsigned long long)po->id, err ? strerror(-err) : "ok");
    if (err) {
        fuse_reply_err(po->req, -err);
        free(po);
        return;
    }
    struct fs *fs = po->fs;
    int32_t backing = 0;
    int pt = pt_acquire(fs->pt, po->ino, fd, &backing, PT_WAIT_MS);
    if (pt < 0) {
        log_warn("open chunk %llu: busy: recomputed, and its previous version is still open "
                 "after %d ms",
                 (unsigned long long)po->id, PT_WAIT_MS);
        close(fd);
        fuse_reply_err(po->req, -pt);
        free(po);
        return;
    }
    struct handle *h = handle_new(fs, NS_CHUNK);
    h->fd = fd;
    h->ino = po->ino;
    h->pt = pt == 1;
    po->fi.fh = (uint64_t)(uintptr_t)h;
    /* A chunk served from the cache keeps the kernel's pages; one computed now (perhaps
     * replacing a version made from older input) starts afresh. With passthrough the pages
     * are the cache file's own. */
    po->fi.keep_cache = !h->pt && !(flags & ENGINE_COMPUTED);
    if (flags & ENGINE_REPLACED)
        fuse_lowlevel_notify_inval_inode(fs->se, po->ino, -1, 0);
    po->fi.noflush = 1;
    int r = h->pt ? pt_reply_open(po->req, &po->fi, backing) : fuse_reply_open(po->req, &po->fi);
    if (r == -ENOENT)
        handle_free(fs, h); /* the open was interrupted: no release will come */
    free(po);
}

static void fs_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct fs *fs = fs_of(req);
    struct ns_node n;
    if (ns_get(&fs->ns, ino, &n) < 0) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
        fuse_reply_err(req, EROFS);
        return;
    }
    if (n.kind == NS_DIR) {
        fuse_reply_err(req, EISDIR);
        return;
    }
    if (n.kind == NS_CHUNK) {
        struct pending_open *po = xmalloc(sizeof *po);
        po->req = req;
        po->fi = *fi;
        po->id = n.prefix;
        po->ino = ino;
        po->fs = fs;
        engine_open_chunk(engine_level(fs->e, n.level), n.prefix, chunk_opened, po);
        return;
    }
    struct handle *h = handle_new(fs, n.kind);
    if (n.kind == NS_STATUS) {
        struct engine_mount_info mi = {.passthrough = pt_active(fs->pt),
                                       .passthrough_off = pt_reason(fs->pt),
                                       .chunk_reads = atomic_load(&fs->chunk_reads)};
        h->buf = engine_status_json(fs->e, &mi);
        h->len = strlen(h->buf);
        fi->direct_io = 1;
    } else {
        h->text = n.text;
        h->len = n.len;
        fi->keep_cache = 1;
    }
    fi->fh = (uint64_t)(uintptr_t)h;
    if (fuse_reply_open(req, fi) == -ENOENT)
        handle_free(fs, h);
}

static void fs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    (void)ino;
    struct handle *h = (struct handle *)(uintptr_t)fi->fh;
    if (h->kind != NS_CHUNK) {
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
    atomic_fetch_add_explicit(&fs_of(req)->chunk_reads, 1, memory_order_relaxed);
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
    .getattr = fs_getattr,
    .readdir = fs_readdir,
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
    return pt_on_read(((struct fs *)userdata)->pt, fd, buf, len);
}

static ssize_t io_writev(int fd, struct iovec *iov, int count, void *userdata)
{
    return pt_on_writev(((struct fs *)userdata)->pt, fd, iov, count);
}

int fs_run(struct task *t, struct cache *c, const struct fs_options *o, struct errbuf *err)
{
    struct fs fs = {.t = t, .uid = getuid(), .gid = getgid(), .ready_fd = o->ready_fd};
    pthread_mutex_init(&fs.handles_lock, NULL);
    fs.handles.next = fs.handles.prev = &fs.handles;
    clock_gettime(CLOCK_REALTIME, &fs.mtime);
    ns_init(&fs.ns, t);
    int r = engine_create(t, c, &fs.e, err);
    if (r < 0)
        return r;
    struct fuse_session *se = new_session(&fs, o, err);
    fs.se = se;
    if (!se) {
        engine_destroy(fs.e);
        return -EINVAL;
    }
    if (fuse_set_signal_handlers(se) != 0 || fuse_session_mount(se, o->mountpoint) != 0) {
        fuse_remove_signal_handlers(se);
        fuse_session_destroy(se);
        engine_destroy(fs.e);
        return err_set(err, -EIO, "%s: cannot mount", o->mountpoint);
    }
    fs.pt = pt_new(t->cfg.passthrough);
    r = pt_attach(fs.pt, se, io_read, io_writev);
    if (r < 0)
        log_warn("FUSE passthrough off: cannot hook the FUSE device: %s", strerror(-r));
    log_info("mounted %s at %s (%zu ROIs, %d threads, cache %s)", t->cfg.path, o->mountpoint,
             t->rois.n, t->cfg.threads, cache_path(c));
    struct fuse_loop_config *lc = fuse_loop_cfg_create();
    fuse_loop_cfg_set_max_threads(lc, 64);
    r = fuse_session_loop_mt(se, lc);
    fuse_loop_cfg_destroy(lc);
    /* Stop computing and answer every open still waiting before the session goes away. */
    engine_destroy(fs.e);
    fuse_session_unmount(se);
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    while (fs.handles.next != &fs.handles) {
        fs.handles.next->pt = false; /* backing files went with the connection */
        handle_free(&fs, fs.handles.next);
    }
    pt_free(fs.pt);
    pthread_mutex_destroy(&fs.handles_lock);
    log_info("unmounted %s", o->mountpoint);
    if (fs.ready_fd >= 0)
        close(fs.ready_fd);
    return r < 0 ? err_set(err, -EIO, "the FUSE loop failed: %s", strerror(-r)) : 0;
}
