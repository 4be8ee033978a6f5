/* runfile.h: how `roifs unmount` finds the daemon of a mount (no FUSE here).
 *
 * Each daemon records its pid and start time in a run file named after its mount's device,
 * the N of "0:N" in /proc/self/mountinfo (also /sys/fs/fuse/connections/N): /run/roifs/N for
 * mounts owned by root, $XDG_RUNTIME_DIR/roifs/N (or /run/user/UID/roifs/N) for other users.
 * The device names exactly one live mount; the start time tells a live daemon from a process
 * that got a dead one's pid. A daemon that cannot write its run file still serves; unmount
 * then falls back to unmounting without it. */
#ifndef ROIFS_RUNFILE_H
#define ROIFS_RUNFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* The topmost mount at an absolute path, from /proc/self/mountinfo. */
struct mount_entry {
    char fstype[64];
    char source[256];
    unsigned minor; /* of the mount's device 0:N */
    uid_t owner;    /* FUSE's user_id= super option (0 when absent) */
};

/* 0, or -ENOENT when nothing is mounted at path (absolute, symlinks resolved). */
int mountinfo_find(const char *path, struct mount_entry *out);

/* Records this process as the daemon of the mount with device minor (owned by this user).
 * 0 or -errno (nothing written). */
int runfile_write(unsigned minor);
/* Removes the run file of minor if it names this process. */
void runfile_remove(unsigned minor);
/* The live daemon recorded for the mount with device minor, owned by user owner: 0 with *pid
 * and its *start time; -ESRCH when the recorded daemon is gone (its stale file is removed);
 * -ENOENT when there is no (trustworthy) run file. */
int runfile_daemon(unsigned minor, uid_t owner, pid_t *pid, unsigned long long *start);

/* Start time of process pid (clock ticks after boot, /proc/PID/stat), or 0 when it is gone
 * or a zombie. */
unsigned long long proc_start_time(pid_t pid);

#endif
