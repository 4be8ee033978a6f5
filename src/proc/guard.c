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
#include <unistd.h>

#include "../util.h"

/* Process groups watched at once: far more than threads (commands) plus workers can be. */
#define GUARD_MAX 65536

struct guard_msg {
    int32_t watch; /* 1: watch, 0: forget */
    int32_t pgid;
};

static pthread_mutex_t guard_lock = PTHREAD_MUTEX_INITIALIZER;
static int guard_fd = -1;
static pid_t guard_owner; /* the process that started the guard: a forked copy starts its own */
static bool guard_failed; /* warned once; not retried */

/* Only in the guard, which is forked from a threaded process and never execs: nothing here
 * may allocate or take a lock (async-signal-safe calls only). */
static pid_t guarded[GUARD_MAX];

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
        if (m.watch && n < GUARD_MAX) {
            guarded[n++] = m.pgid;
        } else if (!m.watch) {
            for (size_t i = n; i-- > 0;)
                if (guarded[i] == m.pgid) {
                    guarded[i] = guarded[--n];
                    break;
                }
        }
    }
    for (size_t i = 0; i < n; i++)
        kill(-guarded[i], SIGKILL);
    _exit(0);
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

static void guard_send(int32_t watch, pid_t pgid)
{
    struct guard_msg m = {.watch = watch, .pgid = (int32_t)pgid};
    pthread_mutex_lock(&guard_lock);
    if (guard_owner != getpid()) { /* first use, or a forked copy of the process */
        if (guard_fd >= 0)
            close(guard_fd);
        guard_fd = -1;
        guard_failed = false;
        guard_owner = getpid();
    }
    if (watch && guard_fd < 0 && !guard_failed) {
        int r = guard_start();
        if (r < 0) {
            guard_failed = true;
            log_warn("cannot start the process guard (%s): processors may outlive a killed "
                     "roifs",
                     strerror(-r));
        }
    }
    if (guard_fd >= 0) {
        ssize_t sent;
        while ((sent = send(guard_fd, &m, sizeof m, MSG_NOSIGNAL)) < 0 && errno == EINTR)
            ;
        if (sent < 0 && !guard_failed) {
            guard_failed = true;
            log_warn("the process guard is gone (%s): processors may outlive a killed roifs",
                     strerror(errno));
        }
    }
    pthread_mutex_unlock(&guard_lock);
}

void guard_watch(pid_t pgid)
{
    guard_send(1, pgid);
}

void guard_forget(pid_t pgid)
{
    guard_send(0, pgid);
}
