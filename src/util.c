/* util.c: error buffers, logging and small file helpers shared by every part of roifs. */
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "atomic_file.h"

int err_set(struct errbuf *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* Puts "prefix: " before the message already in err. */
static void prepend(struct errbuf *err, const char *prefix)
{
    size_t n = strnlen(prefix, sizeof err->msg / 2), cap = sizeof err->msg;
    size_t keep = strnlen(err->msg, cap - 1);
    if (n + 2 + keep > cap - 1)
        keep = cap - 1 - n - 2;
    memmove(err->msg + n + 2, err->msg, keep);
    err->msg[n + 2 + keep] = '\0';
    memcpy(err->msg, prefix, n);
    err->msg[n] = ':';
    err->msg[n + 1] = ' ';
}

int err_prefix(struct errbuf *err, int code, const char *fmt, ...)
{
    if (err) {
        char prefix[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(prefix, sizeof prefix, fmt, ap);
        va_end(ap);
        prepend(err, prefix);
    }
    return code;
}

int err_vat(struct errbuf *err, int code, const char *file, int line, const char *fmt, va_list ap)
{
    if (err) {
        char msg[768]; /* room for the place before it */
        vsnprintf(msg, sizeof msg, fmt, ap);
        if (line > 0)
            snprintf(err->msg, sizeof err->msg, "%s:%d: %s", file, line, msg);
        else
            snprintf(err->msg, sizeof err->msg, "%s: %s", file, msg);
    }
    return code;
}

int err_at(struct errbuf *err, int code, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err_vat(err, code, file, line, fmt, ap);
    va_end(ap);
    return code;
}

int err_prefix_at(struct errbuf *err, int code, const char *file, int line, const char *fmt, ...)
{
    if (err) {
        char what[256], prefix[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof what, fmt, ap);
        va_end(ap);
        if (line > 0)
            snprintf(prefix, sizeof prefix, "%s:%d: %s", file, line, what);
        else
            snprintf(prefix, sizeof prefix, "%s: %s", file, what);
        prepend(err, prefix);
    }
    return code;
}

/* ---- logging ---- */

enum log_sink { SINK_STDERR, SINK_FILE, SINK_SYSLOG };
static enum log_sink log_sink = SINK_STDERR;
static FILE *log_file;
static bool log_debug_on;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

void log_open_stderr(bool debug)
{
    log_sink = SINK_STDERR;
    log_debug_on = debug;
}

int log_open_file(const char *path, bool debug)
{
    /* 0600 whatever the umask: the log names files and carries processors' stderr */
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    FILE *f = fd >= 0 ? fdopen(fd, "a") : NULL;
    if (!f) {
        int e = -errno;
        if (fd >= 0)
            close(fd);
        return e;
    }
    setvbuf(f, NULL, _IOLBF, 0);
    log_file = f;
    log_sink = SINK_FILE;
    log_debug_on = debug;
    return 0;
}

void log_open_syslog(bool debug)
{
    openlog("roifs", LOG_PID, LOG_DAEMON);
    log_sink = SINK_SYSLOG;
    log_debug_on = debug;
}

bool log_debug_enabled(void)
{
    return log_debug_on;
}

void log_msg(enum log_level lvl, const char *fmt, ...)
{
    static const char *const names[] = {"error", "warning", "info", "debug"};
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (log_sink == SINK_SYSLOG) {
        static const int prio[] = {LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG};
        syslog(prio[lvl], "%s", line);
        return;
    }
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    localtime_r(&ts.tv_sec, &tm);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%H:%M:%S", &tm);
    pthread_mutex_lock(&log_lock);
    FILE *f = log_sink == SINK_FILE && log_file ? log_file : stderr;
    fprintf(f, "roifs[%ld] %s.%03ld %s: %s\n", (long)getpid(), stamp, ts.tv_nsec / 1000000,
            names[lvl], line);
    fflush(f);
    pthread_mutex_unlock(&log_lock);
}

/* ---- allocation ---- */

static void oom(void)
{
    fputs("roifs: out of memory\n", stderr);
    abort();
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        oom();
    return p;
}

void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        oom();
    return p;
}

void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p)
        oom();
    return p;
}

char *xstrdup(const char *s)
{
    char *p = strdup(s);
    if (!p)
        oom();
    return p;
}

char *xasprintf(const char *fmt, ...)
{
    va_list ap;
    char *s;
    va_start(ap, fmt);
    int r = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (r < 0)
        oom();
    return s;
}

/* ---- files ---- */

