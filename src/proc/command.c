/* command.c: the `command` processor (docs/processors.md, A command): one `/bin/sh -c COMMAND` per
 * ROI, in its own process group, fed the read region on stdin and expected to write the output on
 * stdout. A COMMAND that is a plain list of words is executed as the shell would, without the shell
 * (one process fewer per ROI; spawn_split_words). With `executor = slurm` the process is `srun ...
 * /bin/sh -c COMMAND`, one job step per ROI, which srun runs on the cluster with stdin, stdout and
 * the environment forwarded. */
#include "proc.h"
#include "slurm.h"
#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Bytes of stderr kept, and the part of them logged when the command fails. */
#define TAIL_MAX  4096
#define TAIL_LOG  1800
#define WRITE_MAX (1u << 20)
/* Pipe buffer for big arrays: fewer wakeups, yet well under the per-user soft limit on pipe
 * memory (64 MiB) with dozens of commands running. */
#define PIPE_SIZE (256 * 1024)
/* Longest poll(): bounds how late a shutdown or timeout is noticed. */
#define TICK_MS 100
/* How long stdout/stderr may stay open after the shell exited (held by its leftovers). */
#define ORPHAN_GRACE 0.2

/* A running command's process group, on run()'s stack while registered. */
struct running_cmd {
    pid_t pgid;
    struct running_cmd *next;
};

struct command {
    struct proc base;
    char *cmdline;
    char **words; /* cmdline without shell syntax, run without the shell; NULL: through it */
    char *dir;    /* NULL: the daemon's cwd */
    double timeout;
    char **param_env; /* "ROIFS_PARAM_NAME=value" */
    int nparams;
    struct slurm_launch *slurm; /* NULL: run locally */
    pthread_mutex_t lock;       /* guards running and stopping */
    struct running_cmd *running;
    _Atomic bool stopping;
};

enum child_end { END_EOF, END_TIMEOUT, END_SHUTDOWN, END_ORPHANED, END_POLL_FAILED, END_TOO_MUCH };

/* One command's pipes and progress; fds are our ends, -1 once closed. */
struct child {
    pid_t pid;
    int in_fd, out_fd, err_fd, pid_fd;
    const unsigned char *in;
    size_t in_len, in_done;
    unsigned char *out;
    size_t out_len, out_got; /* out_got counts bytes beyond out_len too */
    bool exited;             /* the shell has exited (not yet reaped) */
    double exit_time;
    char tail[TAIL_MAX + 1]; /* + 1: room for the NUL once the command is done */
    size_t tail_len;
};

/* ---- environment ---- */

static char *list_var(const char *name, const uint64_t *v, int n)
{
    struct strbuf sb = {0};
    sb_printf(&sb, "%s=", name);
    for (int i = 0; i < n; i++)
        sb_printf(&sb, "%s%llu", i ? "," : "", (unsigned long long)v[i]);
    return sb.buf;
}

static bool overridden(const char *entry, char *const *ours, size_t n)
{
    size_t len = strcspn(entry, "=");
    for (size_t i = 0; i < n; i++)
        if (!strncmp(entry, ours[i], len) && ours[i][len] == '=')
            return true;
    return false;
}

/* The daemon's environment with the ROIFS_* variables of this request set. The strings from
 * index *own on are ours to free. */
static char **build_env(const struct command *cmd, const struct proc_request *rq, size_t *own)
{
    char buf[8], *ours[8];
    size_t n = 0, nenv = 0;
    ours[n++] = xasprintf("ROIFS_ROI=%zu", rq->roi);
    ours[n++] = list_var("ROIFS_START", rq->start, rq->ndim);
    ours[n++] = list_var("ROIFS_STOP", rq->stop, rq->ndim);
    ours[n++] = list_var("ROIFS_IN_START", rq->in_start, rq->ndim);
    ours[n++] = list_var("ROIFS_IN_SHAPE", rq->in_shape, rq->ndim);
    ours[n++] = xasprintf("ROIFS_IN_DTYPE=%s", dtype_typestr_le(&rq->in_dtype, buf));
    ours[n++] = xasprintf("ROIFS_OUT_DTYPE=%s", dtype_typestr_le(&rq->out_dtype, buf));
    if (rq->label) /* a masked ROI (docs/masks.md) */
        ours[n++] = xasprintf("ROIFS_LABEL=%llu", (unsigned long long)rq->label);
    while (environ && environ[nenv])
        nenv++;
    char **env = xmalloc((nenv + n + (size_t)cmd->nparams + 1) * sizeof *env);
    size_t k = 0;
    for (size_t i = 0; i < nenv; i++)
        if (!overridden(environ[i], ours, n) &&
            !overridden(environ[i], cmd->param_env, (size_t)cmd->nparams))
            env[k++] = environ[i];
    for (int i = 0; i < cmd->nparams; i++)
        env[k++] = cmd->param_env[i];
    *own = k;
    for (size_t i = 0; i < n; i++)
        env[k++] = ours[i];
    env[k] = NULL;
    return env;
}

