/* num.h: strict number parsing (never atoi): the whole string must be a
 * number, within range; sizes take K/M/G/T suffixes (powers of 1024) and
 * counts k/M/G too where the caller allows suffixes. */
#ifndef TF_BASE_NUM_H
#define TF_BASE_NUM_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"

/* Decimal (or 0x hex) integer in [min, max]; with suffix, K/M/G/T multiply
 * by 1024^n. TF_ERR_ARG with a detail naming the text on failure. */
tf_status tf_parse_i64(const char *s, int64_t min, int64_t max, bool suffix, int64_t *out);
tf_status tf_parse_u64(const char *s, uint64_t max, bool suffix, uint64_t *out);
/* A finite double in [min, max]. */
tf_status tf_parse_double(const char *s, double min, double max, double *out);
/* A comma-separated list of integers, each in [min, max], at most cap of
 * them, "A-B" ranges expanded. Returns the count in *n. */
tf_status tf_parse_i64_list(const char *s, int64_t min, int64_t max, int64_t *out,
			    int cap, int *n);

#endif
