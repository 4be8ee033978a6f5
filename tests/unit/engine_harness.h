/* engine_harness.h: what the engine's unit tests share: an engine over a task's own cache with
 * the options of its configuration (alone or with its task, a rig), an open that waits, and
 * the engine's status document as text. */
#ifndef ROIFS_ENGINE_HARNESS_H
#define ROIFS_ENGINE_HARNESS_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "cache/cache.h"
#include "engine/engine.h"
#include "task.h"

/* The engine options a configuration gives (as the array set takes them, without -j). */
static inline struct engine_opts harness_opts(const struct task *t)
{
    return (struct engine_opts){.threads = t->cfg.threads,
                                .readahead = t->cfg.readahead,
                                .retries = t->cfg.retries,
                                .retry_after = t->cfg.retry_after > 0 ? t->cfg.retry_after : 0,
                                .max_size = t->cfg.max_size};
}

/* Opens t's cache (registered for its configuration) and an engine over it: 0 or -errno. */
static inline int harness_start(struct task *t, struct cache **c, struct engine **e,
                                struct errbuf *err)
{
    int r = cache_open(t->cache_dir, t->cfg.path, task_version(t), c, err);
    if (r < 0)
        return r;
    struct engine_opts o = harness_opts(t);
    return engine_create(t, *c, &o, e, err);
}

/* A task, its cache and an engine over them: what most engine tests start from. */
struct harness_rig {
    struct task *t;
    struct cache *c;
    struct engine *e;
};

static inline void harness_rig_close(struct harness_rig *g)
{
    if (g->e)
        engine_destroy(g->e);
    if (g->c)
        cache_close(g->c);
    if (g->t)
        task_close(g->t);
    *g = (struct harness_rig){0};
}

/* Opens the task of configuration file path, its cache and an engine into g: true, or false
 * (a failed check, the reason on stderr) with nothing left open. */
static inline bool harness_rig_open(struct harness_rig *g, const char *path)
{
    *g = (struct harness_rig){0};
    struct errbuf err = {{0}};
    int r = task_open(path, &g->t, &err);
    if (r == 0)
        r = harness_start(g->t, &g->c, &g->e, &err);
    if (r < 0) {
        fprintf(stderr, "setup: %s\n", err.msg);
        harness_rig_close(g);
    }
    CHECK_EQ_INT(r, 0);
    return r == 0;
}

struct harness_open {
    pthread_mutex_t m;
    pthread_cond_t cv;
    int err, fd, done;
};

static inline void harness_on_open(void *ctx, int err, int fd, int flags)
{
    (void)flags;
    struct harness_open *o = ctx;
    pthread_mutex_lock(&o->m);
    o->err = err;
    o->fd = fd;
    o->done = 1;
    pthread_cond_signal(&o->cv);
    pthread_mutex_unlock(&o->m);
}

/* Starts an open of chunk id through e into o, answered by harness_on_open. */
static inline void harness_open_start(struct harness_open *o, struct engine *e, uint64_t id)
{
    *o = (struct harness_open){.fd = -1};
    pthread_mutex_init(&o->m, NULL);
    pthread_cond_init(&o->cv, NULL);
    engine_open_chunk(e, id, harness_on_open, o);
}

/* Waits for the answer of o (harness_open_start): the open's error, or 0 with o->fd (the
 * caller closes it). */
static inline int harness_open_end(struct harness_open *o)
{
    pthread_mutex_lock(&o->m);
    while (!o->done)
        pthread_cond_wait(&o->cv, &o->m);
    pthread_mutex_unlock(&o->m);
    pthread_mutex_destroy(&o->m);
    pthread_cond_destroy(&o->cv);
    return o->err;
}

/* Opens chunk id through e and waits for the answer: 0 with *fd (the caller closes it), or
 * the open's error. */
static inline int harness_open_wait(struct engine *e, uint64_t id, int *fd)
{
    struct harness_open o;
    harness_open_start(&o, e, id);
    int r = harness_open_end(&o);
    *fd = o.fd;
    return r;
}

/* engine_status as the status file shows it (indented): malloc'd text. */
static inline char *harness_status(struct engine *e)
{
    json_t *doc = engine_status(e);
    char *text = json_dumps(doc, JSON_INDENT(2) | JSON_REAL_PRECISION(15));
    json_decref(doc);
    return text;
}

#endif
