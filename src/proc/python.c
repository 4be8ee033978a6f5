/* python.c: the `python` processor (docs/processors.md, Python functions): FUNCTION(block, roi) in
 * interpreters forked by one fork server (pyserver.c) that imported the user's file once, when the
 * processor was created, so that no read waits for an interpreter. This file is the pool: which
 * worker (pyworker.c) serves a ROI or a batch of small ROIs, retries of a ROI that was not sent,
 * replacement of dead workers, shutdown and creation. With executor = slurm, a `worker`
 * processor running `python3 -m roifs.worker --python FILE:FUNCTION` on the nodes instead. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <unistd.h>

#include "pyworker.h"

#define DEFAULT_INTERPRETER "/usr/bin/python3"

/* ---- who ends the server ---- */

/* `roifs mount` creates the processor, then forks the daemon, which inherits the server: the
 * parent's copy is destroyed while the daemon's lives on. A fork since the creation means
 * that: the creator then only closes its descriptors (the server ends when the last holder
 * does). */
static _Atomic unsigned fork_count;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void count_fork(void)
{
    fork_count++;
}

static void register_atfork(void)
{
    pthread_atfork(NULL, count_fork, NULL);
}

/* ---- the pool ---- */

static struct pyworker *worker_new(void)
{
    struct pyworker *w = xcalloc(1, sizeof *w);
    w->sock = w->err_fd = w->mem_fd = -1;
    return w;
}

/* A worker for one request, marked busy; NULL once shutting down. */
static struct pyworker *acquire(struct pypool *pp)
{
    pthread_mutex_lock(&pp->lock);
    struct pyworker *w = NULL;
    if (!pp->stopping) {
        for (size_t i = 0; i < pp->nworkers && !w; i++)
            if (!pp->workers[i]->busy && pp->workers[i]->pid > 0)
                w = pp->workers[i];
        for (size_t i = 0; i < pp->nworkers && !w; i++)
            if (!pp->workers[i]->busy)
                w = pp->workers[i];
        if (!w) { /* at most one per concurrent run(), which the engine bounds by threads */
            w = worker_new();
            pp->workers = xrealloc(pp->workers, (pp->nworkers + 1) * sizeof *pp->workers);
            pp->workers[pp->nworkers++] = w;
        }
        w->busy = true;
    }
    pthread_mutex_unlock(&pp->lock);
    return w;
}

static void release(struct pypool *pp, struct pyworker *w)
{
    pthread_mutex_lock(&pp->lock);
    w->busy = false;
    pthread_mutex_unlock(&pp->lock);
}

/* A worker that died or was killed is replaced at once, so that `threads` stay ready; if
 * that fails, the next ROI tries again. */
static void replace(struct pypool *pp, struct pyworker *w)
{
    struct errbuf ferr;
    if (w->pid == 0 && !pp->stopping && pyworker_fork(pp, w, &ferr) < 0)
        log_warn("python: %s", ferr.msg);
}

/* After a restart of the server, the idle workers of the old one (dead with it) are forked
 * anew, so that `threads` are ready again. */
static void renew_stale(struct pypool *pp)
{
    for (;;) {
        struct pyworker *w = NULL;
        pthread_mutex_lock(&pp->lock);
        for (size_t i = 0; i < pp->nworkers && !w && !pp->stopping; i++) {
            struct pyworker *x = pp->workers[i];
            if (!x->busy && x->pid > 0 && x->gen != pp->srv_gen)
                w = x;
        }
        if (w)
            w->busy = true;
        pthread_mutex_unlock(&pp->lock);
        if (!w)
            return;
        pyworker_reset(pp, w);
        replace(pp, w);
        release(pp, w);
    }
}

static int python_run(struct proc *p, const struct proc_request *rq, struct errbuf *err)
{
    struct pypool *pp = (struct pypool *)p;
    struct pyworker *w = acquire(pp);
    if (!w)
        return err_set(err, -ECANCELED, "shut down");
    int rc;
    for (int attempt = 0;; attempt++) {
        if (w->pid > 0)
            pyworker_check_idle(pp, w);
        rc = w->pid > 0 ? 0 : pyworker_fork(pp, w, err);
        if (!rc)
            rc = pyworker_exchange(pp, w, rq, err);
        if (rc != -ENOTCONN) /* the ROI was not sent: once more, on a new worker */
            break;
        if (attempt == 1) {
            rc = -EIO;
            break;
        }
    }
    if (rc && !w->pid)
        replace(pp, w);
    release(pp, w);
    if (pp->renew && atomic_exchange(&pp->renew, false))
        renew_stale(pp);
    return rc;
}

