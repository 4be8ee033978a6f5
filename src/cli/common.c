/* common.c: what every command shares: usage messages, loading the task, opening its arrays
 * and caches, the options (one getopt_long table), and what a cache directory holds. */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../apply/apply.h"
#include "../plate/plate.h"
#include "cli.h"

int cli_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("roifs: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\n(see roifs --help)\n", stderr);
    va_end(ap);
    return EXIT_USAGE;
}

int cli_load_task(const char *path, struct task **t)
{
    return cli_load_task_flags(path, 0, t);
}

int cli_load_task_flags(const char *path, unsigned flags, struct task **t)
{
    struct errbuf err = {{0}};
    if (task_open_flags(path, flags, t, &err) < 0) {
        fprintf(stderr, "roifs: %s\n", err.msg);
        return EXIT_USAGE;
    }
    return 0;
}

int cli_open_arrays(struct task *t, int threads, bool status_file, struct arrayset **s)
{
    struct errbuf err = {{0}};
    struct arrayset_opts o = {.threads = threads, .status_file = status_file};
    int r = arrayset_open(t, &o, s, &err);
    if (r < 0) {
        *s = NULL;
        fprintf(stderr, "roifs: %s\n", err.msg);
        return r == -EINVAL ? EXIT_USAGE : EXIT_RUNTIME;
    }
    return 0;
}

/* ---- options ---- */

/* Long-only options take values past any character. */
enum { OPT_AGAIN = 256, OPT_INTO, OPT_OVERWRITE, OPT_UNUSED, OPT_WELLS };

/* Every option of every command, by the flag that lets a command accept it: a new option is
 * one line here and one case in cli_parse_args. */
static const struct {
    unsigned flag;
    struct option opt;
} option_table[] = {
    {CLI_JOBS, {"jobs", required_argument, NULL, 'j'}},
    {CLI_FOREGROUND, {"foreground", no_argument, NULL, 'f'}},
    {CLI_DEBUG, {"debug", no_argument, NULL, 'd'}},
    {CLI_OPTIONS, {"options", required_argument, NULL, 'o'}},
    {CLI_AGAIN, {"again", no_argument, NULL, OPT_AGAIN}},
    {CLI_INTO, {"into", required_argument, NULL, OPT_INTO}},
    {CLI_OVERWRITE, {"overwrite", no_argument, NULL, OPT_OVERWRITE}},
    {CLI_UNUSED, {"unused", no_argument, NULL, OPT_UNUSED}},
    {CLI_WELLS, {"wells", required_argument, NULL, OPT_WELLS}},
};
#define NOPTIONS (sizeof option_table / sizeof option_table[0])

static int parse_jobs(const char *cmd, const char *value, int *threads)
{
    uint64_t j;
    if (parse_u64(value, &j) < 0 || j == 0 || j > 1024)
        return cli_usage_error("%s: -j needs a number of threads from 1 to 1024, not '%s'", cmd,
                               value);
    *threads = (int)j;
    return 0;
}

/* The message for what getopt_long refused (c: '?' or ':'). */
static int option_error(const char *cmd, int c, char **argv, const struct option *longopts)
{
    const char *pre = cmd ? cmd : "", *sep = cmd ? ": " : "";
    const char *arg = optind > 0 ? argv[optind - 1] : "?";
    if (c == ':')
        return cli_usage_error("%s%soption '%s' needs a value", pre, sep, arg);
    bool known = false;
    for (const struct option *o = longopts; o->name && optopt; o++)
        known = known || o->val == optopt;
    if (known) /* a long option without a value given one: --again=1 */
        return cli_usage_error("%s%soption '%s' takes no value", pre, sep, arg);
    if (optopt > 0 && optopt < 256)
        return cli_usage_error("%s%sunknown option '-%c'", pre, sep, optopt);
    return cli_usage_error("%s%sunknown option '%s'", pre, sep, arg);
}

