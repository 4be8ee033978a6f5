/* worker_wire.c: the worker protocol's wire format (docs/processors.md, The worker protocol): the
 * params object sent to worker and python processors, the JSON request line, the writes of request
 * and input, and the parsing of the reply line and output, with the protocol errors they can find.
 * The scheduling of a request (poll, deadlines, deaths) is in worker.c. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "worker_internal.h"

int proc_params_json(const struct config *cfg, char **out, struct errbuf *err)
{
    json_t *obj = json_object();
    for (int i = 0; i < cfg->nparams; i++) {
        const struct config_param *pm = &cfg->params[i];
        json_t *v = json_string(pm->value);
        if (!v || json_object_set_new(obj, pm->name, v) < 0) {
            json_decref(obj);
            return err_at(err, -EINVAL, cfg->path, pm->line, "param.%s: not valid UTF-8", pm->name);
        }
    }
    *out = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    return 0;
}

static void put_list(struct strbuf *sb, const char *key, const uint64_t *v, int n)
{
    sb_printf(sb, ", \"%s\": [", key);
    for (int i = 0; i < n; i++)
        sb_printf(sb, i ? ", %llu" : "%llu", (unsigned long long)v[i]);
    sb_append(sb, "]", 1);
}

/* The request line: numbers and dtype names need no escaping; params were encoded by
 * jansson once. */
void wire_build_request(const struct worker_pool *wp, const struct proc_request *rq,
                        struct strbuf *sb)
{
    char in_dt[8], out_dt[8];
    sb->len = 0;
    sb_printf(sb, "{\"roi\": %zu", rq->roi);
    put_list(sb, "start", rq->start, rq->ndim);
    put_list(sb, "stop", rq->stop, rq->ndim);
    put_list(sb, "in_start", rq->in_start, rq->ndim);
    put_list(sb, "in_shape", rq->in_shape, rq->ndim);
    sb_printf(sb, ", \"dtype\": \"%s\", \"out_dtype\": \"%s\", \"nbytes\": %zu, \"params\": ",
              dtype_typestr_le(&rq->in_dtype, in_dt), dtype_typestr_le(&rq->out_dtype, out_dt),
              rq->in_nbytes);
    sb_append(sb, wp->params_json, strlen(wp->params_json));
    if (rq->label) /* a masked ROI (docs/masks.md) */
        sb_printf(sb, ", \"label\": %llu", (unsigned long long)rq->label);
    sb_append(sb, "}\n", 2);
}

/* Bigger pipes for big arrays: fewer wakeups per ROI. */
void wire_size_pipes(struct worker *w, const struct proc_request *rq)
{
    size_t want = rq->in_nbytes > rq->out_nbytes ? rq->in_nbytes : rq->out_nbytes;
    if (want <= 65536 || w->pipe_size >= PIPE_SIZE || (size_t)w->pipe_size >= want)
        return;
    int size = want < PIPE_SIZE ? (int)want : PIPE_SIZE;
    int got = fcntl(w->in_fd, F_SETPIPE_SZ, size);
    fcntl(w->out_fd, F_SETPIPE_SZ, size);
    w->pipe_size = got > 0 ? got : PIPE_SIZE; /* do not retry a refusal at every ROI */
}

void wire_write_request(struct worker *w, struct exchange *x)
{
    while (x->to_write > 0) {
        int iovcnt = x->iov[0].iov_len ? 2 : 1;
        struct iovec *iov = x->iov[0].iov_len ? &x->iov[0] : &x->iov[1];
        ssize_t n = writev(w->in_fd, iov, iovcnt);
        if (n < 0) {
            if (errno != EAGAIN && errno != EINTR)
                x->in_closed = true; /* EPIPE: it stopped reading; its stdout will say why */
            if (errno != EINTR)
                return;
            continue;
        }
        x->to_write -= (size_t)n;
        for (int i = 0; i < 2 && n > 0; i++) {
            size_t k = (size_t)n < x->iov[i].iov_len ? (size_t)n : x->iov[i].iov_len;
            x->iov[i].iov_base = (char *)x->iov[i].iov_base + k;
            x->iov[i].iov_len -= k;
            n -= (ssize_t)k;
        }
    }
}

/* Shows the start of a bad header: printable ASCII, at most 60 characters. */
static const char *header_excerpt(const char *s, size_t len, char buf[72])
{
    size_t n = 0;
    for (size_t i = 0; i < len && n < 60; i++)
        buf[n++] = s[i] >= 32 && s[i] < 127 ? s[i] : '?';
    snprintf(buf + n, 72 - n, "%s", len > 60 ? "..." : "");
    return buf;
}

