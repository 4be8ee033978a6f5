/* proc.c: creates the processor a configuration names and forwards the generic calls to its
 * kind (builtin.c, command.c). */
#include "proc.h"

#include <errno.h>

static int unsupported(const struct config *cfg, const char *key, struct errbuf *err)
{
    int line = config_line(cfg, "process", key);
    if (line > 0)
        return err_set(err, -EINVAL, "%s:%d: [process] %s is not supported yet", cfg->path, line,
                       key);
    return err_set(err, -EINVAL, "%s: [process] %s is not supported yet", cfg->path, key);
}

int proc_create(const struct config *cfg, struct proc **out, struct errbuf *err)
{
    *out = NULL;
    switch (cfg->proc_kind) {
    case PROC_BUILTIN:
        return proc_builtin_create(cfg, out, err);
    case PROC_COMMAND:
        return proc_command_create(cfg, out, err);
    case PROC_WORKER:
        return unsupported(cfg, "worker", err);
    case PROC_PLUGIN:
        return unsupported(cfg, "plugin", err);
    case PROC_NONE:
        break;
    }
    return err_set(err, -EINVAL, "%s: [process] needs one of builtin, command, worker or plugin",
                   cfg->path);
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
