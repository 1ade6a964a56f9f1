/*
 * units.h — parsing of the value types the configuration and the tools accept.
 * Each returns 0 on success and -1 (leaving *out unchanged) on any malformed or out-of-range text;
 * the _why forms also say why (*why: "negative", "too large (overflow)", "not a number", ...).
 * Blanks around the text are ignored by every type alike.
 *  size:  a decimal count of bytes with an optional unit: 512, 4k, 512KiB, 64MB, 2M, 1G, 1.5GiB
 *         (digits and one '.', nothing else: no hex "0x10", no exponent "1e6").
 *         K/M/G/T (with or without B / iB) are powers of 1024; KB/MB/GB/TB too (GPU convention).
 *         Exact up to 2^64-1 bytes (integer arithmetic, never a double); a fraction is accepted
 *         where it makes a whole number of bytes (1.5GiB, 0.5K; not 1.5 or 0.1K).
 *  bool:  on/off, true/false, yes/no, 1/0 (any case).
 *  double: a finite decimal number (an exponent is allowed; hex is not).
 *  int:   a decimal integer.
 */
#ifndef GML_UNITS_H
#define GML_UNITS_H

#include <stdbool.h>
#include <stddef.h>

int gml_parse_size(const char *s, size_t *out);
int gml_parse_bool(const char *s, bool *out);
int gml_parse_double(const char *s, double *out);
int gml_parse_int(const char *s, long *out);
int gml_parse_size_why(const char *s, size_t *out, const char **why);
int gml_parse_double_why(const char *s, double *out, const char **why);
int gml_parse_int_why(const char *s, long *out, const char **why);

#endif /* GML_UNITS_H */
