/* spawn.h: starting the processes of the command and worker processors (and their srun
 * steps): pipes that concurrent spawns never inherit, a process group of their own, signal
 * dispositions reset to what a fresh program expects, and a tie to roifs's life (they die
 * with it, kill -9 included). */
#ifndef ROIFS_SPAWN_H
#define ROIFS_SPAWN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* A close-on-exec pipe whose ends are not 0, 1 or 2, so that the child's dup2()s never
 * clobber one another; close-on-exec keeps concurrent spawns from inheriting it. 0 or -errno. */
int spawn_pipe(int fds[2]);
/* Closes *fd if open and sets it to -1. */
void spawn_close(int *fd);
/* Runs path with argv and env in a new process group, child_fds as its standard input, output
 * and error, in directory dir (NULL: the current one). The child gets SIGKILL when roifs dies,
 * and so does the rest of its process group (guard.h); an srun gets SIGTERM instead, on which
 * it ends its job step (a SIGKILL would leave the step running), then srun's abort sequence
 * if it is still there. 0 or -errno (also for a program that cannot be run, or a directory
 * that cannot be entered). */
int spawn_process(const char *path, char *const argv[], char *const env[], const char *dir,
                  const int child_fds[3], bool srun, pid_t *pid);
/* The words of cmdline when it is a plain list of words that /bin/sh -c would run as they are
 * (split at blanks, each made only of letters, digits and _ . / , : + @ % ^ -, the first not
 * starting with -); NULL when it has any other character (quotes, $, globs, redirections,
 * operators, comments, assignments, ~, newlines), which only a shell interprets. Free with
 * spawn_words_free. */
char **spawn_split_words(const char *cmdline);
void spawn_words_free(char **words);
/* The file that /bin/sh, started in dir (NULL: the current one) with the daemon's PATH, would
 * execute for command word prog: prog itself when it has a '/', else the first executable
 * regular file PATH/prog (an empty or relative PATH entry relative to dir); NULL when there is
 * none (then the shell reports it) or when it is neither "#!" script nor ELF binary (then the
 * shell runs it as a shell script). Freed by the caller. */
char *spawn_find_program(const char *prog, const char *dir);

/* Reaps a child of spawn_process() (retrying on EINTR); what waitpid() returns. */
pid_t spawn_reap(pid_t pid, int *status);

/* A child's stderr (or stdout) cut into lines for the log: a line is handed on once complete,
 * or in pieces of SPAWN_LINE_MAX bytes, without its trailing blanks and with NUL bytes shown
 * as '?'; empty lines are dropped. */
#define SPAWN_LINE_MAX 1024
struct spawn_lines {
    char line[SPAWN_LINE_MAX + 1];
    size_t len;
};
/* Receives each line (NUL-terminated, len bytes; it may be modified). */
typedef void (*spawn_line_fn)(void *ctx, char *line, size_t len);
/* Reads *fd without blocking, until it would block (all) or once, handing on complete lines;
 * at end of file or on an error, hands on the unfinished line too and closes *fd (-1). */
void spawn_lines_read(int *fd, struct spawn_lines *l, bool all, spawn_line_fn fn, void *ctx);
/* Hands on the unfinished line, if any. */
void spawn_lines_flush(struct spawn_lines *l, spawn_line_fn fn, void *ctx);

#endif
