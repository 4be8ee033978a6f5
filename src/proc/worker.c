/* worker.c: the `worker` processor (docs/processors.md, The worker protocol): persistent `/bin/sh
 * -c WORKER` processes, each in its own process group, started on first use and reused. One ROI at
 * a time per worker: a JSON request line and the input bytes on its stdin, a JSON reply line and
 * the output bytes on its stdout. A worker that dies, hangs or breaks the protocol is killed and
 * replaced. With `executor = slurm` each worker is `srun ... /bin/sh -c WORKER`, a job step that
 * serves many ROIs; the protocol travels through srun. */
#include "proc.h"
#include "pypath.h"
#include "slurm.h"
#include "spawn.h"
#include "worker_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* ---- environment ---- */

/* environ with ROIFS_WORKER=1, ROIFS_PYTHONPATH set and that directory first in PYTHONPATH. */
static void build_env(struct worker_pool *wp)
{
    pypath_env(&wp->env, wp->env_own, true);
}

/* ---- starting a worker ---- */

static int spawn_shell(const struct worker_pool *wp, const int child_fds[3], pid_t *pid)
{
    char *argv[] = {"sh", "-c", wp->cmdline, NULL};
    if (wp->slurm)
        return spawn_process(wp->slurm->srun, wp->srun_argv, wp->env, wp->dir, child_fds, true,
                             pid);
    return spawn_process("/bin/sh", argv, wp->env, wp->dir, child_fds, false, pid);
}

static int worker_start(const struct worker_pool *wp, struct worker *w, struct errbuf *err)
{
    int p[3][2] = {{-1, -1}, {-1, -1}, {-1, -1}}, rc = 0;
    for (int i = 0; i < 3 && !rc; i++)
        rc = spawn_pipe(p[i]);
    if (!rc) {
        int child_fds[3] = {p[0][0], p[1][1], p[2][1]};
        rc = spawn_shell(wp, child_fds, &w->pid);
    }
    w->in_fd = p[0][1];
    w->out_fd = p[1][0];
    w->err_fd = p[2][0];
    spawn_close(&p[0][0]);
    spawn_close(&p[1][1]);
    spawn_close(&p[2][1]);
    if (rc) {
        spawn_close(&w->in_fd);
        spawn_close(&w->out_fd);
        spawn_close(&w->err_fd);
        w->pid = 0;
        return err_set(err, -EIO, "cannot start worker %s/bin/sh -c '%s' in %s: %s",
                       wp->slurm ? "srun ... " : "", wp->cmdline, wp->dir ? wp->dir : ".",
                       strerror(-rc));
    }
    w->pid_fd = -1;
#ifdef SYS_pidfd_open
    w->pid_fd = (int)syscall(SYS_pidfd_open, w->pid, 0);
#endif
    for (int i = 0; i < 3; i++) {
        int fd = i == 0 ? w->in_fd : i == 1 ? w->out_fd : w->err_fd;
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    }
    w->exited = w->retire = false;
    w->pipe_size = 0;
    w->err_lines.len = w->hdr_len = 0;
    w->last[0] = w->slurm_last[0] = '\0';
    w->srun = wp->slurm != NULL;
    log_info("worker %d: started: %s%s", (int)w->pid, w->srun ? "srun ... " : "", wp->cmdline);
    return 0;
}

/* ---- stderr and exits ---- */

static void on_stderr_line(void *ctx, char *line, size_t n)
{
    struct worker *w = ctx;
    log_info("worker %d: %s", (int)w->pid, line);
    bool own = w->srun && slurm_is_own_line(line);
    if (own && (strstr(line, "Exited with exit code") || !strstr(line, "error")))
        return; /* the exit status says as much */
    char *dst = own ? w->slurm_last : w->last;
    size_t size = own ? sizeof w->slurm_last : sizeof w->last;
    size_t keep = n < size - 1 ? n : size - 1;
    memcpy(dst, line, keep);
    dst[keep] = '\0';
}

/* One read of the worker's stderr, logged line by line. */
static void drain_stderr(struct worker *w)
{
    spawn_lines_read(&w->err_fd, &w->err_lines, false, on_stderr_line, w);
}

