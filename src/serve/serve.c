/* serve.c: `roifs serve`'s HTTP side (docs/serve.md). Each request resolves its URL in the
 * tree; a chunk is asked of its engine with arrayset_open_chunk, and when the engine does not
 * answer at once the connection is suspended (MHD_suspend_connection) and the engine's
 * callback resumes it, so that no server thread waits for a computation. Metadata, the status
 * and generated files are answered at once; the masking table's files wait the same way. */
#include "serve_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <pthread.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../arrays/overlay_remote.h"
#include "../task.h"
#include "../util.h"

#define PAGE_URL "/"
/* At a stop, how long the requests still waiting for a chunk have to receive their answer. */
#define STOP_ANSWER_NS 3000000000LL

/* ---- chunks and tables: asked, then answered (maybe after a suspension) ---- */

/* srv->lock held. */
static void unlist(struct server *srv, struct sreq *q)
{
    if (q->prev)
        q->prev->next = q->next;
    else
        srv->suspended = q->next;
    if (q->next)
        q->next->prev = q->prev;
    q->prev = q->next = NULL;
    q->suspended = false;
}

/* Drops a reference (srv->lock held): true when q is to be freed. */
static bool unref(struct sreq *q)
{
    return --q->refs == 0;
}

static void sreq_free(struct sreq *q)
{
    if (q->fd >= 0)
        close(q->fd);
    free(q);
}

static void answered(struct sreq *q, int err, int fd)
{
    struct server *srv = q->srv;
    atomic_fetch_sub(&srv->held, 1);
    pthread_mutex_lock(&srv->lock);
    q->done = true;
    q->err = err;
    q->fd = fd;
    if (q->suspended) {
        unlist(srv, q);
        MHD_resume_connection(q->conn);
    }
    bool last = unref(q);
    pthread_mutex_unlock(&srv->lock);
    if (last) /* the client went away: nobody takes the answer */
        sreq_free(q);
}

/* Called with the chunk's image held (arrayset_open_chunk): its cache is open. */
static void chunk_cb(void *ctx, int err, int fd, int flags)
{
    (void)flags;
    struct sreq *q = ctx;
    struct engine *e = arrayset_array(q->srv->set, (size_t)q->node.array)->engine;
    struct cache_chunk_meta meta;
    if (!err && e && cache_chunk_meta_of(engine_cache(e), q->node.chunk, fd, &meta) == 0) {
        char hex[33];
        key_hex(meta.key, hex);
        snprintf(q->etag, sizeof q->etag, "\"%s\"", hex);
    }
    answered(q, err, err ? -1 : fd);
}

static void table_cb(void *ctx, int err)
{
    answered(ctx, err, -1);
}

/* The reasons of the failed ROIs among rois[0..n) (every failed ROI when rois is NULL), one
 * line each. */
struct reasons {
    const uint32_t *rois;
    size_t n;
    char *text;
};

static void add_reason(void *ctx, size_t roi, const char *msg)
{
    struct reasons *r = ctx;
    for (size_t i = 0; i < (r->rois ? r->n : 1); i++)
        if (!r->rois || r->rois[i] == roi) {
            char *t = xasprintf("%sROI %zu failed: %s\n", r->text ? r->text : "", roi,
                                msg ? msg : "(no message kept)");
            free(r->text);
            r->text = t;
            return;
        }
}

/* Why q's node failed: its chunk's failed ROIs; for a file of the masking table (made from
 * every chunk of the label image, array 0), every failed ROI. A plate's image is held while
 * its engine is asked (and not started for this: one that is closed or could not start gives
 * the error alone); a plate's table names no ROI. */
static char *failure_reason(struct server *srv, const struct ns_node *n, int err)
{
    bool chunk = n->kind == NS_CHUNK;
    size_t array = chunk ? (size_t)n->array : 0;
    struct engine *e =
        chunk || !arrayset_is_plate(srv->set) ? arrayset_engine_get(srv->set, array, false) : NULL;
    struct reasons r = {0};
    if (e) {
        const struct task *t = engine_task(e);
        int64_t k = chunk ? roi_index_find(t->index, n->chunk) : -1;
        if (k >= 0)
            r.rois = roi_index_rois(t->index, (size_t)k, &r.n);
        if (k >= 0 || !chunk)
            engine_failed_rois(e, add_reason, &r);
    }
    if (!r.text) {
        char *ie = e ? engine_input_error(e) : NULL;
        r.text = xasprintf("%s %llu: %s\n", chunk ? "chunk" : "table file",
                           (unsigned long long)n->chunk, ie ? ie : strerror(-err));
        free(ie);
    }
    if (e)
        arrayset_engine_put(srv->set, array);
    return r.text;
}

