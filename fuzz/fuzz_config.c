/* fuzz_config.c: libFuzzer harness for the configuration parser (config_load). config_load
 * reads a file, so each input is written to a memfd and loaded through /proc/self/fd. Any
 * bytes must either be rejected with a "FILE[:LINE]: ..." message or give a configuration
 * that satisfies the invariants config.h documents. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config.h"

#define FUZZ_NAME "fuzz_config"
#include "fuzz.h"

static int ini_fd = -1;
static char ini_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    ini_fd = memfd_create("fuzz.ini", 0);
    if (ini_fd < 0) {
        perror("fuzz_config: memfd_create");
        abort();
    }
    snprintf(ini_path, sizeof ini_path, "/proc/self/fd/%d", ini_fd);
    return 0;
}

static void check_config(const struct config *cfg)
{
    FUZZ_ASSERT(cfg->path && cfg->dir && cfg->input_path, "missing required paths");
    /* absolute, or a URL with a host (a remote input, docs/remote.md) */
    bool url = !strncmp(cfg->input_path, "http://", 7) || !strncmp(cfg->input_path, "https://", 8);
    const char *host = url ? strstr(cfg->input_path, "://") + 3 : NULL;
    FUZZ_ASSERT(cfg->input_path[0] == '/' || (url && *host && *host != '/'),
                "input path '%s' is neither absolute nor a URL with a host", cfg->input_path);
    /* [measure] labels = NAME alone measures: no [process], no [rois] (docs/measurements.md) */
    bool measures_only = cfg->measure_labels && cfg->proc_kind == PROC_NONE;
    FUZZ_ASSERT(measures_only || (cfg->rois_kind != ROIS_NONE && cfg->proc_kind != PROC_NONE),
                "no rois/process");
    FUZZ_ASSERT(measures_only || (cfg->proc_value && cfg->proc_value[0]), "empty processor");
    FUZZ_ASSERT(cfg->rois_kind != ROIS_FILE || (cfg->rois_file && cfg->rois_file[0] == '/'),
                "rois file");
    FUZZ_ASSERT(cfg->threads >= 1 && cfg->threads <= 1024, "threads %d", cfg->threads);
    FUZZ_ASSERT(cfg->readahead >= 0 || cfg->readahead == READAHEAD_AUTO, "readahead %d",
                cfg->readahead);
    FUZZ_ASSERT(cfg->format == 2 || cfg->format == 3, "format %d", cfg->format);
    FUZZ_ASSERT(cfg->dimension_separator == '.' || cfg->dimension_separator == '/', "separator");
    FUZZ_ASSERT(cfg->timeout >= 0, "timeout");
    FUZZ_ASSERT(cfg->clevel >= 0 && cfg->clevel <= 22, "clevel %d", cfg->clevel);
    FUZZ_ASSERT(cfg->grid_ndim >= 0 && cfg->grid_ndim <= ROIFS_MAX_DIM, "grid_ndim");
    FUZZ_ASSERT(cfg->halo_ndim >= 0 && cfg->halo_ndim <= ROIFS_MAX_DIM, "halo_ndim");
    FUZZ_ASSERT(cfg->chunks_ndim >= 0 && cfg->chunks_ndim <= ROIFS_MAX_DIM, "chunks_ndim");
    for (int d = 0; d < cfg->chunks_ndim; d++)
        FUZZ_ASSERT(cfg->chunks[d] >= 1, "chunks[%d] = 0", d);
    for (int d = 0; d < cfg->grid_ndim; d++)
        FUZZ_ASSERT(cfg->grid[d] >= 1, "grid[%d] = 0", d);
    for (int i = 0; i < cfg->nparams; i++) {
        FUZZ_ASSERT(cfg->params[i].name[0] && cfg->params[i].value, "param %d", i);
        FUZZ_ASSERT(config_param(cfg, cfg->params[i].name) == &cfg->params[i],
                    "duplicate param '%s'", cfg->params[i].name);
        FUZZ_ASSERT(cfg->params[i].line >= 1, "param line");
    }
    FUZZ_ASSERT(config_line(cfg, "input", "path") >= 1, "line of [input] path");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (ftruncate(ini_fd, 0) < 0 || pwrite(ini_fd, data, size, 0) != (ssize_t)size)
        abort();
    struct config cfg;
    struct errbuf err;
    err.msg[0] = '\0';
    int r = config_load(ini_path, &cfg, &err);
    if (r < 0) {
        FUZZ_ASSERT(strncmp(err.msg, ini_path, strlen(ini_path)) == 0,
                    "message does not name the file: '%s'", err.msg);
        return 0;
    }
    FUZZ_ASSERT(r == 0, "config_load returned %d", r);
    check_config(&cfg);
    config_free(&cfg);
    return 0;
}
