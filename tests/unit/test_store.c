/* test_store.c: the result store (src/cache/store.c, store_gc.c) and what it rests on:
 * records appended and found again after a reopen, a torn tail dropped and truncated by the
 * next writer, damaged records refused, packs rolling over, writers in several processes at
 * once; compaction keeping exactly what is wanted, seen by a store opened before it, killed at
 * each step, and run while other processes append; the crc32c fast path against the table;
 * the key hash. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "cache/cache.h"
#include "key.h"
#include "zarr/zarr.h"

static char dir[256];
static int results_fd = -1, locks_fd = -1;

/* A fresh store directory (results/ and locks/ under dir/name). */
static void fresh(const char *name)
{
    if (results_fd >= 0)
        close(results_fd);
    if (locks_fd >= 0)
        close(locks_fd);
    char p[512];
    snprintf(p, sizeof p, "%s/%s/results", dir, name);
    mkdir_p(p, 0700);
    results_fd = open(p, O_RDONLY | O_DIRECTORY);
    snprintf(p, sizeof p, "%s/%s/locks", dir, name);
    mkdir_p(p, 0700);
    locks_fd = open(p, O_RDONLY | O_DIRECTORY);
}

static struct store *open_store(void)
{
    struct store *s = NULL;
    struct errbuf err = {{0}};
    int r = store_open(results_fd, locks_fd, "test", &s, &err);
    if (r < 0)
        fprintf(stderr, "store_open: %s\n", err.msg);
    return s;
}

static struct key128 key_of(int who, int i)
{
    struct keyhash h;
    key_init(&h, "test");
    key_add_u64(&h, (uint64_t)who);
    key_add_u64(&h, (uint64_t)i);
    return key_final(&h);
}

/* Record i's content: compressible for even i, noise for odd i; len varies with i. */
static size_t fill(int who, int i, uint16_t *buf)
{
    size_t n = 50 + (size_t)(i * 37 % 900);
    uint32_t x = (uint32_t)(who * 7919 + i * 104729 + 1);
    for (size_t k = 0; k < n; k++) {
        x = x * 1664525u + 1013904223u;
        buf[k] = i % 2 ? (uint16_t)(x >> 16) : (uint16_t)(k / 8 + (size_t)i);
    }
    return n * sizeof *buf;
}

static int put_many(struct store *s, int who, int from, int to)
{
    uint16_t buf[1000];
    for (int i = from; i < to; i++) {
        struct errbuf err = {{0}};
        size_t len = fill(who, i, buf);
        if (store_put(s, key_of(who, i), buf, len, 2, &err) < 0) {
            fprintf(stderr, "store_put: %s\n", err.msg);
            return -1;
        }
    }
    return 0;
}

/* How many of records [from, to) of who are stored with the right content. */
static int count_good(struct store *s, int who, int from, int to)
{
    uint16_t want[1000], got[1000];
    int good = 0;
    for (int i = from; i < to; i++) {
        size_t len = fill(who, i, want);
        if (store_get(s, key_of(who, i), got, len) == 0 && memcmp(want, got, len) == 0)
            good++;
    }
    return good;
}

static char *pack_path(int n)
{
    char fdpath[64], p[512];
    snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", results_fd);
    ssize_t k = readlink(fdpath, p, sizeof p - 32);
    p[k < 0 ? 0 : k] = '\0';
    return xasprintf("%s/pack-%06d", p, n);
}

static off_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? st.st_size : -1;
}

static void test_crc32c(void)
{
    CHECK_EQ_INT(zarr_crc32c(0, "123456789", 9), 0xE3069283u);
    CHECK_EQ_INT(zarr_crc32c_portable(0, "123456789", 9), 0xE3069283u);
    size_t big = 3 * 8192 * 3 + 77;
    unsigned char *buf = xmalloc(big + 8);
    for (size_t i = 0; i < big + 8; i++)
        buf[i] = (unsigned char)(i * 131 + (i >> 7));
    for (size_t off = 0; off < 8; off++)
        for (size_t len = 0; len < 300; len += 7)
            CHECK_EQ_INT(zarr_crc32c(0, buf + off, len), zarr_crc32c_portable(0, buf + off, len));
    for (size_t len = big - 40; len <= big; len += 13)
        CHECK_EQ_INT(zarr_crc32c(0, buf + 3, len), zarr_crc32c_portable(0, buf + 3, len));
    /* continuing from a previous value is the same as one call */
    uint32_t part = zarr_crc32c(zarr_crc32c(0, buf, 30000), buf + 30000, big - 30000);
    CHECK_EQ_INT(part, zarr_crc32c_portable(0, buf, big));
    free(buf);
}

