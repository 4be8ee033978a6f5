/* serve.c: `roifs serve`'s HTTP side (docs/serve.md). Each request resolves its URL in the
 * tree; a chunk is asked of its engine with engine_open_chunk, and when the engine does not
 * answer at once the connection is suspended (MHD_suspend_connection) and the engine's
 * callback resumes it, so that no server thread waits for a computation. Metadata, the status
 * and generated files are answered at once; the masking table's files wait the same way. */
#include "serve.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../arrays/otable.h"
#include "../task.h"
#include "../util.h"

#define PAGE_URL "/"
/* At a stop, how long the requests still waiting for a chunk have to receive their answer. */
#define STOP_ANSWER_NS 3000000000LL

struct server {
    struct arrayset *set;
    const struct ns *ns;
    const struct serve_opts *o;
    struct MHD_Daemon *d;
    pthread_rwlock_t run; /* read: a request using the engines; write: stopping them */
    bool stopping;        /* under run */
    atomic_int waiting;   /* requests that were suspended and are not answered yet */
};

/* One request's state (MHD's con_cls): what it asked for and, once the engine answered, the
 * answer. */
struct sreq {
    struct server *srv;
    struct MHD_Connection *conn;
    pthread_mutex_t lock;
    bool asked;     /* the engine (or the table) was asked */
    bool done;      /* it answered: err, fd, flags */
    bool suspended; /* the connection waits for that answer */
    bool counted;   /* in srv->waiting until it is completed */
    int err, fd;
    struct ns_node node;
};

/* ---- answers ---- */

static const char *header(struct MHD_Connection *c, const char *name)
{
    return MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
}

/* The origin allowed to read this answer (the request's Origin when --cors lists it), or
 * NULL. */
static const char *cors_origin(const struct server *srv, struct MHD_Connection *c)
{
    const char *list = srv->o->cors, *origin = header(c, "Origin");
    if (!list || !origin)
        return NULL;
    if (strcmp(list, "*") == 0)
        return "*";
    size_t n = strlen(origin);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len && (*p == ' '))
            p++, len--;
        while (len && p[len - 1] == ' ')
            len--;
        if (len == n && strncmp(p, origin, n) == 0)
            return origin;
        if (!end)
            break;
        p = end + 1;
    }
    return NULL;
}

/* Queues resp with status, after the headers every answer carries; destroys resp. */
static enum MHD_Result reply(struct server *srv, struct MHD_Connection *c, unsigned status,
                             struct MHD_Response *resp)
{
    const char *origin = cors_origin(srv, c);
    if (origin) {
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", origin);
        MHD_add_response_header(resp, "Access-Control-Expose-Headers",
                                "Content-Length, Content-Range, ETag, Accept-Ranges");
        if (strcmp(origin, "*") != 0)
            MHD_add_response_header(resp, "Vary", "Origin");
    }
    enum MHD_Result r = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return r;
}

static enum MHD_Result send_text(struct server *srv, struct MHD_Connection *c, unsigned status,
                                 const char *text)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(resp, "Content-Type", "text/plain; charset=utf-8");
    return reply(srv, c, status, resp);
}

/* Parses a single Range of a body of size bytes: 0 (whole body: no header or not one single
 * bytes range, which may be ignored), 1 (*off, *len set), or -1 (unsatisfiable: 416). */
static int parse_range(const char *h, uint64_t size, uint64_t *off, uint64_t *len)
{
    if (!h || strncmp(h, "bytes=", 6) != 0 || strchr(h, ','))
        return 0;
    const char *p = h + 6;
    char *end;
    if (*p == '-') { /* suffix: the last N bytes */
        errno = 0;
        unsigned long long n = strtoull(p + 1, &end, 10);
        if (errno || end == p + 1 || *end)
            return 0;
        if (n == 0 || size == 0)
            return -1;
        *len = n < size ? n : size;
        *off = size - *len;
        return 1;
    }
    if (*p < '0' || *p > '9')
        return 0;
    errno = 0;
    unsigned long long a = strtoull(p, &end, 10), b = UINT64_MAX;
    if (errno || *end != '-')
        return 0;
    const char *q = end + 1;
    if (*q) {
        if (*q < '0' || *q > '9')
            return 0;
        b = strtoull(q, &end, 10);
        if (errno || *end || b < a)
            return 0;
    }
    if (a >= size)
        return -1;
    if (b >= size)
        b = size - 1;
    *off = a;
    *len = b - a + 1;
    return 1;
}

