/* spawn.c: starting the processes of the command and worker processors (see spawn.h). vfork and
 * exec rather than posix_spawn, since the child must set PR_SET_PDEATHSIG before exec; vfork, not
 * fork, since a fork of the threaded daemon marks all its memory copy-on-write (every page it
 * writes afterwards faults), while the vfork child borrows it until exec. */
#include "spawn.h"
#include "guard.h"
#include "../util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

void spawn_close(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

int spawn_pipe(int fds[2])
{
    if (pipe2(fds, O_CLOEXEC) < 0)
        return -errno;
    for (int i = 0; i < 2; i++) {
        if (fds[i] > 2)
            continue;
        int moved = fcntl(fds[i], F_DUPFD_CLOEXEC, 3);
        int e = errno;
        close(fds[i]);
        fds[i] = moved;
        if (moved < 0) {
            spawn_close(&fds[!i]);
            return -e;
        }
    }
    return 0;
}

struct child_args {
    const char *path, *dir;
    char *const *argv, *const *env;
    const int *fds;
    int death_signal;
    bool srun;
    int guard_fd; /* the process guard's socket, or -1 */
    pid_t parent;
    int err_fd; /* close-on-exec: end of file on the other end means exec succeeded */
};

static _Noreturn void child_fail(const struct child_args *a, int e)
{
    while (write(a->err_fd, &e, sizeof e) < 0 && errno == EINTR)
        ;
    _exit(127);
}

/* In the vfork child of a threaded process: async-signal-safe calls only, nothing written to
 * memory (the parent's), no return; errno is the parent thread's, which is fine. */
static _Noreturn void child_exec(const struct child_args *a)
{
    /* The signal comes when the forking thread ends; compute threads outlive their
     * processors (they are joined after the processor's shutdown). */
    if (prctl(PR_SET_PDEATHSIG, a->death_signal) < 0)
        child_fail(a, errno);
    if (getppid() != a->parent) /* roifs died before the line above: do not run orphaned */
        _exit(127);
    if (setpgid(0, 0) < 0)
        child_fail(a, errno);
    guard_watch_self(a->guard_fd, a->srun); /* before anything of the group runs */
    for (int i = 0; i < 3; i++)
        if (dup2(a->fds[i], i) < 0)
            child_fail(a, errno);
    if (a->dir && chdir(a->dir) < 0)
        child_fail(a, errno);
    /* The daemon ignores SIGPIPE (and more); ignored dispositions would survive exec. Handlers
     * go too, so that none runs here once signals are unblocked. */
    struct sigaction dfl = {.sa_handler = SIG_DFL}, sa;
    for (int sig = 1; sig < NSIG; sig++) {
        if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, NULL, &sa) < 0)
            continue;
        if (sa.sa_handler != SIG_DFL)
            sigaction(sig, &dfl, NULL);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execve(a->path, a->argv, a->env);
    child_fail(a, errno);
}

/* Apart, so that no local of the caller lives across vfork(). */
static pid_t vfork_exec(const struct child_args *a)
{
    pid_t pid = vfork();
    if (pid == 0)
        child_exec(a);
    return pid;
}

int spawn_process(const char *path, char *const argv[], char *const env[], const char *dir,
                  const int child_fds[3], bool srun, pid_t *pid)
{
    int ep[2];
    if (pipe2(ep, O_CLOEXEC) < 0)
        return -errno;
    struct child_args a = {.path = path,
                           .dir = dir,
                           .argv = argv,
                           .env = env,
                           .fds = child_fds,
                           .death_signal = srun ? SIGTERM : SIGKILL,
                           .srun = srun,
                           .guard_fd = guard_prepare(),
                           .parent = getpid(),
                           .err_fd = ep[1]};
    /* No handler of ours may run in the child before its dispositions are reset. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t child = vfork_exec(&a);
    int e = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(ep[1]);
    if (child < 0) {
        close(ep[0]);
        return -e;
    }
    int child_errno = 0;
    ssize_t n;
    while ((n = read(ep[0], &child_errno, sizeof child_errno)) < 0 && errno == EINTR)
        ;
    close(ep[0]);
    if (n > 0) {
        int status;
        spawn_reap(child, &status);
        return -(child_errno > 0 ? child_errno : EIO);
    }
    *pid = child;
    return 0;
}

pid_t spawn_reap(pid_t pid, int *status)
{
    guard_forget(pid);
    pid_t got;
    while ((got = waitpid(pid, status, 0)) < 0 && errno == EINTR)
        ;
    return got;
}

/* ---- a child's output, line by line ---- */

void spawn_lines_flush(struct spawn_lines *l, spawn_line_fn fn, void *ctx)
{
    size_t n = l->len;
    while (n > 0 && (l->line[n - 1] == '\r' || l->line[n - 1] == ' ' || l->line[n - 1] == '\t'))
        n--;
    l->line[n] = '\0';
    l->len = 0;
    if (n == 0)
        return;
    for (size_t i = 0; i < n; i++)
        if (l->line[i] == '\0')
            l->line[i] = '?';
    fn(ctx, l->line, n);
}

void spawn_lines_read(int *fd, struct spawn_lines *l, bool all, spawn_line_fn fn, void *ctx)
{
    char buf[4096];
    for (;;) {
        ssize_t n = *fd >= 0 ? read(*fd, buf, sizeof buf) : 0;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (n <= 0) {
            spawn_lines_flush(l, fn, ctx);
            spawn_close(fd);
            return;
        }
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] == '\n' || l->len == SPAWN_LINE_MAX)
                spawn_lines_flush(l, fn, ctx);
            if (buf[i] != '\n')
                l->line[l->len++] = buf[i];
        }
        if (!all)
            return;
    }
}