/* Small ROIs, one round trip for all (with a timeout: one by one, each timed). */
static void python_run_many(struct proc *p, size_t n, const struct proc_request *rq, int *rcs,
                            struct errbuf *errs)
{
    struct pypool *pp = (struct pypool *)p;
    if (pp->timeout > 0 || n > PROC_BATCH_MAX) {
        for (size_t i = 0; i < n; i++)
            rcs[i] = python_run(p, &rq[i], &errs[i]);
        return;
    }
    struct pyworker *w = acquire(pp);
    int rc = w ? 0 : err_set(&errs[0], -ECANCELED, "shut down");
    for (int attempt = 0; w; attempt++) {
        if (w->pid > 0)
            pyworker_check_idle(pp, w);
        rc = w->pid > 0 ? 0 : pyworker_fork(pp, w, &errs[0]);
        if (!rc)
            rc = pyworker_exchange_many(pp, w, n, rq, rcs, errs);
        if (rc != -ENOTCONN) /* the batch was not sent: once more, on a new worker */
            break;
        if (attempt == 1) {
            rc = -EIO;
            break;
        }
    }
    if (rc) /* the whole batch failed */
        for (size_t i = 0; i < n; i++) {
            rcs[i] = rc;
            if (i)
                errs[i] = errs[0];
        }
    if (w) {
        if (rc && !w->pid)
            replace(pp, w);
        release(pp, w);
    }
    if (pp->renew && atomic_exchange(&pp->renew, false))
        renew_stale(pp);
}

/* ---- the end ---- */

/* Busy workers' recv() ends at once (SHUT_RD on roifs's end), the ROI fails with -ECANCELED
 * and the worker is killed; one forked meanwhile is noticed within a tick. */
static void python_shutdown(struct proc *p)
{
    struct pypool *pp = (struct pypool *)p;
    pthread_mutex_lock(&pp->lock);
    pp->stopping = true;
    for (size_t i = 0; i < pp->nworkers; i++)
        if (pp->workers[i]->busy && pp->workers[i]->sock >= 0)
            shutdown(pp->workers[i]->sock, SHUT_RD);
    pthread_mutex_unlock(&pp->lock);
}

/* No run() is in progress any more. Workers get end of file on their sockets and exit; the
 * server reaps them and quits (or, in the parent of a forked daemon, lives on). */
static void python_destroy(struct proc *p)
{
    struct pypool *pp = (struct pypool *)p;
    pp->stopping = true;
    bool owner = getpid() != pp->creator || fork_count == pp->forks_at_create;
    for (size_t i = 0; i < pp->nworkers; i++) {
        struct pyworker *w = pp->workers[i];
        spawn_close(&w->sock);
        spawn_close(&w->err_fd);
        spawn_close(&w->mem_fd);
        if (w->map)
            munmap(w->map, w->map_size);
        free(w);
    }
    free(pp->workers);
    pyserver_stop(pp->srv, owner);
    free((char *)pp->opts.interpreter);
    free((char *)pp->opts.spec);
    free((char *)pp->opts.dir);
    free((char *)pp->opts.params_json);
    pthread_mutex_destroy(&pp->srv_lock);
    pthread_mutex_destroy(&pp->lock);
    free(pp);
}

static const struct proc_ops python_ops = {
    .run = python_run,
    .run_many = python_run_many,
    .shutdown = python_shutdown,
    .destroy = python_destroy,
};

/* ---- creation ---- */

/* "FILE:LINE: [process] python: " (measure: [measure] python) before the message in err. */
static int python_spec_error(const struct config *cfg, bool measure, int rc, struct errbuf *err)
{
    const char *section = measure ? "measure" : "process";
    return err_prefix_at(err, rc, cfg->path, config_line(cfg, section, "python"),
                         measure ? "[measure] python" : "[process] python");
}

