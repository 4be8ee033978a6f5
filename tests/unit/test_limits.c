/* test_limits.c: unit tests of issue 14's limits: what file_read_all() reads (regular files of
 * at most 64 MiB, never blocking on a FIFO), the ROI list read in blocks (byte order mark, NUL
 * bytes, lines across block boundaries, lines without end), NUL bytes in the configuration, and
 * an inner chunk whose shard index announces more than any codec could make of it. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "config.h"
#include "roi.h"
#include "util.h"
#include "zarr/zarr.h"

static char tmpdir[256];

static char *tmp(const char *name)
{
    return xasprintf("%s/%s", tmpdir, name);
}

static void write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f)
        return;
    CHECK_EQ_INT(fwrite(data, 1, len, f), len);
    fclose(f);
}

static int sparse_file(const char *path, off_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int r = fd >= 0 && ftruncate(fd, size) == 0 ? 0 : -1;
    if (fd >= 0)
        close(fd);
    return r;
}

static void test_file_read_all(void)
{
    char *data = NULL, *p = tmp("fifo");
    size_t len;
    CHECK_EQ_INT(mkfifo(p, 0600), 0);
    alarm(20); /* blocking in open() would be the bug */
    CHECK_EQ_INT(file_read_all(p, &data, &len), FILE_ERR_NOT_REGULAR);
    alarm(0);
    CHECK(!strcmp(file_strerror(FILE_ERR_NOT_REGULAR), "not a regular file"));
    free(p);
    p = tmp("zero");
    CHECK_EQ_INT(symlink("/dev/zero", p), 0);
    CHECK_EQ_INT(file_read_all(p, &data, &len), FILE_ERR_NOT_REGULAR);
    free(p);
    CHECK_EQ_INT(file_read_all(tmpdir, &data, &len), -EISDIR);
    /* 64 MiB is read, a byte more is refused before anything is allocated */
    p = tmp("big");
    CHECK_EQ_INT(sparse_file(p, (off_t)FILE_READ_MAX), 0);
    CHECK_EQ_INT(file_read_all(p, &data, &len), 0);
    CHECK_EQ_INT(len, FILE_READ_MAX);
    free(data);
    CHECK_EQ_INT(sparse_file(p, (off_t)FILE_READ_MAX + 1), 0);
    CHECK_EQ_INT(file_read_all(p, &data, &len), -EFBIG);
    CHECK_EQ_INT(sparse_file(p, (off_t)1 << 40), 0);
    CHECK_EQ_INT(file_read_all(p, &data, &len), -EFBIG);
    CHECK_STR_CONTAINS(file_strerror(-EFBIG), "64 MiB");
    /* another limit; a file whose st_size is 0 (as in /proc) is read to its end all the same */
    write_file(p, "0123456789", 10);
    CHECK_EQ_INT(file_read_max(AT_FDCWD, p, 9, &data, &len), -EFBIG);
    CHECK_EQ_INT(file_read_max(AT_FDCWD, p, 10, &data, &len), 0);
    CHECK(len == 10 && !strcmp(data, "0123456789"));
    free(data);
    CHECK_EQ_INT(file_read_all("/proc/self/status", &data, &len), 0);
    CHECK(len > 0 && strstr(data, "Name:") != NULL);
    free(data);
    CHECK_EQ_INT(file_read_max(AT_FDCWD, "/proc/self/status", 8, &data, &len), -EFBIG);
    unlink(p);
    free(p);
}

static int parse_file(const char *text, size_t len, struct roi_set *rs, struct errbuf *err)
{
    char *p = tmp("rois.txt");
    write_file(p, text, len);
    static const uint64_t shape[2] = {100, 100};
    err->msg[0] = '\0';
    int r = roi_parse_file(p, 2, shape, rs, err);
    free(p);
    return r;
}

