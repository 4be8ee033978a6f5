/* v3.c: Zarr v3 array metadata (zarr.json): parsing with messages that name the offending key
 * (codecs[1].configuration.level), and emission of roifs's output metadata. */
#include "zarr.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zarr_json.h"

#define bad_value zarr_json_bad_value

/* "where.configuration.member" into buf, the name of a key in messages (cut if too long). */
static const char *conf_key(char *buf, size_t len, const char *where, const char *member)
{
    if (snprintf(buf, len, "%s.configuration.%s", where, member) >= (int)len)
        buf[len - 1] = '\0';
    return buf;
}

/* At most this many inner chunks per shard: bounds the index held in memory (256 MiB). */
#define ZARR_MAX_SHARD_CHUNKS (1ULL << 24)

static const char *const known_keys[] = {
    "zarr_format",          "node_type",  "shape",  "data_type",  "chunk_grid",
    "chunk_key_encoding",   "fill_value", "codecs", "attributes", "dimension_names",
    "storage_transformers",
};

/* Keys of the array object that roifs does not know must say "must_understand": false. */
static int check_extensions(json_t *root, struct errbuf *err)
{
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        size_t i = 0;
        while (i < sizeof known_keys / sizeof known_keys[0] && strcmp(key, known_keys[i]) != 0)
            i++;
        if (i < sizeof known_keys / sizeof known_keys[0])
            continue;
        json_t *mu = json_is_object(v) ? json_object_get(v, "must_understand") : NULL;
        if (!json_is_false(mu))
            return bad_value(err, key, v,
                             "unknown extension that must be understood (roifs does not "
                             "support it)");
    }
    return 0;
}

/* A list of ndim positive integers (or non-negative: zero_ok) at v, named key in messages. */
static int parse_list(json_t *v, const char *key, int ndim, bool zero_ok, uint64_t *out,
                      struct errbuf *err)
{
    if (!json_is_array(v))
        return bad_value(err, key, v, "expected a list of integers");
    if (json_array_size(v) > ROIFS_MAX_DIM)
        return bad_value(err, key, v, "too many dimensions (at most 32)");
    if (ndim >= 0 && (int)json_array_size(v) != ndim) {
        char why[80];
        snprintf(why, sizeof why, "expected %d entries, one per dimension", ndim);
        return bad_value(err, key, v, why);
    }
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e)
    {
        if (!json_is_integer(e) || json_integer_value(e) < (zero_ok ? 0 : 1))
            return bad_value(err, key, v,
                             zero_ok ? "expected non-negative integers"
                                     : "expected positive integers");
        out[i] = (uint64_t)json_integer_value(e);
    }
    return 0;
}

/* Splits an extension object (or v3.1 bare name) into name and configuration. */
static int extension(json_t *v, const char *key, const char **name, json_t **conf,
                     struct errbuf *err)
{
    *conf = NULL;
    if (json_is_string(v)) {
        *name = json_string_value(v);
        return 0;
    }
    *name = json_is_object(v) ? json_string_value(json_object_get(v, "name")) : NULL;
    if (!*name)
        return bad_value(err, key, v, "expected an object with a \"name\"");
    *conf = json_object_get(v, "configuration");
    if (*conf && !json_is_object(*conf))
        return bad_value(err, key, v, "\"configuration\" must be an object");
    return 0;
}

/* An integer member of a codec configuration (absent: dflt). */
static int conf_int(json_t *conf, const char *where, const char *member, long long lo, long long hi,
                    int dflt, int *out, struct errbuf *err)
{
    json_t *v = conf ? json_object_get(conf, member) : NULL;
    if (!v) {
        *out = dflt;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        char key[160], why[80];
        conf_key(key, sizeof key, where, member);
        snprintf(why, sizeof why, "expected an integer from %lld to %lld", lo, hi);
        return bad_value(err, key, v, why);
    }
    *out = (int)json_integer_value(v);
    return 0;
}

static int conf_choice(json_t *conf, const char *where, const char *member, const char *choices,
                       const char *dflt, const char **out, struct errbuf *err)
{
    json_t *v = conf ? json_object_get(conf, member) : NULL;
    const char *s = v ? json_string_value(v) : dflt;
    size_t n = s ? strlen(s) : 0;
    const char *p = choices;
    while (s && *p) {
        const char *end = strchr(p, '|');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, s, n) == 0) {
            *out = s;
            return 0;
        }
        p += len + (end ? 1 : 0);
    }
    char key[160], why[160];
    conf_key(key, sizeof key, where, member);
    snprintf(why, sizeof why, "expected one of %s", choices);
    return bad_value(err, key, v, why);
}

