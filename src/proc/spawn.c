/* spawn.c: starting the processes of the command and worker processors (see spawn.h). */
#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

void spawn_close(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

int spawn_pipe(int fds[2])
{
    if (pipe2(fds, O_CLOEXEC) < 0)
        return -errno;
    for (int i = 0; i < 2; i++) {
        if (fds[i] > 2)
            continue;
        int moved = fcntl(fds[i], F_DUPFD_CLOEXEC, 3);
        int e = errno;
        close(fds[i]);
        fds[i] = moved;
        if (moved < 0) {
            spawn_close(&fds[!i]);
            return -e;
        }
    }
    return 0;
}

int spawn_process(const char *path, char *const argv[], char *const env[], const char *dir,
                  const int child_fds[3], pid_t *pid)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    sigset_t none, dfl;
    static const int reset[] = {SIGPIPE, SIGCHLD, SIGINT,  SIGQUIT, SIGTERM,
                                SIGHUP,  SIGUSR1, SIGUSR2, SIGXFSZ};
    posix_spawn_file_actions_init(&fa);
    for (int i = 0; i < 3; i++)
        posix_spawn_file_actions_adddup2(&fa, child_fds[i], i);
    if (dir)
        posix_spawn_file_actions_addchdir_np(&fa, dir);
    /* The daemon ignores SIGPIPE and its threads block signals; ignored dispositions and the
     * mask would otherwise survive exec into the child. */
    sigemptyset(&none);
    sigemptyset(&dfl);
    for (size_t i = 0; i < sizeof reset / sizeof reset[0]; i++)
        sigaddset(&dfl, reset[i]);
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                        POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &dfl);
    int rc = posix_spawn(pid, path, &fa, &attr, argv, env);
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&fa);
    return -rc;
}
