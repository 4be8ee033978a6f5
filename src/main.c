/* main.c: the roifs command line (docs/operations.md): dispatches to the commands in cli/. Also
 * accepts `roifs CONFIG MOUNTPOINT -o OPTIONS`, the form mount(8) and fstab use through
 * mount.fuse3. Exit status: 0 success, 1 failure at run time, 2 bad usage, configuration or input.
 */
#include <pwd.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"

static const char usage_text[] =
    "usage: roifs mount [-f] [-d] [-o FUSE_OPTIONS] CONFIG MOUNTPOINT\n"
    "       roifs unmount MOUNTPOINT\n"
    "       roifs check CONFIG           validate; print shape, ROI count, chunks, cache state\n"
    "       roifs warm [-j N] CONFIG     compute everything into the cache, with progress\n"
    "       roifs export [-j N] CONFIG DEST   write the result as a plain Zarr array at DEST\n"
    "       roifs export [-j N] --into IMAGE [--overwrite] CONFIG\n"
    "                                         ome = labels: add labels/NAME, tables/NAME to IMAGE\n"
    "       roifs status MOUNTPOINT      summary of MOUNTPOINT/.roifs/status\n"
    "       roifs apply [-j N] [--again] CONFIG   write the result into the input array\n"
    "       roifs clean CONFIG           delete the cache of CONFIG\n"
    "       roifs clean --unused CONFIG  remove what no ROI or chunk of CONFIG needs now\n"
    "       roifs serve [--listen ADDR:PORT] [--token-file F] [--cors ORIGINS]\n"
    "                   [--tls-cert F --tls-key F] [--listings] [-d] CONFIG\n"
    "                                         the same tree over HTTP\n"
    "       roifs --help | --version\n"
    "       roifs CONFIG MOUNTPOINT [-o OPTIONS]   as mount(8) runs it: mount -t fuse.roifs\n"
    "\n"
    "options: -j N, --jobs=N   compute N ROIs at once (1 to 1024)\n"
    "         -f, --foreground  -d, --debug  -o LIST, --options=LIST (mount)\n"
    "         -j4, -j 4, --jobs=4 and --jobs 4 are the same; -- ends the options\n"
    "\n"
    "roifs presents out[roi] = f(in[roi]) over a list of regions of interest as a read-only\n"
    "Zarr array, computing each ROI once, in parallel, when a reader first opens a chunk.\n"
    "See roifs(1).\n";

static const struct command {
    const char *name;
    int (*fn)(int, char **);
} commands[] = {
    // clang-format off
    {"mount", cmd_mount},   {"unmount", cmd_unmount}, {"umount", cmd_unmount},
    {"check", cmd_check},   {"warm", cmd_warm},       {"export", cmd_export},
    {"status", cmd_status}, {"clean", cmd_clean},     {"apply", cmd_apply},
    {"serve", cmd_serve},
    // clang-format on
};

/* mount(8) runs helpers with a cleaned environment, without HOME: find it the way a login
 * would, so that the default cache is the same as for `roifs mount`. */
static void ensure_home(void)
{
    const char *home = getenv("HOME");
    if (home && home[0])
        return;
    struct passwd *pw = getpwuid(getuid());
    if (pw && pw->pw_dir && pw->pw_dir[0] == '/')
        setenv("HOME", pw->pw_dir, 1);
}

/* ROIs of a task are mostly of one size (a FOV, a tile): their input, output and result
 * buffers, some MB each, are freed and asked for again at every ROI. glibc's default mmap()s
 * each of them afresh past a threshold (and trims freed memory), so that every ROI faulted in
 * and zeroed its buffers again: with large buffers kept in the heap, a ROI reuses the memory
 * of the last one (in a segmentation of 1080x1280 FOVs, the daemon's CPU time halved). The
 * peak memory is the same; freed memory goes back to the system past 256 MiB. A
 * GLIBC_TUNABLES of the user's own is left as it is. */
static void tune_malloc(void)
{
    if (getenv("GLIBC_TUNABLES"))
        return;
    mallopt(M_MMAP_THRESHOLD, 32 << 20); /* the largest glibc takes */
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    tune_malloc();
    ensure_home();
    if (argc < 2)
        return cli_usage_error("missing command");
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("roifs %s\n", ROIFS_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(cmd, commands[i].name) == 0)
            return commands[i].fn(argc - 1, argv + 1);
    struct stat st;
    if (cmd[0] != '-' && stat(cmd, &st) == 0 && S_ISREG(st.st_mode))
        return cmd_mount_helper(argc, argv);
    return cli_usage_error("unknown command '%s'", cmd);
}