static void free_env(char **env, size_t own)
{
    for (size_t i = own; env[i]; i++)
        free(env[i]);
    free(env);
}

/* ---- spawning ---- */

/* The command run directly when it has no shell syntax and its program is found as the shell
 * would find it; 1 when it was not (the shell is to run it: it also reports a program not
 * found, and runs a script without #! line, ENOEXEC, as a shell script). */
static int spawn_direct(const struct command *cmd, char **env, const int child_fds[3], pid_t *pid)
{
    char *prog = cmd->words ? spawn_find_program(cmd->words[0], cmd->dir) : NULL;
    if (!prog)
        return 1;
    int rc = spawn_process(prog, cmd->words, env, cmd->dir, child_fds, false, pid);
    free(prog);
    return rc == -ENOEXEC ? 1 : rc;
}

static int spawn_shell(const struct command *cmd, const struct proc_request *rq, char **env,
                       const int child_fds[3], pid_t *pid, bool *direct)
{
    int rc = spawn_direct(cmd, env, child_fds, pid);
    *direct = rc != 1;
    if (*direct)
        return rc;
    char *sh_argv[] = {"sh", "-c", cmd->cmdline, NULL}, **argv = sh_argv;
    if (cmd->slurm) {
        char job[48];
        snprintf(job, sizeof job, "roifs-roi-%zu", rq->roi);
        argv = slurm_argv(cmd->slurm, job, false, cmd->cmdline);
    }
    rc = spawn_process(cmd->slurm ? cmd->slurm->srun : "/bin/sh", argv, env, cmd->dir, child_fds,
                       cmd->slurm != NULL, pid);
    if (cmd->slurm)
        slurm_argv_free(argv);
    return rc;
}

static void set_nonblock(int fd, size_t bytes)
{
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    if (bytes > 65536) /* best effort */
        fcntl(fd, F_SETPIPE_SZ, bytes < PIPE_SIZE ? (int)bytes : PIPE_SIZE);
}

/* Starts the shell with pipes on its stdin, stdout and stderr, and a pidfd (or -1) that polls
 * readable when it exits. */
static int start_child(const struct command *cmd, const struct proc_request *rq, struct child *c,
                       struct errbuf *err)
{
    int p[3][2] = {{-1, -1}, {-1, -1}, {-1, -1}}, rc = 0;
    bool direct = false;
    for (int i = 0; i < 3 && !rc; i++)
        rc = spawn_pipe(p[i]);
    if (!rc) {
        size_t own;
        char **env = build_env(cmd, rq, &own);
        int child_fds[3] = {p[0][0], p[1][1], p[2][1]};
        rc = spawn_shell(cmd, rq, env, child_fds, &c->pid, &direct);
        free_env(env, own);
    }
    c->in_fd = p[0][1];
    c->out_fd = p[1][0];
    c->err_fd = p[2][0];
    c->pid_fd = -1;
    spawn_close(&p[0][0]);
    spawn_close(&p[1][1]);
    spawn_close(&p[2][1]);
    if (rc) {
        spawn_close(&c->in_fd);
        spawn_close(&c->out_fd);
        spawn_close(&c->err_fd);
        return err_set(err, -EIO, "cannot run %s'%s' in %s: %s",
                       direct       ? ""
                       : cmd->slurm ? "srun ... /bin/sh -c "
                                    : "/bin/sh -c ",
                       cmd->cmdline, cmd->dir ? cmd->dir : ".", strerror(-rc));
    }
#ifdef SYS_pidfd_open
    c->pid_fd = (int)syscall(SYS_pidfd_open, c->pid, 0);
#endif
    set_nonblock(c->in_fd, rq->in_nbytes);
    set_nonblock(c->out_fd, rq->out_nbytes);
    set_nonblock(c->err_fd, 0);
    if (rq->in_nbytes == 0)
        spawn_close(&c->in_fd);
    return 0;
}

