/* guard.h: the process-group guard. A helper process, started at the first spawn, kills the
 * process groups of the commands and workers still running when roifs dies, however it dies
 * (kill -9 included): PR_SET_PDEATHSIG reaches only a direct child, not what it started. */
#ifndef ROIFS_GUARD_H
#define ROIFS_GUARD_H

#include <stdbool.h>
#include <sys/types.h>

/* Kills process group pgid (with SIGKILL) if this process dies before guard_forget(pgid);
 * with srun, pgid is an srun, which is asked to end its job step instead (SIGTERM, then
 * srun's abort sequence, SIGKILL last). Best effort: when the guard cannot run, a warning is
 * logged once. */
void guard_watch(pid_t pgid, bool srun);
/* Call before reaping the group's leader, so that its number is never killed once reused. */
void guard_forget(pid_t pgid);

#endif
