/* serve.h: the presented tree over HTTP/1.1 (docs/serve.md), without FUSE: libmicrohttpd
 * answers GET and HEAD of the tree an array set builds (namespace.h), its chunks from the same
 * engines a mount uses. A request for a chunk being computed holds no server thread: its
 * connection is suspended and resumed from the engine's callback. */
#ifndef ROIFS_SERVE_H
#define ROIFS_SERVE_H

#include <stdbool.h>
#include <sys/socket.h>

#include "../arrays/arrayset.h"

struct serve_opts {
    struct sockaddr_storage addr;   /* where to listen */
    const char *token;              /* bearer token every request needs, or NULL */
    const char *cors;               /* comma list of origins, "*", or NULL */
    const char *tls_cert, *tls_key; /* PEM texts for HTTPS, or NULL */
    int threads;                    /* server threads (at least 1) */
    bool listings;                  /* directories' URLs answer an HTML listing (listing.c) */
};

/* Parses "ADDR:PORT" ("[V6]:PORT" for IPv6; ADDR may be a dotted IPv4 or an IPv6 address)
 * into *sa: 0 or -EINVAL. */
int serve_parse_listen(const char *text, struct sockaddr_storage *sa);

/* Starts the engines of s, serves until SIGINT or SIGTERM (which the caller has blocked in
 * every thread), stops the engines. 0, or -errno with err set. */
int serve_run(struct arrayset *s, const struct serve_opts *o, struct errbuf *err);

/* ---- page.c: the status page ---- */

/* The HTML page of `/` for a started set: counts, rate, recent errors and the chunk grid of
 * array 0 coloured by state, refreshed by the browser every few seconds (no script); with
 * listings, a link to the root's listing (`/?ls`). */
char *serve_page(struct arrayset *s, bool listings, size_t *len);

#endif
