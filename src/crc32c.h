/* crc32c.h: CRC-32C (Castagnoli), a base utility: the v3 crc32c codec and shard indexes
 * (src/zarr/), the cache's records and result store (src/cache/), the apply journal. The
 * zarr_ prefix is historical. */
#ifndef ROIFS_CRC32C_H
#define ROIFS_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* CRC-32C (Castagnoli) of len bytes, continuing from crc (start with 0): with the SSE4.2
 * instruction where the CPU has it. */
uint32_t zarr_crc32c(uint32_t crc, const void *buf, size_t len);
/* The same, always table-driven (to test the fast path against). */
uint32_t zarr_crc32c_portable(uint32_t crc, const void *buf, size_t len);

#endif
