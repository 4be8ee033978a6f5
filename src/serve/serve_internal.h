/* serve_internal.h: what serve.c (requests, the tree, the engines, the server) and reply.c
 * (answers: ranges, ETag and 304, CORS headers) share. */
#ifndef ROIFS_SERVE_INTERNAL_H
#define ROIFS_SERVE_INTERNAL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "serve.h"

struct server {
    struct arrayset *set;
    const struct ns *ns;
    const struct serve_opts *o;
    struct MHD_Daemon *d;
    pthread_rwlock_t run; /* read: a request using the engines; write: stopping them */
    bool stopping;        /* under run */
    atomic_int waiting;   /* requests that were suspended and are not answered yet */
    atomic_int held;      /* requests the engines (or the table) still owe an answer */
    /* the requests suspended now (doubly linked), under lock with every sreq's state */
    pthread_mutex_t lock;
    struct sreq *suspended;
    _Atomic uint64_t requests, gone; /* answered; clients gone while they waited */
    pthread_t watcher;
};

/* One request's state (MHD's con_cls): what it asked for and, once the engine answered, the
 * answer. It lives until both the connection is done with it (on_completed) and the engine has
 * answered: a client that goes away while waiting leaves the answer to nobody. */
struct sreq {
    struct sreq *prev, *next; /* on srv->suspended while suspended */
    struct server *srv;
    struct MHD_Connection *conn;
    int refs;       /* the connection's, and the engine's while it is asked (srv->lock) */
    bool gone;      /* the client went away while it waited: resumed to be closed */
    bool asked;     /* the engine (or the table) was asked */
    bool done;      /* it answered: err, fd, flags */
    bool suspended; /* the connection waits for that answer */
    bool counted;   /* in srv->waiting until it is completed */
    int err, fd;
    struct ns_node node;
    /* a chunk's ETag ("" when none), taken in the engine's callback: a plate's image may be
     * closed once the callback has returned */
    char etag[40];
};

/* ---- reply.c ---- */

/* A request header's value, or NULL. */
const char *serve_header(struct MHD_Connection *c, const char *name);
/* The origin allowed to read this answer (the request's Origin when --cors lists it, or "*"),
 * or NULL. */
const char *serve_cors_origin(const struct server *srv, struct MHD_Connection *c);
/* Queues resp with status, after the headers every answer carries (CORS); destroys resp. */
enum MHD_Result serve_reply(struct server *srv, struct MHD_Connection *c, unsigned status,
                            struct MHD_Response *resp);
enum MHD_Result serve_text(struct server *srv, struct MHD_Connection *c, unsigned status,
                           const char *text);
/* Answers with the bytes of fd (taken), honouring a single Range and, when etag is not NULL,
 * If-None-Match (304). */
enum MHD_Result serve_fd(struct server *srv, struct MHD_Connection *c, int fd, const char *type,
                         const char *etag);
/* The same for bytes in memory (buf taken). */
enum MHD_Result serve_buf(struct server *srv, struct MHD_Connection *c, char *buf, size_t size,
                          const char *type);

/* ---- listing.c (--listings) ---- */

/* Answers the HTML listing of directory dir of the tree (held by the caller when it is a name
 * found in a mirrored directory), whose URL is url ("/", or ending in '/'). */
enum MHD_Result serve_listing(struct server *srv, struct MHD_Connection *c, uint64_t dir,
                              const char *url);
/* A directory's URL without its trailing slash: 301 to the URL with it, so that the relative
 * links of its listing resolve. */
enum MHD_Result serve_redirect_dir(struct server *srv, struct MHD_Connection *c, const char *url);

#endif
