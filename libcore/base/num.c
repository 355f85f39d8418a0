/* num.c: strict number parsing. */
#include "base/num.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int suffix_shift(char c)
{
	switch (c) {
	case 'k': case 'K': return 10;
	case 'm': case 'M': return 20;
	case 'g': case 'G': return 30;
	case 't': case 'T': return 40;
	}
	return -1;
}

tf_status tf_parse_i64(const char *s, int64_t min, int64_t max, bool suffix, int64_t *out)
{
	if (!s || !*s || (*s != '-' && *s != '+' && (*s < '0' || *s > '9')))
		return tf_err(TF_ERR_ARG, "'%s' is not a number", s ? s : "");
	errno = 0;
	char *end;
	long long v = strtoll(s, &end, 0);
	if (end == s)
		return tf_err(TF_ERR_ARG, "'%s' is not a number", s);
	if (errno == ERANGE)
		return tf_err(TF_ERR_ARG, "'%s' is out of range", s);
	if (suffix && *end && !end[1] && suffix_shift(*end) >= 0) {
		int sh = suffix_shift(*end);
		if (v > (LLONG_MAX >> sh) || v < (LLONG_MIN >> sh))
			return tf_err(TF_ERR_ARG, "'%s' is out of range", s);
		v *= 1LL << sh;
		end++;
	}
	if (*end)
		return tf_err(TF_ERR_ARG, "'%s' is not a number", s);
	if (v < min || v > max)
		return tf_err(TF_ERR_ARG, "'%s' is out of range [%lld, %lld]", s, (long long)min,
			      (long long)max);
	*out = v;
	return TF_OK;
}

tf_status tf_parse_u64(const char *s, uint64_t max, bool suffix, uint64_t *out)
{
	if (!s || *s < '0' || *s > '9')
		return tf_err(TF_ERR_ARG, "'%s' is not a non-negative number", s ? s : "");
	errno = 0;
	char *end;
	unsigned long long v = strtoull(s, &end, 0);
	if (errno == ERANGE)
		return tf_err(TF_ERR_ARG, "'%s' is out of range", s);
	if (suffix && *end && !end[1] && suffix_shift(*end) >= 0) {
		int sh = suffix_shift(*end);
		if (v > (ULLONG_MAX >> sh))
			return tf_err(TF_ERR_ARG, "'%s' is out of range", s);
		v <<= sh;
		end++;
	}
	if (*end)
		return tf_err(TF_ERR_ARG, "'%s' is not a number", s);
	if (v > max)
		return tf_err(TF_ERR_ARG, "'%s' is out of range [0, %llu]", s,
			      (unsigned long long)max);
	*out = v;
	return TF_OK;
}

tf_status tf_parse_double(const char *s, double min, double max, double *out)
{
	if (!s || !*s)
		return tf_err(TF_ERR_ARG, "'' is not a number");
	errno = 0;
	char *end;
	double v = strtod(s, &end);
	if (end == s || *end || errno == ERANGE || !isfinite(v))
		return tf_err(TF_ERR_ARG, "'%s' is not a finite number", s);
	if (v < min || v > max)
		return tf_err(TF_ERR_ARG, "'%s' is out of range [%g, %g]", s, min, max);
	*out = v;
	return TF_OK;
}

tf_status tf_parse_i64_list(const char *s, int64_t min, int64_t max, int64_t *out,
			    int cap, int *n)
{
	*n = 0;
	char *copy = strdup(s ? s : "");
	if (!copy)
		return tf_err(TF_ERR_NOMEM, "out of memory");
	tf_status st = TF_OK;
	char *save = NULL;
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		int64_t a, b;
		char *dash = strchr(tok + 1, '-');
		if (dash) {
			*dash = 0;
			if ((st = tf_parse_i64(tok, min, max, false, &a)) ||
			    (st = tf_parse_i64(dash + 1, min, max, false, &b)))
				break;
			if (b < a) {
				st = tf_err(TF_ERR_ARG, "range '%s-%s' is backwards", tok, dash + 1);
				break;
			}
		} else {
			if ((st = tf_parse_i64(tok, min, max, false, &a)))
				break;
			b = a;
		}
		for (int64_t v = a; v <= b; v++) {
			if (*n >= cap) {
				st = tf_err(TF_ERR_ARG, "more than %d values in '%s'", cap, s);
				goto out;
			}
			out[(*n)++] = v;
		}
	}
	if (!st && *n == 0)
		st = tf_err(TF_ERR_ARG, "empty list");
out:
	free(copy);
	return st;
}
