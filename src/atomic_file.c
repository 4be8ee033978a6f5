/* atomic_file.c: see atomic_file.h. */
#include "atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int atomic_begin(struct atomic_file *a, int dirfd, const char *name, const char *tmp,
                 const char *prefix, mode_t mode)
{
    static atomic_ulong counter;
    a->dirfd = dirfd;
    a->fd = -1;
    a->made = false;
    if ((size_t)snprintf(a->name, sizeof a->name, "%s", name) >= sizeof a->name)
        return -ENAMETOOLONG;
    int flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC;
    int n;
    if (tmp) {
        n = snprintf(a->tmp, sizeof a->tmp, "%s", tmp);
        flags |= O_TRUNC;
    } else {
        const char *slash = strrchr(name, '/');
        int dirlen = slash ? (int)(slash - name + 1) : 0;
        n = snprintf(a->tmp, sizeof a->tmp, "%.*s%s%ld.%lu", dirlen, name, prefix, (long)getpid(),
                     (unsigned long)++counter);
        flags |= O_EXCL;
    }
    if (n < 0 || (size_t)n >= sizeof a->tmp)
        return -ENAMETOOLONG;
    a->fd = openat(dirfd, a->tmp, flags, mode);
    if (a->fd < 0)
        return -errno;
    a->made = true;
    return 0;
}

int atomic_close(struct atomic_file *a, unsigned flags)
{
    if (a->fd < 0)
        return 0;
    int r = (flags & ATOMIC_FSYNC) && fsync(a->fd) < 0 ? -errno : 0;
    if (close(a->fd) < 0 && r == 0)
        r = -errno;
    a->fd = -1;
    return r;
}

int fsync_dir_of(int dirfd, const char *name)
{
    const char *slash = strrchr(name, '/');
    char dir[ATOMIC_PATH_MAX];
    if ((size_t)snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - name) : 1,
                         slash ? name : ".") >= sizeof dir)
        return -ENAMETOOLONG;
    int d = openat(dirfd, *dir ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d < 0)
        return -errno;
    int r = fsync(d) < 0 ? -errno : 0;
    close(d);
    return r;
}

int atomic_commit(struct atomic_file *a, unsigned flags)
{
    int r = atomic_close(a, flags);
    if (r < 0)
        return r;
    if (renameat(a->dirfd, a->tmp, a->dirfd, a->name) < 0) {
        if (!(flags & ATOMIC_OVER_DIR) ||
            (errno != EISDIR && errno != ENOTEMPTY && errno != EEXIST) ||
            unlinkat(a->dirfd, a->name, AT_REMOVEDIR) < 0)
            return -errno;
        if (renameat(a->dirfd, a->tmp, a->dirfd, a->name) < 0)
            return -errno;
    }
    a->made = false;
    return flags & ATOMIC_FSYNC_DIR ? fsync_dir_of(a->dirfd, a->name) : 0;
}

void atomic_abort(struct atomic_file *a)
{
    if (a->fd >= 0)
        close(a->fd);
    a->fd = -1;
    if (a->made)
        unlinkat(a->dirfd, a->tmp, 0);
    a->made = false;
}
