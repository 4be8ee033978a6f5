/* atomic_file.c: see atomic_file.h. */
#include "atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A tag of this host and process for temporary names: a hash of the host's name, its boot id
 * and pid namespace, and the pid, so that processes of two hosts sharing a directory (with
 * the same pid) never pick one temporary name (computed again after a fork). */
static unsigned long host_tag(void)
{
    static _Atomic long tag_pid;
    static _Atomic unsigned long tag;
    long me = (long)getpid();
    if (tag_pid == me)
        return tag;
    char buf[512] = "";
    gethostname(buf, 255);
    size_t n = strlen(buf);
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t k = read(fd, buf + n, 64);
        n += k > 0 ? (size_t)k : 0;
        close(fd);
    }
    struct stat st;
    unsigned long long ns = stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long long)st.st_ino : 0;
    n += (size_t)snprintf(buf + n, sizeof buf - n, "%llu", ns);
    unsigned long h = 2166136261u; /* FNV-1a, 32 bits */
    for (size_t i = 0; i < n && i < sizeof buf; i++)
        h = ((h ^ (unsigned char)buf[i]) * 16777619u) & 0xffffffffu;
    tag = h;
    tag_pid = me;
    return h;
}

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
        n = snprintf(a->tmp, sizeof a->tmp, "%.*s%s%08lx.%ld.%lu", dirlen, name, prefix, host_tag(),
                     (long)getpid(), (unsigned long)++counter);
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
