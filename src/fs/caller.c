/* caller.c: what a request does in the input image (ome = labels) it does with the file system
 * ids of the process that asked: its uid and gid as this thread's fsuid and fsgid, and its
 * groups as this thread's, put back after. So a mount that root shares with allow_other lets
 * another user look up, stat, list and read in the input only what that user may there: a
 * private directory or file, a link in the image to one, or one swapped in after a look while
 * the kernel still holds the old attributes, all give EACCES. The system calls themselves are
 * used, not glibc's process-wide wrappers, so other threads keep the daemon's ids. A daemon
 * that is not root acts as itself (its user asked for allow_other). */
#include "fs_internal.h"

#include <errno.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <unistd.h>

int caller_enter(fuse_req_t req, struct caller_ids *saved)
{
    const struct fuse_ctx *ctx = fuse_req_ctx(req);
    saved->switched = false;
    if (geteuid() != 0 || ctx->uid == 0)
        return 0;
    gid_t groups[CALLER_MAXG];
    int ng = fuse_req_getgroups(req, CALLER_MAXG, groups);
    if (ng < 0 || ng > CALLER_MAXG)
        ng = 0; /* its groups unknown: none */
    saved->nown = getgroups(CALLER_MAXG, saved->own);
    if (saved->nown < 0 || syscall(SYS_setgroups, (size_t)ng, groups) < 0)
        return -EACCES;
    saved->gid = (gid_t)setfsgid(ctx->gid);
    saved->uid = (uid_t)setfsuid(ctx->uid);
    saved->switched = true;
    return 0;
}

void caller_leave(struct caller_ids *saved)
{
    if (!saved->switched)
        return;
    int e = errno;
    setfsuid(saved->uid);
    setfsgid(saved->gid);
    if (syscall(SYS_setgroups, (size_t)saved->nown, saved->own) < 0)
        log_error("cannot restore this thread's groups: %s", strerror(errno));
    saved->switched = false;
    errno = e;
}