/* ---- the running child ---- */

/* The first move of a shutdown: a local command's group dies at once; srun is asked to end
 * (a SIGKILL would leave its job step running), and run() then waits for it. */
static void stop_group(const struct command *cmd, pid_t pgid)
{
    if (cmd->slurm) {
        slurm_interrupt(pgid);
        return;
    }
    kill(-pgid, SIGKILL);
    kill(pgid, SIGKILL);
}

static void register_child(struct command *cmd, struct running_cmd *node)
{
    pthread_mutex_lock(&cmd->lock);
    node->next = cmd->running;
    cmd->running = node;
    if (cmd->stopping) /* shutdown came between spawn and here */
        stop_group(cmd, node->pgid);
    pthread_mutex_unlock(&cmd->lock);
}

static void unregister_child(struct command *cmd, struct running_cmd *node)
{
    pthread_mutex_lock(&cmd->lock);
    for (struct running_cmd **pp = &cmd->running; *pp; pp = &(*pp)->next)
        if (*pp == node) {
            *pp = node->next;
            break;
        }
    pthread_mutex_unlock(&cmd->lock);
}

static void feed_stdin(struct child *c)
{
    size_t left = c->in_len - c->in_done;
    ssize_t n = write(c->in_fd, c->in + c->in_done, left < WRITE_MAX ? left : WRITE_MAX);
    if (n > 0)
        c->in_done += (size_t)n;
    else if (n < 0 && errno != EAGAIN && errno != EINTR)
        spawn_close(&c->in_fd); /* EPIPE: the command does not read (all of) its input */
    if (c->in_done == c->in_len)
        spawn_close(&c->in_fd);
}

static void drain_stdout(struct child *c)
{
    unsigned char scratch[16384];
    bool fits = c->out_got < c->out_len;
    size_t room = fits ? c->out_len - c->out_got : sizeof scratch;
    ssize_t n = read(c->out_fd, fits ? c->out + c->out_got : scratch, room);
    if (n > 0)
        c->out_got += (size_t)n;
    else if (n == 0 || (errno != EAGAIN && errno != EINTR))
        spawn_close(&c->out_fd);
}

static void drain_stderr(struct child *c)
{
    char buf[TAIL_MAX];
    ssize_t n = read(c->err_fd, buf, sizeof buf);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        spawn_close(&c->err_fd);
        return;
    }
    if (n < 0)
        return;
    size_t len = (size_t)n;
    if (c->tail_len + len > TAIL_MAX) {
        size_t drop = c->tail_len + len - TAIL_MAX;
        memmove(c->tail, c->tail + drop, c->tail_len - drop);
        c->tail_len -= drop;
    }
    memcpy(c->tail + c->tail_len, buf, len);
    c->tail_len += len;
}

