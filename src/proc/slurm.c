/* slurm.c: running command and worker processes as Slurm job steps (`executor = slurm`): the
 * srun command line built from [slurm], stopping srun so that Slurm cancels its step, and the
 * reason of a failed step found in srun's standard error. */
#include "slurm.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* After SIGTERM, srun kills the step's tasks and waits for Slurm to end the step: normally a
 * fraction of a second; the SIGINTs follow only if it has not exited after this long. */
#define TERM_GRACE 5.0
#define INT_GRACE  5.0
/* srun takes two SIGINTs as "abort" only when they arrive as two signals, not one pending. */
#define INT_GAP 0.3

/* ---- words ---- */

static void push_word(char ***words, size_t *n, struct strbuf *w)
{
    *words = xrealloc(*words, (*n + 2) * sizeof **words);
    (*words)[(*n)++] = xstrdup(w->buf ? w->buf : "");
    (*words)[*n] = NULL;
    w->len = 0;
    if (w->buf)
        w->buf[0] = '\0';
}

/* One "..." section starting at *p (after the quote); 0 or -EINVAL when it does not end. */
static int double_quoted(const char **p, struct strbuf *w)
{
    const char *s = *p;
    while (*s && *s != '"') {
        if (*s == '\\' && s[1] && strchr("\"\\$`\n", s[1])) {
            if (s[1] != '\n')
                sb_append(w, s + 1, 1);
            s += 2;
        } else {
            sb_append(w, s++, 1);
        }
    }
    if (!*s)
        return -EINVAL;
    *p = s + 1;
    return 0;
}

int slurm_split_words(const char *s, char ***words, size_t *n, struct errbuf *err)
{
    struct strbuf w = {0};
    bool in_word = false;
    int rc = 0;
    *words = xcalloc(1, sizeof **words);
    *n = 0;
    for (const char *p = s; *p && !rc;) {
        char c = *p;
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            if (in_word)
                push_word(words, n, &w);
            in_word = false;
            p++;
            continue;
        }
        in_word = true;
        if (c == '\'') {
            const char *end = strchr(p + 1, '\'');
            if (!end)
                rc = err_set(err, -EINVAL, "unterminated ' quote");
            else
                sb_append(&w, p + 1, (size_t)(end - p - 1));
            p = end ? end + 1 : p;
        } else if (c == '"') {
            p++;
            if (double_quoted(&p, &w) < 0)
                rc = err_set(err, -EINVAL, "unterminated \" quote");
        } else if (c == '\\') {
            if (!p[1]) {
                rc = err_set(err, -EINVAL, "\\ at the end");
                break;
            }
            if (p[1] != '\n')
                sb_append(&w, p + 1, 1);
            p += 2;
        } else if (strchr("$`|;&<>()", c)) {
            rc = err_set(err, -EINVAL,
                         "'%c' would need a shell, and roifs only splits words (quote it to "
                         "pass it as it is)",
                         c);
        } else {
            sb_append(&w, p++, 1);
        }
    }
    if (!rc && in_word)
        push_word(words, n, &w);
    sb_free(&w);
    if (rc) {
        slurm_argv_free(*words);
        *words = NULL;
        *n = 0;
    }
    return rc;
}

void slurm_argv_free(char **argv)
{
    if (!argv)
        return;
    for (char **a = argv; *a; a++)
        free(*a);
    free(argv);
}

/* ---- the launch ---- */

/* First executable NAME in $PATH (or the default path), malloc'd; NULL when there is none. */
static char *find_in_path(const char *name)
{
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        size_t len = strcspn(path, ":");
        char *cand = len ? xasprintf("%.*s/%s", (int)len, path, name) : xasprintf("./%s", name);
        if (access(cand, X_OK) == 0)
            return cand;
        free(cand);
        path += len + (path[len] == ':');
    }
    return NULL;
}

/* "FILE:LINE: [section] key: what". */
static int launch_err(const struct config *cfg, struct errbuf *err, const char *section,
                      const char *key, const char *what)
{
    return config_error(cfg, err, section, key, "[%s] %s: %s", section, key, what);
}

static void add_opt(char ***opts, size_t *n, char *opt)
{
    *opts = xrealloc(*opts, (*n + 2) * sizeof **opts);
    (*opts)[(*n)++] = opt;
    (*opts)[*n] = NULL;
}