static int parse_blosc(json_t *conf, const char *where, struct zarr_codec *c, struct errbuf *err)
{
    const char *s;
    if (conf_choice(conf, where, "cname", "lz4|lz4hc|blosclz|zstd|zlib|snappy", "lz4", &s, err) < 0)
        return -EINVAL;
    snprintf(c->cname, sizeof c->cname, "%s", s);
    if (conf_choice(conf, where, "shuffle", "noshuffle|shuffle|bitshuffle", "noshuffle", &s, err) <
        0)
        return -EINVAL;
    c->shuffle = s[0] == 'n' ? 0 : s[0] == 's' ? 1 : 2;
    int typesize;
    if (conf_int(conf, where, "clevel", 0, 9, 5, &c->level, err) < 0 ||
        conf_int(conf, where, "blocksize", 0, INT_MAX, 0, &c->blocksize, err) < 0 ||
        conf_int(conf, where, "typesize", 1, 255, 1, &typesize, err) < 0)
        return -EINVAL;
    return 0;
}

/* One bytes-to-bytes codec (a chain holds at most one compressor). */
static int parse_bb(const char *name, json_t *conf, const char *where, struct zarr_chain *ch,
                    struct errbuf *err)
{
    if (ch->nbb == ZARR_MAX_BB)
        return err_set(err, -EINVAL, "\"%s\": more than %d bytes-to-bytes codecs", where,
                       ZARR_MAX_BB);
    struct zarr_bb *bb = &ch->bb[ch->nbb];
    memset(bb, 0, sizeof *bb);
    if (strcmp(name, "crc32c") == 0) {
        bb->crc32c = true;
        ch->nbb++;
        return 0;
    }
    for (int k = 0; k < ch->nbb; k++)
        if (!ch->bb[k].crc32c)
            return err_set(err, -EINVAL,
                           "\"%s\": a second compressor (\"%s\") in one chain is not supported",
                           where, name);
    int r;
    if (strcmp(name, "blosc") == 0) {
        bb->c.id = ZC_BLOSC;
        r = parse_blosc(conf, where, &bb->c, err);
    } else if (strcmp(name, "gzip") == 0) {
        bb->c.id = ZC_GZIP;
        r = conf_int(conf, where, "level", 0, 9, 5, &bb->c.level, err);
    } else {
        bb->c.id = ZC_ZSTD;
        r = conf_int(conf, where, "level", -131072, 22, 0, &bb->c.level, err);
        json_t *ck = conf ? json_object_get(conf, "checksum") : NULL;
        if (r == 0 && ck && !json_is_boolean(ck)) {
            char key[160];
            conf_key(key, sizeof key, where, "checksum");
            r = bad_value(err, key, ck, "expected true or false");
        }
    }
    if (r == 0)
        ch->nbb++;
    return r;
}

static int parse_transpose(json_t *conf, const char *where, int ndim, struct zarr_chain *ch,
                           struct errbuf *err)
{
    json_t *v = conf ? json_object_get(conf, "order") : NULL;
    char key[160];
    conf_key(key, sizeof key, where, "order");
    uint8_t order[ROIFS_MAX_DIM];
    const char *s = json_string_value(v);
    if (s && (strcmp(s, "C") == 0 || strcmp(s, "F") == 0)) { /* early v3 drafts */
        for (int d = 0; d < ndim; d++)
            order[d] = (uint8_t)(s[0] == 'C' ? d : ndim - 1 - d);
    } else {
        uint64_t o[ROIFS_MAX_DIM];
        bool seen[ROIFS_MAX_DIM] = {false};
        if (parse_list(v, key, ndim, true, o, err) < 0)
            return -EINVAL;
        for (int d = 0; d < ndim; d++) {
            if (o[d] >= (uint64_t)ndim || seen[o[d]])
                return bad_value(err, key, v, "expected a permutation of the dimensions");
            seen[o[d]] = true;
            order[d] = (uint8_t)o[d];
        }
    }
    /* compose with an earlier transpose: encoded dim d is the original dim prev[order[d]] */
    uint8_t prev[ROIFS_MAX_DIM];
    for (int d = 0; d < ndim; d++)
        prev[d] = ch->transpose ? ch->order[d] : (uint8_t)d;
    bool identity = true;
    for (int d = 0; d < ndim; d++) {
        ch->order[d] = prev[order[d]];
        identity = identity && ch->order[d] == d;
    }
    ch->transpose = !identity;
    return 0;
}

