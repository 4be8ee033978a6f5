/* plugin.c: the `plugin` processor (docs/processors.md, A C plugin): a shared library implementing
 * include/roifs/plugin.h, loaded and initialised when the configuration is checked, so that a
 * bad plugin refuses the mount. */
#include "proc.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <roifs/plugin.h>

/* Room for a plugin's message; the rest of errbuf holds our prefix. */
#define PLUGIN_ERR_MAX 768

struct plugin {
    struct proc base;
    void *handle;
    const struct roifs_plugin *def;
    void *state;
    char *path;
    _Atomic bool stopping;
};

/* "FILE:LINE: [process] plugin: message", or without the line when it is unknown. */
static int plugin_error(const struct config *cfg, struct errbuf *err, const char *msg)
{
    return config_error(cfg, err, "process", "plugin", "[process] plugin: %s", msg);
}

/* A plugin's message: NUL-terminated whatever it wrote, trimmed of trailing newlines. */
static const char *plugin_message(char *msg, size_t cap, const char *fallback)
{
    msg[cap - 1] = '\0';
    size_t n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    return n ? msg : fallback;
}

static int plugin_run(struct proc *p, const struct proc_request *rq, struct errbuf *err)
{
    struct plugin *pl = (struct plugin *)p;
    if (pl->stopping)
        return err_set(err, -ECANCELED, "shut down");
    char in_dt[8], out_dt[8], msg[PLUGIN_ERR_MAX];
    struct roifs_roi roi = {
        .index = rq->roi,
        .ndim = rq->ndim,
        .start = rq->start,
        .stop = rq->stop,
        .in_start = rq->in_start,
        .in_shape = rq->in_shape,
        .in_dtype = dtype_typestr_le(&rq->in_dtype, in_dt),
        .out_dtype = dtype_typestr_le(&rq->out_dtype, out_dt),
        .in_itemsize = rq->in_dtype.size,
        .out_itemsize = rq->out_dtype.size,
        .nelems = rq->in_nbytes / rq->in_dtype.size,
        .in_nbytes = rq->in_nbytes,
        .out_nbytes = rq->out_nbytes,
        .label = rq->label,
    };
    msg[0] = '\0';
    int rc = pl->def->process(pl->state, &roi, rq->in, rq->out, msg, sizeof msg);
    if (rc == 0)
        return 0;
    char fallback[64];
    snprintf(fallback, sizeof fallback, "process returned %d", rc);
    return err_set(err, -EIO, "plugin %s: %s", pl->def->name ? pl->def->name : pl->path,
                   plugin_message(msg, sizeof msg, fallback));
}

/* A C call cannot be interrupted: running ROIs finish, later ones are refused. */
static void plugin_shutdown(struct proc *p)
{
    ((struct plugin *)p)->stopping = true;
}

static void plugin_destroy(struct proc *p)
{
    struct plugin *pl = (struct plugin *)p;
    if (pl->def && pl->def->fini)
        pl->def->fini(pl->state);
    if (pl->handle)
        dlclose(pl->handle);
    free(pl->path);
    free(pl);
}

static const struct proc_ops plugin_ops = {
    .run = plugin_run,
    .shutdown = plugin_shutdown,
    .destroy = plugin_destroy,
};

/* Resolves and checks the plugin's description. */
static int plugin_describe(const struct config *cfg, struct plugin *pl, struct errbuf *err)
{
    char msg[900];
    dlerror();
    union {
        void *obj;
        const struct roifs_plugin *(*fn)(void);
    } entry = {.obj = dlsym(pl->handle, ROIFS_PLUGIN_SYMBOL)};
    if (!entry.obj) {
        snprintf(msg, sizeof msg, "%s does not export %s() (see roifs/plugin.h)", pl->path,
                 ROIFS_PLUGIN_SYMBOL);
        return plugin_error(cfg, err, msg);
    }
    pl->def = entry.fn();
    if (!pl->def) {
        snprintf(msg, sizeof msg, "%s: %s() returned NULL", pl->path, ROIFS_PLUGIN_SYMBOL);
        return plugin_error(cfg, err, msg);
    }
    if (pl->def->abi != ROIFS_PLUGIN_ABI) {
        snprintf(msg, sizeof msg, "%s has plugin ABI %d, this roifs supports %d", pl->path,
                 pl->def->abi, ROIFS_PLUGIN_ABI);
        pl->def = NULL; /* its other members may mean something else: never call fini */
        return plugin_error(cfg, err, msg);
    }
    if (!pl->def->process) {
        snprintf(msg, sizeof msg, "%s has no process function", pl->path);
        pl->def = NULL;
        return plugin_error(cfg, err, msg);
    }
    return 0;
}

static int plugin_init(const struct config *cfg, struct plugin *pl, struct errbuf *err)
{
    if (!pl->def->init)
        return 0;
    struct roifs_param *params = xcalloc((size_t)cfg->nparams + 1, sizeof *params);
    for (int i = 0; i < cfg->nparams; i++)
        params[i] = (struct roifs_param){cfg->params[i].name, cfg->params[i].value};
    char pmsg[PLUGIN_ERR_MAX], msg[900];
    pmsg[0] = '\0';
    int rc = pl->def->init(params, (size_t)cfg->nparams, &pl->state, pmsg, sizeof pmsg);
    free(params);
    if (rc == 0)
        return 0;
    char fallback[64];
    snprintf(fallback, sizeof fallback, "init returned %d", rc);
    snprintf(msg, sizeof msg, "%s: %s", pl->path, plugin_message(pmsg, sizeof pmsg, fallback));
    pl->def = NULL; /* init failed: nothing for fini to release */
    return plugin_error(cfg, err, msg);
}

int proc_plugin_create(const struct config *cfg, struct proc **out, struct errbuf *err)
{
    if (!cfg->proc_value || !*cfg->proc_value)
        return plugin_error(cfg, err, "empty path");
    struct plugin *pl = xcalloc(1, sizeof *pl);
    pl->base.ops = &plugin_ops;
    pl->path = xstrdup(cfg->proc_value);
    /* RTLD_LOCAL: two plugins' symbols never clash; RTLD_NOW: missing symbols fail here. */
    pl->handle = dlopen(pl->path, RTLD_NOW | RTLD_LOCAL);
    int rc;
    if (!pl->handle) {
        const char *why = dlerror();
        rc = plugin_error(cfg, err, why ? why : "cannot load the library");
    } else {
        rc = plugin_describe(cfg, pl, err);
        if (rc == 0)
            rc = plugin_init(cfg, pl, err);
    }
    if (rc) {
        plugin_destroy(&pl->base);
        return rc;
    }
    *out = &pl->base;
    return 0;
}