/* Asks the engine (or the table) for q's node; true when the answer is there already. */
static bool ask(struct sreq *q)
{
    struct server *srv = q->srv;
    q->asked = true;
    pthread_mutex_lock(&srv->lock);
    q->refs++;
    pthread_mutex_unlock(&srv->lock);
    atomic_fetch_add(&srv->held, 1);
    if (q->node.kind == NS_CHUNK) /* a plate's image started if need be */
        arrayset_open_chunk(srv->set, (size_t)q->node.array, q->node.chunk, chunk_cb, q);
    else
        arrayset_table_request(srv->set, q->node.chunk, table_cb, q);
    pthread_mutex_lock(&srv->lock);
    bool done = q->done;
    if (!done) {
        q->suspended = true;
        q->next = srv->suspended;
        if (q->next)
            q->next->prev = q;
        srv->suspended = q;
        q->counted = true;
        atomic_fetch_add(&srv->waiting, 1);
        MHD_suspend_connection(q->conn);
    }
    pthread_mutex_unlock(&srv->lock);
    return done;
}

static enum MHD_Result answer_asked(struct sreq *q)
{
    struct server *srv = q->srv;
    struct MHD_Connection *c = q->conn;
    if (srv->stopping) /* the engines are gone */
        return serve_text(srv, c, MHD_HTTP_SERVICE_UNAVAILABLE, "the server is stopping\n");
    if (q->err) {
        char *why = failure_reason(srv, &q->node, q->err);
        log_debug("serve: %s", why);
        enum MHD_Result r = serve_text(srv, c, MHD_HTTP_INTERNAL_SERVER_ERROR, why);
        free(why);
        return r;
    }
    if (q->node.kind == NS_TABLE) {
        size_t len = 0;
        char *data = arrayset_table_copy(srv->set, q->node.chunk, &len);
        if (!data)
            return serve_text(srv, c, MHD_HTTP_NOT_FOUND, "not found\n");
        return serve_buf(srv, c, data, len, "application/octet-stream");
    }
    int fd = q->fd;
    q->fd = -1;
    return serve_fd(srv, c, fd, "application/octet-stream", q->etag[0] ? q->etag : NULL);
}

/* ---- the tree ---- */

/* Resolves url ("/a/b/c", a directory's also "/a/b/") in the tree: 0 and *n, or -ENOENT. A
 * name found in a mirrored directory (ome = labels: the input's own files) is held while the
 * next one is looked up in it, and let go before this returns unless *n is a directory and
 * hold is not NULL: then *hold is the inode the caller lets go (ns_forget), 0 when none. For
 * an input file, *path (malloc'd) is its path in the file system, which the node no longer
 * keeps then. */
static int resolve(const struct ns *ns, const char *url, struct ns_node *n, char **path,
                   uint64_t *hold)
{
    *path = NULL;
    if (hold)
        *hold = 0;
    if (url[0] != '/' || ns_get(ns, NS_INO_ROOT, n) < 0)
        return -ENOENT;
    uint64_t held = 0; /* a live node whose lookup this holds */
    int r = 0;
    for (const char *p = url + 1; *p;) {
        const char *end = strchr(p, '/');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char name[256];
        if (len == 0 || len >= sizeof name || n->kind != NS_DIR) {
            r = -ENOENT;
            break;
        }
        memcpy(name, p, len);
        name[len] = '\0';
        uint64_t dir = n->ino;
        if (ns_lookup(ns, dir, name, n) < 0) {
            r = -ENOENT;
            break;
        }
        if (held)
            ns_forget(ns, held, 1);
        held = n->live ? n->ino : 0;
        if (!end)
            break;
        p = end + 1;
        if (!*p) { /* a trailing slash: only a directory's URL */
            r = n->kind == NS_DIR ? 0 : -ENOENT;
            break;
        }
    }
    if (r == 0 && n->kind == NS_INPUT && n->text)
        *path = xstrdup(n->text);
    if (r == 0 && n->kind == NS_DIR && hold)
        *hold = held; /* the caller's now */
    else if (held)
        ns_forget(ns, held, 1);
    return r;
}

