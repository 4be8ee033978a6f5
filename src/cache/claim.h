/* claim.h: exclusive claims on work that hold between hosts whatever their file system's
 * locks do (docs/design.md, "Claims between hosts"). A claim is a file created exclusively
 * (O_CREAT | O_EXCL) in a directory of the cache, naming its holder: the host (its name, boot
 * id and pid namespace), the process (pid and start time) and a renewal counter that a thread
 * of the holder rewrites every lease / 4 seconds while the claim is held. Another process
 * judges a claim it finds:
 * - of its own host: live while the holder process (pid and start time) runs;
 * - of another host: live while its contents change; a claim seen unchanged for a whole lease
 *   by the observer's own monotonic clock has expired. No clock of another host, nor the file
 *   system's, is compared with ours: clock skew between hosts cannot shorten or stretch a
 *   lease; the cost is that a claim left by a dead host is taken over one lease after it is
 *   first looked at, not earlier.
 * An expired claim is taken over under a takeover token (NAME.take, created exclusively and
 * judged the same way), checking that the claim is still the very file judged (its contents
 * carry a random nonce) before removing it. A wait takes an open-file-description lock on a
 * byte of the file "all" first: processes of one host then wait in the kernel, in order,
 * rather than by looking again (a try takes none: the claim alone tells). A holder knows its
 * claim by its contents (the nonce after its holder text), never by its inode: through sshfs
 * a hard link is another inode number and a file made again at a name may get the same one;
 * a renewal writes only a file with its nonce, and a release removes only such a file. */
#ifndef ROIFS_CLAIM_H
#define ROIFS_CLAIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CLAIM_LEASE_DEFAULT 30
#define CLAIM_LEASE_MIN     5

/* Sets the lease (seconds, at least CLAIM_LEASE_MIN) of this process's claims and of its
 * judgement of other hosts' claims. */
void claim_set_lease(unsigned seconds);
unsigned claim_lease(void);

/* This host's identity, "NAME BOOTID PIDNS" (computed once). */
const char *claim_host(void);
/* Whether the process pid that started at start (clock ticks since boot, as in
 * /proc/PID/stat) runs on this host. */
bool claim_pid_alive(long pid, unsigned long long start);
/* This process's start time (clock ticks since boot). */
unsigned long long claim_my_start(void);

/* Takes the claim name in directory dirfd (borrowed: it must stay open until the release),
 * after (wait only) the byte-range lock of byte ofd_byte in its file "all" (the local fast
 * path for waiting). wait: until it is ours; else -EWOULDBLOCK when a live holder has it. A handle
 * (>= 0) for claim_release, or -errno. */
int claim_take(int dirfd, const char *name, uint64_t ofd_byte, bool wait);
/* Removes the claim and releases its lock. */
void claim_release(int handle);

/* Removes this process's spare claim files in directory dirfd (it is done with it). */
void claim_drop_spares(int dirfd);

/* Removes the claims in directory dirfd whose holder is gone: of this host, its process
 * ended; of another host, not renewed for longer than the lease + 2 s by the file system's
 * time (a claim of another host seen for the first time is never judged by the observer's
 * clock here). Returns how many (roifs clean --unused). */
size_t claim_remove_dead(int dirfd);

/* The file system's time now (ns), estimated from the time it gave the last claim this
 * process made or renewed; 0 when it made none yet. */
int64_t claim_fs_time(void);

/* Judges a host-tagged file's holder text (claim_holder_text's form) found in a file:
 * 1 live, 0 dead (of this host, its process gone), -1 of another host (judge by lease). */
int claim_judge_holder(const char *text);
/* The holder text of this process: "host H\nboot B\npidns N\npid P\nstart S\n". */
const char *claim_holder_text(void);

#endif