int file_read_max(int dirfd, const char *path, size_t max, char **data, size_t *len)
{
    /* O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below) */
    int fd = openat(dirfd, path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    int r = fstat(fd, &st) < 0 ? -errno : 0;
    if (r == 0 && S_ISDIR(st.st_mode))
        r = -EISDIR;
    else if (r == 0 && !S_ISREG(st.st_mode)) /* a FIFO, a device such as /dev/zero, ... */
        r = FILE_ERR_NOT_REGULAR;
    else if (r == 0 && (uint64_t)st.st_size > max)
        r = -EFBIG;
    if (r < 0) {
        close(fd);
        return r;
    }
    /* Read up to max + 1 bytes whatever st_size says: a file may grow while it is read, and
     * some (in /proc) report size 0. */
    size_t cap = st.st_size > 0 ? (size_t)st.st_size + 1 : 4096, n = 0;
    if (cap > max)
        cap = max < SIZE_MAX ? max + 1 : max;
    char *buf = xmalloc(cap + 1);
    for (;;) {
        if (n == cap) {
            if (cap > max) {
                r = -EFBIG;
                break;
            }
            cap = cap <= max / 2 ? cap * 2 : max < SIZE_MAX ? max + 1 : max;
            buf = xrealloc(buf, cap + 1);
        }
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            r = -errno;
            break;
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    close(fd);
    if (r == 0 && n > max)
        r = -EFBIG;
    if (r < 0) {
        free(buf);
        return r;
    }
    buf[n] = '\0';
    *data = buf;
    if (len)
        *len = n;
    return 0;
}

int file_read_all_at(int dirfd, const char *path, char **data, size_t *len)
{
    return file_read_max(dirfd, path, FILE_READ_MAX, data, len);
}

int file_read_all(const char *path, char **data, size_t *len)
{
    return file_read_all_at(AT_FDCWD, path, data, len);
}

int file_read_optional(const char *dir, const char *name, char **data, size_t *len,
                       struct errbuf *err)
{
    char *p = path_join(dir, name);
    int r = file_read_all(p, data, len);
    if (r == -ENOENT || r == -ENOTDIR) {
        *data = NULL;
        r = 0;
    } else if (r < 0) {
        r = err_set(err, -EINVAL, "%s: %s", p, file_strerror(r));
    }
    free(p);
    return r;
}

const char *file_strerror(int rc)
{
    if (rc == FILE_ERR_NOT_REGULAR)
        return "not a regular file";
    if (rc == -EFBIG)
        return "too large (more than 64 MiB)";
    return strerror(-rc);
}

int write_full(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int pread_full(int fd, void *buf, size_t n, uint64_t off, size_t *got)
{
    char *p = buf;
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, p + done, n - done, (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            break;
        done += (size_t)r;
    }
    if (got)
        *got = done;
    return 0;
}

int file_write_atomic(int dirfd, const char *name, const void *data, size_t len, bool durable)
{
    struct atomic_file a;
    int r = atomic_begin(&a, dirfd, name, NULL, ".tmp.", 0600);
    if (r < 0)
        return r;
    r = write_full(a.fd, data, len);
    if (r == 0)
        r = atomic_commit(&a, durable ? ATOMIC_FSYNC : 0);
    if (r < 0)
        atomic_abort(&a);
    return r;
}

int mkdir_p(const char *path, unsigned mode)
{
    char *p = xstrdup(path);
    int r = 0;
    for (char *s = p + 1;; s++) {
        if (*s == '/' || *s == '\0') {
            char c = *s;
            *s = '\0';
            if (mkdir(p, mode) < 0 && errno != EEXIST) {
                r = -errno;
                break;
            }
            *s = c;
            if (c == '\0')
                break;
        }
    }
    free(p);
    if (r == 0) {
        struct stat st;
        if (stat(path, &st) < 0)
            r = -errno;
        else if (!S_ISDIR(st.st_mode))
            r = -ENOTDIR;
    }
    return r;
}

char *path_join(const char *dir, const char *rel)
{
    if (rel[0] == '/')
        return xstrdup(rel);
    size_t n = strlen(dir);
    return xasprintf("%s%s%s", dir, n && dir[n - 1] == '/' ? "" : "/", rel);
}

char *path_dirname(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return xstrdup(".");
    if (slash == path)
        return xstrdup("/");
    return strndup(path, (size_t)(slash - path));
}

char *path_absolute(const char *path)
{
    char *r = realpath(path, NULL);
    if (r)
        return r;
    if (path[0] == '/')
        return xstrdup(path);
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd))
        return xstrdup(path);
    return path_join(cwd, path);
}

uint64_t mem_physical_bytes(void)
{
    /* asked once per ROI when lists are checked: sysconf is a system call (sysinfo) each time,
     * a quarter of a second for 100,000 ROIs */
    static _Atomic uint64_t known;
    uint64_t bytes = known;
    if (bytes)
        return bytes;
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || size <= 0 || __builtin_mul_overflow((uint64_t)pages, (uint64_t)size, &bytes))
        bytes = (uint64_t)1 << 40;
    known = bytes;
    return bytes;
}

