/* proc_harness.h: what the processor tests (test_proc_builtin.c, test_proc_command.c,
 * test_proc_worker.c, test_proc_plugin.c) share: a scratch directory with a task.ini path,
 * hand-made configurations and requests, helpers for its files and for watching processes. */
#ifndef ROIFS_PROC_HARNESS_H
#define ROIFS_PROC_HARNESS_H

#include "check.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <unistd.h>

#include "proc/proc.h"

static char tmpdir[64];
static char cfg_path[128];

static const struct dtype U1 = {DT_UINT, 1, false}, U2 = {DT_UINT, 2, false},
                          I2 = {DT_INT, 2, false}, I8 = {DT_INT, 8, false},
                          U8 = {DT_UINT, 8, false}, F4 = {DT_FLOAT, 4, false},
                          F8 = {DT_FLOAT, 8, false}, B1 = {DT_BOOL, 1, false};

/* A hand-made configuration; params as "name=value" strings, on lines 10, 11, ... */
static inline void make_cfg(struct config *cfg, struct config_param *pm, enum proc_kind kind,
                            const char *value, const char *const *params, int nparams)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->path = cfg_path;
    cfg->dir = tmpdir;
    cfg->proc_kind = kind;
    cfg->proc_value = (char *)value;
    cfg->threads = 4;
    for (int i = 0; i < nparams; i++) {
        const char *eq = strchr(params[i], '=');
        pm[i].name = strndup(params[i], (size_t)(eq - params[i]));
        pm[i].value = strdup(eq + 1);
        pm[i].line = 10 + i;
    }
    cfg->params = pm;
    cfg->nparams = nparams;
}

static inline void free_params(struct config *cfg)
{
    for (int i = 0; i < cfg->nparams; i++) {
        free(cfg->params[i].name);
        free(cfg->params[i].value);
    }
}

/* Creates a processor from the kind, value and params; NULL (with err) on failure. */
static inline struct proc *make_proc(enum proc_kind kind, const char *value,
                                     const char *const *params, int nparams, double timeout,
                                     struct errbuf *err)
{
    struct config cfg;
    struct config_param pm[8];
    make_cfg(&cfg, pm, kind, value, params, nparams);
    cfg.timeout = timeout;
    struct proc *p = NULL;
    int rc = proc_create(&cfg, &p, err);
    free_params(&cfg);
    CHECK(rc == 0 || p == NULL);
    return rc ? NULL : p;
}

/* A request over a 1-D (or given) read region, the ROI being the whole region. */
struct req {
    struct proc_request rq;
    uint64_t start[4], stop[4], in_start[4], shape[4];
};

static inline void make_req(struct req *r, int ndim, const uint64_t *shape, struct dtype in,
                            struct dtype out, const void *inbuf, void *outbuf)
{
    memset(r, 0, sizeof *r);
    size_t n = 1;
    for (int d = 0; d < ndim; d++) {
        r->shape[d] = shape[d];
        r->stop[d] = shape[d];
        n *= (size_t)shape[d];
    }
    r->rq.ndim = ndim;
    r->rq.start = r->start;
    r->rq.stop = r->stop;
    r->rq.in_start = r->in_start;
    r->rq.in_shape = r->shape;
    r->rq.in_dtype = in;
    r->rq.out_dtype = out;
    r->rq.in = inbuf;
    r->rq.in_nbytes = n * in.size;
    r->rq.out = outbuf;
    r->rq.out_nbytes = n * out.size;
}

/* Runs builtin `name` with params over n elements of in, into out. */
static inline int run_builtin(const char *name, const char *param, struct dtype in_dt,
                              const void *in, struct dtype out_dt, void *out, size_t n)
{
    struct errbuf err = {{0}};
    const char *params[1] = {param};
    struct proc *p = make_proc(PROC_BUILTIN, name, params, param ? 1 : 0, 0, &err);
    if (!p) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    struct req r;
    uint64_t shape[1] = {n};
    make_req(&r, 1, shape, in_dt, out_dt, in, out);
    int rc = proc_run(p, &r.rq, &err);
    if (rc)
        fprintf(stderr, "%s\n", err.msg);
    proc_destroy(p);
    return rc;
}

struct run_arg {
    struct proc *p;
    struct proc_request *rq;
    int rc;
    double elapsed;
    struct errbuf err;
};

static inline void *run_thread(void *arg)
{
    struct run_arg *a = arg;
    double t0 = now_monotonic();
    a->rc = proc_run(a->p, a->rq, &a->err);
    a->elapsed = now_monotonic() - t0;
    return NULL;
}

static char *read_tmp_file(const char *name)
{
    char path[256], *data = NULL;
    size_t len;
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    return file_read_all(path, &data, &len) == 0 ? data : NULL;
}

static inline void write_tmp_file(const char *name, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* Number of lines of tmpdir/name (0 when missing). */
static inline int tmp_file_lines(const char *name)
{
    char *s = read_tmp_file(name);
    int n = 0;
    for (char *q = s; q && *q; q++)
        n += *q == '\n';
    free(s);
    return n;
}

static inline void remove_tmp_file(const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    unlink(path);
}

/* State and process group of pid from /proc; false when it is gone. */
static inline bool proc_stat(const char *pid, char *state, int *pgrp)
{
    char path[300], buf[512];
    snprintf(path, sizeof path, "/proc/%s/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = '\0';
    char *paren = strrchr(buf, ')');
    int ppid;
    return paren && sscanf(paren + 1, " %c %d %d", state, &ppid, pgrp) == 3;
}

/* True while some process of group pgid is alive (zombies waiting for init do not count). */
static inline bool group_alive(pid_t pgid)
{
    if (kill(-pgid, 0) < 0 && errno == ESRCH)
        return false;
    DIR *d = opendir("/proc");
    struct dirent *e;
    bool alive = false;
    char state;
    int pgrp;
    while (d && (e = readdir(d)) && !alive)
        alive = proc_stat(e->d_name, &state, &pgrp) && pgrp == pgid && state != 'Z';
    if (d)
        closedir(d);
    return alive;
}

static inline bool pid_alive(pid_t pid)
{
    char name[32], state;
    int pgrp;
    snprintf(name, sizeof name, "%d", (int)pid);
    return proc_stat(name, &state, &pgrp) && state != 'Z';
}

/* Makes the scratch directory (tmpdir; cfg_path names a task.ini in it that is never
 * written: messages name it). 0, or 1 after a message. */
static inline int proc_test_begin(const char *name)
{
    if (check_mkdtemp(tmpdir, sizeof tmpdir, name))
        return 1;
    snprintf(cfg_path, sizeof cfg_path, "%s/task.ini", tmpdir);
    return 0;
}

/* Removes the scratch directory; the exit status of the test program. */
static inline int proc_test_end(void)
{
    check_rmtree(tmpdir);
    return check_done();
}

#endif
