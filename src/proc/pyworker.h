/* pyworker.h: one interpreter forked by the `python` processor's fork server, seen from the
 * daemon (internal to python.c and pyworker.c): its life (fork, death, replacement) and its
 * requests (one ROI, or a batch of small ROIs, in shared memory). The pool in python.c
 * decides which worker serves which ROI. */
#ifndef ROIFS_PYWORKER_H
#define ROIFS_PYWORKER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/types.h>

#include "proc.h"
#include "pyserver.h"
#include "spawn.h"

struct pyworker {
    pid_t pid; /* 0: none; the next ROI forks one */
    int sock, err_fd, mem_fd;
    unsigned char *map;
    size_t map_size;
    bool busy;     /* guarded by the pool's lock, as is sock (the shutdown reads it) */
    bool tick_cut; /* SO_RCVTIMEO shortened for a deadline: restore it */
    unsigned rois; /* ROIs since its fork: stderr is read at least every STDERR_EVERY */
    unsigned gen;  /* the fork server that forked it (pypool.srv_gen then) */
    struct spawn_lines err_lines;
    char last[512]; /* last line of its stderr, for messages */
    uint64_t req[(sizeof(struct py_request) + 4 * ROIFS_MAX_DIM * 8) / 8];
};

struct pypool {
    struct proc base;
    /* The fork server; NULL after it died and a new one failed to start. srv_lock guards srv
     * and srv_gen (bumped at each restart) and is held across a fork request, so that one
     * thread restarts a dead server while the others wait for it. */
    pthread_mutex_t srv_lock;
    struct pyserver *srv;
    _Atomic unsigned srv_gen;
    _Atomic bool renew;        /* a new server started: replace the idle workers of the old one */
    struct pyserver_opts opts; /* owned copies: a dead server is started again with them */
    double timeout;
    pthread_mutex_t lock; /* guards workers, nworkers and busy flags */
    struct pyworker **workers;
    size_t nworkers;
    _Atomic bool stopping;
    pid_t creator;
    unsigned forks_at_create;
};

/* What became of one request. */
enum outcome { PY_OK, PY_REFUSED, PY_DIED, PY_GONE, PY_TIMEOUT, PY_SHUTDOWN, PY_BROKEN };
/* Forgets the process (dead, or killed through the server) and frees its descriptors. */
void pyworker_reset(struct pypool *pp, struct pyworker *w);
/* Kills it through the fork server (if that server forked it), then resets it. */
void pyworker_retire(struct pypool *pp, struct pyworker *w);
/* Forks a new interpreter into w (the fork server started again if it died). */
int pyworker_fork(struct pypool *pp, struct pyworker *w, struct errbuf *err);
/* An idle worker that died since its last ROI is reset (and its end logged). */
void pyworker_check_idle(struct pypool *pp, struct pyworker *w);
/* ROI rq on worker w: 0, or -errno with err set; -ENOTCONN when the ROI was not sent (the
 * worker was gone: the caller may try it on a new one). A worker that died, hung or broke
 * the protocol is reset or retired. */
int pyworker_exchange(struct pypool *pp, struct pyworker *w, const struct proc_request *rq,
                      struct errbuf *err);
/* n small ROIs in one round trip: 0 with every ROI's outcome in rcs/errs, or an error of the
 * whole batch in errs[0] (the worker died: -EIO; not sent: -ENOTCONN), the worker then
 * reset. */
int pyworker_exchange_many(struct pypool *pp, struct pyworker *w, size_t n,
                           const struct proc_request *rq, int *rcs, struct errbuf *errs);

#endif
