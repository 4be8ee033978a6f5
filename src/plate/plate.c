/* plate.c: an HCS plate's and its wells' metadata, and the selection (plate.h). A plate at
 * an http(s) URL is read the same way, each group's metadata by name (zarr_store_*: never a
 * listing; docs/remote.md). */
#include "plate.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../zarr/zarr.h"

/* The attributes of the group at dir (format 3: zarr.json's attributes.ome, with *format 3;
 * format 2: .zattrs) as a new reference, or NULL when it has no metadata file or it cannot be
 * read (why[0..n) says which; a remote object: the URL and the HTTP status). */
static json_t *group_attrs(const char *dir, int *format, char *why, size_t n)
{
    char *text;
    size_t len;
    struct errbuf e;
    snprintf(why, n, "no .zattrs or zarr.json");
    int r = zarr_store_read_optional(dir, "zarr.json", &text, &len, &e);
    if (r == 0 && text) {
        json_t *root = json_loadb(text, len, 0, NULL);
        free(text);
        *format = 3;
        json_t *ome = json_object_get(json_object_get(root, "attributes"), "ome");
        json_t *a = json_incref(ome);
        json_decref(root);
        snprintf(why, n, "zarr.json has no attributes.ome");
        return a;
    }
    if (r == 0)
        r = zarr_store_read_optional(dir, ".zattrs", &text, &len, &e);
    if (r < 0) { /* not absent: unreadable (a remote object's HTTP status) */
        snprintf(why, n, "%s", e.msg);
        return NULL;
    }
    if (text) {
        json_t *a = json_loadb(text, len, 0, NULL);
        free(text);
        *format = 2;
        snprintf(why, n, ".zattrs is not JSON");
        return a;
    }
    return NULL;
}

int plate_detect(const char *dir)
{
    int format;
    char why[sizeof(struct errbuf)];
    json_t *a = group_attrs(dir, &format, why, sizeof why);
    int is = json_is_object(json_object_get(a, "plate"));
    json_decref(a);
    return is;
}

/* A path component of the metadata: alphanumeric (rows, columns), or also '_', '-', '.'
 * (an image's path), never "." or "..": nothing of the metadata names a path outside. */
