/* test_claim.c: claims between hosts (src/cache/claim.c) are known by their contents (the
 * holder text and the claim's nonce), never by their inode: through sshfs a claim made by
 * hard-linking a spare is another inode number, and a file made later at the same name may
 * get the same one. A claim replaced by a copy of itself (another inode) is still renewed and
 * released as ours; one with our holder text but another nonce (in place, the same inode, or
 * renamed over) is neither renewed nor removed. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "cache/claim.h"
#include "util.h"

static char dir[256];
static int dirfd_;

static char *path_of(const char *name)
{
    return xasprintf("%s/%s", dir, name);
}

static bool exists(const char *name)
{
    struct stat st;
    return fstatat(dirfd_, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

/* The contents of claim name ("" when it cannot be read). */
static void read_text(const char *name, char *buf, size_t cap)
{
    buf[0] = '\0';
    int fd = openat(dirfd_, name, O_RDONLY);
    if (fd < 0)
        return;
    ssize_t n = read(fd, buf, cap - 1);
    buf[n > 0 ? n : 0] = '\0';
    close(fd);
}

/* The renewal count of claim name, or -1. */
static long long renewed(const char *name)
{
    char text[1024];
    read_text(name, text, sizeof text);
    const char *at = strstr(text, "\nrenewed ");
    return at ? strtoll(at + 9, NULL, 10) : -1;
}

/* Replaces claim name by a copy of its contents renamed over it: another inode. With
 * other_nonce, the copy's nonce differs (our holder text, another claim). */
static void copy_over(const char *name, bool other_nonce)
{
    char text[1024], tmp[96];
    read_text(name, text, sizeof text);
    char *nonce = strstr(text, "\nnonce ");
    CHECK(nonce != NULL);
    if (nonce && other_nonce)
        nonce[7] = nonce[7] == '0' ? '1' : '0';
    snprintf(tmp, sizeof tmp, "%s.copy", name);
    int fd = openat(dirfd_, tmp, O_WRONLY | O_CREAT | O_EXCL, 0600);
    size_t len = strlen(text);
    CHECK(fd >= 0 && write(fd, text, len) == (ssize_t)len);
    close(fd);
    CHECK_EQ_INT(renameat(dirfd_, tmp, dirfd_, name), 0);
}

/* Changes claim name's nonce in place: the same inode, another claim's contents (as a file
 * made again at the same name looks through sshfs, which numbers inodes by path). */
static void other_nonce_in_place(const char *name)
{
    char text[1024];
    read_text(name, text, sizeof text);
    char *nonce = strstr(text, "\nnonce ");
    CHECK(nonce != NULL);
    if (!nonce)
        return;
    char c = nonce[7] == '0' ? '1' : '0';
    int fd = openat(dirfd_, name, O_WRONLY);
    CHECK(fd >= 0 && pwrite(fd, &c, 1, nonce + 7 - text) == 1);
    close(fd);
}

static void test_release_by_contents(void)
{
    /* through a spare (a byte given) and created directly (none) */
    uint64_t bytes[] = {1, UINT64_MAX};
    for (int i = 0; i < 2; i++) {
        int h = claim_take(dirfd_, "copied", bytes[i], false);
        CHECK(h >= 0);
        copy_over("copied", false);
        claim_release(h);
        CHECK(!exists("copied")); /* ours, whatever its inode: removed */

        h = claim_take(dirfd_, "inplace", bytes[i], false);
        CHECK(h >= 0);
        other_nonce_in_place("inplace");
        claim_release(h);
        CHECK(exists("inplace")); /* the same inode, another claim: not ours */
        CHECK_EQ_INT(unlinkat(dirfd_, "inplace", 0), 0);

        h = claim_take(dirfd_, "renamed", bytes[i], false);
        CHECK(h >= 0);
        copy_over("renamed", true);
        claim_release(h);
        CHECK(exists("renamed"));
        CHECK_EQ_INT(unlinkat(dirfd_, "renamed", 0), 0);
    }
}

static void test_renew_by_contents(void)
{
    int other = claim_take(dirfd_, "r.inplace", 3, false);
    int renamed = claim_take(dirfd_, "r.renamed", 4, false);
    int copied = claim_take(dirfd_, "r.copied", 5, false);
    CHECK(other >= 0 && renamed >= 0 && copied >= 0);
    other_nonce_in_place("r.inplace");
    copy_over("r.renamed", true);
    copy_over("r.copied", false); /* last: its renewals come after the others' changes */
    CHECK_EQ_INT(renewed("r.copied"), 0);
    /* two renewals of the copy: a whole pass over every claim since the changes (bounded:
     * 2 renewals take 2.5 s; 30 s leaves room for a slow, loaded machine) */
    double until = now_monotonic() + 30;
    while (renewed("r.copied") < 2 && now_monotonic() < until) {
        struct timespec ts = {0, 50000000};
        nanosleep(&ts, NULL);
    }
    CHECK(renewed("r.copied") >= 2);
    CHECK_EQ_INT(renewed("r.inplace"), 0); /* another claim's: never written to */
    CHECK_EQ_INT(renewed("r.renamed"), 0);
    claim_release(other);
    claim_release(renamed);
    claim_release(copied);
    CHECK(!exists("r.copied") && exists("r.inplace") && exists("r.renamed"));
}

int main(void)
{
    if (check_mkdtemp(dir, sizeof dir, "claim"))
        return 1;
    log_open_stderr(false);
    claim_set_lease(CLAIM_LEASE_MIN); /* renewed every lease / 4, from the first claim on */
    char *p = path_of("locks");
    CHECK_EQ_INT(mkdir(p, 0700), 0);
    dirfd_ = open(p, O_RDONLY | O_DIRECTORY);
    free(p);
    CHECK(dirfd_ >= 0);
    RUN(test_release_by_contents);
    RUN(test_renew_by_contents);
    claim_drop_spares(dirfd_);
    close(dirfd_);
    check_rmtree(dir);
    return check_done();
}
