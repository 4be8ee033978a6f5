/* runner.c: drives every chunk of a warm or an export through the engines of a set of arrays,
 * with progress on stderr and a clean stop on SIGINT/SIGTERM/SIGHUP that keeps finished work
 * in the caches. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define TICK_TTY   0.2 /* seconds between redraws of the bar */
#define TICK_PLAIN 5.0 /* seconds between progress lines when stderr is not a terminal */
#define BAR_WIDTH  24
#define MAX_NAMED  50 /* failed ROIs named at the end; the rest are counted */

/* ---- the progress display, shared with run_message ---- */

static struct {
    pthread_mutex_t lock;
    bool tty;
    size_t bar_len; /* characters of the bar now on the line, 0 when none */
} display = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void clear_bar_locked(void)
{
    if (display.bar_len)
        fprintf(stderr, "\r%*s\r", (int)display.bar_len, "");
    display.bar_len = 0;
}

void run_message(const char *fmt, ...)
{
    pthread_mutex_lock(&display.lock);
    clear_bar_locked();
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    pthread_mutex_unlock(&display.lock);
}

void cli_format_duration(double s, char *buf, size_t n)
{
    if (!isfinite(s) || s < 0) {
        snprintf(buf, n, "?");
        return;
    }
    long v = (long)(s + 0.5);
    if (s < 9.95)
        snprintf(buf, n, "%.1fs", s);
    else if (v >= 3600)
        snprintf(buf, n, "%ldh%02ldm", v / 3600, v / 60 % 60);
    else if (v >= 60)
        snprintf(buf, n, "%ldm%02lds", v / 60, v % 60);
    else
        snprintf(buf, n, "%lds", v);
}

struct tally {
    const char *verb;
    const struct run_spec *spec;
    size_t chunks_done, chunks_total;
    struct engine_progress p;
    size_t done0; /* ROIs done when the run started */
    double start; /* now_monotonic() then */
};

/* One progress report: a bar redrawn in place on a terminal, a plain line otherwise. */
static void show_progress(const struct tally *ta, bool final)
{
    const struct engine_progress *p = &ta->p;
    double elapsed = now_monotonic() - ta->start;
    size_t settled = p->rois_done + p->rois_failed;
    double frac = p->rois_total ? (double)settled / (double)p->rois_total : 1.0;
    if (frac > 1)
        frac = 1;
    size_t computed = p->rois_computed;
    double rate = elapsed > 0 ? (double)computed / elapsed : 0;
    bool rate_known = computed > 0 && elapsed >= 0.5;
    char left[32] = "", rate_s[32] = "", failed[32] = "";
    if (rate_known || final)
        snprintf(rate_s, sizeof rate_s, "%.1f ROIs/s", rate);
    if (settled < p->rois_total) {
        char d[24];
        cli_format_duration(rate_known ? (double)(p->rois_total - settled) / rate : NAN, d,
                            sizeof d);
        snprintf(left, sizeof left, "%s left", d);
    }
    if (p->rois_failed)
        snprintf(failed, sizeof failed, ", %zu failed", p->rois_failed);
    char line[384], more[128] = "";
    if (ta->spec && ta->spec->describe)
        ta->spec->describe(ta->spec->ctx, more, sizeof more);
    pthread_mutex_lock(&display.lock);
    if (display.tty) {
        char bar[BAR_WIDTH + 1];
        int full = (int)(frac * BAR_WIDTH);
        for (int i = 0; i < BAR_WIDTH; i++)
            bar[i] = i < full ? '#' : '.';
        bar[BAR_WIDTH] = '\0';
        int n = snprintf(
            line, sizeof line, "roifs: %s [%s] %3d%% %zu/%zu ROIs%s, %zu/%zu chunks%s%s%s%s%s",
            ta->verb, bar, (int)(frac * 100), settled, p->rois_total, failed, ta->chunks_done,
            ta->chunks_total, more, *rate_s ? ", " : "", rate_s, *left ? ", " : "", left);
        size_t len = n < 0 ? 0 : (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
        /* Pad over what the previous, longer bar left on the line. */
        fprintf(stderr, "\r%s%*s", line, display.bar_len > len ? (int)(display.bar_len - len) : 0,
                "");
        display.bar_len = len > display.bar_len ? len : display.bar_len;
        if (final) {
            fputc('\n', stderr);
            display.bar_len = 0;
        }
    } else {
        fprintf(stderr, "roifs: %s: %zu of %zu ROIs done (%d%%)%s, %zu of %zu chunks%s%s%s%s%s\n",
                ta->verb, p->rois_done, p->rois_total, (int)(frac * 100), failed, ta->chunks_done,
                ta->chunks_total, more, *rate_s ? ", " : "", rate_s, *left ? ", about " : "", left);
    }
    fflush(stderr);
    pthread_mutex_unlock(&display.lock);
}

/* ---- signals ---- */

static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig)
{
    stop_signal = sig; /* SA_RESETHAND: a second one ends the process at once */
}

