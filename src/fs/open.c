/* open.c: opens. A chunk's open is answered once the engine has the chunk (at once when it is
 * cached, else later from a compute thread), as the version its inode serves (versions.h).
 * Until then the request waits in a list, from which an interrupt (the reader got a signal:
 * FUSE_INTERRUPT) or the unmount answers it at once; exactly one of the three answers it,
 * whoever takes it off the list first, and a late engine callback then only closes its fd.
 * The status file is a snapshot per open, whose size its opener sees in stat. */
#include "fs_internal.h"

#include "../arrays/otable.h"
#include "../arrays/overlay_remote.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct pending_open {
    struct pending_open *prev, *next;
    bool waiting; /* on fs->pending: nobody has taken it to answer it yet */
    fuse_req_t req;
    struct fuse_file_info fi;
    uint64_t id;    /* the chunk */
    fuse_ino_t ino; /* the inode opened */
    uint64_t base;  /* its namespace inode */
    struct fs *fs;
};

/* The request whose interrupt handler this thread is registering: libfuse calls the handler
 * from inside the registration when the interrupt came first, with the request's lock held,
 * where answering it would free the request under that lock. */
static _Thread_local fuse_req_t registering;
static _Thread_local bool interrupted_now;

static void pending_add(struct fs *fs, struct pending_open *po)
{
    pthread_mutex_lock(&fs->pending_lock);
    po->waiting = true;
    po->prev = NULL;
    po->next = fs->pending;
    if (fs->pending)
        fs->pending->prev = po;
    fs->pending = po;
    pthread_mutex_unlock(&fs->pending_lock);
}

/* Lock held. */
static void pending_unlink(struct fs *fs, struct pending_open *po)
{
    if (po->prev)
        po->prev->next = po->next;
    else
        fs->pending = po->next;
    if (po->next)
        po->next->prev = po->prev;
    po->waiting = false;
}

/* Takes po off the list to answer it: false when someone else has. */
static bool pending_take(struct fs *fs, struct pending_open *po)
{
    pthread_mutex_lock(&fs->pending_lock);
    bool mine = po->waiting;
    if (mine)
        pending_unlink(fs, po);
    pthread_mutex_unlock(&fs->pending_lock);
    return mine;
}

/* libfuse's interrupt handler (any thread but the one that answers interrupts inline). The
 * open is answered EINTR at once; the computation goes on for other readers and the cache. */
static void open_interrupted(fuse_req_t req, void *data)
{
    struct fs *fs = data;
    uint64_t id = 0;
    bool found = false;
    pthread_mutex_lock(&fs->pending_lock);
    for (struct pending_open *po = fs->pending; po; po = po->next)
        if (po->req == req) {
            id = po->id;
            pending_unlink(fs, po); /* po now belongs to its engine callback alone */
            found = true;
            break;
        }
    pthread_mutex_unlock(&fs->pending_lock);
    if (!found)
        return; /* answered already */
    log_debug("open chunk %llu: interrupted", (unsigned long long)id);
    if (req == registering)
        interrupted_now = true; /* fs_open answers once the registration returns */
    else
        fuse_reply_err(req, EINTR);
}

void fs_answer_pending(struct fs *fs, int err)
{
    pthread_mutex_lock(&fs->pending_lock);
    size_t n = 0;
    for (struct pending_open *po = fs->pending; po; po = po->next)
        n++;
    fuse_req_t *reqs = xmalloc((n ? n : 1) * sizeof *reqs);
    for (size_t i = 0; i < n; i++) {
        reqs[i] = fs->pending->req;
        pending_unlink(fs, fs->pending);
    }
    pthread_mutex_unlock(&fs->pending_lock);
    for (size_t i = 0; i < n; i++)
        fuse_reply_err(reqs[i], err);
    if (n)
        log_info("unmount: %zu open%s still computing answered with %s", n, n == 1 ? "" : "s",
                 strerror(err));
    free(reqs);
}