static int parse_bytes(json_t *conf, const char *where, const struct dtype *dt,
                       struct zarr_chain *ch, struct errbuf *err)
{
    json_t *v = conf ? json_object_get(conf, "endian") : NULL;
    if (!v && dt->size > 1)
        return err_set(err, -EINVAL,
                       "\"%s\": the bytes codec needs \"endian\" for a %u-byte data type", where,
                       dt->size);
    const char *e;
    if (v && conf_choice(conf, where, "endian", "little|big", NULL, &e, err) < 0)
        return -EINVAL;
    ch->big_endian = v && e[0] == 'b' && dt->size > 1;
    return 0;
}

struct chain_ctx {
    const struct dtype *dt;
    int ndim;
    const uint64_t *shape; /* the chunk shape this chain encodes */
    bool allow_sharding;   /* the array's own chain (not inside a shard) */
    bool index;            /* a shard index chain: bytes and crc32c only */
    struct zarr_meta *m;   /* where sharding is recorded */
};

static int parse_sharding(json_t *conf, const char *where, const struct chain_ctx *cx,
                          struct errbuf *err);

/* Parses a codec list into ch (where names it in messages: "codecs"). */
static int parse_chain(json_t *list, const char *where, const struct chain_ctx *cx,
                       struct zarr_chain *ch, struct errbuf *err)
{
    memset(ch, 0, sizeof *ch);
    if (!json_is_array(list) || json_array_size(list) == 0)
        return bad_value(err, where, list, "expected a non-empty list of codecs");
    bool have_ab = false; /* the array-to-bytes codec was seen */
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v)
    {
        char at[200];
        if (snprintf(at, sizeof at, "%s[%zu]", where, i) >= (int)sizeof at)
            at[sizeof at - 1] = '\0';
        const char *name;
        json_t *conf;
        if (extension(v, at, &name, &conf, err) < 0)
            return -EINVAL;
        bool aa = strcmp(name, "transpose") == 0;
        bool ab = strcmp(name, "bytes") == 0 || strcmp(name, "sharding_indexed") == 0;
        bool bb = strcmp(name, "blosc") == 0 || strcmp(name, "gzip") == 0 ||
                  strcmp(name, "zstd") == 0 || strcmp(name, "crc32c") == 0;
        if (!aa && !ab && !bb)
            return err_set(err, -EINVAL,
                           "\"%s\": codec \"%s\" is not supported (roifs reads transpose, bytes, "
                           "blosc, gzip, zstd, crc32c and sharding_indexed)",
                           at, name);
        if (cx->index &&
            (aa || (bb && strcmp(name, "crc32c") != 0) || strcmp(name, "sharding_indexed") == 0))
            return err_set(err, -EINVAL,
                           "\"%s\": index_codecs may only hold bytes and crc32c (got \"%s\")", at,
                           name);
        if ((aa || ab) && have_ab)
            return err_set(err, -EINVAL, "\"%s\": \"%s\" after the array-to-bytes codec", at, name);
        if (bb && !have_ab)
            return err_set(err, -EINVAL,
                           "\"%s\": \"%s\" before the array-to-bytes codec (bytes or "
                           "sharding_indexed)",
                           at, name);
        int r = 0;
        if (aa) {
            r = parse_transpose(conf, at, cx->ndim, ch, err);
        } else if (strcmp(name, "bytes") == 0) {
            r = parse_bytes(conf, at, cx->dt, ch, err);
        } else if (ab) {
            if (!cx->allow_sharding)
                return err_set(err, -EINVAL, "\"%s\": nested sharding is not supported", at);
            if (ch->transpose)
                return err_set(err, -EINVAL,
                               "\"%s\": transpose before sharding_indexed is not supported", at);
            r = parse_sharding(conf, at, cx, err);
        } else {
            r = parse_bb(name, conf, at, ch, err);
        }
        if (r < 0)
            return r;
        have_ab = have_ab || ab;
    }
    if (!have_ab)
        return bad_value(err, where, list,
                         "no array-to-bytes codec (bytes or sharding_indexed) in the list");
    if (cx->allow_sharding && cx->m->sharded && ch->nbb)
        return err_set(err, -EINVAL,
                       "\"%s\": bytes-to-bytes codecs after sharding_indexed are not supported",
                       where);
    return 0;
}