int slurm_launch_create(const struct config *cfg, struct slurm_launch **out, struct errbuf *err)
{
    *out = NULL;
    if (cfg->executor != EXECUTOR_SLURM)
        return 0;
    char **extra = NULL;
    size_t nextra = 0;
    if (cfg->slurm_extra && slurm_split_words(cfg->slurm_extra, &extra, &nextra, err) < 0) {
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        return launch_err(cfg, err, "slurm", "extra", why);
    }
    char *srun = find_in_path("srun");
    if (!srun) {
        slurm_argv_free(extra);
        return launch_err(cfg, err, "process", "executor",
                          "slurm needs srun, which is not in PATH (Debian: apt-get install "
                          "slurm-client, and a munge key shared with the cluster)");
    }
    struct slurm_launch *sl = xcalloc(1, sizeof *sl);
    sl->srun = srun;
    size_t n = 0;
    add_opt(&sl->opts, &n, xstrdup("--ntasks=1"));
    add_opt(&sl->opts, &n,
            xasprintf("--cpus-per-task=%d",
                      cfg->slurm_cpus_per_task > 0 ? cfg->slurm_cpus_per_task : 1));
    if (cfg->slurm_partition)
        add_opt(&sl->opts, &n, xasprintf("--partition=%s", cfg->slurm_partition));
    if (cfg->slurm_mem)
        add_opt(&sl->opts, &n, xasprintf("--mem=%s", cfg->slurm_mem));
    if (cfg->slurm_gres)
        add_opt(&sl->opts, &n, xasprintf("--gres=%s", cfg->slurm_gres));
    if (cfg->slurm_time)
        add_opt(&sl->opts, &n, xasprintf("--time=%s", cfg->slurm_time));
    /* srun's "job queued and waiting for resources" and the like are not worth a log line
     * each; errors are still printed (extra may say --verbose). */
    add_opt(&sl->opts, &n, xstrdup("--quiet"));
    for (size_t i = 0; i < nextra; i++)
        add_opt(&sl->opts, &n, extra[i]);
    free(extra); /* its strings now belong to opts */
    *out = sl;
    return 0;
}

void slurm_launch_free(struct slurm_launch *sl)
{
    if (!sl)
        return;
    slurm_argv_free(sl->opts);
    free(sl->srun);
    free(sl);
}

char **slurm_argv(const struct slurm_launch *sl, const char *job, bool unbuffered,
                  const char *cmdline)
{
    size_t nopts = 0;
    while (sl->opts[nopts])
        nopts++;
    char **argv = xmalloc((nopts + 8) * sizeof *argv);
    size_t k = 0;
    argv[k++] = xstrdup("srun");
    argv[k++] = xasprintf("--job-name=%s", job);
    /* Before the extra arguments, so that they may override it... */
    for (size_t i = 0; i < nopts; i++)
        argv[k++] = xstrdup(sl->opts[i]);
    if (unbuffered) /* ...but not this: the worker protocol needs it */
        argv[k++] = xstrdup("--unbuffered");
    argv[k++] = xstrdup("/bin/sh");
    argv[k++] = xstrdup("-c");
    argv[k++] = xstrdup(cmdline);
    argv[k] = NULL;
    return argv;
}

/* ---- stopping ---- */

static bool has_exited(pid_t pid)
{
    siginfo_t si = {0};
    int rc = waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT);
    return rc < 0 || si.si_pid == pid; /* an error: it is not ours to wait for any more */
}

static void sleep_for(double secs)
{
    struct timespec ts = ts_from_seconds(secs);
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static bool exits_within(pid_t pid, double secs)
{
    double until = now_monotonic() + secs;
    for (;;) {
        if (has_exited(pid))
            return true;
        if (now_monotonic() >= until)
            return false;
        sleep_for(0.02);
    }
}

void slurm_interrupt(pid_t pid)
{
    if (pid > 0)
        kill(pid, SIGTERM);
}

int slurm_stop(pid_t pid, const char *job)
{
    if (pid <= 0 || has_exited(pid))
        return 0;
    kill(pid, SIGTERM);
    if (exits_within(pid, TERM_GRACE))
        return 0;
    kill(pid, SIGINT);
    sleep_for(INT_GAP);
    kill(pid, SIGINT);
    if (exits_within(pid, INT_GRACE))
        return 0;
    log_warn("srun %d (%s) did not stop %g s after SIGTERM and two SIGINTs; killing it, which "
             "may leave its job step running (see squeue -s; scancel --name=%s)",
             (int)pid, job, TERM_GRACE + INT_GAP + INT_GRACE, job);
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
    return -ETIMEDOUT;
}

/* ---- failure reasons ---- */

bool slurm_is_own_line(const char *line)
{
    return !strncmp(line, "srun: ", 6) || !strncmp(line, "slurmstepd", 10);
}

static void copy_line(char *dst, size_t len, const char *src, size_t n)
{
    if (!len)
        return;
    if (n > len - 1)
        n = len - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

void slurm_reason(const char *tail, char *task, size_t task_len, char *slurm, size_t slurm_len)
{
    copy_line(task, task_len, "", 0);
    copy_line(slurm, slurm_len, "", 0);
    bool cancelled = false; /* a "*** STEP ... CANCELLED ... ***" line outranks the rest */
    char line[1024];
    for (const char *p = tail; *p;) {
        size_t n = strcspn(p, "\n");
        copy_line(line, sizeof line, p, n);
        p += n + (p[n] == '\n');
        size_t len = strlen(line);
        while (len > 0 && strchr(" \t\r", line[len - 1]))
            line[--len] = '\0';
        if (!len)
            continue;
        if (!slurm_is_own_line(line)) {
            copy_line(task, task_len, line, len);
        } else if (strstr(line, "CANCELLED")) {
            copy_line(slurm, slurm_len, line, len);
            cancelled = true;
        } else if (!cancelled && strstr(line, "error:") && !strstr(line, "Exited with exit code")) {
            copy_line(slurm, slurm_len, line, len);
        }
    }
}
