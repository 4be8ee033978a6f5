/* cache.c: the backing directory (see cache.h for its layout): atomic writes, lookups, and
 * the manifest check that keeps results of one task from being served for another. */
#include "cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

struct cache {
    char *path;
    char *manifest;
    /* Replaced (never closed before cache_close) when the directory is recreated. */
    _Atomic int dirfd, chunks_fd, rois_fd, locks_fd;
    int old_fds[64];
    int nold;
    pthread_mutex_t repair_lock;
    bool warned_xattr;
};

const char *cache_path(const struct cache *c)
{
    return c->path;
}

/* A stream over directory fd with an open file description of its own: one made with dup()
 * would share fd's offset, so a second walk (or one on another thread) would start where the
 * last one ended. NULL with errno set on failure. */
static DIR *walk(int fd)
{
    int own = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = own >= 0 ? fdopendir(own) : NULL;
    if (!d && own >= 0) {
        int e = errno;
        close(own);
        errno = e;
    }
    return d;
}

/* Removes every entry of directory fd (one level; our subdirectories hold only files). */
static void empty_dir(int fd)
{
    DIR *d = walk(fd);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            unlinkat(fd, de->d_name, 0);
    closedir(d);
}

static int open_subdir(int dirfd, const char *name)
{
    if (mkdirat(dirfd, name, 0700) < 0 && errno != EEXIST)
        return -errno;
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

static bool dir_is_empty(int fd)
{
    DIR *d = walk(fd);
    if (!d)
        return false;
    bool empty = true;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            empty = false;
            break;
        }
    closedir(d);
    return empty;
}

/* Checks the manifest: reuse on a match, start afresh on a mismatch. */
static int check_manifest(struct cache *c, const struct task *t, struct errbuf *err)
{
    char *old = NULL;
    size_t len = 0;
    /* As large as the ROI list: no fixed cap; a larger one is another task's */
    int r = file_read_max(c->dirfd, "manifest", strlen(t->manifest), &old, &len);
    if (r == 0 && strcmp(old, t->manifest) == 0) {
        free(old);
        return 0;
    }
    if (r < 0 && r != -ENOENT && r != -EFBIG)
        return err_set(err, r, "%s/manifest: %s", c->path, file_strerror(r));
    free(old);
    if (r == 0)
        log_warn("cache %s was made for another configuration or input; emptying it", c->path);
    /* Drop the manifest first so a crash in between never leaves old results under it. */
    unlinkat(c->dirfd, "manifest", 0);
    empty_dir(c->chunks_fd);
    empty_dir(c->rois_fd);
    r = file_write_atomic(c->dirfd, "manifest", t->manifest, strlen(t->manifest), true);
    if (r < 0)
        return err_set(err, r, "%s/manifest: cannot write: %s", c->path, strerror(-r));
    return 0;
}