static int parse_sharding(json_t *conf, const char *where, const struct chain_ctx *cx,
                          struct errbuf *err)
{
    struct zarr_meta *m = cx->m;
    struct zarr_shard *sh = &m->shard;
    char key[200];
    if (!conf)
        return err_set(err, -EINVAL, "\"%s\": sharding_indexed needs a configuration", where);
    conf_key(key, sizeof key, where, "chunk_shape");
    json_t *cs = json_object_get(conf, "chunk_shape");
    if (parse_list(cs, key, cx->ndim, false, sh->inner, err) < 0)
        return -EINVAL;
    uint64_t n = 1, bytes = cx->dt->size;
    for (int d = 0; d < cx->ndim; d++) {
        if (cx->shape[d] % sh->inner[d] != 0)
            return bad_value(err, key, cs, "must divide the chunk_grid's chunk_shape");
        if (__builtin_mul_overflow(n, cx->shape[d] / sh->inner[d], &n) || n > ZARR_MAX_SHARD_CHUNKS)
            return bad_value(err, key, cs, "too many inner chunks per shard (at most 2^24)");
        if (__builtin_mul_overflow(bytes, sh->inner[d], &bytes) || bytes > ZARR_MAX_CHUNK_BYTES)
            return bad_value(err, key, cs, "an inner chunk would exceed 2 GiB");
    }
    const char *loc;
    if (conf_choice(conf, where, "index_location", "start|end", "end", &loc, err) < 0)
        return -EINVAL;
    sh->index_at_start = strcmp(loc, "start") == 0;
    struct chain_ctx inner = {.dt = cx->dt, .ndim = cx->ndim, .shape = sh->inner, .m = m};
    conf_key(key, sizeof key, where, "codecs");
    if (parse_chain(json_object_get(conf, "codecs"), key, &inner, &sh->codecs, err) < 0)
        return -EINVAL;
    static const struct dtype u64 = {.kind = DT_UINT, .size = 8};
    struct chain_ctx index = {.dt = &u64, .ndim = 1, .index = true, .m = m};
    uint64_t nv = 2 * n;
    index.shape = &nv;
    conf_key(key, sizeof key, where, "index_codecs");
    if (parse_chain(json_object_get(conf, "index_codecs"), key, &index, &sh->index_codecs, err) < 0)
        return -EINVAL;
    m->sharded = true;
    return 0;
}

static int parse_dtype_v3(json_t *root, struct dtype *dt, struct errbuf *err)
{
    json_t *v = json_object_get(root, "data_type");
    const char *s = json_string_value(v);
    struct errbuf e;
    if (!s || s[0] == '<' || s[0] == '>' || s[0] == '|' || dtype_parse(s, dt, &e) < 0)
        return bad_value(err, "data_type", v,
                         "expected a core numeric data type: bool, int8 to int64, uint8 to "
                         "uint64, float16, float32 or float64");
    dt->big_endian = false;
    return 0;
}

static int parse_grid(json_t *root, struct zarr_meta *m, struct errbuf *err)
{
    json_t *g = json_object_get(root, "chunk_grid");
    const char *name;
    json_t *conf;
    if (extension(g, "chunk_grid", &name, &conf, err) < 0)
        return -EINVAL;
    if (strcmp(name, "regular") != 0 || !conf)
        return bad_value(err, "chunk_grid", g, "only the \"regular\" grid is supported");
    if (parse_list(json_object_get(conf, "chunk_shape"), "chunk_grid.configuration.chunk_shape",
                   m->ndim, false, m->chunks, err) < 0)
        return -EINVAL;
    uint64_t grid = 1;
    for (int d = 0; d < m->ndim; d++) {
        uint64_t g1 = (m->shape[d] - 1) / m->chunks[d] + 1;
        if (__builtin_mul_overflow(grid, g1, &grid))
            return bad_value(err, "shape", json_object_get(root, "shape"), "too many chunks");
    }
    return 0;
}

