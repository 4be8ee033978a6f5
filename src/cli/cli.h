/* cli.h: the roifs commands, one file per command (mount.c holds mount and unmount),
 * dispatched by main.c: each parses its options (common.c: one getopt_long table), calls the
 * modules, prints and maps to exit statuses; and the chunk runner of warm, export and apply
 * (runner.c). */
#ifndef ROIFS_CLI_H
#define ROIFS_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../arrays/arrayset.h"
#include "../cache/cache.h"
#include "../task.h"

#define EXIT_RUNTIME 1
#define EXIT_USAGE   2

/* Prints "roifs: " and the message, and a pointer to --help; returns EXIT_USAGE. */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* task_open with the error printed: 0 or EXIT_USAGE. */
int cli_load_task(const char *path, struct task **t);
/* The same with task_open_flags's flags (TASK_NO_PROC). */
int cli_load_task_flags(const char *path, unsigned flags, struct task **t);
/* arrayset_open with the error printed: 0, EXIT_USAGE (a configuration or cache directory
 * roifs may not use) or EXIT_RUNTIME. threads > 0: the command line's -j N. */
int cli_open_arrays(struct task *t, int threads, bool status_file, struct arrayset **s);
/* ---- options (common.c): one getopt_long table for every command ---- */

/* The options a command accepts (cli_parse_args's accepted). */
enum cli_opt {
    CLI_JOBS = 1 << 0,       /* -j N, --jobs=N: threads of warm, export, apply */
    CLI_FOREGROUND = 1 << 1, /* -f, --foreground (mount) */
    CLI_DEBUG = 1 << 2,      /* -d, --debug (mount) */
    CLI_OPTIONS = 1 << 3,    /* -o LIST, --options=LIST (mount): FUSE and mount(8) options */
    CLI_AGAIN = 1 << 4,      /* --again (apply) */
    CLI_INTO = 1 << 5,       /* --into=IMAGE (export) */
    CLI_OVERWRITE = 1 << 6,  /* --overwrite (export --into) */
    CLI_UNUSED = 1 << 7,     /* --unused (clean) */
    CLI_WELLS = 1 << 8,      /* --wells=LIST (warm, export): a plate's wells */
};

struct cli_args {
    int threads; /* -j N; 0 when absent */
    bool foreground, debug, again, overwrite, unused;
    const char *into;
    const char *wells; /* --wells LIST, or NULL */
    char *options;     /* every -o LIST joined by commas, as given (mount.c filters it); or NULL */
    char **operands;   /* what is not an option, in order (into argv) */
    int noperands;
};

/* Parses argv (argv[0] the command, cmd its name in messages; NULL for none) with
 * getopt_long: short options may be joined to their value or not (-j4, -j 4), long ones take
 * it after = or as the next argument (--jobs=4, --jobs 4), options may come after operands,
 * and "--" ends them. An option not in accepted, a missing or unexpected value, or a bad -j
 * is bad usage. 0, or EXIT_USAGE (message printed). Free with cli_args_free. */
int cli_parse_args(int argc, char **argv, const char *cmd, unsigned accepted, struct cli_args *a);
void cli_args_free(struct cli_args *a);

/* What directory dir holds: "cache", "older cache" (an older roifs's layout), or NULL. */
const char *cli_cache_layout(const char *dir);

/* ---- the cache (gc.c) ---- */

/* "512 B", "1.5 MiB". */
void cli_format_bytes(uint64_t n, char *buf, size_t len);
/* The rest of check's "cache:" line and the lines after it: the ROIs and chunks cached,
 * stale and to compute. */
void cli_print_census(const struct task *t, struct cache *c);
/* roifs clean --unused CONFIG: the exit status. */
int cli_clean_unused(const char *config);
/* fn on each selected image of plate task t, each its own task (without its processor); an
 * image that cannot be opened is named with why (exit status 1, the others done). The first
 * non-zero status. */
int cli_each_plate_image(const struct task *t, int (*fn)(struct task *image));
/* EXIT_USAGE (after saying why) when an unfinished `roifs apply` needs the cache of t
 * (common.c). */
int cli_refuse_unfinished_apply(const struct task *t);
/* A command that does not take an HCS plate yet (docs/plates.md, Limits): EXIT_USAGE with a
 * message when t is a plate's, else 0. */
int cli_refuse_plate(const struct task *t, const char *what);
/* --wells LIST (warm, export): t's plate narrowed to those of its selected wells. 0 (also
 * without LIST), or EXIT_USAGE (said why) for a configuration that is no plate's or a well
 * it does not select. */
int cli_narrow_wells(struct task *t, const char *wells);

/* "12s", "3m05s", "1h02m"; "?" for a negative or infinite time. */
void cli_format_duration(double seconds, char *buf, size_t n);

/* Each command: argv[0] is the command name. Returns the exit status. */
int cmd_mount(int argc, char **argv);
/* mount(8) and fstab: `roifs CONFIG MOUNTPOINT [-o OPTIONS]`, as mount.fuse3 runs it. */
int cmd_mount_helper(int argc, char **argv);
int cmd_unmount(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_warm(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_clean(int argc, char **argv);
int cmd_apply(int argc, char **argv);
/* serve.c: `roifs serve` (src/serve/, docs/serve.md) */
int cmd_serve(int argc, char **argv);

/* ---- the runner (runner.c): every listed chunk through the set's engines ---- */

struct run_spec {
    const char *verb;    /* "warm", "export": names the progress lines */
    const uint64_t *ids; /* the chunks to compute, in the order to ask for them */
    const int *arrays;   /* the array of the set each belongs to (NULL: all array 0) */
    size_t n;
    /* Called once per chunk that is in the cache (on a compute thread, or the calling one),
     * with k its index in ids, fd the cached chunk (borrowed) and meta its record (what it
     * was made of; NULL when it has none). NULL: nothing to do. Returns 0, or -errno with a
     * message in err (the chunk counts as failed). */
    int (*chunk_ready)(void *ctx, size_t k, int fd, const struct cache_chunk_meta *meta,
                       struct errbuf *err);
    void *ctx;
    /* NULL, or called (on the driving thread) for more of each progress report: text that
     * follows the chunk counts, such as ", 3 chunks replaced". */
    void (*describe)(void *ctx, char *buf, size_t len);
};

/* Starts the engines of s, opens every chunk of spec (a bounded number at a time), shows
 * progress on stderr (a bar on a terminal, a line every few seconds otherwise), and stops the
 * engines, which keep finished work in the caches. SIGINT and SIGTERM stop it. Returns 0,
 * EXIT_RUNTIME after naming the failed ROIs and chunks, or 128 + the signal number when
 * interrupted. */
int run_chunks(struct arrayset *s, const struct run_spec *spec);

/* Prints a message above the progress bar (which is redrawn at the next tick). */
void run_message(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