static int check_spec(const char *spec, struct errbuf *err)
{
    const char *colon = spec ? strrchr(spec, ':') : NULL;
    if (!colon || colon == spec || !colon[1] || strspn(spec, " \t") == strlen(spec))
        return err_set(err, -EINVAL, "expected FILE.py:FUNCTION or MODULE:FUNCTION, got '%s'",
                       spec ? spec : "");
    return 0;
}

static char *shell_quote(const char *s)
{
    struct strbuf sb = {0};
    sb_append(&sb, "'", 1);
    for (; *s; s++)
        if (*s == '\'')
            sb_append(&sb, "'\\''", 4);
        else
            sb_append(&sb, s, 1);
    sb_append(&sb, "'", 1);
    return sb.buf;
}

/* executor = slurm: the nodes start interpreters as workers do (no fork server there). */
static int create_slurm(const struct config *cfg, const char *interp, struct proc **out,
                        struct errbuf *err)
{
    char *qi = shell_quote(interp), *qs = shell_quote(cfg->proc_value);
    struct config c = *cfg;
    c.proc_kind = PROC_WORKER;
    c.proc_value = xasprintf("%s -m roifs.worker --python %s", qi, qs);
    int rc = proc_worker_create(&c, out, err);
    free(c.proc_value);
    free(qi);
    free(qs);
    return rc;
}

/* The pool of spec's interpreters (measure: [measure] python's). */
static int create_pool(const struct config *cfg, const char *spec, bool measure, struct proc **out,
                       struct errbuf *err)
{
    const char *interp = cfg->interpreter ? cfg->interpreter : DEFAULT_INTERPRETER;
    char *params = NULL;
    int rc = check_spec(spec, err);
    if (rc)
        return python_spec_error(cfg, measure, rc, err);
    if ((rc = proc_params_json(cfg, &params, err)))
        return rc;
    struct pyserver_opts o = {.interpreter = interp,
                              .spec = spec,
                              .dir = cfg->dir,
                              .params_json = params,
                              .measure = measure};
    struct pyserver *srv = NULL;
    rc = pyserver_start(&o, &srv, err);
    if (rc) {
        free(params);
        return python_spec_error(cfg, measure, rc, err);
    }
    bool slurm = cfg->executor == EXECUTOR_SLURM && !measure;
    if (slurm) { /* the file imports and has its function: the nodes run it */
        free(params);
        pyserver_stop(srv, true);
        return create_slurm(cfg, interp, out, err);
    }
    pthread_once(&atfork_once, register_atfork);
    struct pypool *pp = xcalloc(1, sizeof *pp);
    pp->base.ops = &python_ops;
    pp->srv = srv;
    pp->opts = (struct pyserver_opts){.interpreter = xstrdup(interp),
                                      .spec = xstrdup(spec),
                                      .dir = cfg->dir ? xstrdup(cfg->dir) : NULL,
                                      .params_json = params,
                                      .measure = measure};
    pthread_mutex_init(&pp->srv_lock, NULL);
    pp->timeout = cfg->timeout;
    pp->creator = getpid();
    pp->forks_at_create = fork_count;
    pthread_mutex_init(&pp->lock, NULL);
    /* A worker that exits while we write to it must not kill the daemon. */
    signal(SIGPIPE, SIG_IGN);
    /* Ready before the first read: one worker per compute thread. */
    for (int i = 0; i < cfg->threads && !rc; i++) {
        struct pyworker *w = worker_new();
        pp->workers = xrealloc(pp->workers, (pp->nworkers + 1) * sizeof *pp->workers);
        pp->workers[pp->nworkers++] = w;
        rc = pyworker_fork(pp, w, err);
    }
    if (rc) {
        python_destroy(&pp->base);
        return python_spec_error(cfg, measure, rc, err);
    }
    *out = &pp->base;
    return 0;
}

int proc_python_create(const struct config *cfg, struct proc **out, struct errbuf *err)
{
    return create_pool(cfg, cfg->proc_value, false, out, err);
}

int proc_python_create_measure(const struct config *cfg, const char *spec, struct proc **out,
                               struct errbuf *err)
{
    return create_pool(cfg, spec, true, out, err);
}
