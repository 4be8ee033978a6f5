/* pyserver.c: the `python` processor's fork server, from roifs's side (see pyserver.h): its
 * start, the control requests (JSON messages on a SOCK_SEQPACKET socket, descriptors passed
 * with SCM_RIGHTS), its output logged line by line, and its end. */
#include "pyserver.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pypath.h"
#include "spawn.h"

/* Importing the user's file (numpy, scipy, a model...) may take this long at most. */
#define START_TIMEOUT 120.0
/* A fork or kill request is answered in milliseconds; this means the server is stuck. */
#define REQUEST_TIMEOUT 30.0
/* After "quit": the server gives its workers 2 s, then kills them; then this much more. */
#define QUIT_TIMEOUT 5.0
/* Workers compute ROI after ROI of the same size: glibc keeps what they free (no mmap per big
 * array, no trimming), so that a ROI reuses the memory of the last one instead of faulting in
 * and zeroing fresh pages (for a scikit-image segmentation of a 1080x1280 FOV, that was half
 * of the CPU time). A GLIBC_TUNABLES of the user's own is left as it is. */
#define MALLOC_TUNABLES                                                                            \
    "GLIBC_TUNABLES=glibc.malloc.mmap_threshold=4294967295:glibc.malloc.trim_threshold="           \
    "17179869184"

struct pyserver {
    pid_t pid;
    pid_t parent;         /* the process that started it (the only one that may reap it) */
    int ctl;              /* control socket */
    int log_fd;           /* the server's stdout and stderr */
    pthread_mutex_t lock; /* one control request at a time; guards the log line */
    struct spawn_lines log_lines;
    char last[512]; /* last line of output, for messages */
};

/* ---- the server's output ---- */

static void on_log_line(void *ctx, char *line, size_t len)
{
    struct pyserver *s = ctx;
    (void)len;
    log_warn("python %d: %s", (int)s->pid, line);
    snprintf(s->last, sizeof s->last, "%.511s", line);
}

/* Reads what the server wrote, without blocking; logs complete lines. */
static void drain_log(struct pyserver *s)
{
    spawn_lines_read(&s->log_fd, &s->log_lines, true, on_log_line, s);
}

/* ---- control messages ---- */

static int send_msg(struct pyserver *s, const char *text, const int *fds, int nfds)
{
    struct iovec iov = {(void *)text, strlen(text)};
    union {
        char buf[CMSG_SPACE(4 * sizeof(int))];
        struct cmsghdr align;
    } u;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds > 0) {
        memset(&u, 0, sizeof u);
        mh.msg_control = u.buf;
        mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
        memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
    }
    while (sendmsg(s->ctl, &mh, MSG_NOSIGNAL) < 0)
        if (errno != EINTR)
            return -errno;
    return 0;
}

/* Waits for one reply (logging the server's output meanwhile): 0 with *reply, -EPIPE when the
 * server is gone, -ETIMEDOUT. */
static int recv_reply(struct pyserver *s, double timeout, json_t **reply, struct errbuf *err)
{
    double until = now_monotonic() + timeout;
    char buf[8192];
    for (;;) {
        struct pollfd pf[2] = {{.fd = s->ctl, .events = POLLIN},
                               {.fd = s->log_fd, .events = POLLIN}};
        double left = until - now_monotonic();
        if (left <= 0)
            return err_set(err, -ETIMEDOUT, "the fork server %d did not answer in %g s",
                           (int)s->pid, timeout);
        if (poll(pf, 2, (int)(left * 1000) + 1) < 0 && errno != EINTR)
            return err_set(err, -errno, "poll: %s", strerror(errno));
        if (pf[1].revents)
            drain_log(s);
        if (!pf[0].revents)
            continue;
        ssize_t n = recv(s->ctl, buf, sizeof buf - 1, MSG_DONTWAIT);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0)
            return -EPIPE;
        buf[n] = '\0';
        json_error_t je;
        *reply = json_loads(buf, 0, &je);
        if (!json_is_object(*reply)) {
            json_decref(*reply);
            return err_set(err, -EPROTO, "the fork server %d sent '%.80s'", (int)s->pid, buf);
        }
        return 0;
    }
}

/* {"ok": true, ...}: 0; {"ok": false, "error": M}: -EINVAL with M. Takes the reply. */
static int reply_status(json_t *reply, struct errbuf *err)
{
    int rc = 0;
    if (!json_is_true(json_object_get(reply, "ok"))) {
        const char *msg = json_string_value(json_object_get(reply, "error"));
        rc = err_set(err, -EINVAL, "%s", msg ? msg : "the fork server refused");
    }
    return rc;
}

