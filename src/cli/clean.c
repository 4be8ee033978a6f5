/* clean.c: `roifs clean CONFIG`: deletes the cache directory of CONFIG, only when it is a
 * roifs cache; `clean --unused CONFIG` (gc.c) removes only what no current key names. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../plate/plate.h"
#include "cli.h"

static int remove_tree(const char *path)
{
    pid_t pid = fork();
    if (pid == 0) {
        execlp("rm", "rm", "-rf", "--", path, (char *)NULL);
        _exit(127);
    }
    int status;
    return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
                   WEXITSTATUS(status) == 0
               ? 0
               : -1;
}

/* Deletes t's cache directory when it is a roifs cache. */
static int clean_task(struct task *t)
{
    int r = 0;
    struct stat st;
    if (stat(t->cache_dir, &st) < 0) {
        printf("nothing to delete: no cache at %s\n", t->cache_dir);
    } else if (!cli_cache_layout(t->cache_dir)) {
        fprintf(stderr,
                "roifs: %s: not a roifs cache directory (no roifs format marker); not deleting "
                "it\n",
                t->cache_dir);
        r = EXIT_RUNTIME;
    } else if (remove_tree(t->cache_dir) < 0) {
        fprintf(stderr, "roifs: %s: cannot delete\n", t->cache_dir);
        r = EXIT_RUNTIME;
    } else {
        printf("deleted %s\n", t->cache_dir);
    }
    return r;
}

int cmd_clean(int argc, char **argv)
{
    struct cli_args o;
    int r = cli_parse_args(argc, argv, "clean", CLI_UNUSED, &o);
    if (r)
        return r;
    if (o.noperands != 1)
        return cli_usage_error("clean needs exactly one CONFIG");
    if (o.unused)
        return cli_clean_unused(o.operands[0]);
    struct task *t;
    r = cli_load_task_flags(o.operands[0], TASK_NO_PROC, &t);
    if (r)
        return r;
    if (t->plate) /* each image's own cache directory (docs/plates.md) */
        r = cli_each_plate_image(t, clean_task);
    else if (!(r = cli_refuse_unfinished_apply(t)))
        r = clean_task(t);
    task_close(t);
    return r;
}
