/* reply.c: the answers of `roifs serve` (docs/serve.md): single and suffix byte ranges (206,
 * 416), ETag and If-None-Match (304), exact lengths (libmicrohttpd's Content-Length of the
 * body given), and the CORS headers of --cors on every answer. */
#include "serve_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util.h"

const char *serve_header(struct MHD_Connection *c, const char *name)
{
    return MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
}

const char *serve_cors_origin(const struct server *srv, struct MHD_Connection *c)
{
    const char *list = srv->o->cors, *origin = serve_header(c, "Origin");
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

enum MHD_Result serve_reply(struct server *srv, struct MHD_Connection *c, unsigned status,
                            struct MHD_Response *resp)
{
    const char *origin = serve_cors_origin(srv, c);
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

enum MHD_Result serve_text(struct server *srv, struct MHD_Connection *c, unsigned status,
                           const char *text)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(resp, "Content-Type", "text/plain; charset=utf-8");
    return serve_reply(srv, c, status, resp);
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

enum MHD_Result serve_fd(struct server *srv, struct MHD_Connection *c, int fd, const char *type,
                         const char *etag)
{
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        return serve_text(srv, c, MHD_HTTP_INTERNAL_SERVER_ERROR, strerror(e));
    }
    uint64_t size = (uint64_t)st.st_size, off = 0, len = size;
    struct MHD_Response *resp;
    unsigned status = MHD_HTTP_OK;
    char range[96];
    if (etag && etag_matches(serve_header(c, "If-None-Match"), etag)) {
        close(fd);
        resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
        MHD_add_response_header(resp, "ETag", etag);
        return serve_reply(srv, c, MHD_HTTP_NOT_MODIFIED, resp);
    }
    int r = parse_range(serve_header(c, "Range"), size, &off, &len);
    if (r < 0) {
        close(fd);
        snprintf(range, sizeof range, "bytes */%llu", (unsigned long long)size);
        resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
        MHD_add_response_header(resp, "Content-Range", range);
        return serve_reply(srv, c, MHD_HTTP_RANGE_NOT_SATISFIABLE, resp);
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
    return serve_reply(srv, c, status, resp);
}

enum MHD_Result serve_buf(struct server *srv, struct MHD_Connection *c, char *buf, size_t size,
                          const char *type)
{
    uint64_t off = 0, len = size;
    int r = parse_range(serve_header(c, "Range"), size, &off, &len);
    char range[96];
    struct MHD_Response *resp;
    if (r < 0) {
        free(buf);
        snprintf(range, sizeof range, "bytes */%zu", size);
        resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
        MHD_add_response_header(resp, "Content-Range", range);
        return serve_reply(srv, c, MHD_HTTP_RANGE_NOT_SATISFIABLE, resp);
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
    return serve_reply(srv, c, r > 0 ? MHD_HTTP_PARTIAL_CONTENT : MHD_HTTP_OK, resp);
}
