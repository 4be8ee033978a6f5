/* provenance.c: the "roifs" attribute of the presented array (provenance.h). */
#include "provenance.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "proc/proc.h"
#include "util.h"

/* The files the processor runs, from the processor identity's "file PATH SIZE HASH" lines
 * (task.c): {PATH: {"size": SIZE, "hash": HASH}}. */
static json_t *processor_files(const char *result_identity)
{
    json_t *files = json_object();
    const char *p = result_identity;
    while (p && *p) {
        const char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > 5 && strncmp(p, "file ", 5) == 0) {
            char *line = xasprintf("%.*s", (int)len, p);
            char *hash = strrchr(line, ' ');
            *hash++ = '\0';
            char *size = strrchr(line, ' ');
            *size++ = '\0';
            json_object_set_new(
                files, line + 5,
                json_pack("{s:I, s:s}", "size", (json_int_t)strtoll(size, NULL, 10), "hash", hash));
            free(line);
        }
        p = end ? end + 1 : NULL;
    }
    return files;
}

void *provenance_new(const struct provenance_of *o)
{
    const struct config *cfg = o->cfg;
    json_t *params = json_object();
    for (int i = 0; i < cfg->nparams; i++)
        json_object_set_new(params, cfg->params[i].name, json_string(cfg->params[i].value));
    char fp[32], id[33];
    snprintf(fp, sizeof fp, "%016llx", (unsigned long long)o->fingerprint);
    key_hex(o->result_id, id);
    return json_pack("{s:s, s:s, s:s, s:{s:s, s:s, s:o, s:s, s:o}, s:I, s:s}", "version",
                     ROIFS_VERSION, "config", cfg->path, "input", cfg->input_path, "processor",
                     "kind", proc_kind_name(cfg->proc_kind), "value", cfg->proc_value, "params",
                     params, "identity", id, "files", processor_files(o->result_identity), "rois",
                     (json_int_t)o->nrois, "fingerprint", fp);
}
