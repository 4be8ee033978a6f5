/* pyserver.h: the fork server of the `python` processor (python/roifs/_server.py), seen from
 * roifs: starting it (it imports the user's file once and checks the function), asking it to
 * fork workers, to kill one, and to quit; and the byte layouts of the per-worker channel.
 *
 * The server is not tied to the process that starts it: `roifs mount` starts it before it
 * forks the daemon, which inherits the control socket. Its life is that socket: end of file
 * (every holder closed it, or died, kill -9 included) ends the server and its workers. */
#ifndef ROIFS_PYSERVER_H
#define ROIFS_PYSERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../util.h"

/* The first page of a worker's memfd, shared by roifs, the worker and the server: the server
 * sets `dead` once it reaped the worker (before it sends PY_REP_DIED). */
struct py_shared {
    uint32_t dead, zero;
};

/* A ROI request on a worker's socket (SOCK_SEQPACKET), followed by ndim u64 each of start,
 * stop, in_start and in_shape. The block is at in_off (after struct py_shared's page) of the
 * worker's memfd (map_size bytes mapped by both sides), the result goes to out_off.
 * Little-endian, no padding. */
#define PY_REQ_ROI 1
/* One object of [measure] python (proc.h, PROC_REQ_MEASURE): the same header and dims. */
#define PY_REQ_MEASURE 3
struct py_request {
    uint32_t kind, ndim;
    uint64_t roi, label; /* label 0: not a masked ROI */
    uint64_t map_size, in_off, in_nbytes, out_off, out_nbytes;
    char in_dtype[8], out_dtype[8]; /* numpy typestrs, NUL-padded */
};

/* A batch of small ROIs in one round trip: struct py_batch, then `n` ROI requests (each a
 * struct py_request and its dims), their blocks and results at their own offsets in the
 * memfd. Its reply: struct py_reply of kind PY_REP_BATCH (value as for OK), then `n` struct
 * py_item (PY_REP_OK, or PY_REP_ERROR with the length of its message), then the messages
 * one after the other (at most PY_BATCH_MSG_MAX bytes each). */
#define PY_REQ_BATCH     2
#define PY_BATCH_MSG_MAX 1000
struct py_batch {
    uint32_t kind, n;
};
struct py_item {
    uint32_t kind, len;
};

/* A reply: OK (the result is in the memfd; value 1 when the worker wrote to its stdout or
 * stderr meanwhile), ERROR (a UTF-8 message follows), or DIED (sent by the server once it
 * reaped the worker: value is the wait status). */
enum { PY_REP_OK = 1, PY_REP_ERROR = 2, PY_REP_DIED = 3, PY_REP_BATCH = 4 };
struct py_reply {
    uint32_t kind, zero;
    int64_t value;
};

struct pyserver;

struct pyserver_opts {
    const char *interpreter;
    const char *spec;        /* FILE.py:FUNCTION or MODULE:FUNCTION, as configured */
    const char *dir;         /* the server's working directory (the configuration's) */
    const char *params_json; /* {"name": "value", ...} */
    bool measure;            /* the function is [measure] python's (labels, intensity, obj) */
};

/* Starts the server and waits until it has imported the file and checked the function.
 * Errors carry the Python error's last line ("seg.py: NameError: name 'x' is not defined").
 * 0 or -errno. */
int pyserver_start(const struct pyserver_opts *o, struct pyserver **out, struct errbuf *err);
/* Has the server fork a worker that serves ROIs on sock (its end of a socket pair) with
 * err_w as its standard output and error and memfd as its shared memory. The descriptors
 * stay the caller's. Thread-safe. 0 or -errno. */
int pyserver_fork(struct pyserver *s, int sock, int err_w, int memfd, pid_t *pid,
                  struct errbuf *err);
/* SIGKILLs one of its workers (the server then reports its death on the worker's socket). */
int pyserver_kill(struct pyserver *s, pid_t pid, struct errbuf *err);
pid_t pyserver_pid(const struct pyserver *s);
/* Ends the server: with `wait`, asks it to quit and waits until it and its workers are gone
 * (workers whose sockets the caller closed exit at once, others are killed after 2 s);
 * without, only closes this process's descriptors (another process, the daemon, holds the
 * server now). Frees s. */
void pyserver_stop(struct pyserver *s, bool wait);

#endif
