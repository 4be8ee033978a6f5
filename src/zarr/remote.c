/* remote.c: the HTTP(S) client of remote inputs (libcurl). A pool of `connections` easy
 * handles sharing one connection cache, DNS cache and TLS sessions: a thread takes a handle,
 * so that at most `connections` requests are in flight, each on a kept-alive connection (HTTP/2
 * when the server offers it over TLS). A request that times out, is reset, gets a 5xx or a
 * body shorter than announced is tried again after an exponential backoff with jitter; a 404
 * is an absent object; other 4xx fail at once. The headers of headers_file go with every
 * request and appear in no message: messages name the URL (without any userinfo) and the
 * status only. */
#include "remote.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BACKOFF_BASE_MS 50
#define BACKOFF_MAX_MS  2000

static struct {
    pthread_mutex_t lock;
    pthread_cond_t idle_cv;
    bool configured;
    struct remote_opts o;
    char *ca_file;
    struct curl_slist *headers;
    CURLSH *share;
    pthread_mutex_t share_lock[CURL_LOCK_DATA_LAST];
    CURL **idle;
    int nidle, created;
    _Atomic uint64_t requests, retried, failed, unconfirmed;
} R = {.lock = PTHREAD_MUTEX_INITIALIZER, .idle_cv = PTHREAD_COND_INITIALIZER};