static int parse_key_encoding(json_t *root, struct zarr_meta *m, struct errbuf *err)
{
    json_t *v = json_object_get(root, "chunk_key_encoding");
    const char *name, *sep;
    json_t *conf;
    if (extension(v, "chunk_key_encoding", &name, &conf, err) < 0)
        return -EINVAL;
    bool dflt = strcmp(name, "default") == 0;
    if (!dflt && strcmp(name, "v2") != 0)
        return bad_value(err, "chunk_key_encoding", v, "expected \"default\" or \"v2\"");
    if (conf_choice(conf, "chunk_key_encoding", "separator", "/|.", dflt ? "/" : ".", &sep, err) <
        0)
        return -EINVAL;
    m->key_prefix_c = dflt;
    m->separator = sep[0];
    return 0;
}

static int parse_extras(json_t *root, const struct zarr_meta *m, char **attributes,
                        char **dimension_names, struct errbuf *err)
{
    json_t *st = json_object_get(root, "storage_transformers");
    if (st && !(json_is_array(st) && json_array_size(st) == 0))
        return bad_value(err, "storage_transformers", st, "storage transformers are not supported");
    json_t *attrs = json_object_get(root, "attributes");
    if (attrs && !json_is_object(attrs))
        return bad_value(err, "attributes", attrs, "expected an object");
    json_t *dn = json_object_get(root, "dimension_names");
    if (dn && !json_is_null(dn)) {
        bool ok = json_is_array(dn) && (int)json_array_size(dn) == m->ndim;
        size_t i;
        json_t *e;
        json_array_foreach(dn, i, e) ok = ok && (json_is_string(e) || json_is_null(e));
        if (!ok)
            return bad_value(err, "dimension_names", dn,
                             "expected a list of strings or nulls, one per dimension");
    }
    if (attributes)
        *attributes = attrs ? json_dumps(attrs, JSON_COMPACT) : NULL;
    if (dimension_names)
        *dimension_names = dn && !json_is_null(dn) ? json_dumps(dn, JSON_COMPACT) : NULL;
    return 0;
}

/* The compressor of the chain that encodes chunk data, for reports. */
static void note_compressor(struct zarr_meta *m)
{
    const struct zarr_chain *ch = m->sharded ? &m->shard.codecs : &m->codecs;
    for (int k = 0; k < ch->nbb; k++)
        if (!ch->bb[k].crc32c)
            m->compressor = ch->bb[k].c;
}

static int parse_root(json_t *root, struct zarr_meta *m, char **attributes, char **dimension_names,
                      struct errbuf *err)
{
    json_t *v = json_object_get(root, "zarr_format");
    if (!json_is_integer(v) || json_integer_value(v) != 3)
        return bad_value(err, "zarr_format", v, "expected 3 (a Zarr v3 array)");
    m->format = 3;
    v = json_object_get(root, "node_type");
    const char *nt = json_string_value(v);
    if (nt && strcmp(nt, "group") == 0)
        return err_set(err, -EINVAL, "\"node_type\": this is a group, not an array");
    if (!nt || strcmp(nt, "array") != 0)
        return bad_value(err, "node_type", v, "expected \"array\"");
    if (check_extensions(root, err) < 0 || parse_dtype_v3(root, &m->dtype, err) < 0)
        return -EINVAL;
    v = json_object_get(root, "shape");
    if (parse_list(v, "shape", -1, true, m->shape, err) < 0)
        return -EINVAL;
    m->ndim = (int)json_array_size(v);
    for (int d = 0; d < m->ndim; d++)
        if (m->shape[d] == 0)
            return bad_value(err, "shape", v, "empty array not supported");
    if (parse_grid(root, m, err) < 0 || parse_key_encoding(root, m, err) < 0 ||
        zarr_json_parse_fill(&m->dtype, json_object_get(root, "fill_value"), true, m->fill,
                             &m->fill_null, err) < 0)
        return -EINVAL;
    struct chain_ctx cx = {
        .dt = &m->dtype, .ndim = m->ndim, .shape = m->chunks, .allow_sharding = true, .m = m};
    if (parse_chain(json_object_get(root, "codecs"), "codecs", &cx, &m->codecs, err) < 0)
        return -EINVAL;
    /* a shard is never held whole when reading, so only its inner chunks are bounded */
    uint64_t bytes = m->dtype.size;
    bool over = false;
    for (int d = 0; d < m->ndim; d++)
        over = over || __builtin_mul_overflow(bytes, m->chunks[d], &bytes);
    if (over || (!m->sharded && bytes > ZARR_MAX_CHUNK_BYTES))
        return bad_value(err, "chunk_grid", json_object_get(root, "chunk_grid"),
                         "a chunk would exceed 2 GiB");
    note_compressor(m);
    return parse_extras(root, m, attributes, dimension_names, err);
}

