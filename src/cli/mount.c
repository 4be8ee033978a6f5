/* mount.c: `roifs mount`, the mount(8)/fstab form `roifs CONFIG MOUNTPOINT -o OPTIONS` that
 * mount.fuse3 runs, and `roifs unmount`. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../fs/fs.h"
#include "cli.h"

/* ---- mount options ---- */

/* True for options that only mount(8) and fstab use, or that roifs decides itself (it is
 * always read-only): FUSE must not see them. */
static bool mount8_only(const char *opt, size_t n)
{
    static const char *const exact[] = {"rw",     "ro",     "defaults", "auto",   "noauto", "user",
                                        "nouser", "users",  "_netdev",  "nofail", "dev",    "nodev",
                                        "suid",   "nosuid", "exec",     "noexec", "async"};
    static const char *const prefix[] = {"x-", "comment=", "user="};
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
        if (strlen(exact[i]) == n && strncmp(opt, exact[i], n) == 0)
            return true;
    for (size_t i = 0; i < sizeof prefix / sizeof prefix[0]; i++)
        if (n >= strlen(prefix[i]) && strncmp(opt, prefix[i], strlen(prefix[i])) == 0)
            return true;
    return false;
}

/* Appends the options of the comma-separated list that FUSE should see to *acc. A backslash
 * escapes a comma inside a value, as libfuse reads it. */
static void add_fuse_opts(char **acc, const char *list)
{
    struct strbuf sb = {0};
    if (*acc)
        sb_printf(&sb, "%s", *acc);
    const char *p = list;
    while (*p) {
        const char *end = p;
        while (*end && *end != ',') {
            if (*end == '\\' && end[1])
                end++;
            end++;
        }
        size_t n = (size_t)(end - p);
        if (n && !mount8_only(p, n)) {
            if (sb.len)
                sb_append(&sb, ",", 1);
            sb_append(&sb, p, n);
        }
        p = *end ? end + 1 : end;
    }
    free(*acc);
    *acc = sb.buf; /* NULL when nothing is left */
}

/* ---- mount ---- */

struct mount_args {
    bool foreground, debug;
    char *fuse_opts;
    const char *config, *mountpoint;
};

static int parse_mount_args(int argc, char **argv, struct mount_args *a)
{
    int i = 1;
    for (; i < argc && argv[i][0] == '-' && argv[i][1]; i++) {
        if (strcmp(argv[i], "-f") == 0) {
            a->foreground = true;
        } else if (strcmp(argv[i], "-d") == 0) {
            a->debug = true;
        } else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
            add_fuse_opts(&a->fuse_opts, argv[++i]);
        } else if (strncmp(argv[i], "-o", 2) == 0 && argv[i][2]) {
            add_fuse_opts(&a->fuse_opts, argv[i] + 2);
        } else {
            return cli_usage_error("mount: unknown option '%s'", argv[i]);
        }
    }
    if (argc - i != 2)
        return cli_usage_error("mount needs CONFIG and MOUNTPOINT%s", "");
    a->config = argv[i];
    a->mountpoint = argv[i + 1];
    return 0;
}

static int check_mountpoint(const char *mnt)
{
    struct stat st;
    if (stat(mnt, &st) < 0) {
        fprintf(stderr, "roifs: %s: %s\n", mnt, strerror(errno));
        return EXIT_USAGE;
    }
    if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "roifs: %s: not a directory\n", mnt);
        return EXIT_USAGE;
    }
    return 0;
}

/* Runs the mount in this process; reports a failure to ready_fd (background) or stderr. */
static int serve(struct task *t, struct cache *c, const struct mount_args *a, int ready_fd)
{
    struct fs_options o = {.mountpoint = a->mountpoint,
                           .fuse_opts = a->fuse_opts,
                           .debug = a->debug,
                           .ready_fd = ready_fd};
    struct errbuf err = {{0}};
    int r = fs_run(t, c, &o, &err);
    if (r < 0) {
        log_error("%s", err.msg);
        if (ready_fd >= 0) {
            char *msg = xasprintf("E%s", err.msg);
            if (write(ready_fd, msg, strlen(msg)) < 0)
                log_error("cannot report to the parent: %s", strerror(errno));
            free(msg);
        } else {
            fprintf(stderr, "roifs: %s\n", err.msg);
        }
        return EXIT_RUNTIME;
    }
    return 0;
}

