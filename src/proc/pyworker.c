/* pyworker.c: the daemon's side of one `python` worker (pyworker.h): forking it through the
 * fork server, reading its stderr, noticing its death, and its requests — the block and the
 * result in a memfd both sides map (grown to the largest ROI, reused), a request header on
 * its socket, one recv() per reply. */
#include "pyworker.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

/* A worker that died gets this long to finish its stderr (the traceback). */
#define DEATH_GRACE 0.5
/* The result starts at this alignment after the block in the shared memory. */
#define MAP_ALIGN 64
/* While a ROI runs, roifs sleeps in one recv() on the worker's socket (on this VM a system
 * call costs about 2 us, a poll() and a recv() per ROI were a third of the overhead); it wakes
 * this often to read the worker's stderr, notice the shutdown and the deadline. */
#define TICK 1.0
/* Its stderr pipe holds this much; the reply says when Python wrote to it, and roifs reads it
 * then, at every tick, and every STDERR_EVERY ROIs for output from C code. */
#define STDERR_PIPE  (1 << 20)
#define STDERR_EVERY 64

/* ---- a worker's stderr ---- */

static void on_stderr_line(void *ctx, char *line, size_t len)
{
    struct pyworker *w = ctx;
    (void)len;
    log_info("python worker %d: %s", (int)w->pid, line);
    snprintf(w->last, sizeof w->last, "%.511s", line);
}

static void drain_stderr(struct pyworker *w)
{
    spawn_lines_read(&w->err_fd, &w->err_lines, true, on_stderr_line, w);
}

static void emit_line(struct pyworker *w)
{
    spawn_lines_flush(&w->err_lines, on_stderr_line, w);
}

/* Waits up to `until` for the end of its stderr (it has exited: the traceback follows). */
static void await_stderr(struct pyworker *w, double until)
{
    while (w->err_fd >= 0) {
        double left = until - now_monotonic();
        struct pollfd pf = {.fd = w->err_fd, .events = POLLIN};
        if (left <= 0 || poll(&pf, 1, (int)(left * 1000) + 1) <= 0)
            return;
        drain_stderr(w);
    }
}

/* ---- a worker's life ---- */

/* Forgets the process (dead, or killed through the server) and frees its descriptors. */
void pyworker_reset(struct pypool *pp, struct pyworker *w)
{
    if (w->err_fd >= 0)
        drain_stderr(w);
    emit_line(w);
    pthread_mutex_lock(&pp->lock);
    spawn_close(&w->sock);
    pthread_mutex_unlock(&pp->lock);
    spawn_close(&w->err_fd);
    spawn_close(&w->mem_fd);
    if (w->map)
        munmap(w->map, w->map_size);
    w->map = NULL;
    w->map_size = 0;
    w->pid = 0;
}

void pyworker_retire(struct pypool *pp, struct pyworker *w)
{
    struct errbuf kerr;
    pthread_mutex_lock(&pp->srv_lock);
    /* A worker of an earlier server died with it (PR_SET_PDEATHSIG). */
    if (w->pid > 0 && pp->srv && w->gen == pp->srv_gen && pyserver_kill(pp->srv, w->pid, &kerr) < 0)
        log_warn("python worker %d: cannot kill it: %s", (int)w->pid, kerr.msg);
    pthread_mutex_unlock(&pp->srv_lock);
    pyworker_reset(pp, w);
}

/* The fork server died (kill -9, out of memory...), and its workers with it: a new one, with
 * the same file, params and directory. Called with srv_lock held. */
static int restart_server(struct pypool *pp, const char *why, struct errbuf *err)
{
    pid_t old = pp->srv ? pyserver_pid(pp->srv) : 0;
    log_warn("python: %s; starting a new one", why);
    pyserver_stop(pp->srv, true); /* reaps it if it is our child; its socket is closed */
    pp->srv = NULL;
    pp->srv_gen++;
    struct pyserver *s = NULL;
    int rc = pyserver_start(&pp->opts, &s, err);
    if (rc)
        return err_prefix(err, rc, "the fork server %d is gone and a new one did not start",
                          (int)old);
    pp->srv = s;
    log_warn("python: fork server %d started in place of %d", (int)pyserver_pid(s), (int)old);
    return 0;
}

