/* listing.c: `roifs serve --listings` (docs/serve.md): a directory of the tree as a page of
 * plain HTML, relative links and sizes, as a file server's index (nginx's autoindex), so that a
 * person or `wget -r` can browse it. A listing computes nothing: a size is shown only when it
 * is known as it is (metadata, the input's files, a chunk already computed or of fixed size, a
 * table already made), as a mount's stat gives it; a plate's image not started is not started
 * for it. */
#include "serve_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../util.h"
#include "html.h"

/* The names of a directory, taken first: sizes are looked up with the tree unlocked. */
struct entries {
    struct entry {
        char *name;
        uint64_t ino;
        bool dir;
    } * v;
    size_t n, cap;
};

static int add_entry(void *ctx, const char *name, uint64_t ino, bool is_dir, uint64_t next_off)
{
    (void)next_off;
    struct entries *l = ctx;
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return 0;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->v = xrealloc(l->v, l->cap * sizeof *l->v);
    }
    l->v[l->n++] = (struct entry){xstrdup(name), ino, is_dir};
    return 0;
}

/* The size of file node n when it is known without computing anything: true and *size. */
static bool known_size(struct server *srv, const struct ns_node *n, uint64_t *size)
{
    bool known = false;
    switch (n->kind) {
    case NS_META:
        *size = n->len;
        return true;
    case NS_CHUNK: { /* a plate's image not started: not started for this */
        struct engine *e = arrayset_engine_get(srv->set, (size_t)n->array, false);
        if (e) {
            engine_chunk_size(e, n->chunk, size, &known, NULL);
            arrayset_engine_put(srv->set, (size_t)n->array);
        }
        return known;
    }
    case NS_INPUT: {
        struct stat st;
        if (!n->text || stat(n->text, &st) < 0 || !S_ISREG(st.st_mode))
            return false;
        *size = (uint64_t)st.st_size;
        return true;
    }
    case NS_GEN: { /* a list made from the input as it is now */
        size_t len;
        char *text = arrayset_generated(srv->set, n->chunk, &len);
        free(text);
        *size = len;
        return text != NULL;
    }
    case NS_TABLE: /* a plate's table would open every image to say */
        if (arrayset_is_plate(srv->set))
            return false;
        *size = arrayset_table_size(srv->set, n->chunk, &known);
        return known;
    default: /* the status: its size is that of each look */
        return false;
    }
}

/* Entry en of directory dir: its size, when a file's is known. A name found in a mirrored
 * directory is looked up (and let go) to be described. */
static bool entry_size(struct server *srv, uint64_t dir, const struct entry *en, uint64_t *size)
{
    struct ns_node n;
    bool live = en->ino >= NS_INO_LIVE;
    if (en->dir ||
        (live ? ns_lookup(srv->ns, dir, en->name, &n) : ns_get(srv->ns, en->ino, &n)) < 0)
        return false;
    bool known = n.kind != NS_DIR && known_size(srv, &n, size);
    if (n.live)
        ns_forget(srv->ns, n.ino, 1);
    return known;
}

/* How many names url ("/a/b/") has. */
static int url_depth(const char *url)
{
    int depth = 0;
    for (const char *p = url + 1; *p; p++)
        depth += *p == '/';
    return depth;
}

#define NAME_COLUMN 50

enum MHD_Result serve_listing(struct server *srv, struct MHD_Connection *c, uint64_t dir,
                              const char *url)
{
    struct entries l = {0};
    int r = ns_readdir(srv->ns, dir, 0, NULL, add_entry, &l);
    if (r < 0) {
        for (size_t i = 0; i < l.n; i++)
            free(l.v[i].name);
        free(l.v);
        return serve_text(srv, c, r == -EACCES ? MHD_HTTP_FORBIDDEN : MHD_HTTP_NOT_FOUND,
                          r == -EACCES ? "forbidden\n" : "not found\n");
    }
    struct html_buf o = {0};
    html_put(&o, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Index of ");
    html_put_escaped(&o, url);
    html_put(&o, "</title></head>\n<body>\n<h1>Index of ");
    html_put_escaped(&o, url);
    html_put(&o, "</h1><hr><pre>\n");
    int depth = url_depth(url);
    if (depth > 0) /* the root's listing is not its URL, /, the status page */
        html_put(&o, "<a href=\"../%s\">../</a>\n", depth == 1 ? "?ls" : "");
    for (size_t i = 0; i < l.n; i++) {
        const struct entry *en = &l.v[i];
        html_put(&o, "<a href=\"");
        html_put_url_escaped(&o, en->name);
        html_put(&o, "%s\">", en->dir ? "/" : "");
        html_put_escaped(&o, en->name);
        size_t width = strlen(en->name) + en->dir;
        html_put(&o, "%s</a>%*s", en->dir ? "/" : "",
                 width < NAME_COLUMN ? (int)(NAME_COLUMN - width) : 1, "");
        uint64_t size;
        if (entry_size(srv, dir, en, &size))
            html_put(&o, "%20llu\n", (unsigned long long)size);
        else
            html_put(&o, "%20s\n", "-");
        free(en->name);
    }
    free(l.v);
    html_put(&o, "</pre><hr></body>\n</html>\n");
    return serve_buf(srv, c, o.buf, o.len, "text/html; charset=utf-8");
}

enum MHD_Result serve_redirect_dir(struct server *srv, struct MHD_Connection *c, const char *url)
{
    struct html_buf loc = {0};
    for (const char *p = url; *p;) { /* each name percent-encoded again, the slashes kept */
        const char *end = strchr(p + 1, '/');
        size_t len = end ? (size_t)(end - p - 1) : strlen(p + 1);
        char *name = xmalloc(len + 1);
        memcpy(name, p + 1, len);
        name[len] = '\0';
        html_put(&loc, "/");
        html_put_url_escaped(&loc, name);
        free(name);
        p += len + 1;
    }
    html_put(&loc, "/");
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(resp, "Location", loc.buf);
    free(loc.buf);
    return serve_reply(srv, c, MHD_HTTP_MOVED_PERMANENTLY, resp);
}
