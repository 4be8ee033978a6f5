/* proc.c: creates the processor a configuration names and forwards the generic calls to its
 * kind (builtin.c, command.c, worker.c, plugin.c, python.c). */
#include "proc.h"

#include <errno.h>

int proc_create(const struct config *cfg, struct proc **out, struct errbuf *err)
{
    *out = NULL;
    switch (cfg->proc_kind) {
    case PROC_BUILTIN:
        return proc_builtin_create(cfg, out, err);
    case PROC_COMMAND:
        return proc_command_create(cfg, out, err);
    case PROC_WORKER:
        return proc_worker_create(cfg, out, err);
    case PROC_PLUGIN:
        return proc_plugin_create(cfg, out, err);
    case PROC_PYTHON:
        return proc_python_create(cfg, out, err);
    case PROC_NONE:
        break;
    }
    return err_set(err, -EINVAL,
                   "%s: [process] needs one of builtin, command, worker, plugin or python",
                   cfg->path);
}

const char *proc_kind_name(enum proc_kind k)
{
    switch (k) {
    case PROC_BUILTIN:
        return "builtin";
    case PROC_COMMAND:
        return "command";
    case PROC_WORKER:
        return "worker";
    case PROC_PLUGIN:
        return "plugin";
    case PROC_PYTHON:
        return "python";
    case PROC_NONE:
        break;
    }
    return "none";
}

void proc_shutdown(struct proc *p)
{
    if (p && p->ops->shutdown)
        p->ops->shutdown(p);
}

void proc_destroy(struct proc *p)
{
    if (p)
        p->ops->destroy(p);
}