/* pyserver_fork, with the server started again when it is gone. */
static int fork_worker_process(struct pypool *pp, int sock, int err_w, int mfd, pid_t *pid,
                               unsigned *gen, struct errbuf *err)
{
    pthread_mutex_lock(&pp->srv_lock);
    int rc = pp->srv ? pyserver_fork(pp->srv, sock, err_w, mfd, pid, err)
                     : err_set(err, -EPIPE, "no fork server");
    if (rc == -EPIPE && !pp->stopping) {
        char why[sizeof err->msg];
        memcpy(why, err->msg, sizeof why);
        rc = restart_server(pp, why, err);
        if (!rc) {
            pp->renew = true;
            rc = pyserver_fork(pp->srv, sock, err_w, mfd, pid, err);
        }
    }
    *gen = pp->srv_gen;
    pthread_mutex_unlock(&pp->srv_lock);
    return rc;
}

static double tick_of(const struct pypool *pp)
{
    return pp->timeout > 0 && pp->timeout < TICK ? pp->timeout : TICK;
}

static void set_tick(int sock, double seconds)
{
    if (seconds < 0.001)
        seconds = 0.001;
    struct timeval tv = {.tv_sec = (time_t)seconds,
                         .tv_usec = (suseconds_t)((seconds - (double)(time_t)seconds) * 1e6)};
    setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

/* The server sets `dead` in the first page of the memfd when it reaps the worker, before it
 * sends the notice: roifs looks at it before each ROI without a system call. */
static bool worker_dead(const struct pyworker *w)
{
    const struct py_shared *sh = (const struct py_shared *)w->map;
    return sh && __atomic_load_n(&sh->dead, __ATOMIC_ACQUIRE) != 0;
}

int pyworker_fork(struct pypool *pp, struct pyworker *w, struct errbuf *err)
{
    int sv[2] = {-1, -1}, ep[2] = {-1, -1}, mfd = -1, rc = 0;
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        rc = -errno;
    if (!rc)
        rc = spawn_pipe(ep);
    if (!rc && (mfd = memfd_create("roifs-python", MFD_CLOEXEC)) < 0)
        rc = -errno;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (!rc && ftruncate(mfd, (off_t)page) < 0) /* the first page: struct py_shared */
        rc = -errno;
    if (rc) {
        for (int i = 0; i < 2; i++) {
            spawn_close(&sv[i]);
            spawn_close(&ep[i]);
        }
        spawn_close(&mfd);
        return err_set(err, rc, "cannot set up a python worker: %s", strerror(-rc));
    }
    pid_t pid = 0;
    unsigned gen = 0;
    rc = fork_worker_process(pp, sv[1], ep[1], mfd, &pid, &gen, err);
    spawn_close(&sv[1]);
    spawn_close(&ep[1]);
    if (rc) {
        spawn_close(&sv[0]);
        spawn_close(&ep[0]);
        spawn_close(&mfd);
        return err_prefix(err, rc, "cannot fork a python worker");
    }
    fcntl(ep[0], F_SETFL, fcntl(ep[0], F_GETFL) | O_NONBLOCK);
    fcntl(ep[0], F_SETPIPE_SZ, STDERR_PIPE); /* best effort */
    set_tick(sv[0], tick_of(pp));
    w->pid = pid;
    w->gen = gen;
    pthread_mutex_lock(&pp->lock);
    w->sock = sv[0];
    pthread_mutex_unlock(&pp->lock);
    w->err_fd = ep[0];
    w->mem_fd = mfd;
    w->map = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    w->map_size = page;
    if (w->map == MAP_FAILED) {
        w->map = NULL;
        w->map_size = 0;
        rc = err_set(err, -errno, "cannot map the shared memory of a python worker: %s",
                     strerror(errno));
        pyworker_retire(pp, w);
        return rc;
    }
    w->err_lines.len = 0;
    w->last[0] = '\0';
    w->rois = 0;
    w->tick_cut = false;
    return 0;
}

/* "exited with status 1", "was killed by signal 9" */
static void describe_status(int status, char *buf, size_t len)
{
    if (WIFSIGNALED(status))
        snprintf(buf, len, "was killed by signal %d", WTERMSIG(status));
    else
        snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
}

/* An idle worker may have died since its last ROI: then it is replaced now rather than
 * failing the next ROI. */
void pyworker_check_idle(struct pypool *pp, struct pyworker *w)
{
    if (!worker_dead(w))
        return;
    struct py_reply rep = {0};
    struct pollfd pf = {.fd = w->sock, .events = POLLIN};
    char what[64] = "is gone";
    if (poll(&pf, 1, (int)(DEATH_GRACE * 1000)) > 0 &&
        recv(w->sock, &rep, sizeof rep, MSG_DONTWAIT) == (ssize_t)sizeof rep &&
        rep.kind == PY_REP_DIED)
        describe_status((int)rep.value, what, sizeof what);
    pid_t pid = w->pid;
    await_stderr(w, now_monotonic() + DEATH_GRACE);
    log_warn("python worker %d %s while idle%s%s; forking a new one", (int)pid, what,
             *w->last ? ": " : "", w->last);
    pyworker_reset(pp, w);
}

/* ---- one request ---- */

static size_t align_up(size_t n, size_t a)
{
    return (n + a - 1) / a * a;
}

/* The shared memory holds struct py_shared in its first page, the block after it and the
 * result at out_off; grown when a ROI needs more, never shrunk, so that its pages are faulted
 * in once. */
static int map_for(struct pyworker *w, size_t need, struct errbuf *err)
{
    if (need <= w->map_size)
        return 0;
    size_t size = align_up(need, (size_t)sysconf(_SC_PAGESIZE));
    if (ftruncate(w->mem_fd, (off_t)size) < 0)
        return err_set(err, -errno,
                       "cannot size the shared memory of a python worker to %zu "
                       "bytes: %s",
                       size, strerror(errno));
    /* A new mapping rather than mremap(), which ThreadSanitizer does not follow. */
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, w->mem_fd, 0);
    if (w->map)
        munmap(w->map, w->map_size);
    w->map = NULL;
    w->map_size = 0;
    if (m == MAP_FAILED) {
        int e = errno;
        return err_set(err, -e, "cannot map %zu bytes of shared memory: %s", size, strerror(e));
    }
    w->map = m;
    w->map_size = size;
    return 0;
}

