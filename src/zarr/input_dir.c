/* input_dir.c: the input array's directory, opened again by its path when its file system
 * went away: a FUSE input whose daemon ended (ENOTCONN), typically another roifs mount (a
 * chained mount) that was unmounted and maybe mounted again. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "input_state.h"

struct input_dir {
    _Atomic int fd;
    pthread_mutex_t lock;
    int *old; /* descriptors replaced: other threads may still use them, closed at the end */
    size_t nold;
};

int input_dir_open(const char *path, struct input_dir **out)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct input_dir *d = xcalloc(1, sizeof *d);
    d->fd = fd;
    pthread_mutex_init(&d->lock, NULL);
    *out = d;
    return 0;
}

int input_dir_fd(const struct input_dir *d)
{
    return d->fd;
}

/* True when path, opened anew, holds a file meta (relative) whose content is text. */
static bool same_array(int fd, const char *meta, const char *text)
{
    char *now = NULL;
    size_t len;
    bool same = file_read_all_at(fd, meta, &now, &len) == 0 && len == strlen(text) &&
                memcmp(now, text, len) == 0;
    free(now);
    return same;
}

bool input_dir_reconnect(struct input_dir *d, const char *path, int failed, const char *meta,
                         const char *text)
{
    pthread_mutex_lock(&d->lock);
    bool ok = d->fd != failed; /* another thread has done it */
    if (!ok) {
        int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ok = fd >= 0 && same_array(fd, meta, text);
        if (ok) {
            d->old = xrealloc(d->old, (d->nold + 1) * sizeof *d->old);
            d->old[d->nold++] = failed;
            d->fd = fd;
            log_info("%s: its file system went away; opened again", path);
        } else if (fd >= 0) {
            close(fd); /* not mounted again (yet), or another array now */
        }
    }
    pthread_mutex_unlock(&d->lock);
    return ok;
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
