/* spawn.h: starting the processes of the command and worker processors (and their srun
 * steps): pipes that concurrent spawns never inherit, a process group of their own, and
 * signal dispositions reset to what a fresh program expects. */
#ifndef ROIFS_SPAWN_H
#define ROIFS_SPAWN_H

#include <sys/types.h>

/* A close-on-exec pipe whose ends are not 0, 1 or 2, so that the child's dup2()s never
 * clobber one another; close-on-exec keeps concurrent spawns from inheriting it. 0 or -errno. */
int spawn_pipe(int fds[2]);
/* Closes *fd if open and sets it to -1. */
void spawn_close(int *fd);
/* Runs path with argv and env in a new process group, child_fds as its standard input, output
 * and error, in directory dir (NULL: the current one). 0 or -errno. */
int spawn_process(const char *path, char *const argv[], char *const env[], const char *dir,
                  const int child_fds[3], pid_t *pid);

#endif
