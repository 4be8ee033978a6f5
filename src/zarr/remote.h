/* remote.h: the HTTP(S) storage under the Zarr input reader (libcurl): objects fetched by
 * name (never a directory listing), whole or by byte range, with kept-alive connections, at
 * most `connections` requests in flight, retries with backoff and jitter, TLS verified, and
 * the headers of headers_file (a token) sent but never shown. docs/remote.md. */
#ifndef ROIFS_ZARR_REMOTE_H
#define ROIFS_ZARR_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util.h"

/* [input] keys of a remote input (docs/configuration.md#remote-inputs). */
struct remote_opts {
    int connections;          /* requests in flight at once */
    int retries;              /* extra attempts after a timeout, a reset, a 5xx, a short body */
    int request_timeout;      /* seconds for one whole request */
    int revalidate;           /* seconds a signature is trusted before it is asked again */
    const char *ca_file;      /* NULL: the system's CAs */
    const char *headers_file; /* NULL: none */
};
#define REMOTE_OPTS_DEFAULT                                                                        \
    {                                                                                              \
        8, 5, 30, 60, NULL, NULL                                                                   \
    }

/* Whether path is an http:// or https:// URL. */
bool remote_is_url(const char *path);
/* Sets the process's client from o: reads headers_file (refused when its group or others can
 * read it; its values never appear in a message). Idempotent; call before any request. */
int remote_configure(const struct remote_opts *o, struct errbuf *err);
/* The connections configured. */
int remote_connections(void);
/* The revalidate period, in ns. */
uint64_t remote_revalidate_ns(void);

/* What the server said of an object. */
struct remote_obj {
    long status;     /* HTTP status of the answer (0: none reached us) */
    bool exists;     /* 2xx, or 304 */
    uint64_t length; /* of the whole object (Content-Length, or Content-Range's total) */
    uint64_t sig;    /* the signature: a hash of the ETag, else of Last-Modified + length */
    char etag[160];  /* the ETag as sent (for If-None-Match), or "" */
};

/* A request for url: range NULL (whole), "A-B" or "-N" (suffix); method HEAD when head;
 * if_none_match: an ETag, the answer may be 304 (o->exists, o->sig unchanged by the caller).
 * 0 with the body in *body and *len (malloc'd, NUL-terminated; not for HEAD or 304), -ENOENT for
 * a 404 (410 too), -EIO with a message naming the URL and the status after the attempts
 * (4xx at once), -EFBIG when the body is larger than max. A body shorter than announced is
 * never returned. */
int remote_request(const char *url, const char *range, bool head, const char *if_none_match,
                   size_t max, char **body, size_t *len, struct remote_obj *o, struct errbuf *err);
/* HEAD requests of urls[0..n) at once (inm[i]: an ETag for a conditional one, or NULL), over
 * the free handles of the pool (a curl multi handle), at most REMOTE_BATCH_MAX: each one's
 * result in rcs[i] (as remote_request's), objs[i] and errs[i]. Those not taken by the batch,
 * or to be tried again, are then asked one at a time. */
#define REMOTE_BATCH_MAX 16
void remote_head_many(const char *const *urls, const char *const *inm, size_t n,
                      struct remote_obj *objs, int *rcs, struct errbuf *errs);
/* The same with GET requests when bodies is not NULL: bodies[i] (malloc'd, or NULL: a 304 or
 * a failure) and lens[i], bodies of at most max bytes (-EFBIG). */
void remote_fetch_many(const char *const *urls, const char *const *inm, size_t n, size_t max,
                       char **bodies, size_t *lens, struct remote_obj *objs, int *rcs,
                       struct errbuf *errs);
/* A whole small object (metadata, a table's array): as file_read_all (-ENOENT when absent). */
int remote_read_text(const char *url, char **data, size_t *len, struct errbuf *err);

/* Counters (the status file's remote.*). */
struct remote_stats {
    uint64_t requests, retried, failed, unconfirmed;
};
void remote_get_stats(struct remote_stats *st);
/* A result was served whose signature could not be confirmed (the server unreachable). */
void remote_note_unconfirmed(void);

#endif
