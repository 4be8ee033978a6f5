/* mount.c: `roifs mount`, the mount(8)/fstab form `roifs CONFIG MOUNTPOINT -o OPTIONS` that
 * mount.fuse3 runs, and `roifs unmount`. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../fs/fs.h"
#include "../fs/runfile.h"
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
static int serve(struct arrayset *s, const struct mount_args *a, int ready_fd)
{
    struct fs_options o = {.mountpoint = a->mountpoint,
                           .fuse_opts = a->fuse_opts,
                           .debug = a->debug,
                           .ready_fd = ready_fd};
    struct errbuf err = {{0}};
    int r = fs_run(s, &o, &err);
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
static int mount_background(struct task *t, struct arrayset *s, const struct mount_args *a)
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
        int r = serve(s, a, p[1]);
        arrayset_close(s);
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
    struct arrayset *s = NULL;
    int r;
    if ((r = cli_load_task(a->config, &t)) || (r = check_mountpoint(a->mountpoint)))
        goto out;
    if ((r = cli_open_arrays(t, 0, true, &s)))
        goto out;
    if ((r = setup_log(t, a)))
        goto out;
    r = a->foreground ? serve(s, a, -1) : mount_background(t, s, a);
out:
    arrayset_close(s);
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

/* How long unmount waits for a daemon to exit after SIGTERM. Its own stop takes at most a
 * few seconds (fs.c STOP_GRACE_S); longer means it is stopped or hung. */
#define UNMOUNT_WAIT_MS 10000

static bool is_roifs(const struct mount_entry *me)
{
    return strcmp(me->fstype, "fuse.roifs") == 0 ||
           (strncmp(me->fstype, "fuse", 4) == 0 && strcmp(me->source, "roifs") == 0);
}

/* Asks the daemon pid of the mount at mnt (device me->minor) to stop, as SIGTERM does for
 * `mount -f`, and waits for it to exit: 0, 1 (EXIT_RUNTIME) when it does not, or -ESRCH when
 * it was gone already. */
static int stop_daemon(const char *mnt, const char *abs, const struct mount_entry *me, pid_t pid,
                       unsigned long long started)
{
    int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pfd < 0 || proc_start_time(pid) != started) {
        if (pfd >= 0)
            close(pfd);
        return -ESRCH; /* the pid now names another process, or nothing */
    }
    if (syscall(SYS_pidfd_send_signal, pfd, SIGTERM, NULL, 0) < 0) {
        int e = errno;
        close(pfd);
        if (e == ESRCH)
            return -ESRCH;
        fprintf(stderr, "roifs: %s: cannot signal its daemon (pid %ld): %s\n", mnt, (long)pid,
                strerror(e));
        return EXIT_RUNTIME;
    }
    struct pollfd p = {.fd = pfd, .events = POLLIN};
    int n;
    while ((n = poll(&p, 1, UNMOUNT_WAIT_MS)) < 0 && errno == EINTR)
        ;
    close(pfd);
    if (n == 0) {
        fprintf(stderr,
                "roifs: %s: its daemon (pid %ld) did not exit within %d s of SIGTERM; it is "
                "still mounted\n",
                mnt, (long)pid, UNMOUNT_WAIT_MS / 1000);
        return EXIT_RUNTIME;
    }
    /* Normally it unmounted itself; one that died without doing so leaves the mount dead. */
    struct mount_entry now;
    if (mountinfo_find(abs, &now) == 0 && now.minor == me->minor && umount2(mnt, MNT_DETACH) < 0 &&
        errno != EINVAL) {
        fprintf(stderr, "roifs: %s: cannot unmount: %s\n", mnt, strerror(errno));
        return EXIT_RUNTIME;
    }
    return 0;
}

/* Unmounts a mount whose daemon is unknown (no run file) or dead. */
static int unmount_plain(const char *mnt, bool daemon_dead)
{
    if (umount2(mnt, 0) == 0)
        return 0;
    int e = errno;
    /* A dead daemon ("Transport endpoint is not connected"), whose files may still be open:
     * detach. A busy mount whose daemon is alive but unknown is left alone: detaching it would
     * leave the daemon computing. */
    if ((e == ENOTCONN || (e == EBUSY && daemon_dead)) && umount2(mnt, MNT_DETACH) == 0)
        return 0;
    if (e == ENOTCONN)
        e = errno;
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
            e == EINVAL  ? "not a mount point"
            : e == EBUSY ? "files are open and its daemon is not known (no run file)"
                         : strerror(e));
    return EXIT_RUNTIME;
}

int cmd_unmount(int argc, char **argv)
{
    if (argc != 2)
        return cli_usage_error("unmount needs exactly one MOUNTPOINT%s", "");
    const char *mnt = argv[1];
    char *abs = mountpoint_path(mnt);
    struct mount_entry me;
    int found = mountinfo_find(abs, &me);
    if (found == 0 && !is_roifs(&me)) {
        fprintf(stderr, "roifs: %s: not a roifs mount (%s from %s); not unmounting it\n", mnt,
                me.fstype, me.source);
        free(abs);
        return EXIT_RUNTIME;
    }
    pid_t pid;
    unsigned long long started;
    int r = found == 0 ? runfile_daemon(me.minor, me.owner, &pid, &started) : -ENOENT;
    if (r == 0)
        r = stop_daemon(mnt, abs, &me, pid, started);
    free(abs);
    if (r >= 0)
        return r;
    return unmount_plain(mnt, r == -ESRCH);
}