static int setup_log(const struct task *t, const struct mount_args *a)
{
    if (t->cfg.log_path) {
        if (log_open_file(t->cfg.log_path, a->debug) < 0) {
            fprintf(stderr, "roifs: %s: cannot open the log: %s\n", t->cfg.log_path,
                    strerror(errno));
            return EXIT_USAGE;
        }
    } else if (a->foreground) {
        log_open_stderr(a->debug);
    } else {
        log_open_syslog(a->debug);
    }
    return 0;
}

/* Forks the daemon and returns once the mount answers (or failed). */
static int mount_background(struct task *t, struct cache *c, const struct mount_args *a)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) {
        fprintf(stderr, "roifs: pipe: %s\n", strerror(errno));
        return EXIT_RUNTIME;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "roifs: fork: %s\n", strerror(errno));
        return EXIT_RUNTIME;
    }
    if (pid == 0) {
        close(p[0]);
        setsid();
        int null = open("/dev/null", O_RDWR);
        if (null >= 0) {
            dup2(null, 0);
            dup2(null, 1);
            dup2(null, 2);
            if (null > 2)
                close(null);
        }
        int r = serve(t, c, a, p[1]);
        cache_close(c);
        task_close(t);
        _exit(r);
    }
    close(p[1]);
    char buf[1100];
    size_t n = 0;
    ssize_t got;
    while (n < sizeof buf - 1 && (got = read(p[0], buf + n, sizeof buf - 1 - n)) != 0) {
        if (got < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        n += (size_t)got;
        if (buf[0] == 'R')
            break;
    }
    close(p[0]);
    buf[n] = '\0';
    if (n > 0 && buf[0] == 'R')
        return 0;
    int status;
    waitpid(pid, &status, 0);
    fprintf(stderr, "roifs: %s\n",
            n > 1 ? buf + 1 : "the daemon exited before the mount was ready");
    return EXIT_RUNTIME;
}

/* Checks everything, then mounts in the foreground or the background. Frees a->fuse_opts. */
static int do_mount(struct mount_args *a)
{
    struct task *t = NULL;
    struct cache *c = NULL;
    int r;
    if ((r = cli_load_task(a->config, &t)) || (r = check_mountpoint(a->mountpoint)))
        goto out;
    struct errbuf err = {{0}};
    if (cache_open(t, &c, &err) < 0) {
        fprintf(stderr, "roifs: %s\n", err.msg);
        r = EXIT_RUNTIME;
        goto out;
    }
    if ((r = setup_log(t, a)))
        goto out;
    r = a->foreground ? serve(t, c, a, -1) : mount_background(t, c, a);
out:
    cache_close(c);
    task_close(t);
    free(a->fuse_opts);
    a->fuse_opts = NULL;
    return r;
}

int cmd_mount(int argc, char **argv)
{
    struct mount_args a = {0};
    int r = parse_mount_args(argc, argv, &a);
    if (r) {
        free(a.fuse_opts);
        return r;
    }
    return do_mount(&a);
}

/* mount.fuse3 runs `roifs CONFIG MOUNTPOINT -o OPTIONS` (options may come anywhere). */
int cmd_mount_helper(int argc, char **argv)
{
    struct mount_args a = {0};
    const char *pos[2];
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "-o") == 0 && i + 1 < argc) {
            add_fuse_opts(&a.fuse_opts, argv[++i]);
        } else if (strncmp(arg, "-o", 2) == 0 && arg[2]) {
            add_fuse_opts(&a.fuse_opts, arg + 2);
        } else if (strcmp(arg, "-f") == 0) {
            a.foreground = true;
        } else if (strcmp(arg, "-d") == 0) {
            a.debug = true;
        } else if (arg[0] == '-' && arg[1]) {
            free(a.fuse_opts);
            return cli_usage_error("unknown option '%s'", arg);
        } else if (npos < 2) {
            pos[npos++] = arg;
        } else {
            free(a.fuse_opts);
            return cli_usage_error("unexpected argument '%s' after CONFIG MOUNTPOINT", arg);
        }
    }
    if (npos != 2) {
        free(a.fuse_opts);
        return cli_usage_error("needs CONFIG and MOUNTPOINT%s", "");
    }
    a.config = pos[0];
    a.mountpoint = pos[1];
    return do_mount(&a);
}