static void test_key(void)
{
    struct keyhash a, b, c;
    key_init(&a, "d");
    key_add(&a, "hello, world, and more than eight bytes", 39);
    key_init(&b, "d");
    key_add(&b, "hello, w", 8);
    key_add(&b, "orld, and more than", 19);
    key_add(&b, " eight bytes", 12);
    CHECK(key_eq(key_final(&a), key_final(&b)));
    key_init(&c, "e");
    key_add(&c, "hello, world, and more than eight bytes", 39);
    CHECK(!key_eq(key_final(&a), key_final(&c)));
    key_init(&b, "d");
    key_add_str(&b, "ab");
    key_add_str(&b, "c");
    key_init(&c, "d");
    key_add_str(&c, "a");
    key_add_str(&c, "bc");
    CHECK(!key_eq(key_final(&b), key_final(&c)));
    CHECK(!key_eq(key_of(0, 1), key_of(1, 0)));
    /* Keys name what caches hold: these values were computed before key_add_u64 had its fast
     * path, and must never change (every cached result would be computed again). */
    struct keyhash h, g;
    key_init(&h, "pin");
    key_add_u64(&h, 1);
    key_add_u64(&h, 0x8000000000000005ull);
    key_add(&h, "abc", 3);
    key_add_u64(&h, 42); /* after an odd length */
    key_add_key(&h, (struct key128){.lo = 7, .hi = 9});
    struct key128 k = key_final(&h);
    /* the key is XXH3-128 of the canonical bytes: u64 3, "pin", u64 1, u64 0x80..05, "abc",
     * u64 42, u64 7, u64 9 (little-endian); `xxh128sum` of those 51 bytes prints
     * 6b761d1ebf5d9dcdfc0f1fabcf453dde */
    char hex[33];
    key_hex(k, hex);
    CHECK(strcmp(hex, "6b761d1ebf5d9dcdfc0f1fabcf453dde") == 0);
    /* a key longer than the buffer streams, with the same result as one call: u64 4, "long",
     * then 0..255 five times; xxh128sum prints 5067bda91d47d6ef863f6a8778c678cd */
    unsigned char run[256];
    for (int i = 0; i < 256; i++)
        run[i] = (unsigned char)i;
    key_init(&g, "long");
    for (int i = 0; i < 5; i++) {
        key_add(&g, run, i == 2 ? 100 : 256); /* in pieces too */
        if (i == 2)
            key_add(&g, run + 100, 156);
    }
    key_hex(key_final(&g), hex);
    CHECK(strcmp(hex, "5067bda91d47d6ef863f6a8778c678cd") == 0);
    key_init(&g, "pin2");
    key_add_u64(&g, 0);
    key_add_key(&g, k);
    CHECK(!key_eq(key_final(&g), k));
}

static void test_append_and_reopen(void)
{
    fresh("append");
    struct store *s = open_store();
    CHECK(s != NULL);
    CHECK_EQ_INT(put_many(s, 0, 0, 200), 0);
    CHECK_EQ_INT(count_good(s, 0, 0, 200), 200);
    uint16_t buf[1000];
    CHECK_EQ_INT(store_get(s, key_of(9, 9), buf, 100), -ENOENT);
    struct store_stats st;
    store_get_stats(s, &st);
    CHECK_EQ_INT(st.results, 200);
    CHECK_EQ_INT(st.packs, 1);
    store_close(s);
    s = open_store();
    CHECK_EQ_INT(count_good(s, 0, 0, 200), 200);
    /* the wrong length is refused (and forgets the record) */
    CHECK_EQ_INT(store_get(s, key_of(0, 3), buf, 10), -EBADMSG);
    CHECK(!store_has(s, key_of(0, 3)));
    store_close(s);
}

static void test_torn_tail(void)
{
    fresh("torn");
    struct store *s = open_store();
    CHECK_EQ_INT(put_many(s, 0, 0, 20), 0);
    store_close(s);
    char *pack = pack_path(1);
    off_t good = file_size(pack);
    /* a writer that died in the middle of a record: a header and half its bytes */
    int fd = open(pack, O_WRONLY | O_APPEND);
    char junk[40] = "roifsP1";
    CHECK(write(fd, junk, sizeof junk) == (ssize_t)sizeof junk);
    close(fd);
    s = open_store();
    CHECK_EQ_INT(count_good(s, 0, 0, 20), 20);
    CHECK_EQ_INT(put_many(s, 0, 20, 21), 0); /* drops the torn tail first */
    CHECK_EQ_INT(count_good(s, 0, 0, 21), 21);
    store_close(s);
    s = open_store();
    CHECK_EQ_INT(count_good(s, 0, 0, 21), 21);
    struct store_stats st;
    store_get_stats(s, &st);
    CHECK_EQ_INT(st.bytes, file_size(pack));
    CHECK(file_size(pack) > good);
    store_close(s);
    free(pack);
}