static bool component_ok(const char *s, bool alnum_only)
{
    if (!s || !*s || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return false;
    for (const char *c = s; *c; c++) {
        bool al = (*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z');
        if (!al && (alnum_only || (*c != '_' && *c != '-' && *c != '.')))
            return false;
    }
    return true;
}

/* True when the well "ROW/COL" is named in the list (each item "ROW/COL" or "ROWCOL"). */
static bool well_listed(const char *list, const char *row, const char *col)
{
    if (!list)
        return true;
    char *both = xasprintf("%s/%s", row, col), *joined = xasprintf("%s%s", row, col);
    bool found = false;
    const char *p = list;
    while (*p && !found) {
        while (*p == ',' || *p == ' ' || *p == '\t')
            p++;
        size_t n = strcspn(p, ", \t");
        if (n && ((strlen(both) == n && strncmp(p, both, n) == 0) ||
                  (strlen(joined) == n && strncmp(p, joined, n) == 0)))
            found = true;
        p += n;
    }
    free(both);
    free(joined);
    return found;
}

/* Each item of the wells list names a well of the plate: -EINVAL naming the first that
 * does not. */
static int check_wells_list(const char *list, json_t *wells, struct errbuf *err)
{
    const char *p = list;
    while (*p) {
        while (*p == ',' || *p == ' ' || *p == '\t')
            p++;
        size_t n = strcspn(p, ", \t");
        if (!n)
            break;
        bool found = false;
        size_t i;
        json_t *w;
        json_array_foreach(wells, i, w)
        {
            const char *path = json_string_value(json_object_get(w, "path"));
            if (!path)
                continue;
            char *flat = xstrdup(path), *slash = strchr(flat, '/');
            if (slash)
                memmove(slash, slash + 1, strlen(slash));
            if ((strlen(path) == n && strncmp(p, path, n) == 0) ||
                (strlen(flat) == n && strncmp(p, flat, n) == 0))
                found = true;
            free(flat);
        }
        if (!found)
            return err_set(err, -EINVAL, "[input] wells: %.*s is not a well of the plate", (int)n,
                           p);
        p += n;
    }
    return 0;
}

static void add_image(struct plate *p, const char *row, const char *col, const char *in_well,
                      const char *acq, const char *error)
{
    p->images = xrealloc(p->images, (p->n + 1) * sizeof *p->images);
    struct plate_image *im = &p->images[p->n++];
    *im = (struct plate_image){.row = xstrdup(row),
                               .column = xstrdup(col),
                               .well = xasprintf("%s/%s", row, col),
                               .path_in_well = xstrdup(in_well),
                               .acquisition_id = xstrdup(acq),
                               .well_index = p->nwells - 1,
                               .plate_format = p->format,
                               .error = error ? xstrdup(error) : NULL};
    im->path_in_plate = *in_well ? xasprintf("%s/%s", im->well, in_well) : xstrdup(im->well);
    im->dir = xasprintf("%s/%s", p->dir, im->path_in_plate);
}

/* The selected images of one well (its metadata read now). */
static void read_well(struct plate *p, const char *row, const char *col, int64_t acquisition)
{
    char *wdir = xasprintf("%s/%s/%s", p->dir, row, col);
    int format = 0;
    char why[sizeof(struct errbuf)];
    json_t *a = group_attrs(wdir, &format, why, sizeof why);
    json_t *images = json_object_get(json_object_get(a, "well"), "images");
    char *error = NULL;
    if (!a)
        error = xasprintf("the well %s/%s is missing (%s)", row, col, why);
    else if (!json_is_array(images))
        error = xasprintf("the well %s/%s has no \"well\" metadata with \"images\"", row, col);
    else if (format != p->format)
        error = xasprintf("the well %s/%s is Zarr v%d in a Zarr v%d plate", row, col, format,
                          p->format);
    size_t i;
    json_t *im;
    if (!error) {
        json_array_foreach(images, i, im)
        {
            const char *path = json_string_value(json_object_get(im, "path"));
            json_t *acq = json_object_get(im, "acquisition");
            if (acquisition >= 0 &&
                (!json_is_integer(acq) || json_integer_value(acq) != acquisition))
                continue;
            char num[32] = "";
            if (json_is_integer(acq))
                snprintf(num, sizeof num, "%lld", (long long)json_integer_value(acq));
            if (!component_ok(path, false)) {
                char *bad =
                    xasprintf("the well %s/%s lists an image with an invalid path", row, col);
                add_image(p, row, col, "", num, bad);
                free(bad);
                continue;
            }
            add_image(p, row, col, path, num, NULL);
        }
    } else {
        add_image(p, row, col, "", "", error);
    }
    free(error);
    json_decref(a);
    free(wdir);
}

int plate_open(const char *dir, const char *wells, int64_t acquisition, struct plate **out,
               struct errbuf *err)
{
    struct plate *p = xcalloc(1, sizeof *p);
    p->dir = zarr_is_url(dir) ? xstrdup(dir) : path_absolute(dir);
    for (size_t n = strlen(p->dir); n > 1 && p->dir[n - 1] == '/'; n--)
        p->dir[n - 1] = '\0'; /* a URL's "plate.zarr/" */
    char why[sizeof(struct errbuf)];
    json_t *a = group_attrs(p->dir, &p->format, why, sizeof why);
    json_t *pl = json_object_get(a, "plate"), *pw = json_object_get(pl, "wells");
    int r = 0;
    if (!json_is_object(pl) || !json_is_array(pw)) {
        r = err_set(err, -EINVAL, "[input] path %s: not an OME-Zarr plate with \"wells\"", dir);
        goto out;
    }
    const char *version = json_string_value(json_object_get(pl, "version"));
    if (!version)
        version = json_string_value(json_object_get(a, "version"));
    p->version = xstrdup(version ? version : (p->format == 3 ? "0.5" : "0.4"));
    if (wells && (r = check_wells_list(wells, pw, err)) < 0)
        goto out;
    size_t i;
    json_t *w;
    json_array_foreach(pw, i, w)
    {
        const char *path = json_string_value(json_object_get(w, "path"));
        const char *slash = path ? strchr(path, '/') : NULL;
        char *row = slash ? xstrdup(path) : NULL;
        if (row)
            row[slash - path] = '\0';
        if (!row || !component_ok(row, true) || !component_ok(slash + 1, true)) {
            free(row);
            r = err_set(err, -EINVAL,
                        "[input] path %s: the plate's well %zu has no path \"ROW/COLUMN\"", dir, i);
            goto out;
        }
        if (well_listed(wells, row, slash + 1)) {
            p->wells = xrealloc(p->wells, (p->nwells + 1) * sizeof *p->wells);
            p->wells[p->nwells++] = xstrdup(path);
            size_t before = p->n;
            read_well(p, row, slash + 1, acquisition);
            if (p->n == before) /* no image of the acquisition: not a selected well */
                free(p->wells[--p->nwells]);
        }
        free(row);
    }
    if (p->n == 0)
        r = err_set(err, -EINVAL, "[input] path %s: no image of the plate is selected", dir);
out:
    json_decref(a);
    if (r < 0) {
        plate_free(p);
        return r;
    }
    *out = p;
    return 0;
}

void plate_free(struct plate *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++) {
        struct plate_image *im = &p->images[i];
        free(im->row);
        free(im->column);
        free(im->well);
        free(im->path_in_well);
        free(im->path_in_plate);
        free(im->acquisition_id);
        free(im->dir);
        free(im->error);
    }
    for (size_t i = 0; i < p->nwells; i++)
        free(p->wells[i]);
    free(p->wells);
    free(p->images);
    free(p->dir);
    free(p->version);
    free(p);
}

/* ---- the new plate of ome = true ---- */

static void add_meta(struct plate_file **v, size_t *n, const struct plate *p, const char *dir,
                     json_t *attrs)
{
    bool v3 = p->format == 3;
    const char *sep = *dir ? "/" : "";
    *v = xrealloc(*v, (*n + 2) * sizeof **v);
    if (v3) {
        json_t *node = json_pack("{s:i, s:s, s:o}", "zarr_format", 3, "node_type", "group",
                                 "attributes", attrs ? attrs : json_object());
        (*v)[(*n)++] = (struct plate_file){xasprintf("%s%szarr.json", dir, sep),
                                           json_dumps(node, JSON_INDENT(4))};
        json_decref(node);
        return;
    }
    (*v)[(*n)++] = (struct plate_file){xasprintf("%s%s.zgroup", dir, sep),
                                       xstrdup("{\n    \"zarr_format\": 2\n}")};
    if (attrs) {
        (*v)[(*n)++] = (struct plate_file){xasprintf("%s%s.zattrs", dir, sep),
                                           json_dumps(attrs, JSON_INDENT(4))};
        json_decref(attrs);
    }
}

/* The object holding "plate" or "well" in attrs (format 3: attrs.ome). */
static json_t *holder(json_t *attrs, int format)
{
    return format == 3 ? json_object_get(attrs, "ome") : attrs;
}

static bool selected_image(const struct plate *p, const char *well, const char *path)
{
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->images[i].well, well) == 0 && strcmp(p->images[i].path_in_well, path) == 0)
            return true;
    return false;
}

