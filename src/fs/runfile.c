/* runfile.c: the mount table and the daemons' run files (see runfile.h). */
#include "runfile.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util.h"

static void unescape_mountinfo(char *s)
{
    char *w = s;
    for (char *r = s; *r; r++) {
        if (r[0] == '\\' && r[1] >= '0' && r[1] <= '7' && r[2] >= '0' && r[2] <= '7' &&
            r[3] >= '0' && r[3] <= '7') {
            *w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
            r += 3;
        } else {
            *w++ = *r;
        }
    }
    *w = '\0';
}

/* The user_id= value in a comma-separated super options field (FUSE mounts), else 0. */
static uid_t owner_of(const char *opts)
{
    const char *p = strstr(opts, "user_id=");
    while (p && p != opts && p[-1] != ',')
        p = strstr(p + 1, "user_id=");
    return p ? (uid_t)strtoul(p + 8, NULL, 10) : 0;
}

/* Parses one mountinfo line; true when it describes a mount at path. */
static bool parse_line(char *line, const char *path, struct mount_entry *out)
{
    char mp[PATH_MAX], dev[64], fstype[64], src[256], opts[1024];
    unsigned major, minor;
    const char *sep = strstr(line, " - ");
    if (!sep || sscanf(line, "%*s %*s %63s %*s %4095s", dev, mp) != 2 ||
        sscanf(dev, "%u:%u", &major, &minor) != 2)
        return false;
    if (sscanf(sep + 3, "%63s %255s %1023s", fstype, src, opts) < 2)
        return false;
    unescape_mountinfo(mp);
    if (strcmp(mp, path) != 0)
        return false;
    unescape_mountinfo(src);
    snprintf(out->fstype, sizeof out->fstype, "%s", fstype);
    snprintf(out->source, sizeof out->source, "%s", src);
    out->minor = minor;
    out->owner = strncmp(fstype, "fuse", 4) == 0 ? owner_of(opts) : 0;
    return true;
}

int mountinfo_find(const char *path, struct mount_entry *out)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return -errno;
    char *line = NULL;
    size_t cap = 0;
    int r = -ENOENT;
    while (getline(&line, &cap, f) > 0) {
        line[strcspn(line, "\n")] = '\0';
        if (parse_line(line, path, out))
            r = 0; /* keep reading: a later line is mounted on top */
    }
    free(line);
    fclose(f);
    return r;
}

unsigned long long proc_start_time(pid_t pid)
{
    char path[64], *text = NULL;
    size_t len;
    snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
    if (file_read_all(path, &text, &len) < 0)
        return 0;
    /* "pid (comm) state ppid ...": comm may hold anything, so count the fields after the
     * last ')': the state is field 3, the start time field 22. */
    const char *p = strrchr(text, ')');
    unsigned long long start = 0;
    if (p && p[1] == ' ' && p[2] && p[2] != 'Z' && p[2] != 'X') { /* a zombie serves nothing */
        p += 2;
        for (int field = 3; field < 22 && p; field++) {
            p = strchr(p, ' ');
            if (p)
                p++;
        }
        if (p)
            start = strtoull(p, NULL, 10);
    }
    free(text);
    return start;
}

/* The directory holding the run files of mounts owned by owner (malloc'd). */
static char *run_dir(uid_t owner)
{
    if (owner == 0)
        return xstrdup("/run/roifs");
    const char *x = getenv("XDG_RUNTIME_DIR");
    if (x && x[0] == '/' && geteuid() == owner)
        return xasprintf("%s/roifs", x);
    return xasprintf("/run/user/%u/roifs", (unsigned)owner);
}

/* Opens owner's run directory (creating it when create): it must belong to owner and be
 * writable by nobody else, or a run file in it could point unmount at any process. */
static int open_run_dir(uid_t owner, bool create)
{
    char *dir = run_dir(owner);
    if (create && mkdir(dir, owner == 0 ? 0755 : 0700) < 0 && errno != EEXIST) {
        int e = errno;
        free(dir);
        return -e;
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int e = errno;
    free(dir);
    if (fd < 0)
        return -e;
    struct stat st;
    if (fstat(fd, &st) < 0 || st.st_uid != owner || (st.st_mode & 022)) {
        close(fd);
        return -EPERM;
    }
    return fd;
}

int runfile_write(unsigned minor)
{
    int dfd = open_run_dir(geteuid(), true);
    if (dfd < 0)
        return dfd;
    char name[32], text[64];
    snprintf(name, sizeof name, "%u", minor);
    int n = snprintf(text, sizeof text, "%ld %llu\n", (long)getpid(), proc_start_time(getpid()));
    int r = file_write_atomic(dfd, name, text, (size_t)n, false);
    close(dfd);
    return r;
}

/* Reads the run file of minor in dfd: its pid and start time. 0 or -errno. */
static int read_runfile(int dfd, unsigned minor, uid_t owner, pid_t *pid, unsigned long long *st)
{
    char name[32], text[64];
    snprintf(name, sizeof name, "%u", minor);
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat sb;
    ssize_t n = -1;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_uid == owner)
        n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0)
        return -EINVAL;
    text[n] = '\0';
    long p;
    if (sscanf(text, "%ld %llu", &p, st) != 2 || p <= 0)
        return -EINVAL;
    *pid = (pid_t)p;
    return 0;
}

void runfile_remove(unsigned minor)
{
    int dfd = open_run_dir(geteuid(), false);
    if (dfd < 0)
        return;
    pid_t pid;
    unsigned long long st;
    char name[32];
    snprintf(name, sizeof name, "%u", minor);
    if (read_runfile(dfd, minor, geteuid(), &pid, &st) == 0 && pid == getpid())
        unlinkat(dfd, name, 0);
    close(dfd);
}

int runfile_daemon(unsigned minor, uid_t owner, pid_t *pid, unsigned long long *start)
{
    int dfd = open_run_dir(owner, false);
    if (dfd < 0)
        return -ENOENT;
    int r = read_runfile(dfd, minor, owner, pid, start);
    if (r == 0 && (*start == 0 || proc_start_time(*pid) != *start)) {
        char name[32];
        snprintf(name, sizeof name, "%u", minor);
        unlinkat(dfd, name, 0); /* its daemon died without removing it */
        r = -ESRCH;
    }
    close(dfd);
    return r == 0 || r == -ESRCH ? r : -ENOENT;
}