static void emit_line(struct worker *w)
{
    spawn_lines_flush(&w->err_lines, on_stderr_line, w);
}

static void note_exit(struct worker *w)
{
    siginfo_t si = {0};
    if (!w->exited && waitid(P_PID, (id_t)w->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        si.si_pid == w->pid) {
        w->exited = true;
        w->exit_time = now_monotonic();
    }
}

static int ms_until(double t, double now)
{
    return t > now ? (int)((t - now) * 1000) + 1 : 0;
}

/* Logs stderr until it closes and the shell exits, or until `until`. */
static void await_exit(struct worker *w, double until)
{
    for (;;) {
        note_exit(w);
        double now = now_monotonic();
        if ((w->exited && w->err_fd < 0) || now >= until)
            return;
        struct pollfd pf[2] = {{.fd = w->err_fd, .events = POLLIN},
                               {.fd = w->exited ? -1 : w->pid_fd, .events = POLLIN}};
        int ms = ms_until(until, now);
        if (w->pid_fd < 0 && !w->exited && ms > TICK_MS)
            ms = TICK_MS;
        if (poll(pf, 2, ms) < 0 && errno != EINTR)
            return;
        if (pf[0].revents)
            drain_stderr(w);
    }
}

/* Kills the worker's process group, reaps the shell and frees the slot for a new worker.
 * Returns the wait status (or -1 when it was lost). */
static int worker_reap(struct worker *w)
{
    int status = -1;
    if (w->pid <= 0)
        return status;
    spawn_close(&w->in_fd);
    spawn_close(&w->out_fd);
    spawn_close(&w->err_fd);
    spawn_close(&w->pid_fd);
    emit_line(w);
    if (w->srun) /* Slurm must end the step; srun's pipes may be closed for that */
        slurm_stop(w->pid, "roifs-worker");
    /* Not reaped yet, so the pid still names the group: leftovers die with it. */
    kill(-w->pid, SIGKILL);
    kill(w->pid, SIGKILL); /* in case it left its group */
    spawn_reap(w->pid, &status);
    w->pid = 0;
    return status;
}

/* "exited with status 1", "was killed by signal 9", ... */
static void describe_status(int status, bool exited, char *buf, size_t len)
{
    if (!exited || status < 0)
        snprintf(buf, len, "closed its output");
    else if (WIFSIGNALED(status))
        snprintf(buf, len, "was killed by signal %d", WTERMSIG(status));
    else if (WEXITSTATUS(status) > 128 && WEXITSTATUS(status) < 128 + 65)
        /* the shell's way of saying that its command was killed */
        snprintf(buf, len, "exited with status %d (signal %d)", WEXITSTATUS(status),
                 WEXITSTATUS(status) - 128);
    else
        snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
}

/* What the worker last said on stderr, with srun's reason under Slurm: "msg [srun: ...]". */
static const char *worker_said(const struct worker *w, char *buf, size_t len)
{
    const char *task = w->last, *srun = w->slurm_last;
    if (*task && *srun)
        snprintf(buf, len, ": %s [%s]", task, srun);
    else if (*task || *srun)
        snprintf(buf, len, ": %s", *task ? task : srun);
    else
        buf[0] = '\0';
    return buf;
}

/* ---- the pool ---- */

static void worker_free(struct worker *w)
{
    free(w->hdr);
    sb_free(&w->req);
    free(w);
}

/* A worker for one request, marked busy; NULL once shutting down. */
static struct worker *acquire(struct worker_pool *wp)
{
    pthread_mutex_lock(&wp->lock);
    struct worker *w = NULL;
    if (!wp->stopping) {
        if (wp->stop_fd < 0) /* made here, after any fork of the daemon */
            wp->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        for (size_t i = 0; i < wp->nworkers && !w; i++)
            if (!wp->workers[i]->busy && wp->workers[i]->pid > 0)
                w = wp->workers[i];
        for (size_t i = 0; i < wp->nworkers && !w; i++)
            if (!wp->workers[i]->busy)
                w = wp->workers[i];
        if (!w) { /* at most one per concurrent run(), which the engine bounds by threads */
            w = xcalloc(1, sizeof *w);
            w->in_fd = w->out_fd = w->err_fd = w->pid_fd = -1;
            w->hdr = xmalloc(HDR_MAX + 1);
            wp->workers = xrealloc(wp->workers, (wp->nworkers + 1) * sizeof *wp->workers);
            wp->workers[wp->nworkers++] = w;
        }
        w->busy = true;
    }
    pthread_mutex_unlock(&wp->lock);
    return w;
}

static void release(struct worker_pool *wp, struct worker *w)
{
    if (w->retire)
        worker_reap(w);
    pthread_mutex_lock(&wp->lock);
    w->busy = false;
    pthread_mutex_unlock(&wp->lock);
}

/* An idle worker may have died or written to stdout since its last ROI: then it is replaced
 * now rather than failing the next ROI. */
static void check_idle(struct worker *w)
{
    struct pollfd pf[3] = {{.fd = w->out_fd, .events = POLLIN},
                           {.fd = w->err_fd, .events = POLLIN},
                           {.fd = w->pid_fd, .events = POLLIN}};
    bool ready = poll(pf, 3, 0) > 0;
    if (ready && pf[1].revents)
        drain_stderr(w);
    if (ready && pf[2].revents && !w->exited) {
        w->exited = true;
        w->exit_time = now_monotonic();
    }
    if (w->pid_fd < 0)
        note_exit(w);
    bool output = ready && pf[0].revents;
    if (!output && !w->exited)
        return;
    char c, what[96], said[800];
    bool chatty = output && read(w->out_fd, &c, 1) > 0;
    pid_t pid = w->pid;
    await_exit(w, now_monotonic() + (chatty ? 0 : DEATH_GRACE));
    bool exited = w->exited;
    describe_status(worker_reap(w), exited, what, sizeof what);
    log_warn("worker %d %s while idle%s; starting a new one", (int)pid,
             chatty ? "wrote to its stdout" : what, worker_said(w, said, sizeof said));
}

/* ---- one request (the wire format is in worker_wire.c) ---- */

static int poll_ms(const struct worker_pool *wp, const struct worker *w, double now,
                   double deadline)
{
    int ms = wp->stop_fd < 0 ? TICK_MS : -1;
    if (deadline > 0 && (ms < 0 || ms_until(deadline, now) < ms))
        ms = ms_until(deadline, now);
    if (w->exited) {
        int grace = ms_until(w->exit_time + DEATH_GRACE, now);
        ms = ms < 0 || grace < ms ? grace : ms;
    } else if (w->pid_fd < 0 && (ms < 0 || ms > TICK_MS)) {
        ms = TICK_MS;
    }
    return ms;
}

/* Sends the request and reads the reply, watching stderr, the worker's exit, the deadline
 * and the shutdown. */
static enum outcome exchange(struct worker_pool *wp, struct worker *w, struct exchange *x,
                             double deadline, struct errbuf *err)
{
    wire_write_request(w, x);
    for (;;) {
        struct pollfd pf[5] = {
            {.fd = x->to_write && !x->in_closed ? w->in_fd : -1, .events = POLLOUT},
            {.fd = w->out_fd, .events = POLLIN},
            {.fd = w->err_fd, .events = POLLIN},
            {.fd = w->exited ? -1 : w->pid_fd, .events = POLLIN},
            {.fd = wp->stop_fd, .events = POLLIN},
        };
        double now = now_monotonic();
        if (poll(pf, 5, poll_ms(wp, w, now, deadline)) < 0 && errno != EINTR)
            return err_set(err, -EIO, "worker %d: poll failed: %s", (int)w->pid, strerror(errno)),
                   OUT_BROKEN;
        if (pf[4].revents || wp->stopping)
            return OUT_SHUTDOWN;
        if (pf[0].revents & POLLOUT)
            wire_write_request(w, x);
        else if (pf[0].revents)
            x->in_closed = true;
        if (pf[2].revents)
            drain_stderr(w);
        if (pf[3].revents && !w->exited) {
            w->exited = true;
            w->exit_time = now_monotonic();
        }
        if (w->pid_fd < 0)
            note_exit(w);
        if (pf[1].revents) {
            enum outcome rc = wire_read_reply(w, x, err);
            if (rc == OUT_OK || rc == OUT_REFUSED)
                return wire_check_complete(w, x, rc, err);
            if (rc != OUT_MORE)
                return rc;
        }
        now = now_monotonic();
        if (deadline > 0 && now >= deadline)
            return OUT_TIMEOUT;
        if (w->exited && now >= w->exit_time + DEATH_GRACE)
            return OUT_DIED; /* its shell is gone; something else holds stdout open */
    }
}

/* The message for a worker that went away mid-request; reaps it. */
static int report_death(struct worker *w, const struct exchange *x, struct errbuf *err)
{
    pid_t pid = w->pid;
    await_exit(w, now_monotonic() + DEATH_GRACE);
    bool exited = w->exited;
    char what[96], when[96], said[800];
    describe_status(worker_reap(w), exited, what, sizeof what);
    if (!x->have_header)
        snprintf(when, sizeof when, " before replying");
    else
        snprintf(when, sizeof when, " in the middle of its reply (%zu of %zu bytes)", x->out_got,
                 x->rq->out_nbytes);
    return err_set(err, -EIO, "worker %d %s%s%.700s", (int)pid, what, when,
                   worker_said(w, said, sizeof said));
}

static int worker_run(struct proc *p, const struct proc_request *rq, struct errbuf *err)
{
    struct worker_pool *wp = (struct worker_pool *)p;
    struct worker *w = acquire(wp);
    if (!w)
        return err_set(err, -ECANCELED, "shut down");
    if (w->pid > 0)
        check_idle(w);
    int rc = w->pid > 0 ? 0 : worker_start(wp, w, err);
    if (rc) {
        release(wp, w);
        return rc;
    }
    double deadline = wp->timeout > 0 ? now_monotonic() + wp->timeout : 0;
    wire_size_pipes(w, rq);
    wire_build_request(wp, rq, &w->req);
    struct exchange x = {
        .rq = rq,
        .iov = {{w->req.buf, w->req.len}, {(void *)rq->in, rq->in_nbytes}},
        .to_write = w->req.len + rq->in_nbytes,
    };
    w->hdr_len = 0;
    enum outcome end = exchange(wp, w, &x, deadline, err);
    switch (end) {
    case OUT_OK:
        break;
    case OUT_REFUSED:
        rc = -EIO;
        break;
    case OUT_SHUTDOWN:
        rc = err_set(err, -ECANCELED, "shut down");
        w->retire = true;
        break;
    case OUT_TIMEOUT:
        rc = err_set(err, -EIO, "worker %d timed out after %g s", (int)w->pid, wp->timeout);
        w->retire = true;
        break;
    case OUT_DIED:
        rc = report_death(w, &x, err);
        break;
    case OUT_BROKEN:
    case OUT_MORE: /* not an end: exchange() waits on it */
        rc = -EIO;
        w->retire = true;
        break;
    }
    if (w->retire && end != OUT_SHUTDOWN) /* the message names the worker */
        log_warn("%s; killing it, the next ROI starts a new worker", err->msg);
    release(wp, w);
    return rc;
}

/* ---- shutdown ---- */

/* EOF on stdin, EXIT_GRACE to exit, then the group is killed; all are reaped. */
static void reap_all(struct worker **ws, size_t n)
{
    for (size_t i = 0; i < n; i++)
        spawn_close(&ws[i]->in_fd);
    double until = now_monotonic() + EXIT_GRACE;
    for (size_t i = 0; i < n; i++)
        if (ws[i]->pid > 0)
            await_exit(ws[i], until);
    for (size_t i = 0; i < n; i++) /* all steps at once; worker_reap waits for each */
        if (ws[i]->pid > 0 && ws[i]->srun && !ws[i]->exited)
            slurm_interrupt(ws[i]->pid);
    for (size_t i = 0; i < n; i++) {
        pid_t pid = ws[i]->pid;
        bool exited = ws[i]->exited;
        if (pid <= 0)
            continue;
        int status = worker_reap(ws[i]);
        if (!exited)
            log_warn("worker %d: still running %g s after the end of its input; killed", (int)pid,
                     EXIT_GRACE);
        else if (status != 0)
            log_info("worker %d: exit status %d", (int)pid,
                     WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    }
}

/* Idle workers get EOF and are reaped here; busy ones are killed by their run(), which the
 * eventfd wakes at once. */
static void worker_shutdown(struct proc *p)
{
    struct worker_pool *wp = (struct worker_pool *)p;
    pthread_mutex_lock(&wp->lock);
    wp->stopping = true;
    if (wp->stop_fd >= 0 && eventfd_write(wp->stop_fd, 1) < 0)
        log_warn("workers: cannot signal the shutdown: %s", strerror(errno));
    struct worker **idle = xcalloc(wp->nworkers + 1, sizeof *idle);
    size_t n = 0;
    for (size_t i = 0; i < wp->nworkers; i++)
        if (!wp->workers[i]->busy && wp->workers[i]->pid > 0) {
            wp->workers[i]->busy = true;
            idle[n++] = wp->workers[i];
        }
    pthread_mutex_unlock(&wp->lock);
    reap_all(idle, n);
    pthread_mutex_lock(&wp->lock);
    for (size_t i = 0; i < n; i++)
        idle[i]->busy = false;
    pthread_mutex_unlock(&wp->lock);
    free(idle);
}

/* No run() is in progress any more. Does not touch stop_fd: after a fork, the parent's copy
 * of this processor is destroyed while the daemon's lives on. */
static void worker_destroy(struct proc *p)
{
    struct worker_pool *wp = (struct worker_pool *)p;
    wp->stopping = true;
    reap_all(wp->workers, wp->nworkers);
    for (size_t i = 0; i < wp->nworkers; i++)
        worker_free(wp->workers[i]);
    free(wp->workers);
    spawn_close(&wp->stop_fd);
    free(wp->env);
    for (int i = 0; i < 3; i++)
        free(wp->env_own[i]);
    free(wp->params_json);
    slurm_argv_free(wp->srun_argv);
    slurm_launch_free(wp->slurm);
    free(wp->cmdline);
    free(wp->dir);
    pthread_mutex_destroy(&wp->lock);
    free(wp);
}

static const struct proc_ops worker_ops = {
    .run = worker_run,
    .shutdown = worker_shutdown,
    .destroy = worker_destroy,
};

int proc_worker_create(const struct config *cfg, struct proc **out, struct errbuf *err)
{
    if (!cfg->proc_value || !cfg->proc_value[strspn(cfg->proc_value, " \t")])
        return err_set(err, -EINVAL, "%s: [process] worker: empty command", cfg->path);
    char *params = NULL;
    struct slurm_launch *slurm = NULL;
    int rc = proc_params_json(cfg, &params, err);
    if (!rc)
        rc = slurm_launch_create(cfg, &slurm, err);
    if (rc) {
        free(params);
        return rc;
    }
    /* A worker that exits while we write to it must not kill the daemon. */
    signal(SIGPIPE, SIG_IGN);
    struct worker_pool *wp = xcalloc(1, sizeof *wp);
    wp->base.ops = &worker_ops;
    wp->cmdline = xstrdup(cfg->proc_value);
    wp->dir = cfg->dir ? xstrdup(cfg->dir) : NULL;
    wp->timeout = cfg->timeout;
    wp->params_json = params;
    wp->stop_fd = -1;
    wp->slurm = slurm;
    if (slurm) /* unbuffered: a reply's bytes must not wait in slurmstepd for a newline */
        wp->srun_argv = slurm_argv(slurm, "roifs-worker", true, wp->cmdline);
    build_env(wp);
    pthread_mutex_init(&wp->lock, NULL);
    *out = &wp->base;
    return 0;
}