/* ---- commands without shell syntax ---- */

static bool word_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           strchr("_./,:+@%^-", c) != NULL;
}

/* dash's builtins (and keywords of a word alone): the shell's versions, not a file's. */
static bool shell_builtin(const char *w)
{
    static const char *const names[] = {
        "alias", "bg",    "break",  "cd",    "chdir", "command",  "continue", "echo",    "eval",
        "exec",  "exit",  "export", "false", "fc",    "fg",       "getopts",  "hash",    "jobs",
        "kill",  "local", "printf", "pwd",   "read",  "readonly", "return",   "set",     "shift",
        "test",  "times", "trap",   "true",  "type",  "ulimit",   "umask",    "unalias", "unset",
        "wait",  "if",    "then",   "else",  "elif",  "fi",       "do",       "done",    "case",
        "esac",  "while", "until",  "for",   "in",    "time"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(w, names[i]))
            return true;
    return false;
}

char **spawn_split_words(const char *cmdline)
{
    size_t n = 0;
    for (const char *p = cmdline; *p; p++) {
        if (*p != ' ' && *p != '\t' && !word_char(*p))
            return NULL;
        if (*p != ' ' && *p != '\t' && (p == cmdline || p[-1] == ' ' || p[-1] == '\t'))
            n++;
    }
    if (n == 0)
        return NULL;
    char **w = xcalloc(n + 1, sizeof *w);
    size_t k = 0;
    for (const char *p = cmdline; *p;) {
        size_t len = strcspn(p, " \t");
        if (len)
            w[k++] = xasprintf("%.*s", (int)len, p);
        p += len;
        p += strspn(p, " \t");
    }
    if (w[0][0] == '-' || shell_builtin(w[0])) { /* an option to sh; the shell's own */
        spawn_words_free(w);
        return NULL;
    }
    return w;
}

void spawn_words_free(char **words)
{
    for (size_t i = 0; words && words[i]; i++)
        free(words[i]);
    free(words);
}

/* Whether the file starts as one execve() runs itself: "#!" or an ELF header (a script
 * without "#!" is the shell's to run as a shell script). */
static bool exec_magic(const char *f)
{
    unsigned char m[4] = {0};
    int fd = open(f, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, m, sizeof m) : -1;
    if (fd >= 0)
        close(fd);
    return (n >= 2 && m[0] == '#' && m[1] == '!') ||
           (n == 4 && m[0] == 0x7f && m[1] == 'E' && m[2] == 'L' && m[3] == 'F');
}

/* Whether path, taken relative to dir when it is relative and dir is given, is an executable
 * regular file that execve() runs itself. */
static bool executable_in(const char *dir, const char *path)
{
    char *f = path[0] == '/' || !dir ? xasprintf("%s", path) : xasprintf("%s/%s", dir, path);
    struct stat st;
    bool ok = stat(f, &st) == 0 && S_ISREG(st.st_mode) && access(f, X_OK) == 0 && exec_magic(f);
    free(f);
    return ok;
}

/* The path is the one the shell would hand to execve (the child is in dir by then), so that a
 * script sees the same $0. */
char *spawn_find_program(const char *prog, const char *dir)
{
    if (strchr(prog, '/'))
        return executable_in(dir, prog) ? xasprintf("%s", prog) : NULL;
    const char *path = getenv("PATH");
    if (!path) /* dash's default */
        path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    for (const char *p = path;; p++) {
        size_t len = strcspn(p, ":");
        char *f = len ? xasprintf("%.*s/%s", (int)len, p, prog) : xasprintf("%s", prog);
        if (executable_in(dir, f))
            return f;
        free(f);
        p += len;
        if (!*p)
            return NULL;
    }
}