static const char *content_type(const char *url)
{
    const char *base = strrchr(url, '/');
    base = base ? base + 1 : url;
    if (strcmp(base, ".zarray") == 0 || strcmp(base, ".zattrs") == 0 ||
        strcmp(base, ".zgroup") == 0 || strcmp(base, "zarr.json") == 0 ||
        strcmp(base, "status") == 0 || strstr(base, ".json"))
        return "application/json";
    return "application/octet-stream";
}

/* An input file read through (ome = labels): opened without blocking on anything but a
 * regular file. */
static enum MHD_Result send_input(struct server *srv, struct MHD_Connection *c, const char *path)
{
    int fd = path ? open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC) : -1;
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        if (fd >= 0)
            close(fd);
        return serve_text(srv, c, MHD_HTTP_NOT_FOUND, "not found\n");
    }
    return serve_fd(srv, c, fd, content_type(path), NULL);
}

/* A file of a remote input image read whole through the remote layer: 404 when it is gone,
 * 502 when the server failed (the log names the URL and the status). */
static enum MHD_Result send_remote_input(struct server *srv, struct MHD_Connection *c,
                                         const char *src, const char *url)
{
    struct errbuf err = {{0}};
    char *data = NULL;
    size_t len = 0;
    int r = overlay_remote_read(src, &data, &len, &err);
    if (r == -ENOENT)
        return serve_text(srv, c, MHD_HTTP_NOT_FOUND, "not found\n");
    if (r < 0) {
        log_warn("%s", err.msg);
        return serve_text(srv, c, MHD_HTTP_BAD_GATEWAY, "the input could not be read\n");
    }
    return serve_buf(srv, c, data, len, content_type(url));
}

static char *status_text(struct server *srv, size_t *len)
{
    json_t *doc = arrayset_status(srv->set);
    json_object_set_new(
        doc, "http",
        json_pack("{s:I, s:i, s:I, s:i}", "requests", (json_int_t)atomic_load(&srv->requests),
                  "waiting", atomic_load(&srv->waiting), "gone",
                  (json_int_t)atomic_load(&srv->gone), "held", atomic_load(&srv->held)));
    char *text = json_dumps(doc, JSON_INDENT(2) | JSON_REAL_PRECISION(15));
    json_decref(doc);
    *len = strlen(text);
    text = xrealloc(text, *len + 2);
    text[(*len)++] = '\n';
    text[*len] = '\0';
    return text;
}

static enum MHD_Result has_ls(void *cls, enum MHD_ValueKind kind, const char *key,
                              const char *value)
{
    (void)kind;
    (void)value;
    if (strcmp(key, "ls") != 0)
        return MHD_YES;
    *(bool *)cls = true;
    return MHD_NO;
}

/* True when the query names "ls" (`/?ls`: the root's listing, / being the status page). */
static bool asks_listing(struct MHD_Connection *c)
{
    bool ls = false;
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, has_ls, &ls);
    return ls;
}

