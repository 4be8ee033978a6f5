/* input_content.c: the rules of content hashing that the reads and the kept hashes share: the
 * hash of bytes read (XXH3-64, or a value of the file's identity when the input is named by
 * identity), the clock a read starts by, and git's "racy timestamp" rule (a file whose mtime or
 * ctime is not older than the read's start by a margin may still be changing: its hash is
 * never kept). Below input_file.c and input_hash.c; calls nothing of the reader. */
#include <stdint.h>
#include <time.h>
#include <xxhash.h>

#include "../util.h"
#include "input_state.h"

uint64_t input_hash_bytes(const void *p, size_t n)
{
    return (uint64_t)XXH3_64bits(p, n);
}

bool input_same_file(const struct file_id *a, const struct file_id *b)
{
    return a->exists == b->exists && a->size == b->size && a->mtime_ns == b->mtime_ns &&
           a->ctime_ns == b->ctime_ns && a->ino == b->ino;
}

uint64_t input_identity_value(const struct file_id *fid)
{
    uint64_t rec[5] = {fid->size, fid->mtime_ns, fid->ctime_ns, fid->ino, 0x6964656e74ULL};
    return hash64(HASH64_INIT, rec, sizeof rec);
}

bool input_by_identity(const struct zarr_input *in)
{
    return in->hashes.by_identity && !in->hashes.verify;
}

uint64_t input_hash_read(const struct zarr_input *in, const struct file_id *fid, const void *p,
                         size_t n)
{
    return input_by_identity(in) ? input_identity_value(fid) : input_hash_bytes(p, n);
}

uint64_t input_max_file_size(const struct zarr_input *in)
{
    /* as input_read_file: no codec makes a chunk this much larger than its data */
    uint64_t chunk = 2 * (uint64_t)in->chunk_nbytes + (1u << 20), max;
    if (!in->meta.sharded)
        return chunk;
    uint64_t n = zarr_shard_count(&in->meta);
    if (__builtin_mul_overflow(n, chunk, &max) ||
        __builtin_add_overflow(max, (uint64_t)zarr_shard_index_size(&in->meta), &max))
        return UINT64_MAX;
    return max;
}

uint64_t input_now_ns(void)
{
    return (uint64_t)clock_ns(CLOCK_REALTIME);
}

bool input_racy(const struct zarr_input *in, const struct file_id *fid, uint64_t start)
{
    if (in->hashes.verify)
        return true;
    if (!fid->exists || input_by_identity(in))
        return false; /* by identity: only a change of identity during the read counts */
    uint64_t t = fid->mtime_ns > fid->ctime_ns ? fid->mtime_ns : fid->ctime_ns;
    return t + in->hashes.margin_ns >= start;
}
