/* config_internal.h: what config.c (the file, its sections and whole-file checks) and
 * config_keys.c (every key of docs/configuration.md and the parsing of its value) share: the
 * loader's state and the key table's entries. Internal to the two. */
#ifndef ROIFS_CONFIG_INTERNAL_H
#define ROIFS_CONFIG_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"

/* Where each key was set, "section" + "key" -> line. */
struct config_lines {
    struct line_entry {
        char *section, *key;
        int line;
    } * v;
    int n, cap;
};

/* The processor and ROI source keys: exactly one of each group must be given. */
enum key_group { GROUP_NONE, GROUP_ROIS, GROUP_PROC, NGROUPS };

struct loader {
    struct config *cfg;
    const char *name; /* the path as given, for messages */
    const char *text, *pos, *end;
    int lineno; /* line most recently handed to inih */
    bool failed;
    int fail_line; /* line of the first error found here (0: none or whole-file) */
    int code;
    struct errbuf *err;
    int section_line[9]; /* line of each known section's first header, 0 if absent */
    int group_count[NGROUPS];
    const char *group_key[NGROUPS][2];
    int group_line[NGROUPS][2];
    char short_line[256];
    char *long_value; /* the value of the current line when it is too long for inih */
};

/* What inih is shown instead of a value too long for its line buffer (see read_line). */
#define LONG_VALUE_TOKEN "\x01roifs-long-value\x01"

struct key_spec;
typedef int (*key_setter)(struct loader *ld, const struct key_spec *k, const char *value);

struct key_spec {
    const char *section, *key;
    key_setter set;
    size_t off;   /* field in struct config */
    size_t off_n; /* set_list: the field holding the number of entries */
    long min, max;
    const char *choices; /* "a|b|c" for set_choice_* */
    enum key_group group;
    int kind; /* rois_kind or proc_kind set when the key is given */
};

/* Records the first error as "FILE:LINE: message" (or "FILE: message" for line 0); -EINVAL. */
int config_fail(struct loader *ld, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A value error: "FILE:LINE: [section] key: message"; -EINVAL. */
int config_bad_value(struct loader *ld, const struct key_spec *k, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The index of a known section named name[0..len), or -1. */
int config_section_index(const char *name, size_t len);
/* The key [section] key of docs/configuration.md, or NULL. */
const struct key_spec *config_find_key(const char *section, const char *key);
/* Errors for an unknown key or section, with a "did you mean" hint; -EINVAL. */
int config_unknown_key(struct loader *ld, const char *section, const char *key);
int config_unknown_section(struct loader *ld, const char *name, int len);

#endif