bool remote_is_url(const char *path)
{
    return path && (strncasecmp(path, "http://", 7) == 0 || strncasecmp(path, "https://", 8) == 0);
}

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *ctx)
{
    (void)h, (void)access, (void)ctx;
    pthread_mutex_lock(&R.share_lock[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *ctx)
{
    (void)h, (void)ctx;
    pthread_mutex_unlock(&R.share_lock[data]);
}

/* Reads headers_file's "Name: value" lines into *out; refused when group or others may read
 * it. No message quotes a line. */
static int load_headers(const char *path, struct curl_slist **out, struct errbuf *err)
{
    struct stat st;
    if (stat(path, &st) < 0)
        return err_set(err, -EINVAL, "[input] headers_file %s: %s", path, strerror(errno));
    if (st.st_mode & (S_IRGRP | S_IROTH | S_IWGRP | S_IWOTH))
        return err_set(err, -EINVAL,
                       "[input] headers_file %s: its group or others may read it (mode %04o): "
                       "chmod 600 it",
                       path, (unsigned)(st.st_mode & 07777));
    char *text;
    size_t size = 0;
    int r = file_read_all(path, &text, &size);
    if (r < 0)
        return err_set(err, -EINVAL, "[input] headers_file %s: %s", path, file_strerror(r));
    struct curl_slist *list = NULL;
    int n = 0;
    for (char *save, *line = strtok_r(text, "\r\n", &save); line;
         line = strtok_r(NULL, "\r\n", &save)) {
        n++;
        while (*line == ' ' || *line == '\t')
            line++;
        if (!*line || *line == '#')
            continue;
        const char *colon = strchr(line, ':');
        if (!colon || colon == line) {
            curl_slist_free_all(list);
            explicit_bzero(text, size);
            free(text);
            return err_set(err, -EINVAL, "[input] headers_file %s:%d: not a \"Name: value\" line",
                           path, n);
        }
        list = curl_slist_append(list, line);
    }
    explicit_bzero(text, size);
    free(text);
    *out = list;
    return 0;
}

int remote_configure(const struct remote_opts *o, struct errbuf *err)
{
    struct curl_slist *headers = NULL;
    if (o->headers_file) {
        int r = load_headers(o->headers_file, &headers, err);
        if (r < 0)
            return r;
    }
    pthread_mutex_lock(&R.lock);
    if (!R.configured) {
        curl_global_init(CURL_GLOBAL_DEFAULT);
        for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
            pthread_mutex_init(&R.share_lock[i], NULL);
        R.share = curl_share_init();
        curl_share_setopt(R.share, CURLSHOPT_LOCKFUNC, share_lock);
        curl_share_setopt(R.share, CURLSHOPT_UNLOCKFUNC, share_unlock);
        curl_share_setopt(R.share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
        curl_share_setopt(R.share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
        curl_share_setopt(R.share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
    }
    curl_slist_free_all(R.headers);
    R.headers = headers;
    free(R.ca_file);
    R.ca_file = o->ca_file ? xstrdup(o->ca_file) : NULL;
    R.o = *o;
    R.o.ca_file = R.o.headers_file = NULL;
    if (R.o.connections < 1)
        R.o.connections = 1;
    R.configured = true;
    pthread_mutex_unlock(&R.lock);
    return 0;
}

uint64_t remote_revalidate_ns(void)
{
    return (uint64_t)R.o.revalidate * 1000000000ULL;
}

static void ensure_configured(void)
{
    if (!R.configured) {
        struct remote_opts o = REMOTE_OPTS_DEFAULT;
        (void)remote_configure(&o, NULL);
    }
}

int remote_connections(void)
{
    ensure_configured();
    return R.o.connections;
}

/* A handle of the pool: at most `connections` are out at once. */
static CURL *take(void)
{
    pthread_mutex_lock(&R.lock);
    while (R.nidle == 0 && R.created >= R.o.connections)
        pthread_cond_wait(&R.idle_cv, &R.lock);
    CURL *h;
    if (R.nidle > 0) {
        h = R.idle[--R.nidle];
    } else {
        h = curl_easy_init();
        R.created++;
        R.idle = xrealloc(R.idle, (size_t)R.created * sizeof *R.idle);
    }
    pthread_mutex_unlock(&R.lock);
    return h;
}

/* A handle of the pool when one is free now (or may be made), else NULL: never waits, so
 * that a thread holding handles never waits for another's. */
static CURL *try_take(void)
{
    CURL *h = NULL;
    pthread_mutex_lock(&R.lock);
    if (R.nidle > 0) {
        h = R.idle[--R.nidle];
    } else if (R.created < R.o.connections) {
        h = curl_easy_init();
        R.created++;
        R.idle = xrealloc(R.idle, (size_t)R.created * sizeof *R.idle);
    }
    pthread_mutex_unlock(&R.lock);
    return h;
}

static void give_back(CURL *h)
{
    pthread_mutex_lock(&R.lock);
    R.idle[R.nidle++] = h;
    pthread_cond_signal(&R.idle_cv);
    pthread_mutex_unlock(&R.lock);
}

/* The URL as messages show it: without "user:password@". */
static void shown(const char *url, char *buf, size_t n)
{
    const char *s = strstr(url, "://"), *at = s ? strchr(s + 3, '@') : NULL;
    const char *slash = s ? strchr(s + 3, '/') : NULL;
    if (at && (!slash || at < slash))
        snprintf(buf, n, "%.*s%s", (int)(s + 3 - url), url, at + 1);
    else
        snprintf(buf, n, "%s", url);
}

/* One answer being received. */
struct answer {
    char *buf;
    size_t len, cap, max;
    bool too_large;
    uint64_t content_length, range_total, range_first, range_last;
    bool has_length, has_range;
    char etag[160], lastmod[80];
};

static size_t on_body(char *p, size_t size, size_t n, void *ctx)
{
    struct answer *a = ctx;
    size_t k = size * n;
    if (a->len + k > a->max) {
        a->too_large = true;
        return 0;
    }
    if (a->len + k + 1 > a->cap) {
        a->cap = (a->len + k + 1) * 2;
        a->buf = xrealloc(a->buf, a->cap);
    }
    memcpy(a->buf + a->len, p, k);
    a->len += k;
    return k;
}

/* Copies header value v (of n bytes, trimmed) into dst. */
static void header_value(const char *v, size_t n, char *dst, size_t cap)
{
    while (n && (*v == ' ' || *v == '\t'))
        v++, n--;
    while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' '))
        n--;
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, v, n);
    dst[n] = 0;
}

static size_t on_header(char *p, size_t size, size_t n, void *ctx)
{
    struct answer *a = ctx;
    size_t k = size * n;
    char v[160];
    if (k > 14 && strncasecmp(p, "HTTP/", 5) == 0) { /* a new answer (after a redirect) */
        a->has_length = a->has_range = false;
        a->etag[0] = a->lastmod[0] = 0;
    } else if (k > 5 && strncasecmp(p, "ETag:", 5) == 0) {
        header_value(p + 5, k - 5, a->etag, sizeof a->etag);
    } else if (k > 14 && strncasecmp(p, "Last-Modified:", 14) == 0) {
        header_value(p + 14, k - 14, a->lastmod, sizeof a->lastmod);
    } else if (k > 15 && strncasecmp(p, "Content-Length:", 15) == 0) {
        header_value(p + 15, k - 15, v, sizeof v);
        a->content_length = strtoull(v, NULL, 10);
        a->has_length = true;
    } else if (k > 14 && strncasecmp(p, "Content-Range:", 14) == 0) {
        header_value(p + 14, k - 14, v, sizeof v);
        unsigned long long f, l, t;
        if (sscanf(v, "bytes %llu-%llu/%llu", &f, &l, &t) == 3 && f <= l && l < t) {
            a->range_first = f, a->range_last = l, a->range_total = t;
            a->has_range = true;
        }
    }
    return k;
}

static bool transient(CURLcode c)
{
    switch (c) {
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
        return true;
    default:
        return false;
    }
}

static void backoff(int attempt)
{
    long ms = BACKOFF_BASE_MS << (attempt < 10 ? attempt : 10);
    if (ms > BACKOFF_MAX_MS)
        ms = BACKOFF_MAX_MS;
    unsigned seed = (unsigned)clock_ns(CLOCK_MONOTONIC) ^ (unsigned)(uintptr_t)&ms;
    ms = ms / 2 + (long)(rand_r(&seed) % (unsigned)(ms + 1)); /* jitter: [ms/2, 3ms/2] */
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void setup(CURL *h, const char *url, const char *range, bool head, struct curl_slist *hdrs,
                  struct answer *a)
{
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_SHARE, R.share);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
    if (R.ca_file)
        curl_easy_setopt(h, CURLOPT_CAINFO, R.ca_file);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, (long)R.o.request_timeout);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, (long)R.o.request_timeout);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L); /* never send the token elsewhere */
    curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, "identity");
    if (range)
        curl_easy_setopt(h, CURLOPT_RANGE, range);
    if (head)
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, a);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, a);
}