/* A ROI list of several read blocks: every ROI comes back, whichever line a block ends in. */
static void test_roi_list_in_blocks(void)
{
    struct strbuf sb = {0};
    sb_append(&sb, "\xef\xbb\xbf", 3); /* a byte order mark */
    size_t n = 0;
    while (sb.len < (3u << 20) + 12345) {
        sb_printf(&sb, "%zu:%zu, %zu:%zu # %s\n", n % 99, n % 99 + 1, n % 97, n % 97 + 3,
                  n % 7 ? "" : "a comment that is a little longer than the others");
        n++;
    }
    sb_printf(&sb, "5:6, 7:8"); /* no newline at the end */
    n++;
    struct roi_set rs;
    struct errbuf err;
    CHECK_EQ_INT(parse_file(sb.buf, sb.len, &rs, &err), 0);
    CHECK_EQ_INT(rs.n, n);
    bool right = rs.n == n;
    for (size_t i = 0; right && i + 1 < n; i++)
        right = rs.start[2 * i] == i % 99 && rs.stop[2 * i] == i % 99 + 1 &&
                rs.start[2 * i + 1] == i % 97 && rs.stop[2 * i + 1] == i % 97 + 3;
    CHECK(right);
    CHECK(rs.n == n && rs.start[2 * (n - 1)] == 5 && rs.stop[2 * (n - 1) + 1] == 8);
    roi_set_free(&rs);
    /* a byte order mark and nothing else in the first block's first bytes */
    CHECK_EQ_INT(parse_file("\xef\xbb\xbf"
                            "1:2, 3:4\n",
                            12, &rs, &err),
                 0);
    CHECK_EQ_INT(rs.n, 1);
    roi_set_free(&rs);
    /* a NUL byte, on the line it is on, also after the first block */
    sb.len -= 8;
    static const char tail[] = "\n0:1, 0:1\n0:1,\0 0:1\n";
    sb_append(&sb, tail, sizeof tail - 1);
    CHECK_EQ_INT(parse_file(sb.buf, sb.len, &rs, &err), -EINVAL);
    char want[64];
    snprintf(want, sizeof want, "rois.txt:%zu: NUL byte", n + 2); /* a blank line, a ROI */
    CHECK_STR_CONTAINS(err.msg, want);
    /* a line without end fails after 64 KiB, not after the whole file */
    char *line = malloc(3u << 20);
    memcpy(line, "1:2, 3:4\n", 9);
    memset(line + 9, '7', (3u << 20) - 9);
    CHECK_EQ_INT(parse_file(line, 3u << 20, &rs, &err), -EINVAL);
    CHECK_STR_CONTAINS(err.msg, "rois.txt:2: line longer than 65536 bytes");
    line[100000] = '\n'; /* a long line that ends is refused too */
    CHECK_EQ_INT(parse_file(line, 200000, &rs, &err), -EINVAL);
    CHECK_STR_CONTAINS(err.msg, "rois.txt:2: line longer than 65536 bytes");
    free(line);
    sb_free(&sb);
    /* not a regular file: refused without blocking */
    char *p = tmp("rois.txt");
    unlink(p);
    CHECK_EQ_INT(mkfifo(p, 0600), 0);
    alarm(20);
    static const uint64_t shape[2] = {100, 100};
    CHECK_EQ_INT(roi_parse_file(p, 2, shape, &rs, &err), -EIO);
    alarm(0);
    CHECK_STR_CONTAINS(err.msg, "rois.txt: cannot read: not a regular file");
    unlink(p);
    free(p);
}

static void test_config_nul(void)
{
    static const char text[] = "[input]\npath = in.zarr\n[rois]\ngrid = 1\n[process]\n"
                               "builtin = add\0junk\n";
    char *p = tmp("nul.ini");
    write_file(p, text, sizeof text - 1);
    struct config cfg;
    struct errbuf err = {{0}};
    CHECK_EQ_INT(config_load(p, &cfg, &err), -EINVAL);
    CHECK_STR_CONTAINS(err.msg, "nul.ini:6: NUL byte");
    unlink(p);
    free(p);
}

/* A shard whose index says its inner chunk has 512 GiB (the file is sparse): refused with a
 * message, not an allocation that aborts. */
static void test_shard_inner_chunk_too_large(void)
{
    struct zarr_meta m = {.format = 3,
                          .ndim = 1,
                          .shape = {8},
                          .chunks = {8},
                          .dtype = {.kind = DT_UINT, .size = 2},
                          .key_prefix_c = true,
                          .separator = '/',
                          .sharded = true};
    m.shard.inner[0] = 4;
    m.shard.index_codecs.bb[m.shard.index_codecs.nbb++].crc32c = true;
    char *dir = tmp("shard.zarr"), *sub = tmp("shard.zarr/c"), *meta = tmp("shard.zarr/zarr.json");
    char *shard = tmp("shard.zarr/c/0");
    CHECK_EQ_INT(mkdir_p(sub, 0700), 0);
    char *json = zarr_meta_emit_v3(&m, NULL, NULL);
    write_file(meta, json, strlen(json));
    free(json);
    uint64_t size = (uint64_t)1 << 40, entries[4] = {0, (uint64_t)1 << 39, UINT64_MAX, UINT64_MAX};
    unsigned char index[36];
    memcpy(index, entries, 32); /* little-endian, as this machine */
    uint32_t crc = zarr_crc32c(0, index, 32);
    memcpy(index + 32, &crc, 4);
    CHECK_EQ_INT(sparse_file(shard, (off_t)size), 0);
    int fd = open(shard, O_WRONLY);
    CHECK_EQ_INT(pwrite(fd, index, sizeof index, (off_t)(size - sizeof index)), sizeof index);
    close(fd);
    struct zarr_input *in;
    struct errbuf err = {{0}};
    CHECK_EQ_INT(zarr_input_open(dir, 1u << 20, &in, &err), 0);
    uint64_t start[1] = {0}, shape[1] = {4};
    uint16_t buf[4];
    CHECK_EQ_INT(zarr_input_read(in, start, shape, buf, &err), -EIO);
    CHECK_STR_CONTAINS(err.msg, "inner chunk 0: 549755813888 bytes is too large");
    zarr_input_close(in);
    unlink(shard);
    free(dir);
    free(sub);
    free(meta);
    free(shard);
}

int main(void)
{
    if (check_mkdtemp(tmpdir, sizeof tmpdir, "limits"))
        return 1;
    RUN(test_file_read_all);
    RUN(test_roi_list_in_blocks);
    RUN(test_config_nul);
    RUN(test_shard_inner_chunk_too_large);
    check_rmtree(tmpdir);
    return check_done();
}
