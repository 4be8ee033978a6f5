/* util.h: error buffers, logging and small file helpers shared by every part of roifs. */
#ifndef ROIFS_UTIL_H
#define ROIFS_UTIL_H

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define ROIFS_MAX_DIM 32

/* A human-readable error message travelling with a negative errno return.
 * Functions that can fail return 0 or -errno and, on failure, fill *err. */
struct errbuf {
    char msg[1024];
};

/* Sets err->msg from fmt (err may be NULL) and returns code (a negative errno). */
int err_set(struct errbuf *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prepends "prefix: " to the message already in err; returns code. */
int err_prefix(struct errbuf *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The one form of a message about a place in a file: "FILE:LINE: message", or
 * "FILE: message" when line <= 0 (unknown or the whole file). Returns code. */
int err_at(struct errbuf *err, int code, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
int err_vat(struct errbuf *err, int code, const char *file, int line, const char *fmt, va_list ap)
    __attribute__((format(printf, 5, 0)));
/* Prepends "FILE:LINE: prefix: " (or "FILE: prefix: ") to the message already in err. */
int err_prefix_at(struct errbuf *err, int code, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Logging: to stderr (foreground), a file, or syslog. Thread-safe. */
enum log_level { LOG_LVL_ERROR, LOG_LVL_WARN, LOG_LVL_INFO, LOG_LVL_DEBUG };
void log_open_stderr(bool debug);
int log_open_file(const char *path, bool debug);
void log_open_syslog(bool debug);
bool log_debug_enabled(void);
void log_msg(enum log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define log_error(...) log_msg(LOG_LVL_ERROR, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_LVL_WARN, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_LVL_INFO, __VA_ARGS__)
#define log_debug(...)                                                                             \
    do {                                                                                           \
        if (log_debug_enabled())                                                                   \
            log_msg(LOG_LVL_DEBUG, __VA_ARGS__);                                                   \
    } while (0)

/* Allocation that aborts on out-of-memory: roifs cannot do anything sensible without memory. */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Reads a whole regular file (or a symlink to one), NUL-terminated for convenience (*len
 * excludes the NUL), of at most FILE_READ_MAX bytes: metadata, configurations, tables.
 * Returns 0 or -errno: -ENOENT when missing, -EISDIR for a directory, FILE_ERR_NOT_REGULAR for
 * anything else (a FIFO is refused without blocking, a device such as /dev/zero without
 * reading it) and -EFBIG when larger; file_strerror() says which. */
#define FILE_READ_MAX        ((size_t)64 << 20)
#define FILE_ERR_NOT_REGULAR (-EINVAL)
int file_read_all(const char *path, char **data, size_t *len);
int file_read_all_at(int dirfd, const char *path, char **data, size_t *len);
/* Reads dir/name as file_read_all does; *data NULL (and 0) when it does not exist. Any other
 * failure is -EINVAL with "DIR/NAME: why" in err. For optional metadata files. */
int file_read_optional(const char *dir, const char *name, char **data, size_t *len,
                       struct errbuf *err);
/* The same with another limit (SIZE_MAX: none, for files roifs wrote itself). */
int file_read_max(int dirfd, const char *path, size_t max, char **data, size_t *len);
/* strerror() for the errors of file_read_all(): "not a regular file", "too large (...)". */
const char *file_strerror(int rc);
/* Writes data to dirfd/name atomically: a temporary file in the same directory, optional
 * fsync, then rename. Returns 0 or -errno. */
int file_write_atomic(int dirfd, const char *name, const void *data, size_t len, bool durable);
/* Creates a directory and its parents with the given mode; 0 or -errno. */
int mkdir_p(const char *path, unsigned mode);
/* Joins dir and rel unless rel is absolute. Returns malloc'd path. */
char *path_join(const char *dir, const char *rel);
/* Directory part of path (malloc'd); "." when there is none. */
char *path_dirname(const char *path);
/* Absolute, normalised path (realpath when it exists, else cwd-joined). malloc'd. */
char *path_absolute(const char *path);

/* Writes/reads exactly n bytes, retrying on EINTR and short transfers. 0 or -errno. */
int write_full(int fd, const void *buf, size_t n);
int pread_full(int fd, void *buf, size_t n, uint64_t off, size_t *got);

/* Physical memory of this machine in bytes (2^40 when unknown): what no single buffer
 * computed from a configuration or metadata may exceed. */
uint64_t mem_physical_bytes(void);

/* Opens directory rel of dirfd ("." for dirfd itself) for readdir, on an open file description
 * of its own (a dup() would share dirfd's offset) that closedir closes: NULL with errno set
 * when it cannot. */
DIR *opendir_at(int dirfd, const char *rel);

/* ---- time: nanoseconds as int64_t (292 years either side of the epoch or the boot) ---- */

#define NS_PER_SEC 1000000000LL

static inline int64_t ts_to_ns(struct timespec t)
{
    return (int64_t)t.tv_sec * NS_PER_SEC + t.tv_nsec;
}

static inline struct timespec ts_from_ns(int64_t ns)
{
    struct timespec t = {.tv_sec = (time_t)(ns / NS_PER_SEC), .tv_nsec = (long)(ns % NS_PER_SEC)};
    if (t.tv_nsec < 0) {
        t.tv_sec--;
        t.tv_nsec += NS_PER_SEC;
    }
    return t;
}

/* s seconds (s >= 0): whole seconds, then the fraction's nanoseconds (truncated). */
static inline struct timespec ts_from_seconds(double s)
{
    time_t whole = (time_t)s;
    return (struct timespec){.tv_sec = whole, .tv_nsec = (long)((s - (double)whole) * 1e9)};
}

/* a + b, both normalised (0 <= tv_nsec < 1e9). */
static inline struct timespec ts_add(struct timespec a, struct timespec b)
{
    a.tv_sec += b.tv_sec;
    a.tv_nsec += b.tv_nsec;
    if (a.tv_nsec >= NS_PER_SEC) {
        a.tv_sec++;
        a.tv_nsec -= NS_PER_SEC;
    }
    return a;
}

/* clk's time now, in nanoseconds. */
int64_t clock_ns(clockid_t clk);
/* clk's time after d from now: the deadline of a wait timed by clk (pthread_cond_timedwait
 * with the clock of cond_init_monotonic or the default CLOCK_REALTIME, pthread_timedjoin_np). */
struct timespec deadline_in(clockid_t clk, struct timespec d);

/* Monotonic clock in seconds. */
double now_monotonic(void);
/* Initialises cv to time its waits (pthread_cond_timedwait) by CLOCK_MONOTONIC, which a
 * change of the wall clock does not move. */
void cond_init_monotonic(pthread_cond_t *cv);

/* Parses a non-negative decimal integer that fills the whole string. 0 or -EINVAL/-ERANGE. */
int parse_u64(const char *s, uint64_t *out);
int parse_i64(const char *s, int64_t *out);
int parse_double(const char *s, double *out);
/* Parses a comma-separated list of u64 ("1, 512,512"). Returns count or -EINVAL. */
int parse_u64_list(const char *s, uint64_t *out, int max);
/* Parses a size with optional K/M/G/T suffix (powers of 1024). */
int parse_size(const char *s, uint64_t *out);

/* XXH3-64 (libxxhash) of data seeded with h, so that calls chain into one hash of several
 * pieces (start with HASH64_INIT): input signatures, fingerprints, records' checksums. */
#define HASH64_INIT 0x9e3779b97f4a7c15ULL
uint64_t hash64(uint64_t h, const void *data, size_t len);

/* 64-bit FNV-1a over data, continuing from h (start with FNV64_INIT): only for the default
 * cache directory's name, which must stay what earlier versions named it (an older layout
 * there is emptied and used again, never left behind beside a new directory). */
#define FNV64_INIT 0xcbf29ce484222325ULL
uint64_t fnv64(uint64_t h, const void *data, size_t len);

/* Growable byte string. */
struct strbuf {
    char *buf;
    size_t len, cap;
};
void sb_append(struct strbuf *sb, const char *s, size_t n);
void sb_printf(struct strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* v in decimal, as "%" PRIu64 writes it, appended (no printf: it is on per-ROI paths). */
void sb_add_u64(struct strbuf *sb, uint64_t v);
/* v in decimal into buf (at least 21 bytes), NUL-terminated; returns its length. No allocation
 * and no lock: safe in a forked child of a threaded process (proc/guard.c). */
size_t u64_dec(char *buf, uint64_t v);
void sb_free(struct strbuf *sb);

#endif
