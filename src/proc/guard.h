/* guard.h: the process-group guard. A helper process, started at the first spawn, kills the
 * process groups of the commands and workers still running when roifs dies, however it dies
 * (kill -9 included): PR_SET_PDEATHSIG reaches only a direct child, not what it started. */
#ifndef ROIFS_GUARD_H
#define ROIFS_GUARD_H

#include <stdbool.h>
#include <sys/types.h>

/* Starts the guard if it is not running; its socket for guard_watch_self(), or -1 (a warning
 * is logged once) when it cannot run. Call before starting the child. */
int guard_prepare(void);
/* In the child, before exec (async-signal-safe): kills this process's group (with SIGKILL)
 * if roifs dies before guard_forget(); with srun, this process is an srun, which is asked to
 * end its job step instead (SIGTERM, then srun's abort sequence, SIGKILL last). Registered by
 * the child itself, so that nothing it starts runs unwatched. fd < 0: nothing. */
void guard_watch_self(int fd, bool srun);
/* Call before reaping the group's leader, so that its number is never killed once reused. */
void guard_forget(pid_t pgid);

#endif