int cache_open(const struct task *t, struct cache **out, struct errbuf *err)
{
    struct cache *c = xcalloc(1, sizeof *c);
    c->path = xstrdup(t->cache_dir);
    c->manifest = xstrdup(t->manifest);
    pthread_mutex_init(&c->repair_lock, NULL);
    c->dirfd = c->chunks_fd = c->rois_fd = c->locks_fd = -1;
    int r = mkdir_p(c->path, 0700);
    if (r < 0) {
        err_set(err, r, "%s: cannot create the cache directory: %s", c->path, strerror(-r));
        goto fail;
    }
    c->dirfd = open(c->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (c->dirfd < 0) {
        r = -errno;
        err_set(err, r, "%s: %s", c->path, strerror(-r));
        goto fail;
    }
    bool fresh = dir_is_empty(c->dirfd);
    if (!fresh && faccessat(c->dirfd, "manifest", F_OK, 0) < 0) {
        r = err_set(err, -ENOTEMPTY,
                    "%s: not a roifs cache directory (not empty, no manifest); refusing to use it",
                    c->path);
        goto fail;
    }
    int fds[3];
    const char *names[] = {"chunks", "rois", "locks"};
    for (int i = 0; i < 3; i++)
        fds[i] = open_subdir(c->dirfd, names[i]);
    c->chunks_fd = fds[0];
    c->rois_fd = fds[1];
    c->locks_fd = fds[2];
    if (fds[0] < 0 || fds[1] < 0 || fds[2] < 0) {
        r = fds[0] < 0 ? fds[0] : fds[1] < 0 ? fds[1] : fds[2];
        err_set(err, r, "%s: cannot create its subdirectories: %s", c->path, strerror(-r));
        goto fail;
    }
    if ((r = check_manifest(c, t, err)) < 0)
        goto fail;
    *out = c;
    return 0;
fail:
    cache_close(c);
    return r;
}

void cache_close(struct cache *c)
{
    if (!c)
        return;
    if (c->dirfd >= 0)
        close(c->dirfd);
    if (c->chunks_fd >= 0)
        close(c->chunks_fd);
    if (c->rois_fd >= 0)
        close(c->rois_fd);
    if (c->locks_fd >= 0)
        close(c->locks_fd);
    for (int i = 0; i < c->nold; i++)
        close(c->old_fds[i]);
    pthread_mutex_destroy(&c->repair_lock);
    free(c->manifest);
    free(c->path);
    free(c);
}

int cache_chunk_open(struct cache *c, uint64_t id, int *fd)
{
    char name[32];
    snprintf(name, sizeof name, "%" PRIu64, id);
    int f = openat(c->chunks_fd, name, O_RDONLY | O_CLOEXEC);
    if (f < 0)
        return -errno;
    *fd = f;
    return 0;
}

int cache_chunk_stat(struct cache *c, uint64_t id, uint64_t *size, int64_t *mtime_ns)
{
    char name[32];
    struct stat st;
    snprintf(name, sizeof name, "%" PRIu64, id);
    if (fstatat(c->chunks_fd, name, &st, 0) < 0)
        return -errno;
    *size = (uint64_t)st.st_size;
    *mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    return 0;
}

int cache_chunk_size(struct cache *c, uint64_t id, uint64_t *size)
{
    int64_t mtime_ns;
    return cache_chunk_stat(c, id, size, &mtime_ns);
}

bool cache_chunk_exists(struct cache *c, uint64_t id)
{
    uint64_t size;
    return cache_chunk_size(c, id, &size) == 0;
}

#define SIG_XATTR "user.roifs.input"

/* Like file_write_atomic, with the signature attached to the file before it appears. */
static int chunk_write_once(struct cache *c, uint64_t id, const void *data, size_t len,
                            uint64_t sig);
static int cache_repair(struct cache *c);

int cache_chunk_write(struct cache *c, uint64_t id, const void *data, size_t len, uint64_t sig)
{
    int r = chunk_write_once(c, id, data, len, sig);
    if (r == -ENOENT && cache_repair(c) == 0)
        r = chunk_write_once(c, id, data, len, sig);
    return r;
}

static int chunk_write_once(struct cache *c, uint64_t id, const void *data, size_t len,
                            uint64_t sig)
{
    static _Atomic unsigned long counter;
    char name[32], tmp[96];
    snprintf(name, sizeof name, "%" PRIu64, id);
    snprintf(tmp, sizeof tmp, ".tmp.%ld.%lu", (long)getpid(), ++counter);
    int fd = openat(c->chunks_fd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    int r = write_full(fd, data, len);
    if (r == 0 && fsetxattr(fd, SIG_XATTR, &sig, sizeof sig, 0) < 0) {
        if (errno != ENOTSUP && errno != EOPNOTSUPP)
            r = -errno;
        else if (!c->warned_xattr) {
            c->warned_xattr = true;
            log_warn("%s: no extended attributes here; changes of the input will not be noticed",
                     c->path);
        }
    }
    if (close(fd) < 0 && r == 0)
        r = -errno;
    if (r == 0 && renameat(c->chunks_fd, tmp, c->chunks_fd, name) < 0)
        r = -errno;
    if (r < 0)
        unlinkat(c->chunks_fd, tmp, 0);
    return r;
}

int cache_chunk_sig(int fd, uint64_t *sig)
{
    ssize_t n = fgetxattr(fd, SIG_XATTR, sig, sizeof *sig);
    if (n == (ssize_t)sizeof *sig)
        return 0;
    if (n >= 0)
        return -ENODATA;
    return errno == EOPNOTSUPP ? -ENOTSUP : -errno;
}

void cache_chunk_remove(struct cache *c, uint64_t id)
{
    char name[32];
    snprintf(name, sizeof name, "%" PRIu64, id);
    unlinkat(c->chunks_fd, name, 0);
}

/* Calls fn for each entry of fd whose name is a plain decimal number. */
static int each_numbered(int fd, void (*fn)(void *ctx, uint64_t id), void *ctx)
{
    DIR *d = walk(fd);
    if (!d)
        return -errno;
    struct dirent *de;
    while ((de = readdir(d))) {
        uint64_t id;
        if (de->d_name[0] >= '0' && de->d_name[0] <= '9' && parse_u64(de->d_name, &id) == 0)
            fn(ctx, id);
    }
    closedir(d);
    return 0;
}

int cache_chunk_each(struct cache *c, void (*fn)(void *ctx, uint64_t id), void *ctx)
{
    return each_numbered(c->chunks_fd, fn, ctx);
}

int cache_roi_each(struct cache *c, void (*fn)(void *ctx, uint64_t roi), void *ctx)
{
    return each_numbered(c->rois_fd, fn, ctx);
}

/* A stored ROI result: this header, then the raw ROI-box bytes. */
struct roi_header {
    char magic[8]; /* "roifsR1" */
    uint64_t sig;
};

int cache_roi_write(struct cache *c, size_t roi, const void *data, size_t len, uint64_t sig)
{
    char name[32];
    snprintf(name, sizeof name, "%zu", roi);
    struct roi_header h = {.magic = "roifsR1", .sig = sig};
    char *buf = xmalloc(sizeof h + len);
    memcpy(buf, &h, sizeof h);
    memcpy(buf + sizeof h, data, len);
    int r = file_write_atomic(c->rois_fd, name, buf, sizeof h + len, false);
    if (r == -ENOENT && cache_repair(c) == 0)
        r = file_write_atomic(c->rois_fd, name, buf, sizeof h + len, false);
    free(buf);
    return r;
}

static int open_roi(struct cache *c, size_t roi, uint64_t sig, int *fd)
{
    char name[32];
    snprintf(name, sizeof name, "%zu", roi);
    *fd = openat(c->rois_fd, name, O_RDONLY | O_CLOEXEC);
    if (*fd < 0)
        return -errno;
    struct roi_header h;
    size_t got = 0;
    int r = pread_full(*fd, &h, sizeof h, 0, &got);
    if (r == 0 && (got != sizeof h || memcmp(h.magic, "roifsR1", 8) != 0 || h.sig != sig))
        r = -ESTALE;
    if (r < 0) {
        close(*fd);
        *fd = -1;
    }
    return r;
}

int cache_roi_check(struct cache *c, size_t roi, uint64_t sig)
{
    int fd;
    int r = open_roi(c, roi, sig, &fd);
    if (r == 0)
        close(fd);
    return r;
}

int cache_roi_read(struct cache *c, size_t roi, void *data, size_t len, uint64_t sig)
{
    int fd;
    int r = open_roi(c, roi, sig, &fd);
    if (r < 0)
        return r;
    size_t got = 0;
    r = pread_full(fd, data, len, sizeof(struct roi_header), &got);
    close(fd);
    if (r < 0)
        return r;
    return got == len ? 0 : -EIO;
}

void cache_roi_remove(struct cache *c, size_t roi)
{
    char name[32];
    snprintf(name, sizeof name, "%zu", roi);
    unlinkat(c->rois_fd, name, 0);
}

/* Locks are byte ranges of one file, DIR/locks/all, taken with open-file-description locks:
 * no file per chunk, released by the kernel when the holder dies, carried by NFS's lock
 * manager on shared file systems. Each lock gets its own open file description, so two
 * holders conflict even inside one process. Chunk id N is byte 2N, ROI i byte 2i + 1. */
static int take_lock(struct cache *c, uint64_t byte, bool wait)
{
    int fd = openat(c->locks_fd, "all", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = (off_t)byte, .l_len = 1};
    while (fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl) < 0) {
        if (errno == EINTR)
            continue;
        int e = errno == EAGAIN || errno == EACCES ? -EWOULDBLOCK : -errno;
        close(fd);
        return e;
    }
    return fd;
}

int cache_lock_chunk(struct cache *c, uint64_t id, bool wait)
{
    return take_lock(c, 2 * id, wait);
}

int cache_lock_roi(struct cache *c, size_t roi)
{
    return take_lock(c, 2 * (uint64_t)roi + 1, true);
}

void cache_unlock(int lock)
{
    if (lock >= 0)
        close(lock); /* closing its open file description releases the lock */
}

/* The cache directory was removed under a running mount: recreate it (with its manifest) and
 * point new writes there. Descriptors of the old one stay open until cache_close, since other
 * threads may be using them. 0 or -errno. */
static int cache_repair(struct cache *c)
{
    pthread_mutex_lock(&c->repair_lock);
    struct stat st;
    int r = 0;
    if (fstatat(c->chunks_fd, ".", &st, 0) == 0 && st.st_nlink > 0) {
        pthread_mutex_unlock(&c->repair_lock); /* another thread repaired it already */
        return 0;
    }
    log_warn("%s: the cache directory disappeared; recreating it", c->path);
    int fds[4] = {-1, -1, -1, -1};
    if ((r = mkdir_p(c->path, 0700)) < 0)
        goto out;
    fds[0] = open(c->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fds[0] < 0) {
        r = -errno;
        goto out;
    }
    const char *names[] = {"chunks", "rois", "locks"};
    for (int i = 0; i < 3; i++)
        if ((fds[i + 1] = open_subdir(fds[0], names[i])) < 0) {
            r = fds[i + 1];
            goto out;
        }
    r = file_write_atomic(fds[0], "manifest", c->manifest, strlen(c->manifest), true);
out:
    if (r == 0 && c->nold + 4 <= (int)(sizeof c->old_fds / sizeof c->old_fds[0])) {
        int old[4] = {c->dirfd, c->chunks_fd, c->rois_fd, c->locks_fd};
        c->dirfd = fds[0];
        c->chunks_fd = fds[1];
        c->rois_fd = fds[2];
        c->locks_fd = fds[3];
        for (int i = 0; i < 4; i++)
            c->old_fds[c->nold++] = old[i];
    } else {
        for (int i = 0; i < 4; i++)
            if (fds[i] >= 0)
                close(fds[i]);
        if (r == 0)
            r = -EMFILE;
        log_error("%s: cannot recreate the cache directory: %s", c->path, strerror(-r));
    }
    pthread_mutex_unlock(&c->repair_lock);
    return r;
}