/* Of a 200 answering a range request: the range's bytes (the server ignored Range). */
static bool cut_range(struct answer *a, const char *range)
{
    unsigned long long f, l;
    uint64_t first, last;
    if (range[0] == '-' && sscanf(range + 1, "%llu", &l) == 1 && l > 0) {
        first = l >= a->len ? 0 : a->len - l;
        last = a->len - 1;
    } else if (sscanf(range, "%llu-%llu", &f, &l) == 2 && l < a->len && f <= l) {
        first = f, last = l;
    } else {
        return false;
    }
    memmove(a->buf, a->buf + first, last - first + 1);
    a->range_first = first, a->range_last = last, a->range_total = a->len;
    a->len = last - first + 1;
    a->has_range = true;
    return true;
}

/* The object's description from a complete answer. */
static void describe(const struct answer *a, long status, struct remote_obj *o)
{
    o->status = status;
    o->exists = true;
    o->length = a->has_range ? a->range_total : a->has_length ? a->content_length : a->len;
    snprintf(o->etag, sizeof o->etag, "%s", a->etag);
    uint64_t h = hash64(HASH64_INIT, "remote", 6);
    if (a->etag[0]) {
        o->sig = hash64(h, a->etag, strlen(a->etag));
    } else {
        h = hash64(h, a->lastmod, strlen(a->lastmod));
        o->sig = hash64(h, &o->length, sizeof o->length);
    }
}

/* The headers of one request (if_none_match: with a conditional one): R.headers, or a copy
 * in *extra (freed by the caller) with If-None-Match added. */