static enum MHD_Result answer_node(struct sreq *q, const char *url)
{
    struct server *srv = q->srv;
    struct MHD_Connection *c = q->conn;
    size_t len;
    bool listings = srv->o->listings;
    if (strcmp(url, PAGE_URL) == 0 && !(listings && asks_listing(c))) {
        char *page = serve_page(srv->set, listings, &len);
        return serve_buf(srv, c, page, len, "text/html; charset=utf-8");
    }
    char *path = NULL;
    uint64_t hold;
    if (resolve(srv->ns, url, &q->node, &path, listings ? &hold : NULL) < 0 ||
        (q->node.kind == NS_DIR && !listings))
        return serve_text(srv, c, MHD_HTTP_NOT_FOUND, "not found\n");
    if (q->node.kind == NS_DIR) { /* --listings */
        enum MHD_Result r = url[strlen(url) - 1] == '/' ? serve_listing(srv, c, q->node.ino, url)
                                                        : serve_redirect_dir(srv, c, url);
        if (hold)
            ns_forget(srv->ns, hold, 1);
        return r;
    }
    switch (q->node.kind) {
    case NS_META: {
        char *copy = xmalloc(q->node.len + 1);
        memcpy(copy, q->node.text, q->node.len);
        return serve_buf(srv, c, copy, q->node.len, content_type(url));
    }
    case NS_STATUS: {
        char *text = status_text(srv, &len);
        return serve_buf(srv, c, text, len, "application/json");
    }
    case NS_GEN: {
        char *text = arrayset_generated(srv->set, q->node.chunk, &len);
        return serve_buf(srv, c, text, len, content_type(url));
    }
    case NS_INPUT: {
        if (!q->node.live) { /* a remote image's file (ome = labels): its URL */
            free(path);
            return send_remote_input(srv, c, q->node.text, url);
        }
        enum MHD_Result r = send_input(srv, c, path);
        free(path);
        return r;
    }
    case NS_CHUNK:
    case NS_TABLE:
        if (!ask(q))
            return MHD_YES; /* suspended: the engine's callback resumes it */
        return answer_asked(q);
    default:
        return serve_text(srv, c, MHD_HTTP_NOT_FOUND, "not found\n");
    }
}

/* ---- requests ---- */

static bool token_ok(const struct server *srv, struct MHD_Connection *c)
{
    if (!srv->o->token)
        return true;
    const char *h = serve_header(c, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return false;
    const char *given = h + 7, *want = srv->o->token;
    size_t n = strlen(want), m = strlen(given);
    unsigned diff = (unsigned)(n != m);
    for (size_t i = 0; i < n; i++) /* in time independent of where they differ */
        diff |= (unsigned)(want[i] ^ (i < m ? given[i] : 0));
    return diff == 0;
}

static enum MHD_Result preflight(struct server *srv, struct MHD_Connection *c)
{
    if (!serve_cors_origin(srv, c))
        return serve_text(srv, c, MHD_HTTP_FORBIDDEN, "origin not allowed\n");
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, HEAD, OPTIONS");
    const char *asked = serve_header(c, "Access-Control-Request-Headers");
    MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                            asked ? asked : "Range, Authorization, If-None-Match");
    MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    return serve_reply(srv, c, MHD_HTTP_NO_CONTENT, resp);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    (void)version;
    (void)upload_data;
    struct server *srv = cls;
    struct sreq *q = *con_cls;
    if (!q) { /* the headers are in: answered at the next call, once the request is whole (an
                 answer queued now would close the connection: no keep-alive) */
        q = xcalloc(1, sizeof *q);
        q->srv = srv;
        q->conn = c;
        q->fd = -1;
        q->refs = 1;
        *con_cls = q;
        return MHD_YES;
    }
    if (*upload_data_size) { /* a body: read and dropped, the method is refused below */
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (q->gone) /* resumed because the client went away: close */
        return MHD_NO;
    if (q->asked) { /* resumed: the engine answered */
        pthread_rwlock_rdlock(&srv->run);
        enum MHD_Result r = answer_asked(q);
        pthread_rwlock_unlock(&srv->run);
        return r;
    }
    if (strcmp(method, "OPTIONS") == 0)
        return preflight(srv, c);
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        struct MHD_Response *resp =
            MHD_create_response_from_buffer(10, (void *)"read-only\n", MHD_RESPMEM_PERSISTENT);
        MHD_add_response_header(resp, "Allow", "GET, HEAD, OPTIONS");
        return serve_reply(srv, c, MHD_HTTP_METHOD_NOT_ALLOWED, resp);
    }
    if (!token_ok(srv, c)) {
        struct MHD_Response *resp =
            MHD_create_response_from_buffer(14, (void *)"unauthorized\n\n", MHD_RESPMEM_PERSISTENT);
        MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
        return serve_reply(srv, c, MHD_HTTP_UNAUTHORIZED, resp);
    }
    log_debug("serve: %s %s", method, url);
    pthread_rwlock_rdlock(&srv->run);
    enum MHD_Result r = srv->stopping
                            ? serve_text(srv, c, MHD_HTTP_SERVICE_UNAVAILABLE, "stopping\n")
                            : answer_node(q, url);
    pthread_rwlock_unlock(&srv->run);
    return r;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    (void)toe;
    struct sreq *q = *con_cls;
    if (!q)
        return;
    struct server *srv = q->srv;
    if (q->counted)
        atomic_fetch_sub(&srv->waiting, 1);
    if (!q->gone)
        atomic_fetch_add(&srv->requests, 1);
    pthread_mutex_lock(&srv->lock);
    bool last = unref(q);
    pthread_mutex_unlock(&srv->lock);
    if (last)
        sreq_free(q);
    *con_cls = NULL;
}