static void note_exit(struct child *c)
{
    siginfo_t si = {0};
    if (!c->exited && waitid(P_PID, (id_t)c->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        si.si_pid == c->pid) {
        c->exited = true;
        c->exit_time = now_monotonic();
    }
}

/* Poll timeout in ms: a tick, shortened to the deadline and the orphan grace; without a pidfd
 * the shell's exit is only seen by polling, so poll briskly once its output is closed. */
static int poll_timeout(const struct child *c, double now, double deadline)
{
    double t = TICK_MS / 1000.0;
    if (c->pid_fd < 0 && !c->exited && c->out_fd < 0 && c->err_fd < 0)
        t = 0.005;
    if (deadline > 0 && deadline - now < t)
        t = deadline - now;
    if (c->exited && c->exit_time + ORPHAN_GRACE - now < t)
        t = c->exit_time + ORPHAN_GRACE - now;
    return t > 0 ? (int)(t * 1000) + 1 : 0;
}

/* Feeds stdin and drains stdout and stderr until the shell has exited with its output closed,
 * or the deadline passes, or a shutdown comes, or the command writes more than expected. */
static enum child_end pump(const struct command *cmd, struct child *c, double deadline)
{
    for (;;) {
        if (cmd->stopping)
            return END_SHUTDOWN;
        note_exit(c);
        double now = now_monotonic();
        if (c->exited && c->out_fd < 0 && c->err_fd < 0)
            return END_EOF;
        if (deadline > 0 && now >= deadline)
            return END_TIMEOUT;
        if (c->exited && now >= c->exit_time + ORPHAN_GRACE)
            return END_ORPHANED;
        struct pollfd pf[4] = {
            {.fd = c->in_fd, .events = POLLOUT},
            {.fd = c->out_fd, .events = POLLIN},
            {.fd = c->err_fd, .events = POLLIN},
            {.fd = c->exited ? -1 : c->pid_fd, .events = POLLIN},
        };
        if (poll(pf, 4, poll_timeout(c, now, deadline)) < 0 && errno != EINTR)
            return END_POLL_FAILED; /* ENOMEM at worst; do not spin */
        if (pf[0].revents & POLLOUT)
            feed_stdin(c);
        else if (pf[0].revents & (POLLERR | POLLHUP | POLLNVAL))
            spawn_close(&c->in_fd);
        if (pf[1].revents)
            drain_stdout(c);
        if (pf[2].revents)
            drain_stderr(c);
        if (c->out_got > c->out_len) /* it may never stop: fail now, do not wait for it */
            return END_TOO_MUCH;
    }
}

/* ---- outcome ---- */

/* The trimmed stderr tail and its last non-empty line (both point into c->tail). */
static void stderr_lines(struct child *c, const char **all, const char **last)
{
    size_t n = c->tail_len;
    while (n > 0 && (c->tail[n - 1] == '\n' || c->tail[n - 1] == '\r' || c->tail[n - 1] == ' ' ||
                     c->tail[n - 1] == '\t'))
        n--;
    c->tail[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (c->tail[i] == '\0') /* keep binary garbage from cutting the text short */
            c->tail[i] = '?';
    char *nl = strrchr(c->tail, '\n');
    *last = nl ? nl + 1 : c->tail;
    *all = c->tail;
    if (n > TAIL_LOG) {
        const char *start = c->tail + n - TAIL_LOG, *cut = strchr(start, '\n');
        *all = cut ? cut + 1 : start;
    }
}

static int report(const struct command *cmd, const struct proc_request *rq, struct child *c,
                  enum child_end end, int status, struct errbuf *err)
{
    const char *all, *last;
    stderr_lines(c, &all, &last);
    char said[700];
    if (cmd->slurm) { /* the task's last words, and srun's or slurmstepd's reason */
        char task[400], slurm[280];
        slurm_reason(c->tail, task, sizeof task, slurm, sizeof slurm);
        snprintf(said, sizeof said, "%s%s%s%s", task, *task && *slurm ? " [" : "", slurm,
                 *task && *slurm ? "]" : "");
        last = said;
    }
    const char *sep = *last ? ": " : "";
    int rc = -EIO;
    if (end == END_SHUTDOWN)
        return err_set(err, -ECANCELED, "shut down");
    if (end == END_TIMEOUT)
        err_set(err, rc, "timed out after %g s", cmd->timeout);
    else if (end == END_POLL_FAILED)
        err_set(err, rc, "poll failed while the command ran");
    else if (end == END_TOO_MUCH)
        err_set(err, rc, "wrote more than the %zu bytes expected on stdout; killed%s%.700s",
                c->out_len, sep, last);
    else if (WIFSIGNALED(status))
        err_set(err, rc, "killed by signal %d%s%.700s", WTERMSIG(status), sep, last);
    else if (WEXITSTATUS(status) != 0)
        err_set(err, rc, "exit status %d%s%.700s", WEXITSTATUS(status), sep, last);
    else if (c->out_got != c->out_len)
        err_set(err, rc, "wrote %zu bytes, expected %zu%s%.700s", c->out_got, c->out_len, sep,
                last);
    else
        rc = 0;
    if (rc && cmd->stopping) /* killed by the shutdown */
        return err_set(err, -ECANCELED, "shut down");
    if (rc && *all)
        log_warn("roi %zu: stderr of the command:\n%s", rq->roi, all);
    return rc;
}

static int command_run(struct proc *p, const struct proc_request *rq, struct errbuf *err)
{
    struct command *cmd = (struct command *)p;
    if (cmd->stopping)
        return err_set(err, -ECANCELED, "shut down");
    struct child *c = xcalloc(1, sizeof *c); /* the stderr tail is too big for small stacks */
    c->in = rq->in;
    c->in_len = rq->in_nbytes;
    c->out = rq->out;
    c->out_len = rq->out_nbytes;
    double deadline = cmd->timeout > 0 ? now_monotonic() + cmd->timeout : 0;
    int rc = start_child(cmd, rq, c, err);
    if (rc) {
        free(c);
        return rc;
    }
    struct running_cmd node = {.pgid = c->pid};
    register_child(cmd, &node);
    enum child_end end = pump(cmd, c, deadline);
    spawn_close(&c->in_fd);
    spawn_close(&c->out_fd);
    spawn_close(&c->err_fd);
    spawn_close(&c->pid_fd);
    if (cmd->slurm && end != END_EOF) { /* srun still runs: Slurm must end the step */
        char job[48];
        snprintf(job, sizeof job, "roifs-roi-%zu", rq->roi);
        slurm_stop(c->pid, job);
    }
    /* The shell is not reaped yet, so its pid still names this group: whatever it left
     * behind (or, on timeout, everything) dies with it. */
    kill(-c->pid, SIGKILL);
    kill(c->pid, SIGKILL); /* in case it left its group (exec setsid ...) */
    unregister_child(cmd, &node);
    int status = 0;
    pid_t waited = spawn_reap(c->pid, &status);
    if (waited < 0) /* someone else reaped it (SIGCHLD ignored, or waitpid(-1)) */
        rc = err_set(err, -EIO, "lost the command's exit status: %s", strerror(errno));
    else
        rc = report(cmd, rq, c, end, status, err);
    free(c);
    return rc;
}

/* ---- processor ---- */

static void command_shutdown(struct proc *p)
{
    struct command *cmd = (struct command *)p;
    pthread_mutex_lock(&cmd->lock);
    cmd->stopping = true;
    for (struct running_cmd *r = cmd->running; r; r = r->next)
        stop_group(cmd, r->pgid);
    pthread_mutex_unlock(&cmd->lock);
}

static void command_destroy(struct proc *p)
{
    struct command *cmd = (struct command *)p;
    for (int i = 0; i < cmd->nparams; i++)
        free(cmd->param_env[i]);
    free(cmd->param_env);
    free(cmd->cmdline);
    spawn_words_free(cmd->words);
    free(cmd->dir);
    slurm_launch_free(cmd->slurm);
    pthread_mutex_destroy(&cmd->lock);
    free(cmd);
}

static const struct proc_ops command_ops = {
    .run = command_run,
    .shutdown = command_shutdown,
    .destroy = command_destroy,
};

/* "ROIFS_PARAM_<NAME>=value": upper case, anything but a letter, digit or _ becomes _. */
static char *param_var(const struct config_param *pm)
{
    char *s = xasprintf("ROIFS_PARAM_%s=%s", pm->name, pm->value);
    char *name = s + strlen("ROIFS_PARAM_");
    for (char *q = name; q < name + strlen(pm->name); q++) {
        if (*q >= 'a' && *q <= 'z')
            *q = (char)(*q - 'a' + 'A');
        else if (!((*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || *q == '_'))
            *q = '_';
    }
    return s;
}

int proc_command_create(const struct config *cfg, struct proc **out, struct errbuf *err)
{
    if (!cfg->proc_value || !cfg->proc_value[strspn(cfg->proc_value, " \t")])
        return err_set(err, -EINVAL, "%s: [process] command: empty command", cfg->path);
    struct slurm_launch *slurm = NULL;
    int rc = slurm_launch_create(cfg, &slurm, err);
    if (rc)
        return rc;
    /* A command that exits without reading its input must not kill the daemon. */
    signal(SIGPIPE, SIG_IGN);
    struct command *cmd = xcalloc(1, sizeof *cmd);
    cmd->slurm = slurm;
    cmd->base.ops = &command_ops;
    cmd->cmdline = xstrdup(cfg->proc_value);
    cmd->words = slurm ? NULL : spawn_split_words(cmd->cmdline); /* srun runs the shell */
    cmd->dir = cfg->dir ? xstrdup(cfg->dir) : NULL;
    cmd->timeout = cfg->timeout;
    cmd->nparams = cfg->nparams;
    cmd->param_env = xcalloc((size_t)cfg->nparams + 1, sizeof *cmd->param_env);
    for (int i = 0; i < cfg->nparams; i++)
        cmd->param_env[i] = param_var(&cfg->params[i]);
    pthread_mutex_init(&cmd->lock, NULL);
    *out = &cmd->base;
    return 0;
}