/* Answers po's open with fd, the cache file the engine gave (po is taken). */
static void reply_chunk(struct fs *fs, struct pending_open *po, int fd, int flags)
{
    struct stat st;
    if (fstat(fd, &st) < 0) {
        log_error("open chunk %llu: cannot stat its cache file: %s", (unsigned long long)po->id,
                  strerror(errno));
        close(fd);
        fuse_reply_err(po->req, EIO);
        return;
    }
    int64_t changed = ts_to_ns(st.st_ctim);
    struct vt_file f = {.dev = (uint64_t)st.st_dev,
                        .ino = (uint64_t)st.st_ino,
                        .size = (uint64_t)st.st_size,
                        .ctime_ns = changed,
                        .mtime_ns = ts_to_ns(st.st_mtim),
                        .fresh = (flags & ENGINE_REPLACED) || changed >= fs->started_ns};
    struct vt_grant g;
    int r = vt_open(fs->vt, po->ino, po->base, fd, &f, &g);
    if (r < 0) {
        /* Files are open on the version this inode serves: the kernel looks the name up again
         * and opens the inode that serves the new one. */
        log_debug("open chunk %llu: its version changed while files are open on inode %llu; "
                  "moved to a new inode",
                  (unsigned long long)po->id, (unsigned long long)po->ino);
        close(fd);
        fuse_reply_err(po->req, -r);
        return;
    }
    if (g.inval_attrs) /* attributes only: no page of a request's file is waited for */
        fuse_lowlevel_notify_inval_inode(fs->se, po->ino, -1, 0);
    struct handle *h = handle_new(NS_CHUNK);
    h->fd = fd;
    h->ino = po->ino;
    handle_add(fs, h);
    po->fi.fh = (uint64_t)(uintptr_t)h;
    /* With passthrough the pages are the cache file's own. */
    po->fi.keep_cache = !g.backing && g.keep_cache;
    po->fi.noflush = 1;
    r = g.backing ? pt_reply_open(po->req, &po->fi, g.backing) : fuse_reply_open(po->req, &po->fi);
    if (r == -ENOENT)
        handle_free(fs, h); /* the reader is gone: no release will come */
}

/* Called by the engine (on a compute thread, or inline when the chunk is cached). */
static void chunk_opened(void *ctx, int err, int fd, int flags)
{
    struct pending_open *po = ctx;
    struct fs *fs = po->fs;
    if (!pending_take(fs, po)) {
        if (fd >= 0)
            close(fd); /* answered already: interrupted, or the unmount */
    } else {
        log_debug("open chunk %llu: %s", (unsigned long long)po->id, err ? strerror(-err) : "ok");
        if (err)
            fuse_reply_err(po->req, -err);
        else
            reply_chunk(fs, po, fd, flags);
    }
    free(po);
}

/* An open that waits (for a chunk or a table): on the pending list, answerable by an interrupt
 * or the unmount. NULL when the request was interrupted while it was registered (answered
 * EINTR; nobody else heard of it). */
static struct pending_open *pending_start(fuse_req_t req, fuse_ino_t ino, const struct ns_node *n,
                                          struct fuse_file_info *fi)
{
    struct fs *fs = fuse_req_userdata(req);
    struct pending_open *po = xcalloc(1, sizeof *po);
    po->req = req;
    po->fi = *fi;
    po->id = n->chunk;
    po->ino = ino;
    po->base = n->ino;
    po->fs = fs;
    pending_add(fs, po);
    registering = req;
    interrupted_now = false;
    fuse_req_interrupt_func(req, open_interrupted, fs);
    registering = NULL;
    if (interrupted_now) {
        fuse_reply_err(req, EINTR); /* po is off the list */
        free(po);
        return NULL;
    }
    return po;
}