int zarr_meta_parse_v3(const char *json, size_t len, struct zarr_meta *m, char **attributes,
                       char **dimension_names, struct errbuf *err)
{
    memset(m, 0, sizeof *m);
    if (attributes)
        *attributes = NULL;
    if (dimension_names)
        *dimension_names = NULL;
    json_error_t jerr;
    json_t *root = zarr_json_load(json, len, &jerr); /* takes uint64 fill values above 2^63 */
    if (!root)
        return err_set(err, -EINVAL, "invalid JSON at line %d, column %d: %s", jerr.line,
                       jerr.column, jerr.text);
    int r = json_is_object(root) ? parse_root(root, m, attributes, dimension_names, err)
                                 : err_set(err, -EINVAL, "expected a JSON object");
    json_decref(root);
    return r < 0 ? -EINVAL : 0;
}

/* The bytes-to-bytes codecs after the leading vlen-utf8 of a string array's codec list. */
static int parse_vlen_chain(json_t *list, struct zarr_chain *ch, struct errbuf *err)
{
    memset(ch, 0, sizeof *ch);
    if (!json_is_array(list) || json_array_size(list) == 0)
        return bad_value(err, "codecs", list, "expected a non-empty list of codecs");
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v)
    {
        char at[64];
        snprintf(at, sizeof at, "codecs[%zu]", i);
        const char *name;
        json_t *conf;
        if (extension(v, at, &name, &conf, err) < 0)
            return -EINVAL;
        bool bb = strcmp(name, "blosc") == 0 || strcmp(name, "gzip") == 0 ||
                  strcmp(name, "zstd") == 0 || strcmp(name, "crc32c") == 0;
        if (i == 0 && strcmp(name, "vlen-utf8") != 0)
            return err_set(err, -EINVAL,
                           "\"%s\": a string array's first codec must be \"vlen-utf8\", not "
                           "\"%s\"",
                           at, name);
        if (i > 0 && !bb)
            return err_set(err, -EINVAL,
                           "\"%s\": codec \"%s\" after vlen-utf8 is not supported (roifs reads "
                           "blosc, gzip, zstd and crc32c there)",
                           at, name);
        if (i > 0 && parse_bb(name, conf, at, ch, err) < 0)
            return -EINVAL;
    }
    return 0;
}

int zarr_meta_parse_v3_vlen_utf8(const char *json, size_t len, struct zarr_meta *m,
                                 struct errbuf *err)
{
    memset(m, 0, sizeof *m);
    json_error_t jerr;
    json_t *root = json_loadb(json, len, 0, &jerr);
    if (!root)
        return err_set(err, -EINVAL, "invalid JSON at line %d, column %d: %s", jerr.line,
                       jerr.column, jerr.text);
    int r = 0;
    json_t *v = json_object_get(root, "zarr_format");
    const char *nt = json_string_value(json_object_get(root, "node_type"));
    const char *dt = json_string_value(json_object_get(root, "data_type"));
    if (!json_is_integer(v) || json_integer_value(v) != 3)
        r = bad_value(err, "zarr_format", v, "expected 3 (a Zarr v3 array)");
    else if (!nt || strcmp(nt, "array") != 0)
        r = bad_value(err, "node_type", json_object_get(root, "node_type"), "expected \"array\"");
    else if (!dt || strcmp(dt, "string") != 0)
        r = bad_value(err, "data_type", json_object_get(root, "data_type"),
                      "expected \"string\" (a column of text)");
    else if (check_extensions(root, err) < 0)
        r = -EINVAL;
    v = json_object_get(root, "shape");
    if (r == 0 && (!json_is_array(v) || json_array_size(v) != 1))
        r = bad_value(err, "shape", v, "expected one dimension");
    m->format = 3;
    m->ndim = 1;
    if (r == 0 &&
        (parse_list(v, "shape", 1, true, m->shape, err) < 0 ||
         (m->shape[0] && parse_grid(root, m, err) < 0) || parse_key_encoding(root, m, err) < 0 ||
         parse_vlen_chain(json_object_get(root, "codecs"), &m->codecs, err) < 0 ||
         parse_extras(root, m, NULL, NULL, err) < 0))
        r = -EINVAL;
    if (r == 0 && m->shape[0] == 0)
        m->chunks[0] = 1;
    json_decref(root);
    return r < 0 ? -EINVAL : 0;
}