/* ---- start ---- */

/* A new session: the server outlives the process that starts it (see pyserver.h), and a
 * terminal's ^C reaches roifs, which then ends it in order. Signals as a fresh program
 * expects them (the daemon ignores SIGPIPE and blocks signals in its threads). */
static int spawn_server(const struct pyserver_opts *o, char **env, int ctl, int log_w, pid_t *pid)
{
    /* Not `-m roifs._server`: a roifs.py in the configuration's directory (first in sys.path)
     * would shadow the package; that directory goes back for the user's imports. */
    static const char code[] = "import sys; d = sys.path.pop(0); import roifs._server as s; "
                               "sys.path.insert(0, d); s.main()";
    char *argv[] = {(char *)o->interpreter, "-c", (char *)code, (char *)o->spec, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    sigset_t none, dfl;
    static const int reset[] = {SIGPIPE, SIGCHLD, SIGINT,  SIGQUIT, SIGTERM,
                                SIGHUP,  SIGUSR1, SIGUSR2, SIGXFSZ};
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, ctl, 0);
    posix_spawn_file_actions_adddup2(&fa, log_w, 1);
    posix_spawn_file_actions_adddup2(&fa, log_w, 2);
    if (o->dir)
        posix_spawn_file_actions_addchdir_np(&fa, o->dir);
    sigemptyset(&none);
    sigemptyset(&dfl);
    for (size_t i = 0; i < sizeof reset / sizeof reset[0]; i++)
        sigaddset(&dfl, reset[i]);
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr,
                             POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &dfl);
    int rc = posix_spawn(pid, o->interpreter, &fa, &attr, argv, env);
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&fa);
    return -rc;
}

/* The server went away before it was ready: what it said, and how it ended. */
static int report_early_exit(struct pyserver *s, struct errbuf *err)
{
    double until = now_monotonic() + 2.0;
    while (s->log_fd >= 0 && now_monotonic() < until) {
        struct pollfd pf = {.fd = s->log_fd, .events = POLLIN};
        if (poll(&pf, 1, 100) > 0)
            drain_log(s);
    }
    int status = 0;
    while (waitpid(s->pid, &status, 0) < 0 && errno == EINTR)
        ;
    s->pid = 0;
    char how[64];
    if (WIFSIGNALED(status))
        snprintf(how, sizeof how, "was killed by signal %d", WTERMSIG(status));
    else
        snprintf(how, sizeof how, "exited with status %d", WEXITSTATUS(status));
    bool no_pkg = strstr(s->last, "No module named roifs") != NULL;
    char *dir = no_pkg ? pypath_dir() : NULL;
    err_set(err, -EINVAL, "the interpreter %s before it was ready%s%s%s%s", how,
            *s->last ? ": " : "", s->last, no_pkg ? "; roifs's Python package is not in " : "",
            no_pkg ? dir : "");
    free(dir);
    return -EINVAL;
}