static void open_chunk(fuse_req_t req, fuse_ino_t ino, const struct ns_node *n,
                       struct fuse_file_info *fi)
{
    struct fs *fs = fuse_req_userdata(req);
    struct pending_open *po = pending_start(req, ino, n, fi);
    if (!po)
        return;
    arrayset_open_chunk(fs->set, (size_t)n->array, n->chunk, chunk_opened, po);
}

/* ---- files of the input (ome = labels) and of the masking table ---- */

/* Opens the input file path for reading as the process that asked (caller.c): a descriptor of
 * a regular file (*st its attributes), or -errno. The open never blocks (O_NONBLOCK, put back
 * after) and anything but a regular file is refused: the inode was shown as a regular file, and a
 * FIFO swapped in since (a writer of the image may do that) would otherwise hold this thread in
 * open() until someone writes to it, its reader unkillable and the mount beyond unmounting; a
 * device would never end. -ESTALE then: what the kernel shows is not what is there, and the kernel
 * looks the name up again once, which finds no such name (live.c shows only regular files and
 * directories), so the reader gets ENOENT, as for a file removed. */
static int open_input_file(fuse_req_t req, const char *path, struct stat *st)
{
    struct caller_ids ids;
    int r = caller_enter(req, &ids);
    if (r < 0)
        return r;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    r = fd < 0 ? -errno : 0;
    caller_leave(&ids);
    if (r == 0 && fstat(fd, st) < 0)
        r = -errno;
    else if (r == 0 && !S_ISREG(st->st_mode))
        r = -ESTALE;
    else if (r == 0 && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) < 0)
        r = -errno;
    if (r < 0 && fd >= 0)
        close(fd);
    return r < 0 ? r : fd;
}

/* A file of a remote input image (ome = labels): fetched whole at the open, each open its
 * own GET through the remote layer (ranges, retries, TLS, headers_file); read from memory. */
static void open_remote_input(fuse_req_t req, const struct ns_node *n, struct fuse_file_info *fi)
{
    struct fs *fs = fuse_req_userdata(req);
    struct errbuf err = {{0}};
    char *data = NULL;
    size_t len = 0;
    int r = overlay_remote_read(n->text, &data, &len, &err);
    if (r < 0) {
        if (r != -ENOENT)
            log_warn("open: %s", err.msg);
        fuse_reply_err(req, r == -ENOENT ? ENOENT : EIO);
        return;
    }
    struct handle *h = handle_new(NS_META); /* read from its buffer */
    h->buf = data;
    h->len = len;
    handle_add(fs, h);
    fi->fh = (uint64_t)(uintptr_t)h;
    fi->keep_cache = 1; /* fixed for the mount, as its size */
    fi->noflush = 1;
    if (fuse_reply_open(req, fi) == -ENOENT)
        handle_free(fs, h);
}

/* A file of the input image, read through: with passthrough when the kernel allows (the
 * inode then serves that file's pages, as a chunk's), else READs from its fd. */
static void open_input(fuse_req_t req, fuse_ino_t ino, const struct ns_node *n,
                       struct fuse_file_info *fi)
{
    struct fs *fs = fuse_req_userdata(req);
    struct stat st;
    int fd = open_input_file(req, n->text, &st);
    if (fd < 0) {
        int e = -fd;
        log_warn("open %s: %s", n->text, strerror(e));
        fuse_reply_err(req, e == ENOENT || e == EACCES || e == EPERM || e == ESTALE ? e : EIO);
        return;
    }
    int64_t changed = ts_to_ns(st.st_ctim);
    struct vt_file f = {.dev = (uint64_t)st.st_dev,
                        .ino = (uint64_t)st.st_ino,
                        .size = (uint64_t)st.st_size,
                        .ctime_ns = changed,
                        .fresh = true};
    struct vt_grant g = {0};
    struct handle *h = handle_new(NS_INPUT);
    h->fd = fd;
    /* a file replaced while open elsewhere on this inode is served without the version table */
    h->ino = vt_open(fs->vt, ino, ino, fd, &f, &g) == 0 ? ino : 0;
    handle_add(fs, h);
    fi->fh = (uint64_t)(uintptr_t)h;
    fi->keep_cache = 0;
    fi->noflush = 1;
    int r = g.backing ? pt_reply_open(req, fi, g.backing) : fuse_reply_open(req, fi);
    if (r == -ENOENT)
        handle_free(fs, h);
}

