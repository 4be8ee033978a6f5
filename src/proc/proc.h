/* proc.h: processors, the f in out[roi] = f(in[roi]). Each kind (builtin, command, worker,
 * plugin, python) implements proc_ops; the engine calls run() from its compute threads,
 * several at once. */
#ifndef ROIFS_PROC_H
#define ROIFS_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../config.h"
#include "../dtype.h"
#include "../util.h"

/* One ROI handed to a processor (docs/processors.md): the ROI box and its read region. */
struct proc_request {
    size_t roi;
    int ndim;
    const uint64_t *start, *stop;        /* ROI box, stop exclusive */
    const uint64_t *in_start, *in_shape; /* read region (ROI grown by halo, clipped) */
    struct dtype in_dtype;               /* little-endian: the bytes of `in` are native order */
    struct dtype out_dtype;              /* little-endian: fill `out` in native order */
    const void *in;
    size_t in_nbytes; /* prod(in_shape) * in_dtype.size */
    void *out;
    size_t out_nbytes; /* prod(in_shape) * out_dtype.size */
    uint64_t label;    /* a masked ROI's label (docs/masks.md), 0 for any other ROI */
    /* 0: a ROI. PROC_REQ_MEASURE: one object of [measure] python (python processors only,
     * pyserver.h's PY_REQ_MEASURE): label its id, roi the number of channels, in the labels
     * crop (in_dtype, shape stop - start) then at PROC_MEASURE_ALIGN its intensities
     * channels-first (out_dtype), in_start / in_shape the object's bbox start and stop; out
     * gets the function's dict as JSON (NUL-terminated, out_nbytes at most). */
    unsigned kind;
};
#define PROC_REQ_MEASURE   3
#define PROC_MEASURE_ALIGN 64

struct proc;

struct proc_ops {
    /* Computes one ROI into rq->out. Thread-safe. 0, or a negative errno with a message
     * (for a command: "exit status 2: <last line of stderr>"). */
    int (*run)(struct proc *p, const struct proc_request *rq, struct errbuf *err);
    /* Optional: computes n ROIs in one call, rcs[i] and errs[i] as run() would give them;
     * for processors that pay a round trip per call (python), for small ROIs (the engine
     * batches ROIs of at most PROC_BATCH_BYTES in and out, PROC_BATCH_MAX at a time).
     * Thread-safe. */
    void (*run_many)(struct proc *p, size_t n, const struct proc_request *rq, int *rcs,
                     struct errbuf *errs);
    /* Stops everything in flight (kills running commands) and makes later run() calls fail
     * fast with -ECANCELED. Called once, at unmount, from another thread. May be NULL. */
    void (*shutdown)(struct proc *p);
    void (*destroy)(struct proc *p);
};

struct proc {
    const struct proc_ops *ops;
    _Atomic unsigned long calls; /* processor invocations, failed ones too (status "calls") */
};

/* Creates the processor the configuration names. Checks builtin names and their params
 * (errors "FILE:LINE: ..." as config_load does). 0 or -EINVAL. */
int proc_create(const struct config *cfg, struct proc **out, struct errbuf *err);
static inline int proc_run(struct proc *p, const struct proc_request *rq, struct errbuf *err)
{
    p->calls++;
    return p->ops->run(p, rq, err);
}
#define PROC_BATCH_MAX   32
#define PROC_BATCH_BYTES (64 << 10)
static inline void proc_run_many(struct proc *p, size_t n, const struct proc_request *rq, int *rcs,
                                 struct errbuf *errs)
{
    p->calls += n;
    p->ops->run_many(p, n, rq, rcs, errs);
}
/* "builtin", "command", "worker", "plugin", "python" (the configuration's key). */
const char *proc_kind_name(enum proc_kind k);
/* The params as one JSON object {"name": "value", ...} (values stay strings, as the
 * configuration wrote them), malloc'd: what worker and python processors are sent.
 * 0, or -EINVAL "FILE:LINE: param.NAME: not valid UTF-8". */
int proc_params_json(const struct config *cfg, char **out, struct errbuf *err);
void proc_shutdown(struct proc *p);
void proc_destroy(struct proc *p);

/* Per kind (proc.c dispatches): */
int proc_builtin_create(const struct config *cfg, struct proc **out, struct errbuf *err);
int proc_command_create(const struct config *cfg, struct proc **out, struct errbuf *err);
int proc_worker_create(const struct config *cfg, struct proc **out, struct errbuf *err);
/* Loads, checks and initialises the plugin: a bad one fails here, refusing the mount. */
int proc_plugin_create(const struct config *cfg, struct proc **out, struct errbuf *err);
/* Starts the fork server (it imports the file and checks the function) and forks `threads`
 * workers: a file that does not import, or has no such function, fails here. */
int proc_python_create(const struct config *cfg, struct proc **out, struct errbuf *err);
/* [measure] python = spec (docs/measurements.md): interpreters of cfg's ([process] interpreter,
 * timeout, threads) whose function takes (labels, intensity, obj), run by PROC_REQ_MEASURE
 * requests only; always local. Errors name [measure] python. 0 or -errno. */
int proc_python_create_measure(const struct config *cfg, const char *spec, struct proc **out,
                               struct errbuf *err);

#endif
