/* input_dir.c: the input array's directory. The input is its path: a look (input_dir_look)
 * compares the directory at the path with the one held, one stat, and follows a new directory
 * that holds an array of the same layout (zarr-python's open(mode="w") makes the directory
 * again; `mv new old` swaps it), refusing with the reason while the path holds none or another
 * array. A file system that went away (ENOTCONN: a FUSE input whose daemon ended, typically
 * another roifs mount, a chained mount, unmounted and maybe mounted again) is opened again the
 * same way. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "input_state.h"

struct input_dir {
    _Atomic int fd;
    _Atomic uint64_t dev, ino; /* of fd: what a look compares the path's directory with */
    _Atomic bool gone;         /* the path does not hold the array now (why: reason) */
    pthread_mutex_t lock;
    char reason[sizeof(struct errbuf)];
    /* Descriptors replaced, closed once no thread uses a descriptor (users == 0: a thread
     * counted in users before it read fd may hold an old one; one that reads fd later gets
     * the new one), at a look, or at the end. */
    _Atomic unsigned users;
    _Atomic unsigned generation; /* of the directory held: one more at each replacement */
    _Atomic size_t nold;
    int *old;
};

int input_dir_open(const char *path, struct input_dir **out)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    struct input_dir *d = xcalloc(1, sizeof *d);
    d->fd = fd;
    d->dev = (uint64_t)st.st_dev;
    d->ino = (uint64_t)st.st_ino;
    pthread_mutex_init(&d->lock, NULL);
    *out = d;
    return 0;
}

int input_dir_fd(const struct input_dir *d)
{
    return d->fd;
}

int input_dir_enter(struct input_dir *d)
{
    atomic_fetch_add(&d->users, 1);
    return d->fd;
}

void input_dir_leave(struct input_dir *d)
{
    atomic_fetch_sub(&d->users, 1);
}

unsigned input_dir_generation(const struct input_dir *d)
{
    return d ? d->generation : 0;
}

/* Closes the descriptors replaced when no thread can be using one (lock held). */
static void close_old(struct input_dir *d)
{
    if (d->nold == 0 || d->users != 0)
        return;
    for (size_t i = 0; i < d->nold; i++)
        close(d->old[i]);
    d->nold = 0;
}

static bool held(const struct input_dir *d, const struct stat *st)
{
    return d->fd >= 0 && d->dev == (uint64_t)st->st_dev && d->ino == (uint64_t)st->st_ino;
}

/* 0 when directory fd holds an array of in's layout (its metadata file the same text, or
 * another text of the same layout), else -EIO with what differs. */
static int same_array(const struct zarr_input *in, int fd, struct errbuf *err)
{
    const char *name = in->meta.format == 2 ? ".zarray" : "zarr.json";
    char *text = NULL;
    size_t len = 0;
    int r = file_read_all_at(fd, name, &text, &len);
    if (r < 0)
        return err_set(err, -EIO, "%s/%s: %s", in->path, name,
                       r == -ENOENT ? "missing" : file_strerror(r));
    if (len == strlen(in->zarray) && memcmp(text, in->zarray, len) == 0) {
        free(text);
        return 0;
    }
    struct zarr_meta now;
    memset(&now, 0, sizeof now);
    struct errbuf perr = {{0}};
    r = in->meta.format == 3 ? zarr_meta_parse_v3(text, len, &now, NULL, NULL, &perr)
                             : zarr_meta_parse_v2(text, len, &now, &perr);
    free(text);
    if (r == 0)
        r = zarr_meta_difference(&in->meta, &now, &perr);
    return r < 0 ? err_set(err, -EIO, "%s/%s: %s", in->path, name, perr.msg) : 0;
}