/* Writes ROI rq's request to dst (8-byte aligned); its length. */
static size_t build_request(const struct pyworker *w, const struct proc_request *rq, uint64_t *dst,
                            size_t in_off, size_t out_off)
{
    struct py_request *h = (struct py_request *)dst;
    char dt[8];
    memset(h, 0, sizeof *h);
    h->kind = rq->kind == PROC_REQ_MEASURE ? PY_REQ_MEASURE : PY_REQ_ROI;
    h->ndim = (uint32_t)rq->ndim;
    h->roi = rq->roi;
    h->label = rq->label;
    h->map_size = w->map_size;
    h->in_off = in_off;
    h->in_nbytes = rq->in_nbytes;
    h->out_off = out_off;
    h->out_nbytes = rq->out_nbytes;
    const char *ts = dtype_typestr_le(&rq->in_dtype, dt);
    memcpy(h->in_dtype, ts, strnlen(ts, sizeof h->in_dtype - 1));
    ts = dtype_typestr_le(&rq->out_dtype, dt);
    memcpy(h->out_dtype, ts, strnlen(ts, sizeof h->out_dtype - 1));
    uint64_t *d = dst + sizeof *h / 8;
    size_t n = (size_t)rq->ndim * sizeof *d;
    memcpy(d, rq->start, n);
    memcpy(d + rq->ndim, rq->stop, n);
    memcpy(d + 2 * rq->ndim, rq->in_start, n);
    memcpy(d + 3 * rq->ndim, rq->in_shape, n);
    return sizeof *h + 4 * n;
}

/* Waits for the reply in recv(), waking every tick (SO_RCVTIMEO) to read stderr and to
 * check the deadline and the shutdown (which also ends the recv with SHUT_RD). */
