/* common.c: what every command shares: usage messages, loading the task, opening its arrays
 * and caches, the -j option, and what a cache directory holds. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

int cli_usage_error(const char *fmt, const char *arg)
{
    fputs("roifs: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs("\n(see roifs --help)\n", stderr);
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

int cli_parse_jobs(int argc, char **argv, int *threads, int *next)
{
    *threads = 0;
    *next = 1;
    if (argc < 3 || strcmp(argv[1], "-j") != 0)
        return 0;
    uint64_t j;
    if (parse_u64(argv[2], &j) < 0 || j == 0 || j > 1024) {
        fprintf(stderr,
                "roifs: %s: -j needs a number of threads from 1 to 1024, not '%s'\n"
                "(see roifs --help)\n",
                argv[0], argv[2]);
        return EXIT_USAGE;
    }
    *threads = (int)j;
    *next = 3;
    return 0;
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
    else if (format && strcmp(format, "roifs-cache 2\n") == 0)
        what = "older cache";
    else if ((manifest = read_marker(dir, "manifest")) && strncmp(manifest, "roifs-", 6) == 0)
        what = "older cache";
    free(format);
    free(manifest);
    return what;
}
