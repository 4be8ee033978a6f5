/* html.c: the HTML text of `roifs serve` (html.h). */
#include "html.h"

#include <stdarg.h>
#include <stdio.h>

#include "../util.h"

void html_put(struct html_buf *o, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < o->cap - o->len) {
            o->len += (size_t)n;
            return;
        }
        o->cap = o->cap * 2 + (n > 0 ? (size_t)n : 0) + 256;
        o->buf = xrealloc(o->buf, o->cap);
    }
}

void html_put_escaped(struct html_buf *o, const char *text)
{
    for (const char *p = text; *p; p++) {
        switch (*p) {
        case '<':
            html_put(o, "&lt;");
            break;
        case '>':
            html_put(o, "&gt;");
            break;
        case '&':
            html_put(o, "&amp;");
            break;
        case '"':
            html_put(o, "&quot;");
            break;
        default:
            html_put(o, "%c", *p);
        }
    }
}

void html_put_url_escaped(struct html_buf *o, const char *text)
{
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        unsigned char ch = *p;
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
            ch == '-' || ch == '.' || ch == '_' || ch == '~')
            html_put(o, "%c", ch);
        else
            html_put(o, "%%%02X", ch);
    }
}
