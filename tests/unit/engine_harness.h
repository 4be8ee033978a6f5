/* engine_harness.h: what the engine's unit tests share: an engine over a task's own cache with
 * the options of its configuration, and the engine's status document as text. */
#ifndef ROIFS_ENGINE_HARNESS_H
#define ROIFS_ENGINE_HARNESS_H

#include <jansson.h>
#include <stdlib.h>

#include "engine/cache.h"
#include "engine/engine.h"
#include "task.h"

/* The engine options a configuration gives (as the array set takes them, without -j). */
static inline struct engine_opts harness_opts(const struct task *t)
{
    return (struct engine_opts){.threads = t->cfg.threads,
                                .readahead = t->cfg.readahead,
                                .retries = t->cfg.retries,
                                .max_size = t->cfg.max_size};
}

/* Opens t's cache (registered for its configuration) and an engine over it: 0 or -errno. */
static inline int harness_start(struct task *t, struct cache **c, struct engine **e,
                                struct errbuf *err)
{
    int r = cache_open(t->cache_dir, t->cfg.path, c, err);
    if (r < 0)
        return r;
    struct engine_opts o = harness_opts(t);
    return engine_create(t, *c, &o, e, err);
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