/* The masking table is complete (err 0) or failed: answers po's open of its file. */
static void table_ready(void *ctx, int err)
{
    struct pending_open *po = ctx;
    struct fs *fs = po->fs;
    if (!pending_take(fs, po)) {
        free(po);
        return;
    }
    size_t len = 0;
    char *data = err ? NULL : arrayset_table_copy(fs->set, po->id, &len);
    if (!data) {
        fuse_reply_err(po->req, err ? -err : ENOENT);
        free(po);
        return;
    }
    /* The table follows the label image (made again when the input changed): the size the
     * kernel holds may be an older table's or the upper bound; attributes only. */
    fuse_lowlevel_notify_inval_inode(fs->se, po->ino, -1, 0);
    struct handle *h = handle_new(NS_TABLE);
    h->buf = data; /* this table's bytes, whatever the next request makes */
    h->len = len;
    handle_add(fs, h);
    po->fi.fh = (uint64_t)(uintptr_t)h;
    po->fi.direct_io = 1; /* stat showed an upper bound before: reads give the exact bytes */
    if (fuse_reply_open(po->req, &po->fi) == -ENOENT)
        handle_free(fs, h);
    free(po);
}

static void open_table(fuse_req_t req, fuse_ino_t ino, const struct ns_node *n,
                       struct fuse_file_info *fi)
{
    struct fs *fs = fuse_req_userdata(req);
    struct pending_open *po = pending_start(req, ino, n, fi);
    if (!po)
        return;
    arrayset_table_request(fs->set, n->chunk, table_ready, po);
}

/* ---- the status file ---- */

/* The status document as text: the set's, plus the FUSE side's own "fuse" and "watch"
 * sections. */
static char *status_snapshot(struct fs *fs)
{
    json_t *doc = arrayset_status(fs->set);
    bool pt = pt_active(fs->pt);
    json_t *f = json_pack("{s:b, s:I}", "passthrough", pt, "chunk_reads",
                          (json_int_t)atomic_load(&fs->chunk_reads));
    if (arrayset_is_overlay(fs->set)) { /* ome = labels: READs of the input's files served
                                           here, and the input's names the kernel holds */
        json_object_set_new(f, "input_reads",
                            json_integer((json_int_t)atomic_load(&fs->input_reads)));
        json_object_set_new(f, "input_names", json_integer((json_int_t)ns_live_count(fs->ns)));
    }
    if (!pt && pt_reason(fs->pt))
        json_object_set_new(f, "passthrough_off", json_string(pt_reason(fs->pt)));
    json_object_set_new(f, "requests", devio_requests(fs->dio));
    json_object_set_new(f, "poll", devio_poll_status(fs->dio));
    json_object_set_new(doc, "fuse", f);
    json_t *w = fs_follow_status(fs);
    if (w)
        json_object_set_new(doc, "watch", w);
    char *text = json_dumps(doc, JSON_INDENT(2) | JSON_REAL_PRECISION(15));
    json_decref(doc);
    size_t n = strlen(text);
    text = xrealloc(text, n + 2);
    text[n] = '\n';
    text[n + 1] = '\0';
    return text;
}