int64_t clock_ns(clockid_t clk)
{
    struct timespec t;
    clock_gettime(clk, &t);
    return ts_to_ns(t);
}

struct timespec deadline_in(clockid_t clk, struct timespec d)
{
    struct timespec now;
    clock_gettime(clk, &now);
    return ts_add(now, d);
}

double now_monotonic(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

DIR *opendir_at(int dirfd, const char *rel)
{
    int fd = openat(dirfd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d && fd >= 0) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return d;
}

void cond_init_monotonic(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
}

/* ---- parsing ---- */

static const char *skip_ws(const char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    return s;
}

/* strtoull or strtoll over the whole of s (blanks around allowed, a sign only when signed);
 * the result is stored only on success. */
static int parse_integer(const char *s, bool is_signed, uint64_t *u, int64_t *i)
{
    s = skip_ws(s);
    const char *d = is_signed && (*s == '-' || *s == '+') ? s + 1 : s;
    if (*d < '0' || *d > '9')
        return -EINVAL;
    char *end;
    errno = 0;
    long long iv = is_signed ? strtoll(s, &end, 10) : 0;
    unsigned long long uv = is_signed ? 0 : strtoull(s, &end, 10);
    if (errno == ERANGE)
        return -ERANGE;
    end = (char *)skip_ws(end);
    if (*end)
        return -EINVAL;
    if (is_signed)
        *i = iv;
    else
        *u = uv;
    return 0;
}

int parse_u64(const char *s, uint64_t *out)
{
    return parse_integer(s, false, out, NULL);
}

int parse_i64(const char *s, int64_t *out)
{
    return parse_integer(s, true, NULL, out);
}

int parse_double(const char *s, double *out)
{
    s = skip_ws(s);
    if (!*s)
        return -EINVAL;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s)
        return -EINVAL;
    end = (char *)skip_ws(end);
    if (*end)
        return -EINVAL;
    if (errno == ERANGE && isinf(v))
        return -ERANGE;
    *out = v;
    return 0;
}

int parse_u64_list(const char *s, uint64_t *out, int max)
{
    int n = 0;
    const char *p = s;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[64];
        if (len >= sizeof item || n >= max)
            return -EINVAL;
        memcpy(item, p, len);
        item[len] = '\0';
        if (parse_u64(item, &out[n]) < 0)
            return -EINVAL;
        n++;
        if (!comma)
            break;
        p = comma + 1;
    }
    return n;
}

int parse_size(const char *s, uint64_t *out)
{
    char buf[64];
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    if (n == 0 || n >= sizeof buf)
        return -EINVAL;
    memcpy(buf, s, n);
    buf[n] = '\0';
    /* a suffix K, M, G or T (either case): 2^10, 2^20, 2^30 or 2^40 */
    static const char suffixes[] = "KMGT";
    const char *sfx = strchr(suffixes, toupper((unsigned char)buf[n - 1]));
    uint64_t mult = 1;
    if (sfx && *sfx) {
        mult = 1ULL << (10 * (sfx - suffixes + 1));
        buf[n - 1] = '\0';
    }
    uint64_t v;
    int r = parse_u64(buf, &v);
    if (r < 0)
        return r;
    if (v > UINT64_MAX / mult)
        return -ERANGE;
    *out = v * mult;
    return 0;
}

uint64_t hash64(uint64_t h, const void *data, size_t len)
{
    return (uint64_t)XXH3_64bits_withSeed(data, len, (XXH64_hash_t)h);
}

uint64_t fnv64(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

void sb_append(struct strbuf *sb, const char *s, size_t n)
{
    if (sb->len + n + 1 > sb->cap) {
        size_t cap = sb->cap ? sb->cap : 256;
        while (cap < sb->len + n + 1)
            cap *= 2;
        sb->buf = xrealloc(sb->buf, cap);
        sb->cap = cap;
    }
    memcpy(sb->buf + sb->len, s, n);
    sb->len += n;
    sb->buf[sb->len] = '\0';
}

size_t u64_dec(char *buf, uint64_t v)
{
    char tmp[20];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        buf[i] = tmp[n - 1 - i];
    buf[n] = '\0';
    return n;
}

void sb_add_u64(struct strbuf *sb, uint64_t v)
{
    char buf[21];
    sb_append(sb, buf, u64_dec(buf, v));
}

void sb_printf(struct strbuf *sb, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof small) {
        sb_append(sb, small, (size_t)n);
        return;
    }
    char *big = xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb_append(sb, big, (size_t)n);
    free(big);
}

void sb_free(struct strbuf *sb)
{
    free(sb->buf);
    sb->buf = NULL;
    sb->len = sb->cap = 0;
}
