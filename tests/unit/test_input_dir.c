/* test_input_dir.c: unit tests of the input reader's directory (src/zarr/input_dir.c): the
 * input is its path. A directory put in its place that holds the same array is read, another
 * layout or none fails with -EIO and the reason (signatures then match nothing), readers racing
 * with replacements never read a box of two directories, the descriptors of replaced
 * directories are closed, and a parked input's directory is closed and opened again. */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "scratch.h"
#include "zarr/zarr.h"

static char root[256];

#define ZARRAY_OF(shape)                                                                           \
    "{\"zarr_format\": 2, \"shape\": " shape ", \"chunks\": [4, 4], \"dtype\": \"<u2\", "          \
    "\"compressor\": null, \"fill_value\": 0, \"order\": \"C\", \"filters\": null}"

static const uint64_t START[2] = {0, 0}, SHAPE[2] = {8, 8};

/* An 8 x 8 <u2 array (4 x 4 chunks, uncompressed) of value v everywhere, at root/name. */
static char *write_array(const char *name, uint16_t v, const char *zarray)
{
    char *dir = xasprintf("%s/%s", root, name);
    scratch_write_file(dir, ".zarray", zarray, strlen(zarray));
    uint16_t chunk[16];
    for (int i = 0; i < 16; i++)
        chunk[i] = v;
    for (int y = 0; y < 2; y++)
        for (int x = 0; x < 2; x++) {
            char key[16];
            snprintf(key, sizeof key, "%d.%d", y, x);
            scratch_write_file(dir, key, chunk, sizeof chunk);
        }
    return dir;
}

static void remove_dir(const char *dir)
{
    check_rmtree(dir);
}

/* The whole array's value (-1: not one value everywhere), or -errno with err. */
static int read_value(struct zarr_input *in, struct errbuf *err)
{
    uint16_t buf[64];
    int r = zarr_input_read(in, START, SHAPE, buf, err);
    if (r < 0)
        return r;
    for (int i = 1; i < 64; i++)
        if (buf[i] != buf[0])
            return -1;
    return buf[0];
}

static uint64_t signature(struct zarr_input *in, int *r)
{
    uint64_t sig = 0;
    *r = zarr_input_signature(in, START, SHAPE, &sig);
    return sig;
}

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        n += de->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static void test_same_array_followed(void)
{
    char *path = write_array("in", 1, ZARRAY_OF("[8, 8]"));
    struct zarr_input *in = NULL;
    struct errbuf err;
    CHECK_EQ_INT(zarr_input_open(path, 1 << 20, &in, &err), 0);
    CHECK_EQ_INT(read_value(in, &err), 1);
    int r;
    uint64_t s1 = signature(in, &r);
    CHECK_EQ_INT(r, 0);
    /* mv in in.old; mv new in */
    char *fresh = write_array("new", 2, ZARRAY_OF("[8, 8]")), *old = xasprintf("%s.old", path);
    CHECK_EQ_INT(rename(path, old), 0);
    CHECK_EQ_INT(rename(fresh, path), 0);
    uint64_t s2 = signature(in, &r);
    CHECK_EQ_INT(r, 0);
    CHECK(s2 != s1);
    CHECK_EQ_INT(read_value(in, &err), 2);
    /* zarr-python's open(mode="w"): removed and made again; the attributes' order differs */
    remove_dir(path);
    free(write_array("in", 3,
                     "{\"shape\": [8, 8], \"zarr_format\": 2, \"chunks\": [4, 4], \"dtype\": "
                     "\"<u2\", \"compressor\": null, \"fill_value\": 0, \"order\": \"C\", "
                     "\"filters\": null}"));
    CHECK_EQ_INT(read_value(in, &err), 3);
    CHECK(signature(in, &r) != s2);
    /* the first one back */
    remove_dir(path);
    CHECK_EQ_INT(rename(old, path), 0);
    CHECK_EQ_INT(read_value(in, &err), 1);
    CHECK_EQ_INT(signature(in, &r), s1);
    zarr_input_close(in);
    remove_dir(path);
    free(old);
    free(fresh);
    free(path);
}

static void test_other_layout_or_none_refused(void)
{
    char *path = write_array("in2", 1, ZARRAY_OF("[8, 8]"));
    struct zarr_input *in = NULL;
    struct errbuf err;
    CHECK_EQ_INT(zarr_input_open(path, 1 << 20, &in, &err), 0);
    int r;
    uint64_t s1 = signature(in, &r);
    CHECK_EQ_INT(read_value(in, &err), 1);
    remove_dir(path);
    CHECK_EQ_INT(read_value(in, &err), -EIO);
    CHECK_STR_CONTAINS(err.msg, "the input's directory was removed");
    uint64_t gone = signature(in, &r);
    CHECK_EQ_INT(r, -EIO);
    CHECK(gone != s1);
    free(write_array("in2", 1, ZARRAY_OF("[8, 12]")));
    CHECK_EQ_INT(read_value(in, &err), -EIO);
    CHECK_STR_CONTAINS(err.msg, "replaced by another");
    CHECK_STR_CONTAINS(err.msg, "its shape changed from [8, 8] to [8, 12]");
    signature(in, &r);
    CHECK_EQ_INT(r, -EIO);
    /* an array of the same layout again: read */
    remove_dir(path);
    free(write_array("in2", 5, ZARRAY_OF("[8, 8]")));
    CHECK_EQ_INT(read_value(in, &err), 5);
    signature(in, &r);
    CHECK_EQ_INT(r, 0);
    zarr_input_close(in);
    remove_dir(path);
    free(path);
}

