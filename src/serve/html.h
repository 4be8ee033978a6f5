/* html.h: the HTML text `roifs serve` makes (the status page, directory listings): a growing
 * buffer written with printf formats, and text escaped for HTML and for a URL's path. */
#ifndef ROIFS_SERVE_HTML_H
#define ROIFS_SERVE_HTML_H

#include <stddef.h>

struct html_buf {
    char *buf; /* malloc'd, NUL-terminated once anything is put */
    size_t len, cap;
};

void html_put(struct html_buf *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* text with HTML's special characters (< > & ") escaped. */
void html_put_escaped(struct html_buf *o, const char *text);
/* text as one segment of a URL's path: every byte but letters, digits and - . _ ~
 * percent-encoded (a '/' too, a ':' too: a relative link never reads as a scheme). */
void html_put_url_escaped(struct html_buf *o, const char *text);

#endif