static void flip_at(const char *path, off_t off)
{
    int fd = open(path, O_RDWR);
    unsigned char b;
    CHECK(pread(fd, &b, 1, off) == 1);
    b ^= 0x40;
    CHECK(pwrite(fd, &b, 1, off) == 1);
    close(fd);
}

static void test_damaged_records(void)
{
    fresh("damaged");
    struct store *s = open_store();
    CHECK_EQ_INT(put_many(s, 0, 0, 10), 0);
    store_close(s);
    char *pack = pack_path(1);
    /* the stored bytes of the last record: refused at read, the others fine */
    flip_at(pack, file_size(pack) - 1);
    s = open_store();
    uint16_t buf[1000];
    size_t len = fill(0, 9, buf);
    CHECK(store_has(s, key_of(0, 9)));
    CHECK_EQ_INT(store_get(s, key_of(0, 9), buf, len), -EBADMSG);
    CHECK(!store_has(s, key_of(0, 9)));
    CHECK_EQ_INT(count_good(s, 0, 0, 9), 9);
    /* stored again: the new copy wins, also after a reopen */
    CHECK_EQ_INT(put_many(s, 0, 9, 10), 0);
    CHECK_EQ_INT(count_good(s, 0, 0, 10), 10);
    store_close(s);
    s = open_store();
    CHECK_EQ_INT(count_good(s, 0, 0, 10), 10);
    store_close(s);
    /* a damaged header: the scan stops there (what follows cannot be delimited) */
    flip_at(pack, 20);
    s = open_store();
    CHECK_EQ_INT(count_good(s, 0, 0, 10), 0);
    CHECK_EQ_INT(put_many(s, 0, 0, 10), 0); /* the next writer truncates and appends */
    CHECK_EQ_INT(count_good(s, 0, 0, 10), 10);
    store_close(s);
    free(pack);
}

static void test_packs_roll_over(void)
{
    fresh("roll");
    store_pack_limit = 8192;
    struct store *s = open_store();
    CHECK_EQ_INT(put_many(s, 0, 0, 100), 0);
    struct store_stats st;
    store_get_stats(s, &st);
    CHECK(st.packs > 3);
    store_close(s);
    s = open_store();
    CHECK_EQ_INT(count_good(s, 0, 0, 100), 100);
    store_close(s);
    store_pack_limit = 1ULL << 30;
}

/* Four processes append at once (small packs: they roll over under each other); a store
 * opened before them sees everything after a refresh, and so does a fresh one. */
static void test_concurrent_writers(void)
{
    fresh("concurrent");
    store_pack_limit = 64 << 10;
    struct store *before = open_store();
    pid_t pids[4];
    for (int w = 0; w < 4; w++) {
        pids[w] = fork();
        if (pids[w] == 0) {
            struct store *s = open_store();
            int r = s ? put_many(s, w + 1, 0, 150) : -1;
            store_close(s);
            _exit(r == 0 ? 0 : 1);
        }
    }
    for (int w = 0; w < 4; w++) {
        int status;
        CHECK(waitpid(pids[w], &status, 0) == pids[w] && WIFEXITED(status) &&
              WEXITSTATUS(status) == 0);
    }
    CHECK_EQ_INT(count_good(before, 1, 0, 1), 0);
    store_refresh(before);
    for (int w = 1; w <= 4; w++)
        CHECK_EQ_INT(count_good(before, w, 0, 150), 150);
    store_close(before);
    struct store *s = open_store();
    for (int w = 1; w <= 4; w++)
        CHECK_EQ_INT(count_good(s, w, 0, 150), 150);
    struct store_stats st;
    store_get_stats(s, &st);
    CHECK_EQ_INT(st.results, 600);
    store_close(s);
    store_pack_limit = 1ULL << 30;
}

static int count_packs(void);

/* A record's header as store.h describes it (56 bytes): what the test reads of a pack. */
struct test_header {
    char magic[8];
    uint64_t key_lo, key_hi, raw_len, stored_len;
    uint32_t codec, data_crc, made, header_crc;
};

