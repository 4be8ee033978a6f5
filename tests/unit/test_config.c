/* test_config.c: unit tests of the configuration loader (config.c): values, defaults, paths
 * and every kind of error message with its file and line. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "config.h"

static char tmpdir[256];
static char cfg_path[512];

/* Writes text to TMPDIR/task.ini (the path used by load()). */
static void write_cfg(const char *text)
{
    FILE *f = fopen(cfg_path, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    fputs(text, f);
    fclose(f);
}

static int load(const char *text, struct config *cfg, struct errbuf *err)
{
    write_cfg(text);
    err->msg[0] = '\0';
    return config_load(cfg_path, cfg, err);
}

/* Loads text, expects -EINVAL and a message starting with the path and containing each
 * needle (NULL-terminated list). */
#define EXPECT_ERROR(text, ...) expect_error(__LINE__, text, (const char *[]){__VA_ARGS__, NULL})
static void expect_error(int line, const char *text, const char **needles)
{
    struct config cfg;
    struct errbuf err;
    int r = load(text, &cfg, &err);
    if (r != -EINVAL)
        fprintf(stderr, "test line %d: config_load returned %d\n", line, r);
    CHECK_EQ_INT(r, -EINVAL);
    CHECK(strncmp(err.msg, cfg_path, strlen(cfg_path)) == 0);
    CHECK(strstr(err.msg, "roifs:") == NULL);
    for (const char **n = needles; *n; n++) {
        if (!strstr(err.msg, *n))
            fprintf(stderr, "test line %d:\n", line);
        CHECK_STR_CONTAINS(err.msg, *n);
    }
    CHECK(cfg.path == NULL && cfg.lines == NULL); /* freed on failure */
    if (getenv("SHOW_MESSAGES"))
        printf("  %s\n", err.msg);
}

#define BASE "[input]\npath = in.zarr\n[rois]\ngrid = 1,64,64\n[process]\nbuiltin = copy\n"

static const char full_text[] = "; a full configuration\n"
                                "[input]\n"
                                "path = data/in.zarr   ; inline comment\n"
                                "level = 2\n"
                                "[rois]\n"
                                "file = rois.txt\n"
                                "halo = 0, 16,16\n"
                                "rounding = ngio\n"
                                "[process]\n"
                                "command = python3 f.py --x=1 \"a b\"\n"
                                "threads = 3\n"
                                "readahead = 7\n"
                                "timeout = 2.5\n"
                                "retries = 2\n"
                                "executor = slurm\n"
                                "param.sigma = 2.0\n"
                                "param.mode-x = fast\n"
                                "[output]\n"
                                "format = 3\n"
                                "dtype = <f4\n"
                                "chunks = 1,128,128\n"
                                "fill_value = nan\n"
                                "outside = input\n"
                                "compressor = blosc\n"
                                "clevel = 9\n"
                                "cname = zstd\n"
                                "shuffle = bitshuffle\n"
                                "dimension_separator = /\n"
                                "shard = 1,256,256\n"
                                "ome = yes\n"
                                "levels = 3\n"
                                "downsample = nearest\n"
                                "[slurm]\n"
                                "partition = gpu\n"
                                "cpus_per_task = 4\n"
                                "mem = 8G\n"
                                "gres = gpu:1\n"
                                "time = 01:00:00\n"
                                "extra = --qos=high --exclusive\n"
                                "[mount]\n"
                                "log = logs/roifs.log\n"
                                "[cache]\n"
                                "dir = /var/tmp/roifs-cache\n"
                                "max_size = 2G\n";

/* [output], [slurm], [mount] and [cache] of full_text. */
static void check_full_output(const struct config *cfg)
{
    char buf[600];
    CHECK_EQ_INT(cfg->format, 3);
    CHECK(strcmp(cfg->dtype, "<f4") == 0);
    CHECK_EQ_INT(cfg->chunks_ndim, 3);
    CHECK(cfg->chunks[0] == 1 && cfg->chunks[1] == 128 && cfg->chunks[2] == 128);
    CHECK(strcmp(cfg->fill_value, "nan") == 0);
    CHECK_EQ_INT(cfg->outside, OUTSIDE_INPUT);
    CHECK(cfg->compressor == COMPRESSOR_BLOSC);
    CHECK_EQ_INT(cfg->clevel, 9);
    CHECK(strcmp(cfg->cname, "zstd") == 0);
    CHECK_EQ_INT(cfg->shuffle, 2);
    CHECK_EQ_INT(cfg->dimension_separator, '/');
    CHECK_EQ_INT(cfg->shard_ndim, 3);
    CHECK(cfg->shard[2] == 256);
    CHECK(cfg->ome);
    CHECK_EQ_INT(cfg->levels, 3);
    CHECK(cfg->downsample == DOWNSAMPLE_NEAREST);
    CHECK(strcmp(cfg->slurm_partition, "gpu") == 0);
    CHECK_EQ_INT(cfg->slurm_cpus_per_task, 4);
    CHECK(strcmp(cfg->slurm_mem, "8G") == 0);
    CHECK(strcmp(cfg->slurm_gres, "gpu:1") == 0);
    CHECK(strcmp(cfg->slurm_time, "01:00:00") == 0);
    CHECK(strcmp(cfg->slurm_extra, "--qos=high --exclusive") == 0);
    snprintf(buf, sizeof buf, "%s/logs/roifs.log", tmpdir);
    CHECK(strcmp(cfg->log_path, buf) == 0);
    CHECK(strcmp(cfg->cache_dir, "/var/tmp/roifs-cache") == 0);
    CHECK(cfg->max_size == 2ULL << 30);
}

static void test_full(void)
{
    struct config cfg;
    struct errbuf err;
    int r = load(full_text, &cfg, &err);
    CHECK_EQ_INT(r, 0);
    if (r != 0) {
        fprintf(stderr, "%s\n", err.msg);
        return;
    }
    char buf[600];
    snprintf(buf, sizeof buf, "%s/data/in.zarr", tmpdir);
    CHECK(strcmp(cfg.input_path, buf) == 0);
    CHECK(strcmp(cfg.dir, tmpdir) == 0);
    CHECK(strcmp(cfg.path, cfg_path) == 0);
    CHECK_EQ_INT(cfg.level, 2);
    CHECK_EQ_INT(cfg.rois_kind, ROIS_FILE);
    snprintf(buf, sizeof buf, "%s/rois.txt", tmpdir);
    CHECK(strcmp(cfg.rois_file, buf) == 0);
    CHECK(cfg.rois_table == NULL);
    CHECK_EQ_INT(cfg.halo_ndim, 3);
    CHECK(cfg.halo[0] == 0 && cfg.halo[1] == 16 && cfg.halo[2] == 16);
    CHECK(cfg.rounding == ROUNDING_NGIO);
    CHECK_EQ_INT(cfg.proc_kind, PROC_COMMAND);
    CHECK(strcmp(cfg.proc_value, "python3 f.py --x=1 \"a b\"") == 0);
    CHECK_EQ_INT(cfg.threads, 3);
    CHECK_EQ_INT(cfg.readahead, 7);
    CHECK(cfg.timeout == 2.5);
    CHECK_EQ_INT(cfg.retries, 2);
    CHECK(cfg.executor == EXECUTOR_SLURM);
    CHECK_EQ_INT(cfg.nparams, 2);
    check_full_output(&cfg);
    CHECK_EQ_INT(config_line(&cfg, "input", "path"), 3);
    CHECK_EQ_INT(config_line(&cfg, "output", "chunks"), 21);
    CHECK_EQ_INT(config_line(&cfg, "cache", "max_size"), 44);
    CHECK_EQ_INT(config_line(&cfg, "process", "param.sigma"), 16);
    CHECK_EQ_INT(config_line(&cfg, "output", "ome"), 30);
    CHECK_EQ_INT(config_line(&cfg, "output", "nosuchkey"), 0);
    CHECK_EQ_INT(config_line(&cfg, "mount", "chunks"), 0);
    config_free(&cfg);
    config_free(&cfg); /* harmless twice */
}

static void test_defaults(void)
{
    struct config cfg;
    struct errbuf err;
    int r = load(BASE, &cfg, &err);
    CHECK_EQ_INT(r, 0);
    if (r != 0)
        return;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    CHECK_EQ_INT(cfg.threads, ncpu);
    CHECK_EQ_INT(cfg.readahead, READAHEAD_AUTO); /* the default follows the work */
    CHECK(!cfg.readahead_is_threads);
    CHECK_EQ_INT(cfg.level, 0);
    CHECK_EQ_INT(cfg.rois_kind, ROIS_GRID);
    CHECK_EQ_INT(cfg.grid_ndim, 3);
    CHECK(cfg.grid[0] == 1 && cfg.grid[1] == 64 && cfg.grid[2] == 64);
    CHECK_EQ_INT(cfg.halo_ndim, 0);
    CHECK(cfg.rounding == ROUNDING_FRACTAL);
    CHECK_EQ_INT(cfg.proc_kind, PROC_BUILTIN);
    CHECK(strcmp(cfg.proc_value, "copy") == 0);
    CHECK(cfg.timeout == 0);
    CHECK_EQ_INT(cfg.retries, 0);
    CHECK(cfg.retry_after == -1); /* unset: the command's default */
    CHECK(cfg.executor == EXECUTOR_LOCAL);
    CHECK_EQ_INT(cfg.nparams, 0);
    CHECK_EQ_INT(cfg.format, 2);
    CHECK(cfg.dtype == NULL);
    CHECK_EQ_INT(cfg.chunks_ndim, 0);
    CHECK(strcmp(cfg.fill_value, "0") == 0);
    CHECK_EQ_INT(cfg.outside, OUTSIDE_FILL);
    CHECK(cfg.compressor == COMPRESSOR_NONE);
    CHECK_EQ_INT(cfg.clevel, 5);
    CHECK(strcmp(cfg.cname, "lz4") == 0);
    CHECK_EQ_INT(cfg.shuffle, 1);
    CHECK_EQ_INT(cfg.dimension_separator, '.');
    CHECK_EQ_INT(cfg.shard_ndim, 0);
    CHECK(!cfg.ome);
    CHECK_EQ_INT(cfg.levels, 4);
    CHECK(cfg.downsample == DOWNSAMPLE_MEAN);
    CHECK(cfg.slurm_partition == NULL && cfg.slurm_extra == NULL);
    CHECK_EQ_INT(cfg.slurm_cpus_per_task, 1);
    CHECK(cfg.log_path == NULL && cfg.cache_dir == NULL);
    CHECK(cfg.max_size == 0);
    CHECK(config_param(&cfg, "sigma") == NULL);
    config_free(&cfg);

    /* readahead 0 stays off; threads given explicitly */
    r = load(BASE "threads = 5\nreadahead = 0\n", &cfg, &err);
    CHECK_EQ_INT(r, 0);
    CHECK_EQ_INT(cfg.threads, 5);
    CHECK_EQ_INT(cfg.readahead, 0);
    config_free(&cfg);
    r = load(BASE "threads = 6\nreadahead = -1\n", &cfg, &err);
    CHECK_EQ_INT(cfg.readahead, 6); /* -1: as many as threads */
    CHECK(cfg.readahead_is_threads);
    config_free(&cfg);
    r = load(BASE "threads = 6\n", &cfg, &err);
    CHECK_EQ_INT(cfg.readahead, READAHEAD_AUTO);
    config_free(&cfg);
    /* readahead = auto is resolved by the engine, as the work goes */
    r = load(BASE "threads = 3\nreadahead = auto\n", &cfg, &err);
    CHECK_EQ_INT(r, 0);
    CHECK_EQ_INT(cfg.readahead, READAHEAD_AUTO);
    config_free(&cfg);
}

static void test_params(void)
{
    struct config cfg;
    struct errbuf err;
    int r = load(BASE "param.zeta = 1\nparam.alpha = two words\nparam.x.y_z-1 = \n"
                      "param.B = 3 ; comment\n",
                 &cfg, &err);
    CHECK_EQ_INT(r, 0);
    if (r != 0)
        return;
    CHECK_EQ_INT(cfg.nparams, 4);
    CHECK(strcmp(cfg.params[0].name, "zeta") == 0 && strcmp(cfg.params[0].value, "1") == 0);
    CHECK(strcmp(cfg.params[1].name, "alpha") == 0);
    CHECK(strcmp(cfg.params[1].value, "two words") == 0);
    CHECK(strcmp(cfg.params[2].name, "x.y_z-1") == 0 && strcmp(cfg.params[2].value, "") == 0);
    CHECK(strcmp(cfg.params[3].name, "B") == 0 && strcmp(cfg.params[3].value, "3") == 0);
    CHECK_EQ_INT(cfg.params[0].line, 7);
    CHECK_EQ_INT(cfg.params[3].line, 10);
    const struct config_param *p = config_param(&cfg, "alpha");
    CHECK(p && p == &cfg.params[1]);
    CHECK(config_param(&cfg, "b") == NULL);
    config_free(&cfg);

    EXPECT_ERROR(BASE "param.a b = 1\n", "task.ini:7:", "param.a b", "invalid name");
    EXPECT_ERROR(BASE "param. = 1\n", "task.ini:7:", "invalid name");
    EXPECT_ERROR(BASE "param.s = 1\nparam.s = 2\n", "task.ini:8:", "duplicate key 'param.s'",
                 "line 7");
}

static void test_paths(void)
{
    struct config cfg;
    struct errbuf err;
    int r = load("[input]\npath = ./sub/../in.zarr\n[rois]\ntable = img.zarr/tables/FOV\n"
                 "[process]\nplugin = lib/libf.so\n[cache]\ndir = cache\n",
                 &cfg, &err);
    CHECK_EQ_INT(r, 0);
    if (r != 0)
        return;
    char buf[600];
    CHECK(cfg.input_path[0] == '/');
    CHECK_STR_CONTAINS(cfg.input_path, tmpdir);
    snprintf(buf, sizeof buf, "%s/img.zarr/tables/FOV", tmpdir);
    CHECK(strcmp(cfg.rois_table, buf) == 0);
    CHECK_EQ_INT(cfg.rois_kind, ROIS_TABLE);
    CHECK_EQ_INT(cfg.proc_kind, PROC_PLUGIN);
    snprintf(buf, sizeof buf, "%s/lib/libf.so", tmpdir);
    CHECK(strcmp(cfg.proc_value, buf) == 0);
    snprintf(buf, sizeof buf, "%s/cache", tmpdir);
    CHECK(strcmp(cfg.cache_dir, buf) == 0);
    config_free(&cfg);

    /* an existing input resolves to its real path; a relative config path becomes absolute */
    snprintf(buf, sizeof buf, "%s/in.zarr", tmpdir);
    CHECK_EQ_INT(mkdir_p(buf, 0755), 0);
    char cwd[512];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    CHECK_EQ_INT(chdir(tmpdir), 0);
    write_cfg("[input]\npath = ./in.zarr/\n[rois]\ngrid = 1\n[process]\nbuiltin = copy\n");
    r = config_load("task.ini", &cfg, &err);
    CHECK_EQ_INT(r, 0);
    if (r == 0) {
        CHECK(strcmp(cfg.input_path, buf) == 0);
        CHECK(strcmp(cfg.path, cfg_path) == 0);
        config_free(&cfg);
    }
    CHECK_EQ_INT(chdir(cwd), 0);
    rmdir(buf);
}

static void test_whitespace(void)
{
    struct config cfg;
    struct errbuf err;
    int r = load("\xef\xbb\xbf# comment\n"
                 "  [input]   \r\n"
                 "\tpath   =   in.zarr   ; the input\r\n"
                 "   level=1\n"
                 "\n"
                 "[rois]\n"
                 "  grid =  1 , 2,3 \n"
                 "[process]\n"
                 "    worker = python3 -u w.py --flag;notacomment\n"
                 "\ttimeout = 1e1\n"
                 "retry_after = 2.5 ; seconds\n",
                 &cfg, &err);
    CHECK_EQ_INT(r, 0);
    if (r != 0) {
        fprintf(stderr, "%s\n", err.msg);
        return;
    }
    CHECK_EQ_INT(cfg.level, 1);
    CHECK(cfg.grid[0] == 1 && cfg.grid[1] == 2 && cfg.grid[2] == 3);
    CHECK_EQ_INT(cfg.proc_kind, PROC_WORKER);
    CHECK(strcmp(cfg.proc_value, "python3 -u w.py --flag;notacomment") == 0);
    CHECK(cfg.timeout == 10.0);
    CHECK(cfg.retry_after == 2.5);
    CHECK_EQ_INT(config_line(&cfg, "input", "level"), 4);
    CHECK_EQ_INT(config_line(&cfg, "process", "timeout"), 10);
    config_free(&cfg);
}

static void test_unknown(void)
{
    EXPECT_ERROR(BASE "thread = 4\n", "task.ini:7: unknown key 'thread' in [process]",
                 "did you mean 'threads'");
    EXPECT_ERROR(BASE "frobnicate = 4\n", "task.ini:7: unknown key 'frobnicate' in [process]");
    EXPECT_ERROR(BASE "[output]\nchunk = 1,2,3\n", "task.ini:8: unknown key 'chunk' in [output]");
    EXPECT_ERROR(BASE "\n\n[proces]\nthreads = 2\n", "task.ini:9: unknown section [proces]");
    /* an unknown section without keys is still an error */
    EXPECT_ERROR("[input]\npath = x\n[bogus]\n[rois]\ngrid = 1\n[process]\nbuiltin = copy\n",
                 "task.ini:3: unknown section [bogus]");
    EXPECT_ERROR("path = x\n[input]\n", "task.ini:1:", "'path' outside of any section");
    EXPECT_ERROR("\xef\xbb\xbf[inputs]\n", "task.ini:1: unknown section [inputs]");
    /* keys are case-sensitive */
    EXPECT_ERROR(BASE "Threads = 2\n", "task.ini:7:", "unknown key 'Threads'");
}

static void test_syntax(void)
{
    EXPECT_ERROR(BASE "threads 4\n", "task.ini:7: syntax error", "threads 4");
    EXPECT_ERROR("[input\npath = x\n", "task.ini:1: syntax error", "[input");
    /* the first error in the file wins, whichever kind it is */
    EXPECT_ERROR("[input]\nno equals sign\npath = x\nbad = 1\n", "task.ini:2: syntax error");
    EXPECT_ERROR("[input]\nbad = 1\nno equals sign\n", "task.ini:2: unknown key 'bad'");

    char text[1024];
    char long_value[401];
    memset(long_value, 'x', 400);
    long_value[400] = '\0';
    /* a long line that is not "key = value" is still refused */
    snprintf(text, sizeof text, BASE "%s\n", long_value);
    EXPECT_ERROR(text, "task.ini:7: line too long (at most ");
    /* values longer than inih's line buffer are kept whole, inline comment removed */
    snprintf(text, sizeof text, BASE "param.long = %s   ; a comment\n", long_value);
    struct config cfg;
    struct errbuf err;
    CHECK_EQ_INT(load(text, &cfg, &err), 0);
    CHECK(cfg.nparams == 1 && strcmp(cfg.params[0].value, long_value) == 0);
    CHECK_EQ_INT(cfg.params[0].line, 7);
    config_free(&cfg);
    long_value[150] = '\0';
    snprintf(text, sizeof text, BASE "param.long = %s\n", long_value);
    CHECK_EQ_INT(load(text, &cfg, &err), 0);
    CHECK(cfg.nparams == 1 && strlen(cfg.params[0].value) == 150);
    config_free(&cfg);
}

static void test_values(void)
{
    EXPECT_ERROR(BASE "[output]\ncompressor = lz5\n",
                 "task.ini:8: [output] compressor: unknown value 'lz5' (expected none, blosc, "
                 "zstd, gzip or zlib)");
    EXPECT_ERROR(BASE "threads = 2000\n", "task.ini:7: [process] threads:", "2000", "0 to 1024");
    EXPECT_ERROR(BASE "threads = -1\n", "task.ini:7: [process] threads:", "-1");
    EXPECT_ERROR(BASE "threads = four\n", "task.ini:7:", "'four' is not an integer");
    EXPECT_ERROR(BASE "readahead = -2\n", "task.ini:7: [process] readahead:", "-2");
    EXPECT_ERROR(BASE "readahead = deep\n", "task.ini:7: [process] readahead:",
                 "'deep' is not a number of chunks, -1 or auto");
    EXPECT_ERROR(BASE "timeout = -1\n", "task.ini:7: [process] timeout:", "negative");
    EXPECT_ERROR(BASE "retry_after = -1\n", "task.ini:7: [process] retry_after:", "negative");
    EXPECT_ERROR(BASE "timeout = soon\n", "task.ini:7: [process] timeout:", "'soon'");
    EXPECT_ERROR(BASE "retries = -1\n", "task.ini:7: [process] retries:");
    EXPECT_ERROR(BASE "executor = pbs\n", "task.ini:7: [process] executor:", "'pbs'",
                 "local or slurm");
    EXPECT_ERROR(BASE "executor = slurm\n", "task.ini:7: [process] executor:", "command");
    EXPECT_ERROR("[input]\npath = x\nlevel = -1\n", "task.ini:3: [input] level:", "-1");
    EXPECT_ERROR("[input]\npath =\n", "task.ini:2: [input] path:", "empty value");
    /* a URL with no host (the config fuzzer's find: it reached the task as a path) */
    EXPECT_ERROR("[input]\npath = http://\n",
                 "task.ini:2: [input] path:", "'http://' names no host");
    EXPECT_ERROR("[input]\npath = https:///x.zarr\n", "task.ini:2: [input] path:", "no host");
    EXPECT_ERROR("[input]\npath = x\n[rois]\nfile = https://h/r.txt\n",
                 "task.ini:4: [rois] file:", "a URL is taken only by [input] path");
    EXPECT_ERROR("[input]\npath = x\n[rois]\ngrid = 1,0,4\n",
                 "task.ini:4: [rois] grid:", "entry 2 is 0");
    EXPECT_ERROR("[input]\npath = x\n[rois]\ngrid = 1,a,4\n",
                 "task.ini:4: [rois] grid:", "'1,a,4'");
    EXPECT_ERROR("[input]\npath = x\n[rois]\ngrid = 1,,4\n", "task.ini:4: [rois] grid:");
    EXPECT_ERROR(BASE "[rois]\nhalo = 0,-1,2\n", "task.ini:8: [rois] halo:", "'0,-1,2'");
    EXPECT_ERROR(BASE "[rois]\nrounding = up\n", "task.ini:8: [rois] rounding:", "'up'",
                 "fractal or ngio");
    EXPECT_ERROR(BASE "[output]\nformat = 4\n", "task.ini:8: [output] format:", "2 or 3");
    EXPECT_ERROR(BASE "[output]\nchunks = 1,0,64\n", "task.ini:8: [output] chunks:");
    EXPECT_ERROR(BASE "[output]\noutside = zero\n", "task.ini:8: [output] outside:", "'zero'");
    EXPECT_ERROR(BASE "[output]\nclevel = 10\n", "task.ini:8: [output] clevel:", "10");
    EXPECT_ERROR(BASE "[output]\nclevel = 23\ncompressor = zstd\n", "task.ini:8:", "clevel");
    EXPECT_ERROR(BASE "[output]\ncname = snappy\n", "task.ini:8: [output] cname:", "'snappy'");
    EXPECT_ERROR(BASE "[output]\nshuffle = yes\n",
                 "task.ini:8: [output] shuffle:", "noshuffle, shuffle or bitshuffle");
    EXPECT_ERROR(BASE "[output]\ndimension_separator = _\n",
                 "task.ini:8: [output] dimension_separator:", "'_'");
    EXPECT_ERROR(BASE "[output]\nshard = 1,128,128\n", "task.ini:8: [output] shard:", "format = 3");
    EXPECT_ERROR(BASE "[output]\nformat = 3\nchunks = 1,64,64\nshard = 1,96,128\n",
                 "task.ini:10: [output] shard:", "multiple");
    EXPECT_ERROR(BASE "[output]\nome = maybe\n", "task.ini:8: [output] ome:", "'maybe'");
    EXPECT_ERROR(BASE "[output]\nlevels = 0\n", "task.ini:8: [output] levels:");
    EXPECT_ERROR(BASE "[output]\ndownsample = max\n", "task.ini:8: [output] downsample:");
    EXPECT_ERROR(BASE "[output]\nchunks = 64,64\n", "task.ini:8: [output] chunks:", "2 entries",
                 "[rois] grid on line 4 has 3");
    EXPECT_ERROR(BASE "[slurm]\ncpus_per_task = 0\n", "task.ini:8: [slurm] cpus_per_task:");
    EXPECT_ERROR(BASE "[cache]\nmax_size = 10X\n", "task.ini:8: [cache] max_size:", "'10X'");

    /* accepted variants */
    struct config cfg;
    struct errbuf err;
    int r = load(BASE "[output]\ncompressor = zstd\nclevel = 19\nome = 1\ncname = lz4hc\n"
                      "format = 3\nchunks = 1,32,32\nshard = 1,64,128\n[cache]\nmax_size = 512\n",
                 &cfg, &err);
    CHECK_EQ_INT(r, 0);
    if (r == 0) {
        CHECK_EQ_INT(cfg.clevel, 19);
        CHECK(cfg.ome);
        CHECK(strcmp(cfg.cname, "lz4hc") == 0);
        CHECK(cfg.max_size == 512);
        config_free(&cfg);
    }
    r = load(BASE "[output]\nome = False\n[slurm]\npartition =\n", &cfg, &err);
    CHECK_EQ_INT(r, 0);
    if (r == 0) {
        CHECK(!cfg.ome);
        CHECK(cfg.slurm_partition == NULL);
        config_free(&cfg);
    }
}

static void test_duplicates_and_groups(void)
{
    EXPECT_ERROR(BASE "threads = 2\n\nthreads = 3\n",
                 "task.ini:9: duplicate key 'threads' in [process] (first set on line 7)");
    /* the same key in a repeated section is still a duplicate */
    EXPECT_ERROR(BASE "[output]\nformat = 2\n[output]\nformat = 3\n",
                 "task.ini:10:", "duplicate key 'format'", "line 8");
    EXPECT_ERROR(BASE "command = ./f.sh\n", "task.ini:7: [process] command:", "only one of",
                 "'builtin' is set on line 6");
    EXPECT_ERROR("[input]\npath = x\n[rois]\nfile = r.txt\ngrid = 1,2\n[process]\nbuiltin = add\n",
                 "task.ini:5: [rois] grid:", "only one of file, grid or table",
                 "'file' is set on line 4");
    EXPECT_ERROR("[input]\npath = x\n[rois]\nhalo = 1\n[process]\nbuiltin = add\n",
                 "task.ini:3: [rois] needs one of file, grid or table");
    EXPECT_ERROR("[input]\npath = x\n[process]\nbuiltin = add\n",
                 "task.ini: [rois] needs one of file, grid or table");
    EXPECT_ERROR("[input]\npath = x\n[rois]\ngrid = 1\n[process]\nthreads = 1\n",
                 "task.ini:5: [process] needs one of builtin, command, worker, plugin or python");
    EXPECT_ERROR("[input]\npath = x\n[rois]\ngrid = 1\n",
                 "task.ini: [process] needs one of builtin, command, worker, plugin or python");
    EXPECT_ERROR("[rois]\ngrid = 1\n[process]\nbuiltin = copy\n",
                 "task.ini: [input] path is required");
    EXPECT_ERROR("[rois]\ngrid = 1\n[input]\nlevel = 1\n[process]\nbuiltin = copy\n",
                 "task.ini:3: [input] path is required");
    EXPECT_ERROR("", "task.ini: [input] path is required");
}

static void test_unreadable(void)
{
    struct config cfg;
    struct errbuf err;
    char path[600];
    snprintf(path, sizeof path, "%s/missing.ini", tmpdir);
    int r = config_load(path, &cfg, &err);
    CHECK_EQ_INT(r, -ENOENT);
    CHECK_STR_CONTAINS(err.msg, "missing.ini: cannot read: ");
    CHECK_STR_CONTAINS(err.msg, strerror(ENOENT));
    r = config_load(tmpdir, &cfg, &err);
    CHECK_EQ_INT(r, -EISDIR);
    CHECK(cfg.path == NULL);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/roifs-test-config.XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    char *real = path_absolute(tmpdir); /* /tmp may be a symlink */
    snprintf(tmpdir, sizeof tmpdir, "%s", real);
    free(real);
    snprintf(cfg_path, sizeof cfg_path, "%s/task.ini", tmpdir);
    RUN(test_full);
    RUN(test_defaults);
    RUN(test_params);
    RUN(test_paths);
    RUN(test_whitespace);
    RUN(test_unknown);
    RUN(test_syntax);
    RUN(test_values);
    RUN(test_duplicates_and_groups);
    RUN(test_unreadable);
    unlink(cfg_path);
    rmdir(tmpdir);
    return check_done();
}
