/* utf8.c — the length of a UTF-8 character, or of the invalid bytes in its place (contract in
 * utf8.h). */
#include "utf8.h"

/* The length of the UTF-8 character at s, or minus that of its maximal invalid subpart. */
static int utf8_len(const unsigned char *s)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    int n;
    unsigned char lo = 0x80, hi = 0xbf; /* the range of the second byte */
    if (c >= 0xc2 && c <= 0xdf)
        n = 2;
    else if (c >= 0xe0 && c <= 0xef)
        n = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
    else if (c >= 0xf0 && c <= 0xf4)
        n = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
    else
        return -1;
    for (int i = 1; i < n; i++) {
        unsigned char b = s[i]; /* the terminating NUL is no continuation byte: it stops here */
        if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xbf))
            return -i;
    }
    return n;
}

void gml_utf8_write(FILE *f, const char *s, const char *bad, void (*ascii)(FILE *, unsigned char))
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        int n = utf8_len(p);
        if (n < 0)
            fputs(bad, f);
        else if (n > 1)
            fwrite(p, 1, (size_t)n, f);
        else
            ascii(f, *p);
        p += n < 0 ? -n : n;
    }
}