/* ---- emission ---- */

static json_t *dims_json(const uint64_t *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_integer((json_int_t)v[i]));
    return a;
}

static json_t *named(const char *name, json_t *conf)
{
    json_t *o = json_pack("{s:s}", "name", name);
    if (conf)
        json_object_set_new(o, "configuration", conf);
    return o;
}

static json_t *chain_json(const struct zarr_chain *ch, int ndim, unsigned typesize)
{
    static const char *const shuffles[] = {"noshuffle", "shuffle", "bitshuffle"};
    json_t *a = json_array();
    if (ch->transpose) {
        json_t *order = json_array();
        for (int d = 0; d < ndim; d++)
            json_array_append_new(order, json_integer(ch->order[d]));
        json_array_append_new(a, named("transpose", json_pack("{s:o}", "order", order)));
    }
    json_array_append_new(
        a, named("bytes", json_pack("{s:s}", "endian", ch->big_endian ? "big" : "little")));
    for (int k = 0; k < ch->nbb; k++) {
        const struct zarr_codec *c = &ch->bb[k].c;
        json_t *o;
        if (ch->bb[k].crc32c) {
            o = named("crc32c", NULL);
        } else if (c->id == ZC_BLOSC) {
            int sh = c->shuffle >= 0 ? c->shuffle : typesize == 1 ? 2 : 1;
            o = named("blosc", json_pack("{s:s, s:i, s:s, s:i, s:i}", "cname",
                                         c->cname[0] ? c->cname : "lz4", "clevel", c->level,
                                         "shuffle", shuffles[sh], "typesize", (int)typesize,
                                         "blocksize", c->blocksize));
        } else if (c->id == ZC_GZIP) {
            o = named("gzip", json_pack("{s:i}", "level", c->level));
        } else {
            o = named("zstd", json_pack("{s:i, s:b}", "level", c->level, "checksum", 0));
        }
        json_array_append_new(a, o);
    }
    return a;
}

char *zarr_meta_emit_v3(const struct zarr_meta *m, const char *attributes,
                        const char *dimension_names)
{
    uint64_t big = 0;
    json_t *root = json_object();
    json_object_set_new(root, "zarr_format", json_integer(3));
    json_object_set_new(root, "node_type", json_string("array"));
    json_object_set_new(root, "shape", dims_json(m->shape, m->ndim));
    json_object_set_new(root, "data_type", json_string(dtype_v3_name(&m->dtype)));
    json_object_set_new(
        root, "chunk_grid",
        named("regular", json_pack("{s:o}", "chunk_shape", dims_json(m->chunks, m->ndim))));
    char sep[2] = {m->separator == '.' ? '.' : '/', '\0'};
    json_object_set_new(
        root, "chunk_key_encoding",
        named(m->key_prefix_c ? "default" : "v2", json_pack("{s:s}", "separator", sep)));
    json_object_set_new(root, "fill_value", zarr_json_fill(m, true, &big));
    json_t *codecs;
    if (m->sharded) {
        json_t *conf =
            json_pack("{s:o, s:o, s:o, s:s}", "chunk_shape", dims_json(m->shard.inner, m->ndim),
                      "codecs", chain_json(&m->shard.codecs, m->ndim, m->dtype.size),
                      "index_codecs", chain_json(&m->shard.index_codecs, 1, 8), "index_location",
                      m->shard.index_at_start ? "start" : "end");
        codecs = json_array();
        json_array_append_new(codecs, named("sharding_indexed", conf));
    } else {
        codecs = chain_json(&m->codecs, m->ndim, m->dtype.size);
    }
    json_object_set_new(root, "codecs", codecs);
    json_t *attrs = attributes ? json_loads(attributes, 0, NULL) : NULL;
    json_object_set_new(root, "attributes", json_is_object(attrs) ? attrs : json_object());
    if (attrs && !json_is_object(attrs))
        json_decref(attrs);
    json_t *dn = dimension_names ? json_loads(dimension_names, 0, NULL) : NULL;
    if (json_is_array(dn) && (int)json_array_size(dn) == m->ndim)
        json_object_set_new(root, "dimension_names", dn);
    else
        json_decref(dn);
    json_object_set_new(root, "storage_transformers", json_array());
    return zarr_json_dump(root, false, big);
}