/* Opens the directory at in's path: 0 with *fd and *st when it holds the same array. */
static int open_same(const struct zarr_input *in, int *fd, struct stat *st, struct errbuf *err)
{
    *fd = open(in->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (*fd < 0)
        return err_set(err, -EIO, "%s: %s", in->path,
                       errno == ENOENT ? "removed" : strerror(errno));
    int r = fstat(*fd, st) < 0 ? err_set(err, -EIO, "%s: %s", in->path, strerror(errno))
                               : same_array(in, *fd, err);
    if (r < 0) {
        close(*fd);
        *fd = -1;
    }
    return r;
}

/* Holds fd (of st) from now on (lock held); the one it replaces stays open for the threads
 * that may be using it (close_old). */
static void hold(struct input_dir *d, int fd, const struct stat *st)
{
    d->old = xrealloc(d->old, (d->nold + 1) * sizeof *d->old);
    d->old[d->nold] = d->fd;
    d->nold++;
    d->dev = (uint64_t)st->st_dev;
    d->ino = (uint64_t)st->st_ino;
    d->fd = fd;
    d->generation++;
}

/* The path holds the array again (lock held). */
static void found_again(struct input_dir *d, const char *path)
{
    if (d->gone)
        log_info("%s: the input array is there again", path);
    d->gone = false;
}

bool input_dir_reconnect(const struct zarr_input *in, int failed)
{
    struct input_dir *d = in->dir;
    pthread_mutex_lock(&d->lock);
    bool ok = d->fd != failed; /* another thread has done it */
    if (!ok) {
        int fd;
        struct stat st;
        ok = open_same(in, &fd, &st, NULL) == 0; /* not mounted again (yet), or another array */
        if (ok) {
            hold(d, fd, &st);
            found_again(d, in->path);
            log_info("%s: its file system went away; opened again", in->path);
        }
    }
    pthread_mutex_unlock(&d->lock);
    return ok;
}

/* Whether the file system of the directory held went away (a FUSE input whose daemon ended,
 * such as a chained roifs mount unmounted): statfs always asks the daemon, so it fails with
 * ENOTCONN where a stat may still be answered from the kernel's caches. Its files, read as
 * they were (the kernel's caches) or failing with ENOTCONN, are then what they always were:
 * no other directory took the path, so no look refuses; input_dir_reconnect and the next
 * look take up the mount made again. */
static bool fs_went_away(const struct input_dir *d)
{
    struct statfs sfs;
    return fstatfs(d->fd, &sfs) < 0 && errno == ENOTCONN;
}

int input_dir_look(const struct zarr_input *in, struct errbuf *err)
{
    struct input_dir *d = in->dir;
    if (!d)
        return 0; /* a remote input: its objects are looked at one by one (input_remote.c) */
    struct stat st;
    int r = stat(in->path, &st) < 0 ? -errno : 0;
    if (r == 0 && held(d, &st) && !d->gone && (d->nold == 0 || d->users != 0))
        return 0; /* the usual case: one stat */
    pthread_mutex_lock(&d->lock);
    close_old(d);
    struct errbuf why = {{0}};
    if (r < 0) {
        err_set(
            &why, -EIO, "%s: the input's directory %s%s", in->path,
            r == -ENOENT ? "was removed" : "cannot be found: ", r == -ENOENT ? "" : strerror(-r));
    } else if (!held(d, &st)) {
        int fd;
        struct stat now;
        r = open_same(in, &fd, &now, &why);
        if (r < 0) {
            err_prefix(&why, r, "%s: the input's directory was replaced by another", in->path);
        } else {
            log_info(fs_went_away(d) ? "%s: its file system went away; opened again"
                                     : "%s: another directory holding the same array is at the "
                                       "path; reading it from now on",
                     in->path);
            hold(d, fd, &now);
        }
    }
    if (r < 0 && fs_went_away(d)) {
        pthread_mutex_unlock(&d->lock);
        return 0;
    }
    if (r == 0) {
        found_again(d, in->path);
    } else {
        if (!d->gone || strcmp(d->reason, why.msg) != 0)
            log_warn("%s", why.msg);
        snprintf(d->reason, sizeof d->reason, "%s", why.msg);
        d->gone = true;
        r = err_set(err, -EIO, "%s", why.msg);
    }
    pthread_mutex_unlock(&d->lock);
    return r;
}

void input_dir_close(struct input_dir *d)
{
    if (!d)
        return;
    close(d->fd);
    for (size_t i = 0; i < d->nold; i++)
        close(d->old[i]);
    free(d->old);
    pthread_mutex_destroy(&d->lock);
    free(d);
}

void input_dir_park(struct zarr_input *in)
{
    struct input_dir *d = in->dir;
    if (!d)
        return;
    pthread_mutex_lock(&d->lock);
    close_old(d);
    if (d->users == 0 && d->nold == 0 && d->fd >= 0) {
        close(d->fd);
        d->fd = -1; /* dev and ino kept: what the path held */
    }
    pthread_mutex_unlock(&d->lock);
}

void zarr_input_resume(struct zarr_input *in)
{
    struct input_dir *d = in->dir;
    if (!d)
        return;
    pthread_mutex_lock(&d->lock);
    if (d->fd < 0) {
        int fd;
        struct stat st;
        struct errbuf why = {{0}};
        if (open_same(in, &fd, &st, &why) == 0) { /* as a look: the same array is followed */
            if (d->dev != (uint64_t)st.st_dev || d->ino != (uint64_t)st.st_ino)
                d->generation++;
            d->dev = (uint64_t)st.st_dev;
            d->ino = (uint64_t)st.st_ino;
            d->fd = fd;
            found_again(d, in->path);
        } else { /* reads fail, saying why, until a look finds the array there again */
            if (!d->gone || strcmp(d->reason, why.msg) != 0)
                log_warn("%s", why.msg);
            snprintf(d->reason, sizeof d->reason, "%s", why.msg);
            d->gone = true;
        }
    }
    pthread_mutex_unlock(&d->lock);
}
