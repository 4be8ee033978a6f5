/* devio.h: the daemon's side of the FUSE device, under libfuse's custom I/O hooks: every
 * request counted by opcode (the status file's fuse.requests), a short poll of the device
 * before blocking while requests come in a burst, and the terminal ioctl answered at once.
 *
 * The poll is for this machine's kind of VM: a vCPU left idle is descheduled by the host and
 * waking it costs ~300 µs, several times the daemon's own work per request, so a reader that
 * opens file after file pays that wake-up per open. While requests come at most poll_us apart,
 * one thread at a time keeps polling for up to poll_us after its reply (its CPU stays awake and
 * the next request is read at once); after poll_us without a request the mount blocks as any
 * other, so an idle mount uses no CPU. Passthrough's negotiation (passthrough.h) sees every
 * message read and written. */
#ifndef ROIFS_DEVIO_H
#define ROIFS_DEVIO_H

#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "passthrough.h"

struct devio;

/* poll_us: the polling window (0: never poll). */
struct devio *devio_new(struct pt *pt, unsigned poll_us);
void devio_free(struct devio *d);

/* Installs the hooks on se, which must be mounted. The hooks call devio_on_read and
 * devio_on_writev with the session's userdata, so the caller provides thin wrappers that find
 * d in it. 0 or -errno. */
int devio_attach(struct devio *d, struct fuse_session *se,
                 ssize_t (*rd)(int, void *, size_t, void *),
                 ssize_t (*wv)(int, struct iovec *, int, void *));
ssize_t devio_on_read(struct devio *d, int fd, void *buf, size_t len);
ssize_t devio_on_writev(struct devio *d, int fd, struct iovec *iov, int count);

/* Requests seen so far, by opcode: {"OPEN": n, ...} (opcodes seen only), a new reference. */
json_t *devio_requests(struct devio *d);
/* The polling: {"us": window, "polls": n, "hits": n, "cpu_s": seconds spent polling}. */
json_t *devio_poll_status(struct devio *d);

#endif
