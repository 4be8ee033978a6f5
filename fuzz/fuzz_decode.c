/* fuzz_decode.c: libFuzzer harness for one chunk decoder (zarr_codec_decode), compiled once
 * per codec with -DFUZZ_CODEC=ZC_<NAME>. Input layout: three bytes of little-endian expected
 * decoded size (modulo 4 MiB), one byte of element size (1 + b % 8), then the encoded chunk.
 * A decoder must never write past the expected size nor trust the stream; what it accepts
 * must encode and decode back to the same bytes. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zarr/zarr.h"

#ifndef FUZZ_CODEC
#error "build with -DFUZZ_CODEC=ZC_BLOSC (or another enum zarr_codec_id)"
#endif

#define FUZZ_ASSERT(cond, ...)                                                                     \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_decode: %s: ", #cond);                                           \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    size_t want = (data[0] | (size_t)data[1] << 8 | (size_t)data[2] << 16) & ((1u << 22) - 1);
    unsigned typesize = 1 + data[3] % 8;
    const uint8_t *src = data + 4;
    size_t src_len = size - 4;
    /* a copy of exactly src_len bytes, so that ASan sees any read past the stream */
    uint8_t *in = malloc(src_len ? src_len : 1);
    memcpy(in, src, src_len);
    uint8_t *out = malloc(want ? want : 1);

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
    free(out);
    free(in);
    return 0;
}