static const int stop_signals[] = {SIGINT, SIGTERM, SIGHUP};
#define NSTOP (sizeof stop_signals / sizeof stop_signals[0])

static void catch_stop_signals(struct sigaction *saved)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    stop_signal = 0;
    for (size_t i = 0; i < NSTOP; i++)
        sigaction(stop_signals[i], &sa, &saved[i]);
}

static void restore_stop_signals(const struct sigaction *saved)
{
    for (size_t i = 0; i < NSTOP; i++)
        sigaction(stop_signals[i], &saved[i], NULL);
}

/* ---- driving the engine ---- */

struct run_state {
    pthread_mutex_t lock;
    pthread_cond_t cv; /* a chunk finished */
    const struct run_spec *spec;
    size_t inflight, done, failed;
};

struct chunk_req {
    struct run_state *st;
    struct engine *e; /* the engine of the chunk's array, held by arrayset_open_chunk */
    size_t k;
};

static void chunk_opened(void *ctx, int err, int fd, int flags)
{
    (void)flags;
    struct chunk_req *rq = ctx;
    struct run_state *st = rq->st;
    int r = err;
    if (r == 0 && st->spec->chunk_ready) {
        struct errbuf eb = {{0}};
        struct cache_chunk_meta meta;
        bool has = cache_chunk_meta_of(engine_cache(rq->e), st->spec->ids[rq->k], fd, &meta) == 0;
        if ((r = st->spec->chunk_ready(st->spec->ctx, rq->k, fd, has ? &meta : NULL, &eb)) < 0)
            run_message("roifs: %s", eb.msg);
    }
    if (fd >= 0)
        close(fd);
    pthread_mutex_lock(&st->lock);
    st->inflight--;
    st->done++;
    if (r < 0)
        st->failed++;
    pthread_cond_signal(&st->cv);
    pthread_mutex_unlock(&st->lock);
    free(rq);
}

static void wait_a_tick(struct run_state *st, double seconds)
{
    struct timespec ts = deadline_in(CLOCK_MONOTONIC, ts_from_ns((int64_t)(seconds * 1e9)));
    pthread_cond_timedwait(&st->cv, &st->lock, &ts);
}

/* Opens every chunk of the spec, at most limit at a time, until done or a stop signal; the
 * progress shown is that of the set's first array. */
static void drive(struct arrayset *s, struct run_state *st, struct tally *ta, size_t limit)
{
    struct engine *e = arrayset_engine(s, 0, false); /* held by run_chunks */
    const struct run_spec *spec = st->spec;
    double tick = display.tty ? TICK_TTY : TICK_PLAIN, next_show = now_monotonic() + tick;
    size_t next = 0;
    for (;;) {
        pthread_mutex_lock(&st->lock);
        bool issue = !stop_signal && next < spec->n && st->inflight < limit;
        if (issue)
            st->inflight++;
        else if (stop_signal || (next == spec->n && st->inflight == 0)) {
            pthread_mutex_unlock(&st->lock);
            return;
        } else
            wait_a_tick(st, 0.1); /* also how late a stop signal is noticed */
        ta->chunks_done = st->done;
        pthread_mutex_unlock(&st->lock);
        if (issue) {
            size_t k = next++, array = spec->arrays ? (size_t)spec->arrays[k] : 0;
            struct engine *le = arrayset_engine_get(s, array, true);
            if (!le || engine_chunk_has_failed_roi(le, spec->ids[k])) {
                /* It would only run the failed ROI again: once per warm is enough (or its
                 * image of a plate could not start, logged). */
                if (le)
                    arrayset_engine_put(s, array);
                pthread_mutex_lock(&st->lock);
                st->inflight--;
                st->done++;
                st->failed++;
                pthread_mutex_unlock(&st->lock);
            } else {
                struct chunk_req *rq = xmalloc(sizeof *rq);
                rq->st = st;
                rq->e = le;
                rq->k = k;
                /* still held: the image that answered engine_chunk_has_failed_roi */
                arrayset_open_chunk(s, array, spec->ids[k], chunk_opened, rq);
                arrayset_engine_put(s, array);
            }
        }
        double now = now_monotonic();
        if (now >= next_show && e) {
            engine_progress(e, &ta->p);
            show_progress(ta, false);
            next_show = now + tick;
        }
    }
}

