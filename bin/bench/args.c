/* args.c: tf-bench's list arguments. */
#include <stdio.h>
#include <string.h>

#include "base/cli.h"
#include "base/num.h"
#include "bench/bench.h"

/* Parse "a,b,c" of integers in [lo, hi] into v (at most max). */
int bench_parse_list(const char *s, const char *what, int64_t lo, int64_t hi, int64_t *v, int max)
{
	int n = 0;
	tf_status st = tf_parse_i64_list(s, lo, hi, v, max, &n);
	if (st || !n)
		tf_usage_error("bad %s '%s': %s", what, s, st ? tf_errmsg(st) : "empty");
	return n;
}

/* The DeepSeek-V4.1 release shapes, K x N (in x out features). */
static const uint32_t dsv41[][2] = {
	{5120, 2304}, {2304, 5120},                 /* experts: up/gate, down */
	{5120, 1280}, {1280, 32768}, {4096, 1024}, {8192, 5120}, /* attention */
	{5120, 129280},                            /* head */
};

int bench_parse_shapes(const char *s, uint32_t (*v)[2], int max)
{
	if (!strcmp(s, "dsv41")) {
		int n = (int)(sizeof(dsv41) / sizeof(dsv41[0]));
		memcpy(v, dsv41, sizeof(dsv41));
		return n;
	}
	int n = 0;
	char buf[512];
	snprintf(buf, sizeof(buf), "%s", s);
	for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		unsigned k, nn;
		char tail;
		if (n == max || sscanf(t, "%ux%u%c", &k, &nn, &tail) != 2 || !k || !nn || k % 128 ||
		    nn % 128 || k > 65536 || nn > 262144)
			tf_usage_error("bad shape '%s' (expected KxN, multiples of 128)", t);
		v[n][0] = k;
		v[n][1] = nn;
		n++;
	}
	return n;
}

int bench_parse_codebooks(const char *s, int *v)
{
	if (!strcmp(s, "all")) {
		v[0] = 0, v[1] = 1, v[2] = 2;
		return 3;
	}
	int n = 0;
	char buf[64];
	snprintf(buf, sizeof(buf), "%s", s);
	for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		int cb = !strcmp(t, "3inst") ? 0 : !strcmp(t, "mcg") ? 1 : !strcmp(t, "mul1") ? 2 : -1;
		if (cb < 0 || n == 3)
			tf_usage_error("bad codebook '%s' (3inst, mcg, mul1 or all)", t);
		v[n++] = cb;
	}
	return n;
}