/* ---- unmount ---- */

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

/* The file system type and source of the topmost mount at path (absolute): 0, or -ENOENT
 * when nothing is mounted there. */
static int find_mount(const char *path, char *type, size_t tn, char *source, size_t sn)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return -errno;
    char *line = NULL;
    size_t cap = 0;
    int r = -ENOENT;
    while (getline(&line, &cap, f) > 0) {
        char mp[PATH_MAX], fstype[256], src[PATH_MAX];
        const char *sep = strstr(line, " - ");
        if (!sep || sscanf(line, "%*s %*s %*s %*s %4095s", mp) != 1 ||
            sscanf(sep + 3, "%255s %4095s", fstype, src) != 2)
            continue;
        unescape_mountinfo(mp);
        if (strcmp(mp, path) != 0)
            continue;
        unescape_mountinfo(src);
        snprintf(type, tn, "%s", fstype);
        snprintf(source, sn, "%s", src);
        r = 0; /* keep reading: a later line is mounted on top */
    }
    free(line);
    fclose(f);
    return r;
}

static char *strndup_or_die(const char *s, size_t n)
{
    char *d = xmalloc(n + 1);
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

/* path made absolute with its parent's symlinks resolved; the last component is kept as it
 * is, since resolving it would ask the (perhaps dead) file system mounted there. */
static char *mountpoint_path(const char *path)
{
    char *copy = xstrdup(path);
    size_t n = strlen(copy);
    while (n > 1 && copy[n - 1] == '/')
        copy[--n] = '\0';
    char *slash = strrchr(copy, '/');
    const char *base = slash ? slash + 1 : copy;
    char *dir = slash
                    ? (slash == copy ? xstrdup("/") : strndup_or_die(copy, (size_t)(slash - copy)))
                    : xstrdup(".");
    char real[PATH_MAX], *out;
    if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0 || !realpath(dir, real))
        out = path_absolute(path);
    else
        out = strcmp(real, "/") == 0 ? xasprintf("/%s", base) : xasprintf("%s/%s", real, base);
    free(dir);
    free(copy);
    return out;
}

int cmd_unmount(int argc, char **argv)
{
    if (argc != 2)
        return cli_usage_error("unmount needs exactly one MOUNTPOINT%s", "");
    const char *mnt = argv[1];
    char *abs = mountpoint_path(mnt);
    char type[256], source[PATH_MAX];
    int found = find_mount(abs, type, sizeof type, source, sizeof source);
    free(abs);
    if (found == 0 && strcmp(type, "fuse.roifs") != 0 &&
        !(strncmp(type, "fuse", 4) == 0 && strcmp(source, "roifs") == 0)) {
        fprintf(stderr, "roifs: %s: not a roifs mount (%s from %s); not unmounting it\n", mnt, type,
                source);
        return EXIT_RUNTIME;
    }
    if (umount2(mnt, 0) == 0)
        return 0;
    int e = errno;
    if (e == ENOTCONN || e == EBUSY) {
        /* A dead daemon ("Transport endpoint is not connected") or busy files: detach. */
        if (umount2(mnt, MNT_DETACH) == 0)
            return 0;
        e = errno;
    }
    if (e == EPERM) {
        pid_t pid = fork();
        if (pid == 0) {
            execlp("fusermount3", "fusermount3", "-u", mnt, (char *)NULL);
            _exit(127);
        }
        int status;
        if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
            WEXITSTATUS(status) == 0)
            return 0;
    }
    fprintf(stderr, "roifs: %s: cannot unmount: %s\n", mnt,
            e == EINVAL ? "not a mount point" : strerror(e));
    return EXIT_RUNTIME;
}