size_t fs_status_size(struct fs *fs, pid_t pid)
{
    pthread_mutex_lock(&fs->handles_lock);
    for (struct handle *h = fs->status.next; h != &fs->status; h = h->next)
        if (h->pid == pid) {
            size_t len = h->len; /* the newest of its snapshots: handles are added in front */
            pthread_mutex_unlock(&fs->handles_lock);
            return len;
        }
    pthread_mutex_unlock(&fs->handles_lock);
    char *doc = status_snapshot(fs); /* outside the lock: it asks the engine */
    size_t len = strlen(doc);
    free(doc);
    /* Kept for pid's next open, in pid's record (which stays as it is while the document
     * fits: the open's own permission check asks again), else a free or the oldest one. */
    int64_t now = clock_ns(CLOCK_MONOTONIC);
    pthread_mutex_lock(&fs->handles_lock);
    struct status_seen *slot = &fs->seen[0];
    for (int i = 0; i < STATUS_SEEN; i++) {
        struct status_seen *s = &fs->seen[i];
        if (s->pid == pid && s->at_ns) {
            slot = s;
            break;
        }
        if (s->at_ns < slot->at_ns)
            slot = s;
    }
    if (slot->pid != pid || !slot->at_ns || now - slot->at_ns >= STATUS_SEEN_NS || len > slot->size)
        *slot = (struct status_seen){.pid = pid, .at_ns = now, .size = len + STATUS_SLACK};
    size_t size = slot->size;
    pthread_mutex_unlock(&fs->handles_lock);
    return size;
}

/* The status document for an open by pid: as it is now, padded with spaces (before its final
 * newline) to the size pid was shown less than STATUS_SEEN_NS ago when it fits. */
static char *status_for_open(struct fs *fs, pid_t pid, size_t *len)
{
    char *doc = status_snapshot(fs);
    *len = strlen(doc);
    size_t shown = 0;
    int64_t now = clock_ns(CLOCK_MONOTONIC);
    pthread_mutex_lock(&fs->handles_lock);
    for (int i = 0; i < STATUS_SEEN; i++) {
        struct status_seen *s = &fs->seen[i];
        if (s->pid == pid && s->at_ns) {
            if (now - s->at_ns < STATUS_SEEN_NS)
                shown = s->size;
            *s = (struct status_seen){0};
            break;
        }
    }
    pthread_mutex_unlock(&fs->handles_lock);
    if (shown > *len) {
        doc = xrealloc(doc, shown + 1);
        memset(doc + *len - 1, ' ', shown - *len);
        doc[shown - 1] = '\n';
        doc[shown] = '\0';
        *len = shown;
    }
    return doc;
}

void fs_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct fs *fs = fuse_req_userdata(req);
    struct ns_node n;
    if (fs_node(fs, ino, &n) < 0) {
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
        open_chunk(req, ino, &n, fi);
        return;
    }
    if (n.kind == NS_INPUT && !n.live) {
        open_remote_input(req, &n, fi);
        return;
    }
    if (n.kind == NS_INPUT) {
        open_input(req, ino, &n, fi);
        return;
    }
    if (n.kind == NS_TABLE) {
        open_table(req, ino, &n, fi);
        return;
    }
    struct handle *h = handle_new(n.kind);
    if (n.kind == NS_STATUS) {
        h->pid = fuse_req_ctx(req)->pid;
        h->buf = status_for_open(fs, h->pid, &h->len);
        fi->direct_io = 1;         /* its content is this snapshot, whatever the kernel cached */
    } else if (n.kind == NS_GEN) { /* made from the input's files, read as the caller */
        struct caller_ids ids;
        if (caller_enter(req, &ids) < 0) {
            free(h);
            fuse_reply_err(req, EACCES);
            return;
        }
        h->buf = arrayset_generated(fs->set, n.chunk, &h->len);
        caller_leave(&ids);
        if (!h->buf) { /* a failed image's file of a plate (docs/plates.md) */
            free(h);
            fuse_reply_err(req, EIO);
            return;
        }
        fi->direct_io = 1; /* made now: the size the kernel holds may be older */
    } else {
        h->text = n.text;
        h->len = n.len;
        fi->keep_cache = 1;
    }
    handle_add(fs, h);
    fi->fh = (uint64_t)(uintptr_t)h;
    if (fuse_reply_open(req, fi) == -ENOENT)
        handle_free(fs, h);
}