int cli_parse_args(int argc, char **argv, const char *cmd, unsigned accepted, struct cli_args *a)
{
    struct option longopts[NOPTIONS + 1];
    char shortopts[2 * NOPTIONS + 2] = ":"; /* ':': a missing value is told apart */
    size_t n = 0, ns = 1;
    for (size_t i = 0; i < NOPTIONS; i++) {
        if (!(accepted & option_table[i].flag))
            continue;
        longopts[n++] = option_table[i].opt;
        if (option_table[i].opt.val < 256) {
            shortopts[ns++] = (char)option_table[i].opt.val;
            if (option_table[i].opt.has_arg == required_argument)
                shortopts[ns++] = ':';
        }
    }
    shortopts[ns] = '\0';
    longopts[n] = (struct option){0};
    memset(a, 0, sizeof *a);
    opterr = 0;
    optind = 0; /* start afresh (glibc) */
    int c, r = 0;
    while (r == 0 && (c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
        switch (c) {
        case 'j':
            r = parse_jobs(cmd ? cmd : "roifs", optarg, &a->threads);
            break;
        case 'f':
            a->foreground = true;
            break;
        case 'd':
            a->debug = true;
            break;
        case 'o': {
            char *joined = a->options ? xasprintf("%s,%s", a->options, optarg) : xstrdup(optarg);
            free(a->options);
            a->options = joined;
            break;
        }
        case OPT_AGAIN:
            a->again = true;
            break;
        case OPT_INTO:
            a->into = optarg;
            break;
        case OPT_OVERWRITE:
            a->overwrite = true;
            break;
        case OPT_UNUSED:
            a->unused = true;
            break;
        case OPT_WELLS:
            a->wells = optarg;
            break;
        default:
            r = option_error(cmd, c, argv, longopts);
        }
    }
    if (r) {
        cli_args_free(a);
        return r;
    }
    a->operands = argv + optind;
    a->noperands = argc - optind;
    return 0;
}

void cli_args_free(struct cli_args *a)
{
    free(a->options);
    a->options = NULL;
}

/* The text of dir/name (a small regular file), or NULL. */
static char *read_marker(const char *dir, const char *name)
{
    char *path = path_join(dir, name), *text = NULL;
    struct stat st;
    if (lstat(path, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > 4096 ||
        file_read_all(path, &text, NULL) < 0)
        text = NULL;
    free(path);
    return text;
}

/* "cache", "older cache" (an older roifs's layout) or NULL: what dir holds. */
const char *cli_cache_layout(const char *dir)
{
    char *format = read_marker(dir, "format"), *manifest = NULL;
    const char *what = NULL;
    if (format && strcmp(format, CACHE_FORMAT_TEXT) == 0)
        what = "cache";
    else if (format &&
             (strcmp(format, "roifs-cache 2\n") == 0 || strcmp(format, "roifs-cache 3\n") == 0))
        what = "older cache";
    else if ((manifest = read_marker(dir, "manifest")) && strncmp(manifest, "roifs-", 6) == 0)
        what = "older cache";
    free(format);
    free(manifest);
    return what;
}

int cli_refuse_unfinished_apply(const struct task *t)
{
    struct errbuf err = {{0}};
    if (apply_refuse_unfinished(t, &err) < 0) {
        fprintf(stderr, "roifs: %s\n", err.msg);
        return EXIT_USAGE;
    }
    return 0;
}

int cli_refuse_plate(const struct task *t, const char *what)
{
    if (!t->plate)
        return 0;
    fprintf(stderr, "roifs: %s: %s does not take an HCS plate yet (docs/plates.md)\n", t->cfg.path,
            what);
    return EXIT_USAGE;
}

int cli_narrow_wells(struct task *t, const char *wells)
{
    if (!wells)
        return 0;
    if (!t->plate) {
        fprintf(stderr, "roifs: %s: --wells: the input is no HCS plate\n", t->cfg.path);
        return EXIT_USAGE;
    }
    struct plate *np;
    struct errbuf err = {{0}};
    if (plate_open(t->plate->dir, wells, t->cfg.acquisition, &np, &err) < 0) {
        fprintf(stderr, "roifs: %s: --wells: %s\n", t->cfg.path, err.msg);
        return EXIT_USAGE;
    }
    for (size_t i = 0; i < np->nwells; i++) {
        bool selected = false;
        for (size_t j = 0; j < t->plate->nwells && !selected; j++)
            selected = strcmp(np->wells[i], t->plate->wells[j]) == 0;
        if (!selected) {
            fprintf(stderr, "roifs: %s: --wells: %s is not a well the configuration selects\n",
                    t->cfg.path, np->wells[i]);
            plate_free(np);
            return EXIT_USAGE;
        }
    }
    plate_free(t->plate);
    t->plate = np;
    return 0;
}

int cli_each_plate_image(const struct task *t, int (*fn)(struct task *image))
{
    int r = 0;
    for (size_t k = 0; k < t->plate->n; k++) {
        const struct plate_image *im = &t->plate->images[k];
        struct errbuf err = {{0}};
        struct task *it = NULL;
        int e = im->error ? err_set(&err, -EINVAL, "%s", im->error)
                          : task_open_image(t->cfg.path, im, TASK_NO_PROC, &it, &err);
        printf("image %s:\n", im->path_in_plate);
        if (e < 0) {
            fprintf(stderr, "roifs: image %s cannot be opened, its cache not looked at: %s\n",
                    im->path_in_plate, err.msg);
            r = r ? r : EXIT_RUNTIME;
            continue;
        }
        e = fn(it);
        r = r ? r : e;
        task_close(it);
    }
    return r;
}
