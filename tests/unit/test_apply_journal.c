/* test_apply_journal.c: the journal of roifs apply (src/apply/journal.c): what a reopen reads
 * back, a torn last record cut off, a damaged header refused, a new application replacing the
 * old one, what journal_peek says; and the input's marker (src/apply/marker.c): written whole,
 * read back, a damaged one refused, removed with a temporary one a kill left. */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "apply/journal.h"
#include "apply/marker.h"
#include "check.h"

static char dir[64];

static char *journal_path(void)
{
    return xasprintf("%s/apply/journal", dir);
}

static void test_reopen_and_torn_tail(void)
{
    struct journal j;
    struct errbuf err = {{0}};
    struct zarr_file_identity ids[3] = {
        {true, 10, 111, 5, 41}, {false, 0, 0, 0, 0}, {true, 7, 99, 6, 42}};
    CHECK_EQ_INT(journal_open(dir, &j, &err), 0);
    CHECK(!j.begun);
    CHECK_EQ_INT(journal_begin(&j, 42, ids, 3, &err), 0);
    CHECK_EQ_INT(j.gen, 1);
    CHECK_EQ_INT(journal_intent(&j, 0, 100, 0xabc, &err), 0);
    CHECK_EQ_INT(journal_replaced(&j, 0, &err), 0);
    CHECK_EQ_INT(journal_intent(&j, 2, 200, 0xdef, &err), 0);
    journal_close(&j);

    CHECK_EQ_INT(journal_open(dir, &j, &err), 0);
    CHECK(j.begun && !j.finished);
    CHECK_EQ_INT(j.fingerprint, 42);
    CHECK_EQ_INT(j.nstorage, 3);
    CHECK(j.origin[0].exists && j.origin[0].size == 10 && j.origin[0].mtime_ns == 111 &&
          j.origin[0].hash == 41);
    CHECK(!j.origin[1].exists);
    CHECK_EQ_INT(j.state[0], JC_REPLACED);
    CHECK_EQ_INT(j.state[1], JC_ORIGINAL);
    CHECK_EQ_INT(j.state[2], JC_INTENT);
    CHECK_EQ_INT(j.intent_len[2], 200);
    CHECK_EQ_INT(j.intent_crc[2], 0xdef);
    CHECK_EQ_INT(j.nreplaced, 1);
    uint64_t end = j.end;
    journal_close(&j);

    /* a record cut in the middle (a kill while it was written): dropped, and cut off */
    char *p = journal_path();
    int fd = open(p, O_WRONLY | O_APPEND);
    CHECK(fd >= 0);
    CHECK_EQ_INT(write(fd, "rAJr-torn", 9), 9);
    close(fd);
    CHECK_EQ_INT(journal_open(dir, &j, &err), 0);
    CHECK_EQ_INT(j.end, end);
    CHECK_EQ_INT(j.state[2], JC_INTENT);
    struct stat st;
    CHECK(stat(p, &st) == 0 && (uint64_t)st.st_size == end);
    CHECK_EQ_INT(journal_replaced(&j, 2, &err), 0);
    CHECK_EQ_INT(journal_finish(&j, &err), 0);
    journal_close(&j);
    CHECK_EQ_INT(journal_open(dir, &j, &err), 0);
    CHECK(j.finished && j.nreplaced == 2 && j.finished_at > 0);

    /* --again: a new application with the identities of now; the old records are gone */
    ids[0].ino = 77;
    CHECK_EQ_INT(journal_begin(&j, 42, ids, 3, &err), 0);
    CHECK_EQ_INT(j.gen, 2);
    journal_close(&j);
    CHECK_EQ_INT(journal_open(dir, &j, &err), 0);
    CHECK(j.begun && !j.finished && j.gen == 2 && j.nreplaced == 0);
    CHECK_EQ_INT(j.origin[0].ino, 77);
    CHECK_EQ_INT(j.state[0], JC_ORIGINAL);
    journal_close(&j);
    free(p);
}

static void test_damaged_header_refused(void)
{
    struct journal j;
    struct errbuf err = {{0}};
    char *p = journal_path();
    int fd = open(p, O_WRONLY);
    CHECK(fd >= 0);
    CHECK_EQ_INT(pwrite(fd, "X", 1, 20), 1);
    close(fd);
    CHECK(journal_open(dir, &j, &err) < 0);
    CHECK_STR_CONTAINS(err.msg, "damaged");
    journal_close(&j);
    free(p);
}

