/*
 * utf8.h — text the tools write for readers that take UTF-8 only (gmlake replay's JSON lines, its
 * SVG charts), where a name comes from the user's file system and may be in another encoding.
 *
 * Contract
 *  - gml_utf8_write(f, s, bad, ascii) writes s (NUL-terminated) character by character: a valid
 *    UTF-8 character of 2 to 4 bytes (no overlong form, no surrogate, at most U+10FFFF) as it is,
 *    an ASCII byte through the writer's escaping `ascii`, and each maximal invalid subpart (the
 *    bytes that begin a character but do not complete one) as one `bad`, the writer's U+FFFD, as
 *    Unicode recommends (and Python's decode(errors="replace") does).  It never reads past the
 *    terminating NUL, which is no continuation byte.  JSON lines (replay.c) and SVG text
 *    (plot.c) differ only in `ascii` and `bad`.
 */
#ifndef GML_UTF8_H
#define GML_UTF8_H

#include <stdio.h>

/* Writes s to f: each valid character of two bytes or more as it is, each maximal invalid subpart
 * as `bad` (the writer's U+FFFD), each ASCII byte through ascii(f, c), the writer's escaping. */
void gml_utf8_write(FILE *f, const char *s, const char *bad, void (*ascii)(FILE *, unsigned char));

/* U+FFFD, the replacement character, in UTF-8. */
#define GML_UTF8_REPLACEMENT "\xef\xbf\xbd"

#endif /* GML_UTF8_H */
