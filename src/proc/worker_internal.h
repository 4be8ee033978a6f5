/* worker_internal.h: what worker.c and worker_wire.c share (the `worker` processor). */
#ifndef ROIFS_WORKER_INTERNAL_H
#define ROIFS_WORKER_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "proc.h"
#include "slurm.h"
#include "spawn.h"

/* Longest reply header line; also the read size while looking for it, so that a small reply
 * arrives with one read(). */
#define HDR_MAX (64 * 1024)
/* Best-effort pipe buffer for big arrays (see command.c). */
#define PIPE_SIZE (256 * 1024)
/* After EOF on stdin at shutdown, workers get this long to exit before their group is killed. */
#define EXIT_GRACE 2.0
/* A worker that died gets this long to finish its stderr (the traceback) and exit. */
#define DEATH_GRACE 0.5
/* Without pidfds, exits are noticed by polling this often. */
#define TICK_MS 20

/* One persistent process; its fds are -1 when closed, pid 0 when there is none. */
struct worker {
    pid_t pid;
    int in_fd, out_fd, err_fd, pid_fd;
    bool busy;   /* held by a run() or by the shutdown; guarded by the pool's lock */
    bool exited; /* the shell has exited (not yet reaped) */
    double exit_time;
    bool retire;                  /* do not reuse: kill and reap at release */
    int pipe_size;                /* what F_SETPIPE_SZ gave, 0 before */
    struct spawn_lines err_lines; /* stderr, logged line by line */
    char last[512];               /* last non-empty stderr line, for error messages */
    char slurm_last[256]; /* under srun: its (or slurmstepd's) last error line, kept apart */
    bool srun;            /* a job step: stop it through srun, never with SIGKILL alone */
    char *hdr;            /* HDR_MAX + 1 bytes: the reply header and what came after it */
    size_t hdr_len;
    struct strbuf req; /* the request header, reused */
};

struct worker_pool {
    struct proc base;
    char *cmdline;
    char *dir; /* NULL: the daemon's cwd */
    double timeout;
    char *params_json; /* the "params" object, encoded once */
    char **env;        /* environ with our PYTHONPATH; env_own[] are ours to free */
    char *env_own[3];
    struct slurm_launch *slurm; /* NULL: run locally */
    char **srun_argv;           /* srun ... /bin/sh -c WORKER */
    pthread_mutex_t lock;       /* guards workers, nworkers, busy flags, stop_fd */
    struct worker **workers;
    size_t nworkers;
    int stop_fd; /* eventfd made readable by the shutdown; made at first use */
    _Atomic bool stopping;
};

/* What became of one request. OUT_MORE is no end: wire_read_reply's "the reply is not
 * complete yet, wait for more". */
enum outcome { OUT_MORE, OUT_OK, OUT_REFUSED, OUT_BROKEN, OUT_DIED, OUT_TIMEOUT, OUT_SHUTDOWN };

/* One request in flight. */
struct exchange {
    const struct proc_request *rq;
    struct iovec iov[2]; /* what is left to write */
    size_t to_write;
    bool in_closed; /* the worker stopped reading its stdin */
    bool have_header;
    bool ok; /* the header said ok: true */
    size_t out_got;
};

void wire_build_request(const struct worker_pool *wp, const struct proc_request *rq,
                        struct strbuf *sb);
/* Bigger pipes for big arrays: fewer wakeups per ROI. */
void wire_size_pipes(struct worker *w, const struct proc_request *rq);
/* Writes what it can of the request without blocking. */
void wire_write_request(struct worker *w, struct exchange *x);
/* Reads what the worker sent without blocking: OUT_MORE while the reply is incomplete;
 * OUT_OK once the header said ok and all the output is read; OUT_REFUSED once the header said
 * ok: false (message in err); OUT_BROKEN (message in err) or OUT_DIED (end of file) else. */
enum outcome wire_read_reply(struct worker *w, struct exchange *x, struct errbuf *err);
/* A finished reply: the whole request must have been read, and nothing may follow. */
enum outcome wire_check_complete(struct worker *w, struct exchange *x, enum outcome got,
                                 struct errbuf *err);

#endif