static void test_peek(void)
{
    struct journal_summary s;
    char *cache = xasprintf("%s/peek", dir);
    CHECK_EQ_INT(journal_peek(cache, &s), 0);
    CHECK(!s.begun && !s.finished);
    CHECK_EQ_INT(mkdir(cache, 0700), 0);
    struct journal j;
    struct errbuf err = {{0}};
    struct zarr_file_identity ids[2] = {{true, 1, 1, 1, 1}, {true, 2, 2, 2, 2}};
    CHECK_EQ_INT(journal_open(cache, &j, &err), 0);
    CHECK_EQ_INT(journal_begin(&j, 7, ids, 2, &err), 0);
    uint64_t gen = j.gen;
    CHECK_EQ_INT(journal_intent(&j, 1, 5, 6, &err), 0);
    CHECK_EQ_INT(journal_replaced(&j, 1, &err), 0);
    CHECK_EQ_INT(journal_peek(cache, &s), 0);
    CHECK(s.begun && !s.finished);
    CHECK_EQ_INT(s.gen, gen);
    CHECK_EQ_INT(s.replaced, 1);
    CHECK_EQ_INT(s.total, 2);
    CHECK_EQ_INT(journal_finish(&j, &err), 0);
    journal_close(&j);
    CHECK_EQ_INT(journal_peek(cache, &s), 0);
    CHECK(s.begun && s.finished);
    CHECK_EQ_INT(s.gen, gen);
    free(cache);
}

static void test_marker(void)
{
    struct errbuf err = {{0}};
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    CHECK(dfd >= 0);
    struct apply_marker m, back;
    CHECK_EQ_INT(apply_marker_read(dfd, &back, &err), 0);
    CHECK(!back.present);
    memset(&m, 0, sizeof m);
    memcpy(m.job, "0123456789abcdef0123456789abcdef", 33);
    m.gen = 3;
    m.started = 1700000000;
    m.cache = xstrdup("/cache/with \"quotes\"\nand a newline");
    m.config = xstrdup("/work/task.ini");
    CHECK_EQ_INT(apply_marker_write(dfd, &m, &err), 0);
    CHECK(faccessat(dfd, APPLY_MARKER_TMP, F_OK, 0) < 0);
    CHECK_EQ_INT(apply_marker_read(dfd, &back, &err), 0);
    CHECK(back.present);
    CHECK(strcmp(back.job, m.job) == 0);
    CHECK_EQ_INT(back.gen, 3);
    CHECK_EQ_INT(back.started, 1700000000);
    CHECK(strcmp(back.cache, m.cache) == 0);
    CHECK(strcmp(back.config, m.config) == 0);
    apply_marker_free(&back);
    /* not a record roifs wrote: refused, not taken for none */
    CHECK_EQ_INT(file_write_atomic(dfd, APPLY_MARKER, "{\"job\": 1}", 10, false), 0);
    CHECK_EQ_INT(apply_marker_read(dfd, &back, &err), -EBADMSG);
    CHECK(!back.present);
    CHECK_STR_CONTAINS(err.msg, APPLY_MARKER);
    /* removed, with the temporary file a kill between its write and its rename left */
    int fd = openat(dfd, APPLY_MARKER_TMP, O_WRONLY | O_CREAT, 0600);
    CHECK(fd >= 0);
    close(fd);
    CHECK_EQ_INT(apply_marker_remove(dfd, &err), 0);
    CHECK(faccessat(dfd, APPLY_MARKER, F_OK, 0) < 0 &&
          faccessat(dfd, APPLY_MARKER_TMP, F_OK, 0) < 0);
    CHECK_EQ_INT(apply_marker_remove(dfd, &err), 0); /* none: fine */
    apply_marker_free(&m);
    close(dfd);
}

int main(void)
{
    if (check_mkdtemp(dir, sizeof dir, "journal"))
        return 1;
    RUN(test_reopen_and_torn_tail);
    RUN(test_damaged_header_refused);
    RUN(test_peek);
    RUN(test_marker);
    char *cmd = xasprintf("rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
    free(cmd);
    return check_done();
}
