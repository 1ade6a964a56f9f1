/*
 * utf8.h — text the tools write for readers that take UTF-8 only (gmlake replay's JSON lines, its
 * SVG charts), where a name comes from the user's file system and may be in another encoding.
 *
 * Contract
 *  - gml_utf8_len(s) reads the character that begins at s (s NUL-terminated, *s != 0): its length
 *    in bytes (1 to 4; 1 for ASCII) where it is valid UTF-8 (no overlong form, no surrogate, at
 *    most U+10FFFF), else minus the length of its maximal invalid subpart, the bytes that begin a
 *    character but do not complete one (at least 1), which a writer replaces by one U+FFFD, as
 *    Unicode recommends (and Python's decode(errors="replace") does).  It never reads past the
 *    terminating NUL, which is no continuation byte.
 */
#ifndef GML_UTF8_H
#define GML_UTF8_H

int gml_utf8_len(const unsigned char *s);

/* U+FFFD, the replacement character, in UTF-8. */
#define GML_UTF8_REPLACEMENT "\xef\xbf\xbd"

#endif /* GML_UTF8_H */