struct racer {
    struct zarr_input *in;
    _Atomic bool stop;
    _Atomic int reads, mixed, failed;
};

static void *race_reader(void *arg)
{
    struct racer *rc = arg;
    while (!rc->stop) {
        struct errbuf err;
        int v = read_value(rc->in, &err);
        rc->reads++;
        rc->mixed += v == -1;
        rc->failed += v < -1;
    }
    return NULL;
}

static void test_readers_while_replaced(void)
{
    int fds = open_fds();
    char *path = write_array("in3", 0, ZARRAY_OF("[8, 8]"));
    struct racer rc = {0};
    struct errbuf err;
    CHECK_EQ_INT(zarr_input_open(path, 0, &rc.in, &err), 0);
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, race_reader, &rc);
    char *old = xasprintf("%s.old", path);
    for (int k = 1; k <= 40; k++) { /* swapped in by one rename, then removed */
        char name[16];
        snprintf(name, sizeof name, "next%d", k);
        char *next = write_array(name, (uint16_t)k, ZARRAY_OF("[8, 8]"));
        CHECK_EQ_INT(rename(path, old), 0);
        CHECK_EQ_INT(rename(next, path), 0);
        usleep(2000);
        remove_dir(old);
        free(next);
    }
    rc.stop = true;
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    CHECK(rc.reads > 40);
    CHECK_EQ_INT(rc.mixed, 0); /* never a box of two directories */
    CHECK_EQ_INT(read_value(rc.in, &err), 40);
    /* the replaced directories' descriptors closed at that look: only the one held is left */
    CHECK_EQ_INT(open_fds(), fds + 1);
    zarr_input_close(rc.in);
    CHECK_EQ_INT(open_fds(), fds);
    printf("# %d reads, %d failed while the directory was away\n", rc.reads, rc.failed);
    remove_dir(path);
    free(old);
    free(path);
}

/* zarr_input_park closes the directory's descriptor (a plate's image closed); zarr_input_resume
 * opens the directory at the path again: the same one, another holding the same array
 * (followed), or another layout (reads fail with the reason until the array is back). */
static void test_park_and_resume(void)
{
    char *path = write_array("in3", 1, ZARRAY_OF("[8, 8]"));
    struct zarr_input *in = NULL;
    struct errbuf err;
    CHECK_EQ_INT(zarr_input_open(path, 1 << 20, &in, &err), 0);
    CHECK_EQ_INT(read_value(in, &err), 1);
    int before = open_fds();
    zarr_input_park(in);
    CHECK_EQ_INT(open_fds(), before - 1);
    zarr_input_resume(in);
    CHECK_EQ_INT(open_fds(), before);
    CHECK_EQ_INT(read_value(in, &err), 1);
    /* parked, then mv in in.old; mv new in */
    zarr_input_park(in);
    char *fresh = write_array("new3", 2, ZARRAY_OF("[8, 8]")), *old = xasprintf("%s.old", path);
    CHECK_EQ_INT(rename(path, old), 0);
    CHECK_EQ_INT(rename(fresh, path), 0);
    zarr_input_resume(in);
    CHECK_EQ_INT(read_value(in, &err), 2);
    /* parked, then another layout at the path */
    zarr_input_park(in);
    remove_dir(path);
    free(write_array("in3", 1, ZARRAY_OF("[8, 12]")));
    zarr_input_resume(in);
    CHECK_EQ_INT(read_value(in, &err), -EIO);
    CHECK_STR_CONTAINS(err.msg, "its shape changed from [8, 8] to [8, 12]");
    remove_dir(path);
    free(write_array("in3", 5, ZARRAY_OF("[8, 8]")));
    CHECK_EQ_INT(read_value(in, &err), 5);
    zarr_input_close(in);
    CHECK_EQ_INT(open_fds(), before - 1);
    remove_dir(path);
    remove_dir(old);
    free(old);
    free(fresh);
    free(path);
}

int main(void)
{
    if (check_mkdtemp(root, sizeof root, "input-dir"))
        return 1;
    log_open_stderr(false);
    RUN(test_same_array_followed);
    RUN(test_other_layout_or_none_refused);
    RUN(test_readers_while_replaced);
    RUN(test_park_and_resume);
    check_rmtree(root);
    return check_done();
}