/* ---- clients that go away while they wait ---- */

/* A suspended connection's socket is not watched by libmicrohttpd: every WATCH_MS this thread
 * looks for those whose client hung up, and resumes them to be closed. A chunk's request is
 * withdrawn from its engine (arrayset_withdraw_chunk): a chunk nobody else waits for is demanded
 * no longer, and not made at all when none of its ROIs has started. An answer already on its
 * way (or a table's) goes to nobody. */
#define WATCH_MS  100
#define WATCH_MAX 1024

static void *watch_gone(void *arg)
{
    struct server *srv = arg;
    struct pollfd fds[WATCH_MAX];
    struct sreq *qs[WATCH_MAX];
    for (;;) {
        pthread_mutex_lock(&srv->lock);
        bool stop = srv->stopping;
        size_t n = 0;
        for (struct sreq *q = srv->suspended; q && n < WATCH_MAX; q = q->next) {
            const union MHD_ConnectionInfo *ci =
                MHD_get_connection_info(q->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
            if (!ci)
                continue;
            fds[n] = (struct pollfd){.fd = ci->connect_fd, .events = POLLRDHUP};
            qs[n++] = q;
        }
        pthread_mutex_unlock(&srv->lock);
        if (stop)
            return NULL;
        if (n == 0 || poll(fds, n, 0) <= 0) {
            usleep(WATCH_MS * 1000);
            continue;
        }
        pthread_mutex_lock(&srv->lock);
        for (size_t i = 0; i < n; i++) {
            if (!(fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR)))
                continue;
            struct sreq *q = srv->suspended; /* still suspended (not answered meanwhile)? */
            while (q && q != qs[i])
                q = q->next;
            if (!q)
                continue;
            q->gone = true;
            unlist(srv, q);
            atomic_fetch_add(&srv->gone, 1);
            /* The engine's lock is taken under srv->lock, never the other way round: the
             * engine calls back outside its lock. The connection's reference stays until
             * on_completed, after the resume below: the engine's is never the last. */
            if (q->node.kind == NS_CHUNK && arrayset_withdraw_chunk(srv->set, (size_t)q->node.array,
                                                                    q->node.chunk, chunk_cb, q)) {
                atomic_fetch_sub(&srv->held, 1);
                (void)unref(q);
            }
            log_debug("serve: a client waiting for chunk %llu went away",
                      (unsigned long long)q->node.chunk);
            MHD_resume_connection(q->conn);
        }
        pthread_mutex_unlock(&srv->lock);
        usleep(WATCH_MS * 1000);
    }
}

/* ---- the server ---- */

int serve_parse_listen(const char *text, struct sockaddr_storage *sa)
{
    memset(sa, 0, sizeof *sa);
    const char *colon = strrchr(text, ':');
    if (!colon || colon == text)
        return -EINVAL;
    uint64_t port;
    if (parse_u64(colon + 1, &port) < 0 || port > 65535)
        return -EINVAL;
    char host[64];
    size_t n = (size_t)(colon - text);
    if (text[0] == '[') { /* [V6]:PORT */
        if (n < 3 || text[n - 1] != ']')
            return -EINVAL;
        text++;
        n -= 2;
    }
    if (n >= sizeof host)
        return -EINVAL;
    memcpy(host, text, n);
    host[n] = '\0';
    struct sockaddr_in *v4 = (struct sockaddr_in *)sa;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)sa;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        return 0;
    }
    if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        return 0;
    }
    return -EINVAL;
}