/* True when If-None-Match names etag (or is "*"). */
static bool etag_matches(const char *inm, const char *etag)
{
    if (!inm)
        return false;
    if (strcmp(inm, "*") == 0)
        return true;
    size_t n = strlen(etag);
    for (const char *p = strstr(inm, etag); p; p = strstr(p + 1, etag))
        if ((p == inm || p[-1] == ' ' || p[-1] == ',' || p[-1] == '/') &&
            (p[n] == '\0' || p[n] == ',' || p[n] == ' '))
            return true;
    return false;
}

/* Answers with the bytes of fd (taken: closed by MHD or here), honouring Range and, when etag
 * is not NULL, If-None-Match. */
static enum MHD_Result send_fd(struct server *srv, struct MHD_Connection *c, int fd,
                               const char *type, const char *etag)
{
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        return send_text(srv, c, MHD_HTTP_INTERNAL_SERVER_ERROR, strerror(e));
    }
    uint64_t size = (uint64_t)st.st_size, off = 0, len = size;
    struct MHD_Response *resp;
    unsigned status = MHD_HTTP_OK;
    char range[96];
    if (etag && etag_matches(header(c, "If-None-Match"), etag)) {
        close(fd);
        resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
        MHD_add_response_header(resp, "ETag", etag);
        return reply(srv, c, MHD_HTTP_NOT_MODIFIED, resp);
    }
    int r = parse_range(header(c, "Range"), size, &off, &len);
    if (r < 0) {
        close(fd);
        snprintf(range, sizeof range, "bytes */%llu", (unsigned long long)size);
        resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
        MHD_add_response_header(resp, "Content-Range", range);
        return reply(srv, c, MHD_HTTP_RANGE_NOT_SATISFIABLE, resp);
    }
    if (r > 0) {
        status = MHD_HTTP_PARTIAL_CONTENT;
        snprintf(range, sizeof range, "bytes %llu-%llu/%llu", (unsigned long long)off,
                 (unsigned long long)(off + len - 1), (unsigned long long)size);
    }
    resp = MHD_create_response_from_fd_at_offset64(len, fd, off);
    if (!resp) {
        close(fd);
        return MHD_NO;
    }
    if (r > 0)
        MHD_add_response_header(resp, "Content-Range", range);
    MHD_add_response_header(resp, "Accept-Ranges", "bytes");
    MHD_add_response_header(resp, "Content-Type", type);
    if (etag) {
        MHD_add_response_header(resp, "ETag", etag);
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
    }
    return reply(srv, c, status, resp);
}

/* The same for bytes in memory (buf taken: freed by MHD). */
static enum MHD_Result send_buf(struct server *srv, struct MHD_Connection *c, char *buf,
                                size_t size, const char *type)
{
    uint64_t off = 0, len = size;
    int r = parse_range(header(c, "Range"), size, &off, &len);
    char range[96];
    struct MHD_Response *resp;
    if (r < 0) {
        free(buf);
        snprintf(range, sizeof range, "bytes */%zu", size);
        resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
        MHD_add_response_header(resp, "Content-Range", range);
        return reply(srv, c, MHD_HTTP_RANGE_NOT_SATISFIABLE, resp);
    }
    if (r > 0) {
        memmove(buf, buf + off, (size_t)len);
        snprintf(range, sizeof range, "bytes %llu-%llu/%zu", (unsigned long long)off,
                 (unsigned long long)(off + len - 1), size);
    }
    resp = MHD_create_response_from_buffer((size_t)len, buf, MHD_RESPMEM_MUST_FREE);
    if (r > 0)
        MHD_add_response_header(resp, "Content-Range", range);
    MHD_add_response_header(resp, "Accept-Ranges", "bytes");
    MHD_add_response_header(resp, "Content-Type", type);
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    return reply(srv, c, r > 0 ? MHD_HTTP_PARTIAL_CONTENT : MHD_HTTP_OK, resp);
}

/* ---- chunks and tables: asked, then answered (maybe after a suspension) ---- */

static void answered(struct sreq *q, int err, int fd)
{
    pthread_mutex_lock(&q->lock);
    q->done = true;
    q->err = err;
    q->fd = fd;
    if (q->suspended) {
        q->suspended = false;
        MHD_resume_connection(q->conn);
    }
    pthread_mutex_unlock(&q->lock);
}

static void chunk_cb(void *ctx, int err, int fd, int flags)
{
    (void)flags;
    answered(ctx, err, err ? -1 : fd);
}

static void table_cb(void *ctx, int err)
{
    answered(ctx, err, -1);
}

/* The reasons of the failed ROIs of chunk id of array a, one line each. */
struct reasons {
    const uint32_t *rois;
    size_t n;
    char *text;
};

