/* passthrough.h: FUSE passthrough for cached chunks on libfuse 3.14.
 *
 * With passthrough (Linux >= 6.9, CONFIG_FUSE_PASSTHROUGH, CAP_SYS_ADMIN) the kernel serves
 * read(), splice and mmap of an open chunk straight from its cache file: no READ request
 * reaches the daemon and the data is copied once, from the cache file's page cache, as for a
 * file in a plain folder. libfuse exposes it from 3.17 on; Debian 12 ships 3.14, so this
 * module negotiates it itself through libfuse's custom I/O hooks (3.14 has them; devio.h
 * installs them): it sees the kernel's INIT request, adds the passthrough flag and a stack
 * depth to libfuse's INIT reply, registers cache files with the FUSE device
 * (FUSE_DEV_IOC_BACKING_OPEN) and adds FOPEN_PASSTHROUGH and the backing id to the OPEN
 * replies it is asked to.
 *
 * The kernel allows one backing file per inode at a time, and refuses to mix passthrough and
 * page-cache opens of one inode, so a backing id is shared by all opens of an inode and
 * closed at the last release (versions.c keeps that count: an inode serves one cache file
 * while it is open), and the first failure to register a cache file turns passthrough off
 * for the rest of the mount (the cache directory is then on a file system that cannot back
 * FUSE files). */
#ifndef ROIFS_PASSTHROUGH_H
#define ROIFS_PASSTHROUGH_H

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

struct pt;

/* want = false: never negotiate (the [mount] passthrough = false key). */
struct pt *pt_new(bool want);
void pt_free(struct pt *pt);

/* The session's FUSE device (for registering backing files), once mounted. */
void pt_set_device(struct pt *pt, int fd);
/* Called by devio.c for every request read (n bytes at buf) and every reply written (it
 * writes them, changed where passthrough needs it). */
void pt_saw_request(struct pt *pt, const void *buf, size_t n);
ssize_t pt_on_writev(struct pt *pt, int fd, struct iovec *iov, int count);

/* True once the kernel accepted passthrough and no cache file was refused. */
bool pt_active(const struct pt *pt);
/* Why passthrough is off ("" when it is on): for the log and the status file. */
const char *pt_reason(const struct pt *pt);

/* Registers fd with the FUSE device as a backing file: its id (> 0), or 0 when passthrough
 * is off (then serve the open the ordinary way). The first refusal turns passthrough off. */
int32_t pt_backing_open(struct pt *pt, int fd);
void pt_backing_close(struct pt *pt, int32_t id);
/* fuse_reply_open with FOPEN_PASSTHROUGH and backing_id added to the reply. */
int pt_reply_open(fuse_req_t req, const struct fuse_file_info *fi, int32_t backing_id);

#endif