struct naming {
    const struct task *t;
    size_t named;
};

static void name_failed_roi(void *ctx, size_t roi, const char *msg)
{
    struct naming *nm = ctx;
    if (nm->named++ >= MAX_NAMED)
        return;
    const struct roi_set *rs = &nm->t->rois;
    struct strbuf box = {0};
    for (int d = 0; d < rs->ndim; d++)
        sb_printf(&box, "%s%llu:%llu", d ? ", " : "",
                  (unsigned long long)rs->start[roi * (size_t)rs->ndim + d],
                  (unsigned long long)rs->stop[roi * (size_t)rs->ndim + d]);
    run_message("roifs: roi %zu [%s] failed: %s", roi, box.buf ? box.buf : "",
                msg ? msg : "(its message is no longer kept; see the log)");
    sb_free(&box);
}

int run_chunks(struct arrayset *s, const struct run_spec *spec)
{
    struct errbuf err = {{0}};
    if (arrayset_start(s, &err) < 0) {
        fprintf(stderr, "roifs: %s\n", err.msg);
        return EXIT_RUNTIME;
    }
    const struct array *a0 = arrayset_array(s, 0);
    /* the progress shown is array 0's, held for the run (a plate's image 0 stays open) */
    struct engine *e = arrayset_engine_get(s, 0, true);
    display.tty = isatty(STDERR_FILENO);
    struct sigaction saved[NSTOP];
    catch_stop_signals(saved);

    struct run_state st = {.spec = spec};
    pthread_mutex_init(&st.lock, NULL);
    cond_init_monotonic(&st.cv);

    struct tally ta = {
        .verb = spec->verb, .spec = spec, .chunks_total = spec->n, .start = now_monotonic()};
    if (e)
        engine_progress(e, &ta.p);
    ta.done0 = ta.p.rois_done;
    size_t limit = (size_t)(a0->opts.threads > 0 ? a0->opts.threads : 1) * 2 + 2;
    drive(s, &st, &ta, limit);

    int sig = stop_signal, rc = 0;
    pthread_mutex_lock(&st.lock);
    if (sig && st.done == spec->n)
        sig = 0; /* it came after the last chunk: nothing was cut short */
    pthread_mutex_unlock(&st.lock);
    if (sig) {
        pthread_mutex_lock(&display.lock);
        clear_bar_locked();
        pthread_mutex_unlock(&display.lock);
        run_message("roifs: %s: stopping; finished work stays in the cache", spec->verb);
        arrayset_stop(s); /* fails what is in flight, keeps what is finished */
        run_message("roifs: interrupted; run the same command again to resume");
        rc = 128 + sig;
    } else {
        if (e)
            engine_progress(e, &ta.p);
        ta.chunks_done = st.done;
        if (display.tty)
            show_progress(&ta, true); /* the bar, complete, ends its line */
        double took_s = now_monotonic() - ta.start;
        size_t computed = ta.p.rois_computed; /* not those found in the cache */
        char took[24], rate[64] = "";
        cli_format_duration(took_s, took, sizeof took);
        if (computed && took_s > 0)
            snprintf(rate, sizeof rate, ", %.1f ROIs/s", (double)computed / took_s);
        run_message("roifs: %s: %zu of %zu chunks done after %s; %zu ROI%s computed%s", spec->verb,
                    st.done - st.failed, spec->n, took, computed, computed == 1 ? "" : "s", rate);
        struct naming nm = {.t = a0->task};
        size_t nfailed = e ? engine_failed_rois(e, name_failed_roi, &nm) : 0;
        if (nfailed > MAX_NAMED)
            run_message("roifs: ... and %zu more failed ROIs (see the log)", nfailed - MAX_NAMED);
        if (st.failed) {
            run_message("roifs: %s: %zu of %zu chunks failed%s", spec->verb, st.failed, spec->n,
                        nfailed ? "" : "; see the messages above");
            rc = EXIT_RUNTIME;
        }
        arrayset_stop(s);
    }
    if (e)
        arrayset_engine_put(s, 0);
    restore_stop_signals(saved);
    pthread_cond_destroy(&st.cv);
    pthread_mutex_destroy(&st.lock);
    return rc;
}
