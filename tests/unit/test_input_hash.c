/* test_input_hash.c: unit tests for the input's content signatures (src/zarr/input_hash.c):
 * a signature follows the bytes of the chunk files, not their identities; a file read while
 * its times were recent (racy) is hashed again at the next look instead of being trusted; the
 * hashes recorded are kept in a directory across opens (a damaged file of them is not used); verify
 * = content sees a write through a shared mmap that changed no identity. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "zarr/zarr.h"

static char dir[256];
static char *arr; /* dir/in.zarr: <i4, 8x8, chunks 4x4, no compressor */

static void write_file(const char *name, const void *data, size_t len)
{
    char *p = xasprintf("%s/%s", arr, name);
    CHECK_EQ_INT(file_write_atomic(AT_FDCWD, p, data, len, false), 0);
    free(p);
}

/* Chunk key (0.0 ...) with every value v. */
static void write_chunk(const char *key, int32_t v)
{
    int32_t c[16];
    for (int i = 0; i < 16; i++)
        c[i] = v + i;
    write_file(key, c, sizeof c);
}

/* Writes chunk key in place (same inode and size) with values from v, its mtime put back. */
static void rewrite_in_place_keeping_mtime(const char *key, int32_t v)
{
    char *p = xasprintf("%s/%s", arr, key);
    struct stat st;
    CHECK_EQ_INT(stat(p, &st), 0);
    int32_t c[16];
    for (int i = 0; i < 16; i++)
        c[i] = v + i;
    int fd = open(p, O_WRONLY);
    CHECK_EQ_INT((int)pwrite(fd, c, sizeof c, 0), (int)sizeof c);
    struct timespec ts[2] = {st.st_atim, st.st_mtim};
    CHECK_EQ_INT(futimens(fd, ts), 0);
    close(fd);
    free(p);
}

static void make_array(void)
{
    arr = xasprintf("%s/in.zarr", dir);
    CHECK_EQ_INT(mkdir_p(arr, 0755), 0);
    const char *meta = "{\"zarr_format\": 2, \"shape\": [8, 8], \"chunks\": [4, 4], \"dtype\": "
                       "\"<i4\", \"compressor\": null, \"fill_value\": 0, \"order\": \"C\", "
                       "\"filters\": null}";
    write_file(".zarray", meta, strlen(meta));
    write_chunk("0.0", 0);
    write_chunk("0.1", 100);
    write_chunk("1.0", 200);
    write_chunk("1.1", 300);
}

static struct zarr_input *open_in(uint64_t margin_ns)
{
    struct zarr_input *in = NULL;
    struct errbuf err = {{0}};
    CHECK_EQ_INT(zarr_input_open(arr, 1 << 20, &in, &err), 0);
    if (in)
        zarr_input_set_racy_margin(in, margin_ns);
    return in;
}

static const uint64_t zero[2] = {0, 0}, c4[2] = {4, 4}, all[2] = {8, 8};

static uint64_t look(struct zarr_input *in, const uint64_t *shape)
{
    uint64_t sig = 0;
    CHECK_EQ_INT(zarr_input_signature(in, zero, shape, &sig), 0);
    return sig;
}

/* The files were just written: a read of them is racy, so what it saw is not recorded, and
 * every look hashes the file again, until its times are older than the margin. */
static void test_racy_reads_are_not_trusted(void)
{
    struct zarr_input *in = open_in(2000000000ULL);
    if (!in)
        return;
    int32_t buf[16];
    uint64_t sig = 0;
    struct errbuf err = {{0}};
    CHECK_EQ_INT(zarr_input_read_sig(in, zero, c4, buf, &sig, &err), 0);
    uint64_t p = zarr_input_hash_passes(in);
    CHECK(look(in, c4) == sig);
    CHECK_EQ_INT((int)(zarr_input_hash_passes(in) - p), 1); /* not taken from the read */
    CHECK(look(in, c4) == sig);
    CHECK_EQ_INT((int)(zarr_input_hash_passes(in) - p), 2); /* nor from the look before */
    zarr_input_set_racy_margin(in, 0);                      /* the files are old enough now */
    CHECK(look(in, c4) == sig);
    CHECK_EQ_INT((int)(zarr_input_hash_passes(in) - p), 3);
    CHECK(look(in, c4) == sig); /* recorded */
    CHECK_EQ_INT((int)(zarr_input_hash_passes(in) - p), 3);
    zarr_input_close(in);
}

/* A signature is of the bytes: a touch, or a rewrite with the same bytes under a new inode,
 * keeps it; other bytes in place under the old size, inode and mtime change it. */
static void test_signatures_follow_content(void)
{
    struct zarr_input *in = open_in(0);
    if (!in)
        return;
    uint64_t s0 = look(in, all);
    write_chunk("0.1", 100); /* the same bytes, a new file renamed over the old one */
    char *p = xasprintf("%s/1.0", arr);
    CHECK_EQ_INT(utimensat(AT_FDCWD, p, NULL, 0), 0); /* touch */
    free(p);
    CHECK(look(in, all) == s0);
    rewrite_in_place_keeping_mtime("1.1", 5000);
    uint64_t s1 = look(in, all);
    CHECK(s1 != s0);
    int32_t buf[64];
    uint64_t sig = 0;
    struct errbuf err = {{0}};
    CHECK_EQ_INT(zarr_input_read_sig(in, zero, all, buf, &sig, &err), 0);
    CHECK(sig == s1);
    CHECK_EQ_INT(buf[4 * 8 + 4], 5000);
    rewrite_in_place_keeping_mtime("1.1", 300); /* back to the first bytes */
    CHECK(look(in, all) == s0);
    zarr_input_close(in);
}