static struct curl_slist *request_headers(const char *inm, struct curl_slist **extra)
{
    *extra = NULL;
    if (!inm || !*inm)
        return R.headers;
    char line[200];
    snprintf(line, sizeof line, "If-None-Match: %s", inm);
    for (struct curl_slist *s = R.headers; s; s = s->next)
        *extra = curl_slist_append(*extra, s->data);
    return *extra = curl_slist_append(*extra, line);
}

/* The outcome of a request h made with curl's result c: 0, -EAGAIN (worth another), or
 * another -errno with err set. */
static int outcome(CURL *h, CURLcode c, const char *url, const char *range, bool head,
                   struct answer *a, struct remote_obj *o, struct errbuf *err)
{
    char u[1024];
    shown(url, u, sizeof u);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    o->status = status;
    if (a->too_large)
        return err_set(err, -EFBIG, "%s: larger than %zu bytes", u, a->max);
    if (c != CURLE_OK)
        return err_set(err, transient(c) ? -EAGAIN : -EIO, "%s: %s", u, curl_easy_strerror(c));
    if (status == 404 || status == 410)
        return -ENOENT;
    if (status >= 500 || status == 429 || status == 408)
        return err_set(err, -EAGAIN, "%s: HTTP %ld", u, status);
    if (status == 304) {
        o->exists = true;
        return 0;
    }
    if (status < 200 || status >= 300)
        return err_set(err, -EIO, "%s: HTTP %ld", u, status);
    if (!head && a->has_length && a->len != a->content_length) /* curl says so, but surely */
        return err_set(err, -EAGAIN, "%s: a body of %zu bytes, %llu announced", u, a->len,
                       (unsigned long long)a->content_length);
    if (!head && range && status == 200 && !cut_range(a, range))
        return err_set(err, -EIO, "%s: the range %s is outside the object", u, range);
    if (!head && range && status == 206 &&
        (!a->has_range || a->range_last - a->range_first + 1 != a->len))
        return err_set(err, -EAGAIN, "%s: a range of %zu bytes, not as announced", u, a->len);
    describe(a, status, o);
    return 0;
}

/* One attempt: 0, -EAGAIN (worth another), or another -errno with err set. */
static int attempt(CURL *h, const char *url, const char *range, bool head, const char *inm,
                   struct answer *a, struct remote_obj *o, struct errbuf *err)
{
    struct curl_slist *extra;
    setup(h, url, range, head, request_headers(inm, &extra), a);
    atomic_fetch_add(&R.requests, 1);
    CURLcode c = curl_easy_perform(h);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
    curl_slist_free_all(extra);
    return outcome(h, c, url, range, head, a, o, err);
}

int remote_request(const char *url, const char *range, bool head, const char *if_none_match,
                   size_t max, char **body, size_t *len, struct remote_obj *o, struct errbuf *err)
{
    ensure_configured();
    memset(o, 0, sizeof *o);
    CURL *h = take();
    int r = -EIO;
    struct answer a;
    for (int i = 0;; i++) {
        memset(&a, 0, sizeof a);
        a.max = max;
        r = attempt(h, url, range, head, if_none_match, &a, o, err);
        if (r != -EAGAIN || i >= R.o.retries)
            break;
        free(a.buf);
        atomic_fetch_add(&R.retried, 1);
        backoff(i);
    }
    give_back(h);
    if (r < 0 && r != -ENOENT)
        atomic_fetch_add(&R.failed, 1);
    if (r == -EAGAIN)
        r = err_prefix(err, -EIO, "after %d attempt%s", R.o.retries + 1, R.o.retries ? "s" : "");
    if (r < 0 || head || o->status == 304) {
        free(a.buf);
        return r;
    }
    if (!a.buf)
        a.buf = xmalloc(1);
    a.buf[a.len] = 0;
    *body = a.buf;
    *len = a.len;
    return 0;
}