static enum outcome wait_reply(struct pypool *pp, struct pyworker *w, double deadline,
                               struct py_reply *rep, char *buf, size_t size, size_t *len,
                               struct errbuf *err)
{
    for (;;) {
        ssize_t n = recv(w->sock, buf, size - 1, 0);
        if (n > 0) {
            if ((size_t)n < sizeof *rep)
                return err_set(err, -EIO, "python worker %d sent a reply of %zd bytes", (int)w->pid,
                               n),
                       PY_BROKEN;
            memcpy(rep, buf, sizeof *rep);
            buf[n] = '\0';
            *len = (size_t)n;
            if (rep->kind == PY_REP_OK || rep->kind == PY_REP_BATCH)
                return PY_OK;
            if (rep->kind == PY_REP_DIED)
                return PY_DIED;
            if (rep->kind == PY_REP_ERROR)
                return err_set(err, -EIO, "%s", buf + sizeof *rep), PY_REFUSED;
            return err_set(err, -EIO, "python worker %d sent a reply of kind %u", (int)w->pid,
                           rep->kind),
                   PY_BROKEN;
        }
        if (pp->stopping)
            return PY_SHUTDOWN;
        if (n == 0) /* the worker and the server are gone */
            return PY_GONE;
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return err_set(err, -EIO, "python worker %d: recv: %s", (int)w->pid, strerror(errno)),
                   PY_BROKEN;
        drain_stderr(w);
        if (deadline > 0) {
            double left = deadline - now_monotonic();
            if (left <= 0)
                return PY_TIMEOUT;
            if (left < tick_of(pp)) {
                set_tick(w->sock, left);
                w->tick_cut = true;
            }
        }
    }
}

/* The message for a worker that went away mid-ROI. */
static int report_death(struct pypool *pp, struct pyworker *w, enum outcome end, int status,
                        struct errbuf *err)
{
    char what[64] = "is gone (and so is the fork server)";
    if (end == PY_DIED)
        describe_status(status, what, sizeof what);
    pid_t pid = w->pid;
    await_stderr(w, now_monotonic() + DEATH_GRACE);
    int rc = err_set(err, -EIO, "python worker %d %s before replying%s%.700s", (int)pid, what,
                     *w->last ? ": " : "", w->last);
    log_warn("%s; forking a new one", err->msg);
    pyworker_reset(pp, w);
    return rc;
}

int pyworker_exchange(struct pypool *pp, struct pyworker *w, const struct proc_request *rq,
                      struct errbuf *err)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t out_off = page + align_up(rq->in_nbytes, MAP_ALIGN);
    int rc = map_for(w, out_off + rq->out_nbytes, err);
    if (rc)
        return rc;
    memcpy(w->map + page, rq->in, rq->in_nbytes);
    size_t len = build_request(w, rq, w->req, page, out_off);
    if (w->tick_cut) {
        set_tick(w->sock, tick_of(pp));
        w->tick_cut = false;
    }
    double deadline = pp->timeout > 0 ? now_monotonic() + pp->timeout : 0;
    struct py_reply rep = {0};
    char buf[sizeof rep + 4096 + 1];
    size_t got = 0;
    enum outcome end;
    if (send(w->sock, w->req, len, MSG_NOSIGNAL) < 0) {
        /* Both other ends of its socket are closed, the worker's and the server's: they died
         * while it was idle (the server killed, its workers with it). The ROI was not sent:
         * the caller may try it on a new worker. */
        int e = errno;
        rc = err_set(err, -ENOTCONN, "python worker %d is gone (and so is the fork server): %s",
                     (int)w->pid, strerror(e));
        log_warn("%s; forking a new one", err->msg);
        pyworker_reset(pp, w);
        return rc;
    }
    end = wait_reply(pp, w, deadline, &rep, buf, sizeof buf, &got, err);
    if (end == PY_OK && rep.kind != PY_REP_OK) {
        err_set(err, -EIO, "python worker %d sent a batch reply", (int)w->pid);
        end = PY_BROKEN;
    }
    switch (end) {
    case PY_OK:
        memcpy(rq->out, w->map + out_off, rq->out_nbytes);
        if (rep.value || ++w->rois % STDERR_EVERY == 0) /* it wrote to stderr */
            drain_stderr(w);
        return 0;
    case PY_REFUSED:
        drain_stderr(w); /* the traceback */
        return -EIO;
    case PY_DIED:
    case PY_GONE:
        return report_death(pp, w, end, (int)rep.value, err);
    case PY_TIMEOUT:
        rc = err_set(err, -EIO, "python worker %d timed out after %g s", (int)w->pid, pp->timeout);
        break;
    case PY_SHUTDOWN:
        rc = err_set(err, -ECANCELED, "shut down");
        break;
    case PY_BROKEN:
        rc = -EIO;
        break;
    }
    if (end != PY_SHUTDOWN)
        log_warn("%s; killing it, forking a new one", err->msg);
    pyworker_retire(pp, w);
    return rc;
}

/* ---- a batch of small ROIs: one round trip ---- */

