/* slurm.h: `[process] executor = slurm` for the command and worker processors: the srun
 * command line that makes each process a Slurm job step, cancelling a running srun so that
 * its step really ends, and the failure reason in srun's standard error. */
#ifndef ROIFS_PROC_SLURM_H
#define ROIFS_PROC_SLURM_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "../config.h"
#include "../util.h"

/* How a processor launches its processes under Slurm: srun and the options from [slurm]. */
struct slurm_launch {
    char *srun;  /* absolute path of srun */
    char **opts; /* the options after the job name, [slurm] extra last; NULL-terminated */
};

/* NULL in *out when the executor is local (or unset). Otherwise finds srun in PATH and checks
 * [slurm] extra; errors name the file and line ("FILE:LINE: ..."). 0 or -EINVAL. */
int slurm_launch_create(const struct config *cfg, struct slurm_launch **out, struct errbuf *err);
void slurm_launch_free(struct slurm_launch *sl);

/* argv (NULL-terminated, every string malloc'd) of
 *   srun --job-name=JOB OPTS... [--unbuffered] /bin/sh -c CMDLINE
 * --unbuffered makes the step's stdout a pty in raw mode instead of a pipe that slurmstepd
 * line-buffers: a worker's binary reply, which rarely ends in a newline, must not wait for one. */
char **slurm_argv(const struct slurm_launch *sl, const char *job, bool unbuffered,
                  const char *cmdline);
void slurm_argv_free(char **argv);

/* Splits s into words as a POSIX shell would, without running one: blanks separate words;
 * '...' keeps everything literally; "..." too, except that \ escapes " \ $ ` and newline;
 * \ escapes the next character elsewhere. Unquoted $ ` | ; & < > ( ) are refused: they would
 * need a shell. *words is NULL-terminated (free with slurm_argv_free); *n counts the words.
 * 0, or -EINVAL with the reason in err. */
int slurm_split_words(const char *s, char ***words, size_t *n, struct errbuf *err);

/* Asks a running srun (pid: a child of ours, in its own process group, not yet reaped) to
 * end: SIGTERM, on which srun kills its step's tasks and lets Slurm end the step; then two
 * SIGINTs (srun's "abort" sequence); only then SIGKILL to its group, which would leave the
 * step running, so it is logged. Returns at once when srun has exited already; reaps nothing.
 * 0 when srun ended by itself, -ETIMEDOUT when it had to be killed. */
int slurm_stop(pid_t pid, const char *job);
/* Sends SIGTERM to srun (the first step of slurm_stop), without waiting. */
void slurm_interrupt(pid_t pid);

/* Whether a line of standard error comes from srun or slurmstepd rather than the task. */
bool slurm_is_own_line(const char *line);
/* Reads the stderr tail of an srun (NUL-terminated text): *task gets the last non-empty line
 * written by the task itself, *slurm the line of srun or slurmstepd saying why the step
 * failed (a cancellation, an allocation error, a killed task); either may come back empty.
 * A plain "task 0: Exited with exit code N" is left out: the exit status says as much. */
void slurm_reason(const char *tail, char *task, size_t task_len, char *slurm, size_t slurm_len);

#endif