static bool selected_acquisition(const struct plate *p, json_int_t id)
{
    char num[32];
    snprintf(num, sizeof num, "%lld", (long long)id);
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->images[i].acquisition_id, num) == 0)
            return true;
    return false;
}

/* The attributes of the group at dir as they are (format 3: zarr.json's attributes). */
static json_t *raw_attrs(const char *dir, int format)
{
    char *text;
    size_t len;
    struct errbuf e;
    if (zarr_store_read_optional(dir, format == 3 ? "zarr.json" : ".zattrs", &text, &len, &e) < 0 ||
        !text)
        return NULL;
    json_t *doc = json_loadb(text, len, 0, NULL);
    free(text);
    if (format != 3)
        return doc;
    json_t *a = json_incref(json_object_get(doc, "attributes"));
    json_decref(doc);
    return a;
}

int plate_new_files(const struct plate *p, struct plate_file **files, size_t *n, struct errbuf *err)
{
    *files = NULL;
    *n = 0;
    json_t *attrs = raw_attrs(p->dir, p->format);
    json_t *pl = json_object_get(holder(attrs, p->format), "plate");
    if (!json_is_object(pl)) {
        json_decref(attrs);
        return err_set(err, -EINVAL, "%s: the plate's metadata is gone", p->dir);
    }
    json_t *wells = json_array(), *acqs = json_object_get(pl, "acquisitions");
    size_t i;
    json_t *w;
    json_array_foreach(json_object_get(pl, "wells"), i, w)
    {
        const char *path = json_string_value(json_object_get(w, "path"));
        for (size_t k = 0; path && k < p->nwells; k++)
            if (strcmp(p->wells[k], path) == 0)
                json_array_append(wells, w);
    }
    json_object_set_new(pl, "wells", wells);
    if (json_is_array(acqs)) {
        json_t *keep = json_array(), *a;
        json_array_foreach(acqs, i, a)
        {
            if (selected_acquisition(p, json_integer_value(json_object_get(a, "id"))))
                json_array_append(keep, a);
        }
        json_object_set_new(pl, "acquisitions", keep);
    }
    add_meta(files, n, p, "", attrs);
    for (size_t k = 0; k < p->nwells; k++) {
        char *row = xstrdup(p->wells[k]);
        *strchr(row, '/') = '\0';
        bool seen = false;
        for (size_t j = 0; j < k; j++)
            seen = seen ||
                   (strncmp(p->wells[j], row, strlen(row)) == 0 && p->wells[j][strlen(row)] == '/');
        if (!seen)
            add_meta(files, n, p, row, NULL);
        free(row);
        char *wdir = path_join(p->dir, p->wells[k]);
        json_t *wa = raw_attrs(wdir, p->format);
        free(wdir);
        json_t *well = json_object_get(holder(wa, p->format), "well");
        if (!json_is_object(well)) { /* a missing well: listed in failed_images only */
            json_decref(wa);
            continue;
        }
        json_t *ims = json_array(), *im;
        json_array_foreach(json_object_get(well, "images"), i, im)
        {
            const char *path = json_string_value(json_object_get(im, "path"));
            if (path && selected_image(p, p->wells[k], path))
                json_array_append(ims, im);
        }
        json_object_set_new(well, "images", ims);
        add_meta(files, n, p, p->wells[k], wa);
    }
    return 0;
}

void plate_files_free(struct plate_file *files, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(files[i].path);
        free(files[i].text);
    }
    free(files);
}
