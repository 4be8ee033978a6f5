/* zarr_json.h: JSON helpers shared by the v2 (meta.c) and v3 (v3.c) metadata code: error
 * messages naming a key, and fill values. Internal to src/zarr. */
#ifndef ROIFS_ZARR_JSON_H
#define ROIFS_ZARR_JSON_H

#include <jansson.h>

#include "zarr.h"

/* Largest decoded chunk accepted: what blosc (and a sane LRU) can handle. */
#define ZARR_MAX_CHUNK_BYTES ((uint64_t)INT_MAX - 16)

/* Sets err to "\"key\": why (got <v as short JSON>)"; returns -EINVAL. */
int zarr_json_bad_value(struct errbuf *err, const char *key, const json_t *v, const char *why);

/* json_loadb, except that a top-level "fill_value" integer above INT64_MAX (zarr-python writes
 * uint64 fill values so; jansson refuses them) is accepted: it becomes the string
 * ZARR_JSON_BIG_MARK followed by its digits, which zarr_json_parse_fill understands. */
json_t *zarr_json_load(const char *json, size_t len, json_error_t *jerr);

/* Parses fill value v for dtype dt into fill (one native element). v3 also accepts raw bit
 * patterns ("0x7fc00000") for floats and refuses null; v2 sets *is_null for null. */
int zarr_json_parse_fill(const struct dtype *dt, json_t *v, bool v3, unsigned char *fill,
                         bool *is_null, struct errbuf *err);

/* The JSON form of m's fill value. A uint64 above INT64_MAX (which jansson cannot hold) comes
 * back as the string ZARR_JSON_BIG_MARK with its value in *big: the caller substitutes it in
 * the dumped text (zarr_json_dump). v3 writes NaNs other than the canonical one as hex. */
json_t *zarr_json_fill(const struct zarr_meta *m, bool v3, uint64_t *big);
#define ZARR_JSON_BIG_MARK "@roifs-big-uint64-fill@"

/* Dumps root (pretty, 4-space indent, sorted keys if asked), substitutes a big fill value,
 * appends a newline and frees root. malloc'd. */
char *zarr_json_dump(json_t *root, bool sort_keys, uint64_t big);

#endif