/* "http://127.0.0.1:8080/" of the daemon's listening socket. */
static void say_where(struct server *srv)
{
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(srv->d, MHD_DAEMON_INFO_LISTEN_FD);
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (info && getsockname(info->listen_fd, (struct sockaddr *)&sa, &sl) == 0) {
        if (sa.ss_family == AF_INET6) {
            struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&sa;
            inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof host);
            port = ntohs(v6->sin6_port);
        } else {
            struct sockaddr_in *v4 = (struct sockaddr_in *)&sa;
            inet_ntop(AF_INET, &v4->sin_addr, host, sizeof host);
            port = ntohs(v4->sin_port);
        }
    }
    bool v6 = sa.ss_family == AF_INET6;
    fprintf(stderr, "roifs: serving %s://%s%s%s:%u/\n", srv->o->tls_cert ? "https" : "http",
            v6 ? "[" : "", host, v6 ? "]" : "", port);
    log_info("serving on %s%s%s:%u", v6 ? "[" : "", host, v6 ? "]" : "", port);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n')
        msg[--n] = '\0';
    log_warn("http: %s", msg);
}

int serve_run(struct arrayset *s, const struct serve_opts *o, struct errbuf *err)
{
    struct server srv = {.set = s, .ns = arrayset_tree(s), .o = o};
    pthread_rwlock_init(&srv.run, NULL);
    pthread_mutex_init(&srv.lock, NULL);
    int r = arrayset_start(s, err);
    if (r < 0) {
        pthread_rwlock_destroy(&srv.run);
        pthread_mutex_destroy(&srv.lock);
        return r;
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ERROR_LOG | (o->addr.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0) |
                     (o->tls_cert ? MHD_USE_TLS : 0);
    struct MHD_OptionItem tls[] = {
        {o->tls_cert ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, 0, (void *)o->tls_cert},
        {MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)o->tls_key},
        {MHD_OPTION_END, 0, NULL}};
    srv.d = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, &srv, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
        MHD_OPTION_SOCK_ADDR, &o->addr, MHD_OPTION_THREAD_POOL_SIZE,
        (unsigned)(o->threads > 0 ? o->threads : 1), MHD_OPTION_NOTIFY_COMPLETED, on_completed,
        &srv, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)300, MHD_OPTION_ARRAY, tls, MHD_OPTION_END);
    if (!srv.d) {
        arrayset_stop(s);
        pthread_rwlock_destroy(&srv.run);
        pthread_mutex_destroy(&srv.lock);
        return err_set(err, -EADDRNOTAVAIL,
                       "cannot listen there (address in use, not this host's, or a TLS "
                       "certificate or key libmicrohttpd refused)");
    }
    say_where(&srv);
    int wr = pthread_create(&srv.watcher, NULL, watch_gone, &srv);
    if (wr != 0)
        log_warn("serve: no watch of clients that go away while they wait: %s", strerror(wr));
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    int sig = 0;
    while (sigwait(&stop, &sig) != 0)
        ;
    log_info("signal %d: stopping", sig);
    /* No request uses an engine from here on; the engines' stop answers every request still
     * waiting (suspended connections are resumed with an error), then the server stops. */
    pthread_rwlock_wrlock(&srv.run);
    pthread_mutex_lock(&srv.lock);
    srv.stopping = true;
    pthread_mutex_unlock(&srv.lock);
    pthread_rwlock_unlock(&srv.run);
    if (wr == 0)
        pthread_join(srv.watcher, NULL);
    arrayset_stop(s);
    /* The requests the engines' stop resumed get their 503 before the connections close. */
    int64_t until = clock_ns(CLOCK_MONOTONIC) + STOP_ANSWER_NS;
    while (atomic_load(&srv.waiting) > 0 && clock_ns(CLOCK_MONOTONIC) < until)
        usleep(10000);
    /* libmicrohttpd aborts a stop with connections still suspended: any left (nothing
     * answered them) are closed as if their clients had gone. */
    pthread_mutex_lock(&srv.lock);
    while (srv.suspended) {
        struct sreq *q = srv.suspended;
        q->gone = true;
        unlist(&srv, q);
        MHD_resume_connection(q->conn);
    }
    pthread_mutex_unlock(&srv.lock);
    MHD_stop_daemon(srv.d);
    pthread_rwlock_destroy(&srv.run);
    pthread_mutex_destroy(&srv.lock);
    return 0;
}
