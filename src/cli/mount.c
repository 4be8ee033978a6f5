/* mount.c: `roifs mount`, the mount(8)/fstab form `roifs CONFIG MOUNTPOINT -o OPTIONS` that
 * mount.fuse3 runs, and `roifs unmount`. */
#include <errno.h>
#include <fcntl.h>
#include <fuse3/fuse_opt.h>
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

/* What -o lists hold besides FUSE's own options: those only mount(8) and fstab use, and
 * those roifs decides itself (it is always read-only). FUSE must not see them. */
static const struct fuse_opt mount8_only[] = {
    FUSE_OPT_KEY("rw", FUSE_OPT_KEY_DISCARD),       FUSE_OPT_KEY("ro", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("defaults", FUSE_OPT_KEY_DISCARD), FUSE_OPT_KEY("auto", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("noauto", FUSE_OPT_KEY_DISCARD),   FUSE_OPT_KEY("user", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("nouser", FUSE_OPT_KEY_DISCARD),   FUSE_OPT_KEY("users", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("_netdev", FUSE_OPT_KEY_DISCARD),  FUSE_OPT_KEY("nofail", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("dev", FUSE_OPT_KEY_DISCARD),      FUSE_OPT_KEY("nodev", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("suid", FUSE_OPT_KEY_DISCARD),     FUSE_OPT_KEY("nosuid", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("exec", FUSE_OPT_KEY_DISCARD),     FUSE_OPT_KEY("noexec", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("async", FUSE_OPT_KEY_DISCARD),    FUSE_OPT_KEY("comment=", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("user=", FUSE_OPT_KEY_DISCARD),    FUSE_OPT_END};

/* Every option the table does not discard: "x-*" (mount(8)'s, which a template cannot name)
 * is dropped too; the rest is kept for FUSE, which refuses what it does not know. */
static int keep_for_fuse(void *data, const char *arg, int key, struct fuse_args *outargs)
{
    (void)outargs;
    if (key != FUSE_OPT_KEY_OPT)
        return 1; /* the program name */
    if (strncmp(arg, "x-", 2) == 0)
        return 0;
    return fuse_opt_add_opt_escaped(data, arg);
}

/* The options of the -o lists (joined by commas) that FUSE should see, in *fuse_opts (NULL
 * when none is left). A backslash escapes a comma inside a value, as libfuse reads it. 0 or
 * EXIT_USAGE (printed). */
static int fuse_options(const char *lists, char **fuse_opts)
{
    *fuse_opts = NULL;
    if (!lists)
        return 0;
    char *argv[] = {"roifs", "-o", (char *)lists, NULL};
    struct fuse_args args = FUSE_ARGS_INIT(3, argv);
    int r = fuse_opt_parse(&args, fuse_opts, mount8_only, keep_for_fuse);
    fuse_opt_free_args(&args);
    if (r < 0) {
        free(*fuse_opts);
        *fuse_opts = NULL;
        return cli_usage_error("mount: cannot read the options '%s'", lists);
    }
    return 0;
}

/* ---- mount ---- */

struct mount_args {
    bool foreground, debug;
    char *fuse_opts;
    const char *config, *mountpoint;
};

#define MOUNT_OPTIONS (CLI_FOREGROUND | CLI_DEBUG | CLI_OPTIONS)

/* The options and operands of `roifs mount` (cmd "mount") or of the mount(8) form (cmd NULL:
 * argv[0] is the program). 0 or EXIT_USAGE (printed). */
static int parse_mount_args(int argc, char **argv, const char *cmd, struct mount_args *a)
{
    struct cli_args o;
    int r = cli_parse_args(argc, argv, cmd, MOUNT_OPTIONS, &o);
    if (r)
        return r;
    a->foreground = o.foreground;
    a->debug = o.debug;
    r = fuse_options(o.options, &a->fuse_opts);
    cli_args_free(&o);
    if (r)
        return r;
    if (o.noperands == 2) {
        a->config = o.operands[0];
        a->mountpoint = o.operands[1];
        return 0;
    }
    if (cmd)
        r = cli_usage_error("mount needs CONFIG and MOUNTPOINT");
    else if (o.noperands > 2)
        r = cli_usage_error("unexpected argument '%s' after CONFIG MOUNTPOINT", o.operands[2]);
    else
        r = cli_usage_error("needs CONFIG and MOUNTPOINT");
    free(a->fuse_opts);
    a->fuse_opts = NULL;
    return r;
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
    int r = parse_mount_args(argc, argv, "mount", &a);
    return r ? r : do_mount(&a);
}

/* mount.fuse3 runs `roifs CONFIG MOUNTPOINT -o OPTIONS` (options may come anywhere). */
int cmd_mount_helper(int argc, char **argv)
{
    struct mount_args a = {0};
    int r = parse_mount_args(argc, argv, NULL, &a);
    return r ? r : do_mount(&a);
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
    struct cli_args o;
    int r = cli_parse_args(argc, argv, "unmount", 0, &o);
    if (r)
        return r;
    if (o.noperands != 1)
        return cli_usage_error("unmount needs exactly one MOUNTPOINT");
    const char *mnt = o.operands[0];
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
    r = found == 0 ? runfile_daemon(me.minor, me.owner, &pid, &started) : -ENOENT;
    if (r == 0)
        r = stop_daemon(mnt, abs, &me, pid, started);
    free(abs);
    if (r >= 0)
        return r;
    return unmount_plain(mnt, r == -ESRCH);
}
