/* cache.c: the backing directory (see cache.h for its layout): atomic writes, lookups, and
 * the manifest check that keeps results of one task from being served for another. */
#include "cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct cache {
    char *path;
    int dirfd, chunks_fd, rois_fd;
};

const char *cache_path(const struct cache *c)
{
    return c->path;
}

/* Removes every entry of directory fd (one level; our subdirectories hold only files). */
static void empty_dir(int fd)
{
    int dup_fd = dup(fd);
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!d) {
        if (dup_fd >= 0)
            close(dup_fd);
        return;
    }
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
    int dup_fd = dup(fd);
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
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
    int r = file_read_all_at(c->dirfd, "manifest", &old, &len);
    if (r == 0 && strcmp(old, t->manifest) == 0) {
        free(old);
        return 0;
    }
    if (r < 0 && r != -ENOENT)
        return err_set(err, r, "%s/manifest: %s", c->path, strerror(-r));
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
    c->dirfd = c->chunks_fd = c->rois_fd = -1;
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
    if ((c->chunks_fd = open_subdir(c->dirfd, "chunks")) < 0 ||
        (c->rois_fd = open_subdir(c->dirfd, "rois")) < 0) {
        r = c->chunks_fd < 0 ? c->chunks_fd : c->rois_fd;
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

int cache_chunk_size(struct cache *c, uint64_t id, uint64_t *size)
{
    char name[32];
    struct stat st;
    snprintf(name, sizeof name, "%" PRIu64, id);
    if (fstatat(c->chunks_fd, name, &st, 0) < 0)
        return -errno;
    *size = (uint64_t)st.st_size;
    return 0;
}

bool cache_chunk_exists(struct cache *c, uint64_t id)
{
    uint64_t size;
    return cache_chunk_size(c, id, &size) == 0;
}

int cache_chunk_write(struct cache *c, uint64_t id, const void *data, size_t len)
{
    char name[32];
    snprintf(name, sizeof name, "%" PRIu64, id);
    return file_write_atomic(c->chunks_fd, name, data, len, false);
}

/* Calls fn for each entry of fd whose name is a plain decimal number. */
static int each_numbered(int fd, void (*fn)(void *ctx, uint64_t id), void *ctx)
{
    int dup_fd = dup(fd);
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!d) {
        if (dup_fd >= 0)
            close(dup_fd);
        return -errno;
    }
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

int cache_roi_write(struct cache *c, size_t roi, const void *data, size_t len)
{
    char name[32];
    snprintf(name, sizeof name, "%zu", roi);
    return file_write_atomic(c->rois_fd, name, data, len, false);
}

int cache_roi_read(struct cache *c, size_t roi, void *data, size_t len)
{
    char name[32];
    snprintf(name, sizeof name, "%zu", roi);
    int fd = openat(c->rois_fd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t got = 0;
    int r = pread_full(fd, data, len, 0, &got);
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
