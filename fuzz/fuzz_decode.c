/* fuzz_decode.c: libFuzzer harness for one chunk decoder (zarr_codec_decode), compiled once
 * per codec with -DFUZZ_CODEC=ZC_<NAME>. Input layout: three bytes of little-endian expected
 * decoded size (modulo 1 MiB), one byte of element size (1 + b % 8), then the encoded chunk.
 * A decoder must never read past the stream nor write past the expected size; what it accepts
 * must encode and decode back to the same bytes. The codec libraries are not instrumented, so
 * the stream and the output both end at an inaccessible page: an overrun there faults. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "zarr/zarr.h"

#ifndef FUZZ_CODEC
#error "build with -DFUZZ_CODEC=ZC_BLOSC (or another enum zarr_codec_id)"
#endif

#define FUZZ_NAME "fuzz_decode"
#include "fuzz.h"

#define MAX_OUT (1u << 20)
#define MAX_IN  (1u << 20) /* fuzz/run.sh passes -max_len=65536 */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t *in_end, *out_end;
    if (!in_end) {
        in_end = fuzz_guarded_end(MAX_IN);
        out_end = fuzz_guarded_end(MAX_OUT);
    }
    if (size < 4 || size - 4 > MAX_IN)
        return 0;
    size_t want = (data[0] | (size_t)data[1] << 8 | (size_t)data[2] << 16) & (MAX_OUT - 1);
    unsigned typesize = 1 + data[3] % 8;
    size_t src_len = size - 4;
    uint8_t *in = in_end - src_len, *out = out_end - want;
    memcpy(in, data + 4, src_len);

    struct zarr_codec c = {.id = FUZZ_CODEC, .level = 1, .shuffle = 1};
    snprintf(c.cname, sizeof c.cname, "lz4");
    struct errbuf err;
    err.msg[0] = '\0';
    int r = zarr_codec_decode(&c, in, src_len, out, want, typesize, &err);
    if (r < 0) {
        FUZZ_ASSERT(r == -EIO || r == -ENOMEM, "decode returned %d", r);
        FUZZ_ASSERT(err.msg[0] != '\0', "rejected without a message");
    } else {
        void *enc;
        size_t enc_len;
        r = zarr_codec_encode(&c, out, want, typesize, &enc, &enc_len, &err);
        FUZZ_ASSERT(r == 0, "cannot encode what was decoded: %s", err.msg);
        uint8_t *back = malloc(want ? want : 1);
        r = zarr_codec_decode(&c, enc, enc_len, back, want, typesize, &err);
        FUZZ_ASSERT(r == 0, "cannot decode what was encoded: %s", err.msg);
        FUZZ_ASSERT(memcmp(back, out, want) == 0, "round trip changed the data");
        free(back);
        free(enc);
    }
    return 0;
}