static void server_free(struct pyserver *s)
{
    spawn_close(&s->ctl);
    spawn_close(&s->log_fd);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

/* Sends the hello, waits for the verdict on the import. */
static int handshake(struct pyserver *s, const struct pyserver_opts *o, struct errbuf *err)
{
    char *hello = xasprintf("{\"params\": %s, \"measure\": %s}",
                            o->params_json ? o->params_json : "{}", o->measure ? "true" : "false");
    int rc = send_msg(s, hello, NULL, 0);
    free(hello);
    json_t *reply = NULL;
    if (rc == -EMSGSIZE)
        return err_set(err, rc, "the param.* values are too long to hand to Python");
    if (rc == 0)
        rc = recv_reply(s, START_TIMEOUT, &reply, err);
    if (rc == -EPIPE || rc == -ECONNRESET)
        return report_early_exit(s, err);
    if (rc == -ETIMEDOUT)
        return err_set(err, rc, "the interpreter did not finish importing %s in %g s", o->spec,
                       START_TIMEOUT);
    if (rc)
        return rc;
    rc = reply_status(reply, err);
    json_decref(reply);
    return rc;
}

int pyserver_start(const struct pyserver_opts *o, struct pyserver **out, struct errbuf *err)
{
    *out = NULL;
    int sv[2], lp[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return err_set(err, -errno, "socketpair: %s", strerror(errno));
    int rc = spawn_pipe(lp);
    if (rc) {
        close(sv[0]);
        close(sv[1]);
        return err_set(err, rc, "pipe: %s", strerror(-rc));
    }
    struct pyserver *s = xcalloc(1, sizeof *s);
    pthread_mutex_init(&s->lock, NULL);
    s->ctl = sv[0];
    s->log_fd = lp[0];
    char **env, **env2;
    char *own[3];
    pypath_env(&env, own, false);
    size_t n = 0;
    while (env[n])
        n++;
    env2 = xmalloc((n + 2) * sizeof *env2);
    memcpy(env2, env, n * sizeof *env2);
    env2[n] = getenv("GLIBC_TUNABLES") ? NULL : MALLOC_TUNABLES;
    env2[n + 1] = NULL;
    rc = spawn_server(o, env2, sv[1], lp[1], &s->pid);
    free(env2);
    free(env);
    for (int i = 0; i < 3; i++)
        free(own[i]);
    close(sv[1]);
    close(lp[1]);
    if (rc) {
        err_set(err, rc, "cannot run the interpreter %s: %s", o->interpreter, strerror(-rc));
        s->pid = 0;
        server_free(s);
        return rc;
    }
    s->parent = getpid();
    fcntl(s->log_fd, F_SETFL, fcntl(s->log_fd, F_GETFL) | O_NONBLOCK);
    rc = handshake(s, o, err);
    if (rc) {
        pyserver_stop(s, true);
        return rc;
    }
    *out = s;
    return 0;
}

/* ---- requests ---- */

static int request(struct pyserver *s, const char *text, const int *fds, int nfds, json_t **reply,
                   struct errbuf *err)
{
    pthread_mutex_lock(&s->lock);
    drain_log(s);
    int rc = s->ctl < 0 ? -EPIPE : send_msg(s, text, fds, nfds);
    if (rc == 0)
        rc = recv_reply(s, REQUEST_TIMEOUT, reply, err);
    if (rc == -EPIPE || rc == -ECONNRESET)
        rc = err_set(err, -EPIPE, "the fork server %d is gone%s%s", (int)s->pid,
                     *s->last ? ": " : "", s->last);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int pyserver_fork(struct pyserver *s, int sock, int err_w, int memfd, pid_t *pid,
                  struct errbuf *err)
{
    int fds[3] = {sock, err_w, memfd};
    json_t *reply = NULL;
    int rc = request(s, "{\"op\": \"fork\"}", fds, 3, &reply, err);
    if (rc)
        return rc;
    rc = reply_status(reply, err);
    json_int_t p = json_integer_value(json_object_get(reply, "pid"));
    json_decref(reply);
    if (!rc && p <= 0)
        rc = err_set(err, -EPROTO, "the fork server %d did not say which process it forked",
                     (int)s->pid);
    *pid = rc ? 0 : (pid_t)p;
    return rc;
}

int pyserver_kill(struct pyserver *s, pid_t pid, struct errbuf *err)
{
    char text[64];
    snprintf(text, sizeof text, "{\"op\": \"kill\", \"pid\": %d}", (int)pid);
    json_t *reply = NULL;
    int rc = request(s, text, NULL, 0, &reply, err);
    if (!rc) {
        rc = reply_status(reply, err);
        json_decref(reply);
    }
    return rc;
}

pid_t pyserver_pid(const struct pyserver *s)
{
    return s->pid;
}

/* ---- end ---- */

void pyserver_stop(struct pyserver *s, bool wait)
{
    if (!s)
        return;
    if (wait && s->pid > 0 && s->ctl >= 0) {
        send_msg(s, "{\"op\": \"quit\"}", NULL, 0);
        /* The server's end closes when it exits (its workers closed their copies at fork). */
        double until = now_monotonic() + QUIT_TIMEOUT;
        bool gone = false;
        while (!gone && now_monotonic() < until) {
            struct pollfd pf[2] = {{.fd = s->ctl, .events = POLLIN},
                                   {.fd = s->log_fd, .events = POLLIN}};
            if (poll(pf, 2, 100) < 0 && errno != EINTR)
                break;
            if (pf[1].revents)
                drain_log(s);
            char c;
            if (pf[0].revents && recv(s->ctl, &c, 1, MSG_DONTWAIT) == 0)
                gone = true;
        }
        if (!gone) { /* still holding its socket, so still the same process */
            log_warn("python %d: the fork server did not quit in %g s; killed", (int)s->pid,
                     QUIT_TIMEOUT);
            kill(-s->pid, SIGKILL);
            kill(s->pid, SIGKILL);
        }
        drain_log(s);
        if (s->parent == getpid())
            while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR)
                ;
    }
    server_free(s);
}