static void add_reason(void *ctx, size_t roi, const char *msg)
{
    struct reasons *r = ctx;
    for (size_t i = 0; i < r->n; i++)
        if (r->rois[i] == roi) {
            char *t = xasprintf("%sROI %zu failed: %s\n", r->text ? r->text : "", roi,
                                msg ? msg : "(no message kept)");
            free(r->text);
            r->text = t;
            return;
        }
}

static char *failure_reason(struct server *srv, const struct ns_node *n, int err)
{
    struct engine *e = arrayset_array(srv->set, (size_t)n->array)->engine;
    const struct task *t = engine_task(e);
    struct reasons r = {0};
    int64_t k = roi_index_find(t->index, n->chunk);
    if (k >= 0) {
        r.rois = roi_index_rois(t->index, (size_t)k, &r.n);
        engine_failed_rois(e, add_reason, &r);
    }
    if (!r.text) {
        char *ie = engine_input_error(e);
        r.text =
            xasprintf("chunk %llu: %s\n", (unsigned long long)n->chunk, ie ? ie : strerror(-err));
        free(ie);
    }
    return r.text;
}

/* Asks the engine (or the table) for q's node; true when the answer is there already. */
static bool ask(struct sreq *q)
{
    struct server *srv = q->srv;
    q->asked = true;
    if (q->node.kind == NS_CHUNK)
        engine_open_chunk(arrayset_array(srv->set, (size_t)q->node.array)->engine, q->node.chunk,
                          chunk_cb, q);
    else
        otable_request(arrayset_table(srv->set), table_cb, q);
    pthread_mutex_lock(&q->lock);
    bool done = q->done;
    if (!done) {
        q->suspended = true;
        q->counted = true;
        atomic_fetch_add(&srv->waiting, 1);
        MHD_suspend_connection(q->conn);
    }
    pthread_mutex_unlock(&q->lock);
    return done;
}

static enum MHD_Result answer_asked(struct sreq *q)
{
    struct server *srv = q->srv;
    struct MHD_Connection *c = q->conn;
    if (srv->stopping) /* the engines are gone */
        return send_text(srv, c, MHD_HTTP_SERVICE_UNAVAILABLE, "the server is stopping\n");
    if (q->err) {
        char *why = failure_reason(srv, &q->node, q->err);
        log_debug("serve: %s", why);
        enum MHD_Result r = send_text(srv, c, MHD_HTTP_INTERNAL_SERVER_ERROR, why);
        free(why);
        return r;
    }
    if (q->node.kind == NS_TABLE) {
        size_t len = 0;
        char *data = otable_copy(arrayset_table(srv->set), q->node.chunk, &len);
        if (!data)
            return send_text(srv, c, MHD_HTTP_NOT_FOUND, "not found\n");
        return send_buf(srv, c, data, len, "application/octet-stream");
    }
    int fd = q->fd;
    q->fd = -1;
    struct engine *e = arrayset_array(srv->set, (size_t)q->node.array)->engine;
    struct cache_chunk_meta meta;
    char etag[40] = "";
    if (cache_chunk_meta_of(engine_cache(e), q->node.chunk, fd, &meta) == 0) {
        char hex[33];
        key_hex(meta.key, hex);
        snprintf(etag, sizeof etag, "\"%s\"", hex);
    }
    return send_fd(srv, c, fd, "application/octet-stream", etag[0] ? etag : NULL);
}

/* ---- the tree ---- */

/* Resolves url ("/a/b/c") in the tree: 0 and *n, or -ENOENT. */
static int resolve(const struct ns *ns, const char *url, struct ns_node *n)
{
    if (url[0] != '/')
        return -ENOENT;
    uint64_t ino = NS_INO_ROOT;
    if (ns_get(ns, ino, n) < 0)
        return -ENOENT;
    const char *p = url + 1;
    while (*p) {
        const char *end = strchr(p, '/');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == 0 || len > 255 || n->kind != NS_DIR)
            return -ENOENT;
        char name[256];
        memcpy(name, p, len);
        name[len] = '\0';
        if (ns_lookup(ns, ino, name, n) < 0)
            return -ENOENT;
        if (n->live)
            ns_forget(ns, n->ino, 1); /* the lookup's hold: nothing keeps this node */
        ino = n->ino;
        if (!end)
            break;
        p = end + 1;
        if (!*p) /* a trailing slash: only directories, which are not served */
            return n->kind == NS_DIR ? -EISDIR : -ENOENT;
    }
    return 0;
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
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        if (fd >= 0)
            close(fd);
        return send_text(srv, c, MHD_HTTP_NOT_FOUND, "not found\n");
    }
    return send_fd(srv, c, fd, content_type(path), NULL);
}