/* The writers (who) whose records pack n holds, as a bit set (bit who), reading its headers. */
static unsigned writers_of_pack(int n, int nwho, int per)
{
    char *path = pack_path(n);
    int fd = open(path, O_RDONLY);
    free(path);
    unsigned set = 0;
    struct test_header h;
    off_t off = 0;
    while (fd >= 0 && pread(fd, &h, sizeof h, off) == (ssize_t)sizeof h &&
           memcmp(h.magic, "roifsP1", 8) == 0) {
        for (int w = 1; w <= nwho; w++)
            for (int i = 0; i < per; i++) {
                struct key128 k = key_of(w, i);
                if (k.lo == h.key_lo && k.hi == h.key_hi)
                    set |= 1u << w;
            }
        off += (off_t)(sizeof h + h.stored_len);
    }
    if (fd >= 0)
        close(fd);
    return set;
}

/* No pack is ever appended to by two writers (issue 35: hosts whose byte-range locks do not
 * reach each other tore each other's records): 4 processes storing at once each append to a
 * pack of their own, held by its claim; a pack whose writer ended is resumed by the next
 * writer (no new pack), and one whose writer was killed too. */
static void test_one_writer_per_pack(void)
{
    fresh("onewriter");
    int done[2], go[2];
    CHECK(pipe(done) == 0 && pipe(go) == 0);
    pid_t pids[4];
    for (int w = 0; w < 4; w++) {
        pids[w] = fork();
        if (pids[w] == 0) {
            close(done[0]);
            close(go[1]);
            struct store *s = open_store();
            int r = s ? put_many(s, w + 1, 0, 60) : -1;
            char b = 'x';
            if (write(done[1], &b, 1) != 1 || read(go[0], &b, 1) < 0) /* all at once, open */
                r = -1;
            store_close(s);
            _exit(r == 0 ? 0 : 1);
        }
    }
    close(done[1]);
    close(go[0]);
    char b[4];
    size_t got = 0;
    while (got < 4) {
        ssize_t k = read(done[0], b + got, 4 - got);
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    CHECK_EQ_INT(got, 4);
    int packs = count_packs();
    CHECK_EQ_INT(packs, 4); /* four writers at once: four packs, each of one writer */
    for (int n = 1; n <= packs; n++) {
        unsigned set = writers_of_pack(n, 4, 60);
        CHECK(set != 0 && (set & (set - 1)) == 0);
    }
    close(go[1]); /* they may end now */
    close(done[0]);
    for (int w = 0; w < 4; w++) {
        int status;
        CHECK(waitpid(pids[w], &status, 0) == pids[w] && WIFEXITED(status) &&
              WEXITSTATUS(status) == 0);
    }
    struct store *s = open_store();
    for (int w = 1; w <= 4; w++)
        CHECK_EQ_INT(count_good(s, w, 0, 60), 60);
    /* a writer killed (no store_close: its claim stays, naming a process that is gone) */
    pid_t k = fork();
    if (k == 0) {
        struct store *c = open_store();
        _exit(c && put_many(c, 5, 0, 10) == 0 ? 0 : 1);
    }
    int status;
    CHECK(waitpid(k, &status, 0) == k && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_EQ_INT(count_packs(), packs);     /* it resumed a pack whose writer had ended */
    CHECK_EQ_INT(put_many(s, 6, 0, 10), 0); /* and this one the killed writer's, or another */
    CHECK_EQ_INT(count_packs(), packs);
    store_refresh(s);
    CHECK_EQ_INT(count_good(s, 5, 0, 10), 10);
    CHECK_EQ_INT(count_good(s, 6, 0, 10), 10);
    store_close(s);
}

/* ---- compaction ---- */

/* Live: the records of who whose index is even (or, with all, every record of who). */
struct live_set {
    int who;
    bool all;
};

static bool live_even(void *ctx, struct key128 k)
{
    const struct live_set *ls = ctx;
    for (int i = 0; i < 400; i++)
        if (key_eq(k, key_of(ls->who, i)))
            return ls->all || i % 2 == 0;
    return false;
}

static int count_packs(void)
{
    int n = 0;
    for (int i = 1; i < 200; i++) {
        char *p = pack_path(i);
        n += file_size(p) >= 0;
        free(p);
    }
    return n;
}

/* How many of records [from, to) of who the store holds (good or not). */
static int count_has(struct store *s, int who, int from, int to)
{
    int n = 0;
    for (int i = from; i < to; i++)
        n += store_has(s, key_of(who, i));
    return n;
}

static void test_compact_keeps_what_is_wanted(void)
{
    fresh("compact");
    store_pack_limit = 16 << 10;
    struct store *s = open_store();
    CHECK_EQ_INT(put_many(s, 0, 0, 300), 0);
    CHECK_EQ_INT(put_many(s, 1, 0, 20), 0); /* another job's: not wanted at all */
    CHECK_EQ_INT(put_many(s, 0, 0, 10), 0); /* duplicates: the later copies are named */
    struct store *other = open_store();     /* a process that looked before the compaction */
    int packs = count_packs();
    CHECK(packs > 5);
    struct store_stats before, after;
    store_get_stats(s, &before);
    struct live_set ls = {0, false};
    struct store_compaction c;
    struct errbuf err = {{0}};
    CHECK_EQ_INT(store_compact(s, live_even, &ls, &c, &err), 0);
    CHECK_EQ_INT(c.kept, 150);
    CHECK_EQ_INT(c.removed, 170);
    CHECK(c.bytes_after < c.bytes_before / 2 + 8192);
    CHECK(count_packs() < packs);
    for (int i = 0; i < 300; i++)
        CHECK_EQ_INT(store_has(s, key_of(0, i)), i % 2 == 0);
    CHECK_EQ_INT(count_good(s, 0, 0, 300), 150);
    CHECK_EQ_INT(count_has(s, 1, 0, 20), 0);
    store_get_stats(s, &after);
    CHECK_EQ_INT(after.results, 150);
    CHECK(after.bytes < before.bytes);
    /* the other store still reads what it knew (the removed packs stay open) until its next
     * look, which finds the copies and lets the removed packs go */
    CHECK_EQ_INT(count_good(other, 0, 0, 300), 300);
    store_refresh(other);
    CHECK_EQ_INT(count_good(other, 0, 0, 300), 150);
    CHECK_EQ_INT(count_has(other, 0, 0, 300), 150);
    struct store_stats ost;
    store_get_stats(other, &ost);
    CHECK_EQ_INT(ost.packs, count_packs());
    /* both append on: nothing lands in a removed pack, each sees the other's */
    CHECK_EQ_INT(put_many(other, 2, 0, 50), 0);
    CHECK_EQ_INT(put_many(s, 3, 0, 50), 0);
    store_refresh(s);
    store_refresh(other);
    CHECK_EQ_INT(count_good(s, 2, 0, 50), 50);
    CHECK_EQ_INT(count_good(other, 3, 0, 50), 50);
    store_close(other);
    store_close(s);
    s = open_store();
    CHECK_EQ_INT(count_good(s, 0, 0, 300), 150);
    CHECK_EQ_INT(count_good(s, 2, 0, 50) + count_good(s, 3, 0, 50), 100);
    /* a second compaction with everything wanted changes nothing */
    packs = count_packs();
    ls.all = true;
    ls.who = 0;
    CHECK_EQ_INT(store_compact(s, live_even, &ls, &c, &err), 0);
    CHECK_EQ_INT(c.removed, 100); /* 2's and 3's */
    CHECK_EQ_INT(count_good(s, 0, 0, 300), 150);
    store_close(s);
    store_pack_limit = 1ULL << 30;
}

static int kill_at;

static void kill_hook(int step)
{
    if (step == kill_at)
        raise(SIGKILL);
}

/* Killed after the copies are written, after they are durable, after the first pack is
 * removed; and a copy cut short (the newest pack truncated in the middle of a record): the
 * next open finds every wanted record, and a complete compaction afterwards keeps them. */
static void test_compact_killed_at_each_step(void)
{
    for (int step = 1; step <= 4; step++) {
        char name[32];
        snprintf(name, sizeof name, "killed%d", step);
        fresh(name);
        store_pack_limit = 16 << 10;
        struct store *s = open_store();
        CHECK_EQ_INT(put_many(s, 0, 0, 200), 0);
        store_close(s);
        int packs = count_packs();
        pid_t pid = fork();
        if (pid == 0) {
            kill_at = step == 4 ? 1 : step;
            store_compact_hook = kill_hook;
            struct store *cs = open_store();
            struct live_set ls = {0, false};
            struct store_compaction c;
            struct errbuf err = {{0}};
            store_compact(cs, live_even, &ls, &c, &err);
            _exit(3); /* never reached: the hook killed it */
        }
        int status;
        CHECK(waitpid(pid, &status, 0) == pid && WIFSIGNALED(status));
        if (step == 4) { /* the kill came in the middle of writing the copies */
            char *p = pack_path(packs + 1);
            off_t sz = file_size(p);
            CHECK(sz > 100);
            CHECK(truncate(p, sz - 37) == 0);
            free(p);
        }
        s = open_store();
        for (int i = 0; i < 200; i += 2)
            CHECK(store_has(s, key_of(0, i)));
        CHECK_EQ_INT(count_good(s, 0, 0, 200) >= 100, 1);
        for (int i = 0; i < 200; i += 2) {
            uint16_t want[1000], got[1000];
            size_t len = fill(0, i, want);
            CHECK(store_get(s, key_of(0, i), got, len) == 0 && memcmp(want, got, len) == 0);
        }
        struct live_set ls = {0, false};
        struct store_compaction c;
        struct errbuf err = {{0}};
        CHECK_EQ_INT(store_compact(s, live_even, &ls, &c, &err), 0);
        CHECK_EQ_INT(count_good(s, 0, 0, 200), 100);
        CHECK_EQ_INT(count_has(s, 0, 0, 200), 100);
        store_close(s);
        s = open_store();
        CHECK_EQ_INT(count_good(s, 0, 0, 200), 100);
        CHECK_EQ_INT(count_has(s, 0, 0, 200), 100);
        store_close(s);
        store_pack_limit = 1ULL << 30;
    }
}

/* Wanted while others append: 0's even records and everything the writers 1..3 append. */
static bool live_busy(void *ctx, struct key128 k)
{
    (void)ctx;
    for (int w = 1; w <= 3; w++)
        for (int i = 0; i < 150; i++)
            if (key_eq(k, key_of(w, i)))
                return true;
    struct live_set ls = {0, false};
    return live_even(&ls, k);
}

/* Three processes append while this one compacts again and again: nothing appended is lost,
 * every wanted record stays, every other one goes. */
static void test_compact_while_others_append(void)
{
    fresh("busy");
    store_pack_limit = 32 << 10;
    struct store *s = open_store();
    CHECK_EQ_INT(put_many(s, 0, 0, 300), 0);
    pid_t pids[3];
    for (int w = 0; w < 3; w++) {
        pids[w] = fork();
        if (pids[w] == 0) {
            struct store *cs = open_store();
            int r = 0;
            for (int i = 0; i < 150 && r == 0; i += 10) {
                r = put_many(cs, w + 1, i, i + 10);
                store_refresh(cs);
            }
            store_close(cs);
            _exit(r == 0 ? 0 : 1);
        }
    }
    struct store_compaction c;
    struct errbuf err = {{0}};
    for (int round = 0; round < 6; round++) {
        int r = store_compact(s, live_busy, NULL, &c, &err);
        if (r < 0)
            fprintf(stderr, "store_compact: %s\n", err.msg);
        CHECK_EQ_INT(r, 0);
    }
    for (int w = 0; w < 3; w++) {
        int status;
        CHECK(waitpid(pids[w], &status, 0) == pids[w] && WIFEXITED(status) &&
              WEXITSTATUS(status) == 0);
    }
    store_refresh(s);
    CHECK_EQ_INT(count_good(s, 0, 0, 300), 150);
    for (int w = 1; w <= 3; w++)
        CHECK_EQ_INT(count_good(s, w, 0, 150), 150);
    store_close(s);
    s = open_store();
    CHECK_EQ_INT(count_good(s, 0, 0, 300), 150);
    CHECK_EQ_INT(count_has(s, 0, 0, 300), 150);
    for (int w = 1; w <= 3; w++)
        CHECK_EQ_INT(count_good(s, w, 0, 150), 150);
    store_close(s);
    store_pack_limit = 1ULL << 30;
}

int main(void)
{
    if (check_mkdtemp(dir, sizeof dir, "store"))
        return 1;
    log_open_stderr(false);
    RUN(test_crc32c);
    RUN(test_key);
    RUN(test_append_and_reopen);
    RUN(test_torn_tail);
    RUN(test_damaged_records);
    RUN(test_packs_roll_over);
    RUN(test_concurrent_writers);
    RUN(test_one_writer_per_pack);
    RUN(test_compact_keeps_what_is_wanted);
    RUN(test_compact_killed_at_each_step);
    RUN(test_compact_while_others_append);
    close(results_fd);
    close(locks_fd);
    check_rmtree(dir);
    return check_done();
}
