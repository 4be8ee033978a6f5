/* test_apply_journal.c: the journal of roifs apply (src/apply/journal.c): what a reopen reads
 * back, a torn last record cut off, a damaged header refused, a new application replacing the
 * old one. */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "apply/journal.h"
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

int main(void)
{
    if (check_mkdtemp(dir, sizeof dir, "journal"))
        return 1;
    RUN(test_reopen_and_torn_tail);
    RUN(test_damaged_header_refused);
    char *cmd = xasprintf("rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
    free(cmd);
    return check_done();
}
