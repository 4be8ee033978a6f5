/* marker.c: IN/.roifs-apply, the input's record of an unfinished `roifs apply` (marker.h): a
 * small JSON object ({"roifs_apply": 1, "job", "generation", "started", "cache", "config"}). */
#include "marker.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../atomic_file.h"
#include "../key.h"

#define MARKER_MAX 65536

/* Hashes text's lines but those that start with one of skip[0..nskip). */
static void add_lines(struct keyhash *h, const char *text, const char *const *skip, int nskip)
{
    for (const char *p = text; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) + 1 : strlen(p);
        bool keep = true;
        for (int i = 0; i < nskip && keep; i++)
            keep = strncmp(p, skip[i], strlen(skip[i])) != 0;
        if (keep)
            key_add(h, p, n);
        p += n;
    }
}

void apply_job_id(const struct task *t, char hex[33])
{
    static const char *const skip[] = {"input ", "roifs "};
    struct keyhash h;
    key_init(&h, "roifs apply job 1");
    add_lines(&h, t->manifest, skip, 2);
    key_add_str(&h, "\n--\n");
    add_lines(&h, t->result_identity, skip, 2);
    key_hex(key_final(&h), hex);
}

void apply_marker_free(struct apply_marker *m)
{
    free(m->cache);
    free(m->config);
    memset(m, 0, sizeof *m);
}

int apply_marker_read(int dirfd, struct apply_marker *m, struct errbuf *err)
{
    memset(m, 0, sizeof *m);
    char *text = NULL;
    size_t len = 0;
    int r = file_read_max(dirfd, APPLY_MARKER, MARKER_MAX, &text, &len);
    if (r == -ENOENT)
        return 0;
    if (r < 0)
        return err_set(err, r, "%s: %s", APPLY_MARKER, file_strerror(r));
    json_t *o = json_loadb(text, len, 0, NULL);
    free(text);
    json_t *job = json_object_get(o, "job"), *gen = json_object_get(o, "generation");
    json_t *started = json_object_get(o, "started"), *cache = json_object_get(o, "cache");
    json_t *config = json_object_get(o, "config");
    bool ok = json_integer_value(json_object_get(o, "roifs_apply")) == 1 && json_is_string(job) &&
              strlen(json_string_value(job)) == 32 && json_is_integer(gen) &&
              json_integer_value(gen) > 0 && json_is_integer(started) && json_is_string(cache) &&
              json_string_value(cache)[0] == '/' && json_is_string(config);
    if (ok) {
        m->present = true;
        memcpy(m->job, json_string_value(job), 33);
        m->gen = (uint64_t)json_integer_value(gen);
        m->started = (uint64_t)json_integer_value(started);
        m->cache = xstrdup(json_string_value(cache));
        m->config = xstrdup(json_string_value(config));
    }
    json_decref(o);
    return ok ? 0 : err_set(err, -EBADMSG, "%s: not a record that roifs wrote", APPLY_MARKER);
}

int apply_marker_write(int dirfd, const struct apply_marker *m, struct errbuf *err)
{
    json_t *o = json_pack("{s:i, s:s, s:I, s:I, s:s, s:s}", "roifs_apply", 1, "job", m->job,
                          "generation", (json_int_t)m->gen, "started", (json_int_t)m->started,
                          "cache", m->cache, "config", m->config);
    char *text = o ? json_dumps(o, JSON_INDENT(2)) : NULL;
    json_decref(o);
    if (!text)
        return err_set(err, -EINVAL, "%s: cannot encode (a path that is not UTF-8?)", APPLY_MARKER);
    struct atomic_file a;
    int r = atomic_begin(&a, dirfd, APPLY_MARKER, APPLY_MARKER_TMP, NULL, 0644);
    if (r == 0)
        r = write_full(a.fd, text, strlen(text));
    free(text);
    if (r == 0)
        r = atomic_commit(&a, ATOMIC_FSYNC | ATOMIC_FSYNC_DIR);
    if (r < 0) {
        atomic_abort(&a);
        unlinkat(dirfd, APPLY_MARKER_TMP, 0);
        return err_set(err, r, "%s: cannot write: %s", APPLY_MARKER, strerror(-r));
    }
    return 0;
}

int apply_marker_remove(int dirfd, struct errbuf *err)
{
    unlinkat(dirfd, APPLY_MARKER_TMP, 0); /* a kill between its write and its rename */
    int r = unlinkat(dirfd, APPLY_MARKER, 0) < 0 && errno != ENOENT ? -errno : 0;
    if (r == 0)
        r = fsync_dir_of(dirfd, APPLY_MARKER);
    return r < 0 ? err_set(err, r, "%s: cannot remove: %s", APPLY_MARKER, strerror(-r)) : 0;
}