/* The hashes recorded are kept in a directory: opened again, the input reads no file whose
 * identity did not change. */
static void test_hashes_kept_across_opens(void)
{
    char *keep = xasprintf("%s/keep", dir);
    CHECK_EQ_INT(mkdir_p(keep, 0700), 0);
    int kfd = open(keep, O_RDONLY | O_DIRECTORY);
    struct zarr_input *in = open_in(0);
    if (!in || kfd < 0)
        return;
    CHECK_EQ_INT(zarr_input_keep_hashes(in, kfd), 0);
    uint64_t s0 = look(in, all);
    CHECK_EQ_INT((int)zarr_input_hash_passes(in), 4);
    zarr_input_close(in);
    in = open_in(0);
    CHECK_EQ_INT(zarr_input_keep_hashes(in, kfd), 0);
    CHECK(look(in, all) == s0);
    CHECK_EQ_INT((int)zarr_input_hash_passes(in), 0);
    char *p = xasprintf("%s/0.0", arr);
    CHECK_EQ_INT(utimensat(AT_FDCWD, p, NULL, 0), 0);
    free(p);
    CHECK(look(in, all) == s0);
    CHECK_EQ_INT((int)zarr_input_hash_passes(in), 1); /* the touched file alone */
    zarr_input_close(in);
    /* a damaged file of hashes is not used: every file is read again, nothing else changes */
    DIR *d = opendir(keep);
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (de->d_name[0] != '.') {
            int fd = openat(kfd, de->d_name, O_RDWR);
            char c = 0;
            CHECK_EQ_INT((int)pread(fd, &c, 1, 20), 1);
            c ^= 1;
            CHECK_EQ_INT((int)pwrite(fd, &c, 1, 20), 1);
            close(fd);
        }
    if (d)
        closedir(d);
    in = open_in(0);
    CHECK_EQ_INT(zarr_input_keep_hashes(in, kfd), 0);
    CHECK(look(in, all) == s0);
    CHECK_EQ_INT((int)zarr_input_hash_passes(in), 4);
    zarr_input_close(in);
    close(kfd);
    free(keep);
}

/* A store through a shared mmap into a page already dirty changes no mtime: by identity the
 * input cannot see it (docs/reliability.md); with verify = content every look hashes the
 * files, and no decoded chunk is used twice. */
static void test_verify_sees_writes_through_a_shared_mmap(void)
{
    struct zarr_input *in = open_in(0), *vin = open_in(0);
    char *p = xasprintf("%s/0.1", arr);
    int fd = open(p, O_RDWR);
    int32_t *map = fd >= 0 ? mmap(NULL, 64, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : NULL;
    if (!in || !vin || fd < 0 || map == MAP_FAILED) {
        CHECK(0);
        return;
    }
    zarr_input_set_verify(vin, true);
    map[0] = 1; /* the page fault of the first store sets mtime */
    uint64_t s1 = look(in, all), v1 = look(vin, all);
    CHECK(s1 == v1);
    int32_t buf[64];
    struct errbuf err = {{0}};
    CHECK_EQ_INT(zarr_input_read(vin, zero, all, buf, &err), 0);
    CHECK_EQ_INT(buf[4], 1);
    struct stat before, after;
    CHECK_EQ_INT(fstat(fd, &before), 0);
    map[0] = 2; /* into the page already dirty: no fault, no new mtime */
    CHECK_EQ_INT(fstat(fd, &after), 0);
    uint64_t v2 = look(vin, all);
    CHECK(v2 != v1);
    CHECK_EQ_INT(zarr_input_read(vin, zero, all, buf, &err), 0);
    CHECK_EQ_INT(buf[4], 2);
    uint64_t sig = 0;
    CHECK_EQ_INT(zarr_input_read_sig(vin, zero, all, buf, &sig, &err), 0);
    CHECK(sig == v2);
    bool same_time = before.st_mtim.tv_sec == after.st_mtim.tv_sec &&
                     before.st_mtim.tv_nsec == after.st_mtim.tv_nsec;
    printf("# second store through the mmap: mtime %s; by identity the change was %s\n",
           same_time ? "unchanged" : "changed (written back meanwhile)",
           look(in, all) == s1 ? "not seen" : "seen");
    munmap(map, 64);
    close(fd);
    free(p);
    zarr_input_close(in);
    zarr_input_close(vin);
}

int main(void)
{
    if (check_mkdtemp(dir, sizeof dir, "input_hash"))
        return 1;
    log_open_stderr(false);
    make_array();
    RUN(test_racy_reads_are_not_trusted);
    RUN(test_signatures_follow_content);
    RUN(test_hashes_kept_across_opens);
    RUN(test_verify_sees_writes_through_a_shared_mmap);
    check_rmtree(dir);
    free(arr);
    return check_done();
}
