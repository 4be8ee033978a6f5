/* guard.c: the process-group guard (see guard.h). It holds one end of a socket pair whose other
 * end only this process holds (close-on-exec, so no child inherits it): records "watch pgid" and
 * "forget pgid" come in order, and end of file means that this process is gone. */
#include "guard.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../util.h"

/* Process groups watched at once: far more than threads (commands) plus workers can be. */
#define GUARD_MAX 65536

enum guard_op { GUARD_FORGET, GUARD_KILL, GUARD_SRUN };

struct guard_msg {
    int32_t op; /* enum guard_op */
    int32_t pgid;
};

static pthread_mutex_t guard_lock = PTHREAD_MUTEX_INITIALIZER;
static int guard_fd = -1;
static pid_t guard_owner; /* the process that started the guard: a forked copy starts its own */
static bool guard_failed; /* warned once; not retried */

/* Only in the guard, which is forked from a threaded process and never execs: nothing here
 * may allocate or take a lock (async-signal-safe calls only). */
static pid_t guarded[GUARD_MAX];
static bool guarded_srun[GUARD_MAX];

/* Whether pid runs (not a zombie), from /proc/PID/stat: no stdio, no allocation. */
static bool guard_running(pid_t pid)
{
    char path[40] = "/proc/", buf[512];
    size_t k = 6 + u64_dec(path + 6, (uint64_t)pid); /* no allocation, no lock */
    memcpy(path + k, "/stat", 6);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')');
    return paren && paren[1] == ' ' && paren[2] != 'Z' && paren[2] != 'X';
}

static void guard_sleep(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static void guard_signal_sruns(size_t n, int sig)
{
    for (size_t i = 0; i < n; i++)
        if (guarded_srun[i] && guard_running(guarded[i]))
            kill(guarded[i], sig);
}

/* roifs is gone: local groups die at once. srun got SIGTERM from PR_SET_PDEATHSIG, on which it
 * ends its step; one that is still there (a signal that came while it was launching) gets
 * srun's abort sequence, two SIGINTs, as slurm_stop() does, and at last SIGKILL. */
static _Noreturn void guard_fire(size_t n)
{
    bool sruns = false;
    for (size_t i = 0; i < n; i++) {
        if (!guarded_srun[i])
            kill(-guarded[i], SIGKILL);
        sruns = sruns || guarded_srun[i];
    }
    if (sruns) {
        guard_signal_sruns(n, SIGTERM);
        guard_sleep(2000);
        guard_signal_sruns(n, SIGINT);
        guard_sleep(300);
        guard_signal_sruns(n, SIGINT);
        guard_sleep(3000);
        guard_signal_sruns(n, SIGKILL);
    }
    _exit(0);
}

static void guard_close_others(int keep)
{
    if (close_range((unsigned)keep + 1, ~0U, 0) == 0)
        return;
    struct rlimit rl;
    rlim_t max =
        getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? rl.rlim_cur : 65536;
    for (rlim_t fd = (rlim_t)keep + 1; fd < max; fd++)
        close((int)fd);
}

static _Noreturn void guard_main(int fd)
{
    /* Its own group: ^C on a terminal or a kill of roifs's group must not end the guard
     * before roifs itself. It holds nothing of roifs's open files (the FUSE device above all,
     * whose last holder keeps a dead mount hanging), and its stdio is /dev/null. */
    setpgid(0, 0);
    int moved = fcntl(fd, F_DUPFD, 10);
    int null = open("/dev/null", O_RDWR);
    for (int i = 0; i < 3 && null >= 0; i++)
        dup2(null, i);
    if (moved < 0 || dup2(moved, 3) < 0)
        _exit(1);
    guard_close_others(3);
    prctl(PR_SET_NAME, "roifs-guard");
    static const int ignored[] = {SIGINT, SIGQUIT, SIGHUP, SIGTSTP, SIGTTIN, SIGTTOU, SIGPIPE};
    struct sigaction ign = {.sa_handler = SIG_IGN}, dfl = {.sa_handler = SIG_DFL};
    for (size_t i = 0; i < sizeof ignored / sizeof ignored[0]; i++)
        sigaction(ignored[i], &ign, NULL);
    sigaction(SIGTERM, &dfl, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    size_t n = 0;
    for (;;) {
        struct guard_msg m;
        ssize_t got = recv(3, &m, sizeof m, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break; /* end of file: roifs is gone */
        if (got != sizeof m || m.pgid <= 1)
            continue;
        if (m.op != GUARD_FORGET && n < GUARD_MAX) {
            guarded_srun[n] = m.op == GUARD_SRUN;
            guarded[n++] = m.pgid;
        } else if (m.op == GUARD_FORGET) {
            for (size_t i = n; i-- > 0;)
                if (guarded[i] == m.pgid) {
                    n--;
                    guarded[i] = guarded[n];
                    guarded_srun[i] = guarded_srun[n];
                    break;
                }
        }
    }
    guard_fire(n);
}

/* Under guard_lock. */
static int guard_start(void)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return -errno;
    pid_t pid = fork();
    if (pid == 0)
        guard_main(sv[1]);
    int e = errno;
    close(sv[1]);
    if (pid < 0) {
        close(sv[0]);
        return -e;
    }
    guard_fd = sv[0];
    return 0;
}

/* The guard's socket, the guard started first if need be; -1 when there is none. */
static int guard_socket(bool start)
{
    pthread_mutex_lock(&guard_lock);
    if (guard_owner != getpid()) { /* first use, or a forked copy of the process */
        if (guard_fd >= 0)
            close(guard_fd);
        guard_fd = -1;
        guard_failed = false;
        guard_owner = getpid();
    }
    if (start && guard_fd < 0 && !guard_failed) {
        int r = guard_start();
        if (r < 0) {
            guard_failed = true;
            log_warn("cannot start the process guard (%s): processors may outlive a killed "
                     "roifs",
                     strerror(-r));
        }
    }
    int fd = guard_fd;
    pthread_mutex_unlock(&guard_lock);
    return fd;
}

static int guard_send(int fd, enum guard_op op, pid_t pgid)
{
    struct guard_msg m = {.op = op, .pgid = (int32_t)pgid};
    ssize_t sent;
    while ((sent = send(fd, &m, sizeof m, MSG_NOSIGNAL)) < 0 && errno == EINTR)
        ;
    return sent < 0 ? -errno : 0;
}

int guard_prepare(void)
{
    return guard_socket(true);
}

void guard_watch_self(int fd, bool srun)
{
    if (fd >= 0)
        guard_send(fd, srun ? GUARD_SRUN : GUARD_KILL, getpid());
}

void guard_forget(pid_t pgid)
{
    int fd = guard_socket(false);
    int r = fd >= 0 ? guard_send(fd, GUARD_FORGET, pgid) : 0;
    pthread_mutex_lock(&guard_lock);
    if (r < 0 && !guard_failed) {
        guard_failed = true;
        log_warn("the process guard is gone (%s): processors may outlive a killed roifs",
                 strerror(-r));
    }
    pthread_mutex_unlock(&guard_lock);
}