static char *status_text(struct server *srv, size_t *len)
{
    json_t *doc = arrayset_status(srv->set);
    char *text = json_dumps(doc, JSON_INDENT(2) | JSON_REAL_PRECISION(15));
    json_decref(doc);
    *len = strlen(text);
    text = xrealloc(text, *len + 2);
    text[(*len)++] = '\n';
    text[*len] = '\0';
    return text;
}

static enum MHD_Result answer_node(struct sreq *q, const char *url)
{
    struct server *srv = q->srv;
    struct MHD_Connection *c = q->conn;
    size_t len;
    if (strcmp(url, PAGE_URL) == 0) {
        char *page = serve_page(srv->set, &len);
        return send_buf(srv, c, page, len, "text/html; charset=utf-8");
    }
    if (resolve(srv->ns, url, &q->node) < 0 || q->node.kind == NS_DIR)
        return send_text(srv, c, MHD_HTTP_NOT_FOUND, "not found\n");
    switch (q->node.kind) {
    case NS_META: {
        char *copy = xmalloc(q->node.len + 1);
        memcpy(copy, q->node.text, q->node.len);
        return send_buf(srv, c, copy, q->node.len, content_type(url));
    }
    case NS_STATUS: {
        char *text = status_text(srv, &len);
        return send_buf(srv, c, text, len, "application/json");
    }
    case NS_GEN: {
        char *text = arrayset_generated(srv->set, q->node.chunk, &len);
        return send_buf(srv, c, text, len, content_type(url));
    }
    case NS_INPUT:
        return send_input(srv, c, q->node.text);
    case NS_CHUNK:
    case NS_TABLE:
        if (!ask(q))
            return MHD_YES; /* suspended: the engine's callback resumes it */
        return answer_asked(q);
    default:
        return send_text(srv, c, MHD_HTTP_NOT_FOUND, "not found\n");
    }
}

/* ---- requests ---- */

static bool token_ok(const struct server *srv, struct MHD_Connection *c)
{
    if (!srv->o->token)
        return true;
    const char *h = header(c, "Authorization");
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
    if (!cors_origin(srv, c))
        return send_text(srv, c, MHD_HTTP_FORBIDDEN, "origin not allowed\n");
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, HEAD, OPTIONS");
    const char *asked = header(c, "Access-Control-Request-Headers");
    MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                            asked ? asked : "Range, Authorization, If-None-Match");
    MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    return reply(srv, c, MHD_HTTP_NO_CONTENT, resp);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    (void)version;
    (void)upload_data;
    struct server *srv = cls;
    struct sreq *q = *con_cls;
    if (*upload_data_size) /* a body: not ours to take */
        return send_text(srv, c, MHD_HTTP_METHOD_NOT_ALLOWED, "read-only\n");
    if (q && q->asked) { /* resumed: the engine answered */
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
        return reply(srv, c, MHD_HTTP_METHOD_NOT_ALLOWED, resp);
    }
    if (!token_ok(srv, c)) {
        struct MHD_Response *resp =
            MHD_create_response_from_buffer(14, (void *)"unauthorized\n\n", MHD_RESPMEM_PERSISTENT);
        MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
        return reply(srv, c, MHD_HTTP_UNAUTHORIZED, resp);
    }
    if (!q) {
        q = xcalloc(1, sizeof *q);
        q->srv = srv;
        q->conn = c;
        q->fd = -1;
        pthread_mutex_init(&q->lock, NULL);
        *con_cls = q;
    }
    log_debug("serve: %s %s", method, url);
    pthread_rwlock_rdlock(&srv->run);
    enum MHD_Result r = srv->stopping
                            ? send_text(srv, c, MHD_HTTP_SERVICE_UNAVAILABLE, "stopping\n")
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
    if (q->counted)
        atomic_fetch_sub(&q->srv->waiting, 1);
    if (q->fd >= 0)
        close(q->fd);
    pthread_mutex_destroy(&q->lock);
    free(q);
    *con_cls = NULL;
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
    int r = arrayset_start(s, err);
    if (r < 0) {
        pthread_rwlock_destroy(&srv.run);
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
        return err_set(err, -EADDRNOTAVAIL,
                       "cannot listen there (address in use, not this host's, or a TLS "
                       "certificate or key libmicrohttpd refused)");
    }
    say_where(&srv);
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
    srv.stopping = true;
    pthread_rwlock_unlock(&srv.run);
    arrayset_stop(s);
    /* The requests the engines' stop resumed get their 503 before the connections close. */
    int64_t until = clock_ns(CLOCK_MONOTONIC) + STOP_ANSWER_NS;
    while (atomic_load(&srv.waiting) > 0 && clock_ns(CLOCK_MONOTONIC) < until)
        usleep(10000);
    MHD_stop_daemon(srv.d);
    pthread_rwlock_destroy(&srv.run);
    return 0;
}