int remote_read_text(const char *url, char **data, size_t *len, struct errbuf *err)
{
    struct remote_obj o;
    size_t n = 0;
    int r = remote_request(url, NULL, false, NULL, FILE_READ_MAX, data, &n, &o, err);
    if (r == 0 && len)
        *len = n;
    return r;
}

void remote_get_stats(struct remote_stats *st)
{
    st->requests = R.requests;
    st->retried = R.retried;
    st->failed = R.failed;
    st->unconfirmed = R.unconfirmed;
}

void remote_note_unconfirmed(void)
{
    atomic_fetch_add(&R.unconfirmed, 1);
}

void remote_fetch_many(const char *const *urls, const char *const *inm, size_t n, size_t max,
                       char **bodies, size_t *lens, struct remote_obj *objs, int *rcs,
                       struct errbuf *errs)
{
    ensure_configured();
    bool head = bodies == NULL;
    CURL *hs[REMOTE_BATCH_MAX];
    struct answer as[REMOTE_BATCH_MAX];
    struct curl_slist *extra[REMOTE_BATCH_MAX];
    if (n > REMOTE_BATCH_MAX)
        n = REMOTE_BATCH_MAX;
    size_t k = 0; /* the first request waits for a handle, the others only take free ones */
    for (hs[0] = take(), k = 1; k < n && (hs[k] = try_take()); k++)
        ;
    CURLM *multi = curl_multi_init();
    for (size_t i = 0; i < k; i++) {
        memset(&as[i], 0, sizeof as[i]);
        memset(&objs[i], 0, sizeof objs[i]);
        as[i].max = max;
        setup(hs[i], urls[i], NULL, head, request_headers(inm[i], &extra[i]), &as[i]);
        curl_easy_setopt(hs[i], CURLOPT_PRIVATE, (void *)(uintptr_t)i);
        curl_multi_add_handle(multi, hs[i]);
        atomic_fetch_add(&R.requests, 1);
    }
    int running = 1;
    while (running) {
        if (curl_multi_perform(multi, &running) != CURLM_OK)
            break;
        if (running)
            curl_multi_poll(multi, NULL, 0, 1000, NULL);
    }
    CURLMsg *msg;
    int left;
    bool done[REMOTE_BATCH_MAX] = {false};
    while ((msg = curl_multi_info_read(multi, &left))) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        void *priv = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &priv);
        size_t i = (size_t)(uintptr_t)priv;
        rcs[i] = outcome(hs[i], msg->data.result, urls[i], NULL, head, &as[i], &objs[i], &errs[i]);
        done[i] = true;
    }
    for (size_t i = 0; i < k; i++) {
        curl_multi_remove_handle(multi, hs[i]);
        curl_easy_setopt(hs[i], CURLOPT_HTTPHEADER, NULL);
        curl_slist_free_all(extra[i]);
        give_back(hs[i]);
        if (!done[i])
            rcs[i] = -EAGAIN;
        if (!head && rcs[i] == 0 && objs[i].status != 304) {
            if (!as[i].buf)
                as[i].buf = xmalloc(1);
            as[i].buf[as[i].len] = 0;
            bodies[i] = as[i].buf, lens[i] = as[i].len;
        } else {
            free(as[i].buf);
            if (!head)
                bodies[i] = NULL, lens[i] = 0;
        }
    }
    curl_multi_cleanup(multi);
    /* what the batch could not take, or must try again (with its backoff): one at a time */
    for (size_t i = 0; i < n; i++)
        if (i >= k || rcs[i] == -EAGAIN) {
            if (i < k)
                atomic_fetch_add(&R.retried, 1);
            char *b = NULL;
            size_t l = 0;
            rcs[i] = remote_request(urls[i], NULL, head, inm[i], max, &b, &l, &objs[i], &errs[i]);
            if (!head)
                bodies[i] = rcs[i] == 0 ? b : NULL, lens[i] = l;
        }
}

void remote_head_many(const char *const *urls, const char *const *inm, size_t n,
                      struct remote_obj *objs, int *rcs, struct errbuf *errs)
{
    remote_fetch_many(urls, inm, n, 0, NULL, NULL, objs, rcs, errs);
}
