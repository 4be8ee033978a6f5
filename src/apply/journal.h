/* journal.h: the journal of `roifs apply` (docs/operations.md), DIR/apply/journal in the cache:
 * what the input was when the application began (the identity of every storage file), and, chunk by
 * chunk, that a replacement is about to be renamed into place (its length and crc32c) and that it
 * was. Only the journal says which input files hold results; everything else (ROI results,
 * assembled chunks) is in the cache and named by the original input. */
#ifndef ROIFS_APPLY_JOURNAL_H
#define ROIFS_APPLY_JOURNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "../util.h"
#include "../zarr/zarr.h"

/* What the journal says of one storage file of the current application. */
enum journal_chunk { JC_ORIGINAL, JC_INTENT, JC_REPLACED };

struct journal {
    int dirfd; /* DIR/apply */
    int fd;    /* DIR/apply/journal, or -1 before the first application */
    uint64_t end;
    /* the current application (valid when begun) */
    bool begun, finished;
    uint64_t gen, fingerprint, started, finished_at;
    uint64_t nstorage;
    struct zarr_file_identity *origin; /* nstorage: the input when it began */
    uint8_t *state;                    /* nstorage: enum journal_chunk */
    uint64_t *intent_len;              /* nstorage: JC_INTENT and JC_REPLACED */
    uint32_t *intent_crc;
    uint64_t nreplaced;
};

/* Opens (creating) DIR/apply and reads its journal: a torn last record (a kill while it was
 * written) is cut off. 0, or -errno with err set (-EBADMSG: the journal is damaged). */
int journal_open(const char *cache_dir, struct journal *j, struct errbuf *err);
void journal_close(struct journal *j);
/* Starts application gen + 1 over the input whose storage files are ids[0..n): a new journal
 * file, durable before this returns, replaces the old one. */
int journal_begin(struct journal *j, uint64_t fingerprint, const struct zarr_file_identity *ids,
                  uint64_t n, struct errbuf *err);
/* Records that storage file sid is about to be replaced by len bytes with crc32c crc
 * (durably, before the rename), then that it was (durable with the next durable record: the
 * intent record lets the next run tell a rename whose record was lost), then that the
 * application finished (durably). */
int journal_intent(struct journal *j, uint64_t sid, uint64_t len, uint32_t crc, struct errbuf *err);
int journal_replaced(struct journal *j, uint64_t sid, struct errbuf *err);
int journal_finish(struct journal *j, struct errbuf *err);
/* What journal_peek reads. */
struct journal_summary {
    bool begun, finished;          /* an application began; it finished */
    uint64_t gen, replaced, total; /* its number; of its storage files, those replaced */
};
/* Reads the journal of the cache at cache_dir without changing anything (apply may be running):
 * 0 (s->begun false when there is no journal) or -errno (-EBADMSG: damaged). */
int journal_peek(const char *cache_dir, struct journal_summary *s);

#endif