/* The per-ROI outcomes of a batch reply into rcs and errs; copies the results out. */
static int read_batch_reply(struct pyworker *w, size_t n, const struct proc_request *rq,
                            const size_t *out_off, const char *buf, size_t len, int *rcs,
                            struct errbuf *errs)
{
    const struct py_item *items = (const struct py_item *)(buf + sizeof(struct py_reply));
    size_t msg = sizeof(struct py_reply) + n * sizeof *items;
    if (len < msg)
        return err_set(&errs[0], -EIO, "python worker %d sent a batch reply of %zu bytes",
                       (int)w->pid, len);
    for (size_t i = 0; i < n; i++) {
        struct py_item it;
        memcpy(&it, &items[i], sizeof it);
        if (it.kind == PY_REP_OK) {
            rcs[i] = 0;
            memcpy(rq[i].out, w->map + out_off[i], rq[i].out_nbytes);
        } else if (it.kind == PY_REP_ERROR && it.len <= len - msg) {
            rcs[i] = err_set(&errs[i], -EIO, "%.*s", (int)it.len, buf + msg);
            msg += it.len;
        } else {
            return err_set(&errs[0], -EIO, "python worker %d sent a broken batch reply",
                           (int)w->pid);
        }
    }
    return 0;
}

/* 0 with every ROI's outcome in rcs/errs, or an error of the whole batch in errs[0] (the
 * worker died: -EIO; not sent: -ENOTCONN), the worker then reset. */
int pyworker_exchange_many(struct pypool *pp, struct pyworker *w, size_t n,
                           const struct proc_request *rq, int *rcs, struct errbuf *errs)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), at = page, len = sizeof(struct py_batch);
    size_t in_off[PROC_BATCH_MAX], out_off[PROC_BATCH_MAX];
    for (size_t i = 0; i < n; i++) {
        in_off[i] = at;
        out_off[i] = at + align_up(rq[i].in_nbytes, MAP_ALIGN);
        at = out_off[i] + align_up(rq[i].out_nbytes, MAP_ALIGN);
    }
    int rc = map_for(w, at, &errs[0]);
    if (rc)
        return rc;
    uint64_t *msg = xmalloc(sizeof(struct py_batch) + n * sizeof w->req);
    struct py_batch b = {PY_REQ_BATCH, (uint32_t)n};
    memcpy(msg, &b, sizeof b);
    for (size_t i = 0; i < n; i++) {
        memcpy(w->map + in_off[i], rq[i].in, rq[i].in_nbytes);
        len += build_request(w, &rq[i], msg + len / 8, in_off[i], out_off[i]);
    }
    ssize_t sent = send(w->sock, msg, len, MSG_NOSIGNAL);
    free(msg);
    if (sent < 0) {
        int e = errno;
        rc =
            err_set(&errs[0], -ENOTCONN, "python worker %d is gone (and so is the fork server): %s",
                    (int)w->pid, strerror(e));
        log_warn("%s; forking a new one", errs[0].msg);
        pyworker_reset(pp, w);
        return rc;
    }
    size_t size = sizeof(struct py_reply) + n * (sizeof(struct py_item) + PY_BATCH_MSG_MAX) + 1;
    char *buf = xmalloc(size);
    struct py_reply rep = {0};
    size_t got = 0;
    enum outcome end = wait_reply(pp, w, 0, &rep, buf, size, &got, &errs[0]);
    if (end == PY_OK && rep.kind != PY_REP_BATCH) {
        err_set(&errs[0], -EIO, "python worker %d answered a batch with kind %u", (int)w->pid,
                rep.kind);
        end = PY_BROKEN;
    }
    if (end == PY_OK)
        rc = read_batch_reply(w, n, rq, out_off, buf, got, rcs, errs);
    free(buf);
    if (end == PY_OK && rc == 0) {
        if (rep.value || (w->rois += (unsigned)n) % STDERR_EVERY < n)
            drain_stderr(w);
        return 0;
    }
    if (end == PY_DIED || end == PY_GONE)
        return report_death(pp, w, end, (int)rep.value, &errs[0]);
    if (end == PY_SHUTDOWN)
        rc = err_set(&errs[0], -ECANCELED, "shut down");
    else
        log_warn("%s; killing it, forking a new one", errs[0].msg);
    if (!rc)
        rc = -EIO;
    pyworker_retire(pp, w);
    return rc;
}