/* A protocol error: "worker PID broke the protocol: ..." in err. */
static enum outcome broken(const struct worker *w, struct errbuf *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static enum outcome broken(const struct worker *w, struct errbuf *err, const char *fmt, ...)
{
    char what[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    err_set(err, -EIO, "worker %d broke the protocol: %s", (int)w->pid, what);
    return OUT_BROKEN;
}

/* Parses the reply header hdr[0, len). */
static enum outcome parse_header(struct worker *w, struct exchange *x, size_t len,
                                 struct errbuf *err)
{
    char ex[72];
    json_error_t jerr;
    json_t *root = json_loadb(w->hdr, len, 0, &jerr), *ok = json_object_get(root, "ok");
    enum outcome rc = OUT_BROKEN;
    if (!json_is_boolean(ok)) {
        broken(w, err, "expected a JSON reply line with \"ok\", got '%s'",
               header_excerpt(w->hdr, len, ex));
    } else if (json_is_false(ok)) {
        const char *msg = json_string_value(json_object_get(root, "error"));
        err_set(err, -EIO, "%s", msg && *msg ? msg : "the worker reported an error");
        rc = OUT_REFUSED;
    } else {
        json_t *nb = json_object_get(root, "nbytes");
        if (!json_is_integer(nb))
            broken(w, err, "reply without nbytes: '%s'", header_excerpt(w->hdr, len, ex));
        else if ((uint64_t)json_integer_value(nb) != x->rq->out_nbytes ||
                 json_integer_value(nb) < 0)
            broken(w, err, "reply has nbytes %lld, expected %zu", (long long)json_integer_value(nb),
                   x->rq->out_nbytes);
        else
            rc = OUT_OK;
        x->ok = true;
    }
    json_decref(root);
    return rc;
}

/* More than the announced output: what the header allows is nbytes when ok, nothing else. */
static enum outcome sent_too_much(const struct worker *w, const struct exchange *x,
                                  struct errbuf *err)
{
    return broken(w, err, "sent more than the %zu bytes announced", x->ok ? x->rq->out_nbytes : 0);
}

/* The output after the header. */
static enum outcome read_output(struct worker *w, struct exchange *x)
{
    const struct proc_request *rq = x->rq;
    ssize_t n = read(w->out_fd, (char *)rq->out + x->out_got, rq->out_nbytes - x->out_got);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return OUT_MORE;
    if (n <= 0)
        return OUT_DIED;
    x->out_got += (size_t)n;
    return x->out_got == rq->out_nbytes ? OUT_OK : OUT_MORE;
}

enum outcome wire_read_reply(struct worker *w, struct exchange *x, struct errbuf *err)
{
    const struct proc_request *rq = x->rq;
    if (x->have_header)
        return read_output(w, x);
    ssize_t n = read(w->out_fd, w->hdr + w->hdr_len, HDR_MAX - w->hdr_len);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return OUT_MORE;
    if (n <= 0)
        return OUT_DIED;
    char *nl = memchr(w->hdr + w->hdr_len, '\n', (size_t)n);
    w->hdr_len += (size_t)n;
    if (!nl && w->hdr_len == HDR_MAX)
        return broken(w, err, "no reply line in its first %d bytes", HDR_MAX);
    if (!nl)
        return OUT_MORE;
    size_t hlen = (size_t)(nl - w->hdr), extra = w->hdr_len - hlen - 1;
    x->have_header = true;
    enum outcome rc = parse_header(w, x, hlen, err);
    if (rc != OUT_OK && rc != OUT_REFUSED)
        return rc;
    if (extra > (x->ok ? rq->out_nbytes : 0))
        return sent_too_much(w, x, err);
    memcpy(rq->out, nl + 1, extra);
    x->out_got = extra;
    if (rc == OUT_REFUSED)
        return rc;
    return x->out_got == rq->out_nbytes ? OUT_OK : OUT_MORE;
}

/* A finished reply: the whole request must have been read, and nothing may follow. */
enum outcome wire_check_complete(struct worker *w, struct exchange *x, enum outcome got,
                                 struct errbuf *err)
{
    if (x->to_write > 0) {
        char said[sizeof err->msg];
        snprintf(said, sizeof said, "%s", got == OUT_REFUSED ? err->msg : "");
        return broken(w, err, "replied before reading its input%s%.600s",
                      *said ? "; it said: " : "", said);
    }
    char c;
    ssize_t n = read(w->out_fd, &c, 1);
    if (n > 0)
        return sent_too_much(w, x, err);
    if (n == 0) /* it closed stdout after replying: this reply stands, the worker is done */
        w->retire = true;
    return got;
}
