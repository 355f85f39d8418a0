/* roce_ports.c: which ports two ranks connect (pure functions).
 *
 * Taking the first N active ports in device-list order can pick a port on a
 * subnet the peer does not have (a host with two neighbours), and that
 * queue pair's RTR step then fails. So each rank sends its usable ports'
 * IPv4 addresses over the bootstrap, and both keep the ports whose /24 the
 * other side also lists, ordered by subnet, each /24 no more often than
 * both sides have it: both ranks then choose the same number of ports and
 * position i of one choice reaches position i of the other. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fabric/roce.h"

static uint32_t net24(uint32_t ip)
{
	return ip >> 8;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

/* The n-th (0-based) index of list whose /24 is net, or -1. */
static int nth_in(const uint32_t *list, int n, uint32_t net, int k)
{
	for (int i = 0; i < n; i++)
		if (net24(list[i]) == net && k-- == 0)
			return i;
	return -1;
}

void tf_roce_choose_ports(const uint32_t *local, int nl, const uint32_t *peer, int np, int want,
			  struct tf_roce_choice *out)
{
	memset(out, 0, sizeof *out);
	if (want > TF_ROCE_MAX_HCA)
		want = TF_ROCE_MAX_HCA;
	if (nl > TF_ROCE_MAX_PORTS)
		nl = TF_ROCE_MAX_PORTS;
	if (np > TF_ROCE_MAX_PORTS)
		np = TF_ROCE_MAX_PORTS;
	/* The distinct /24s of the local list, ascending: the same set of
	 * shared subnets in the same order on both ranks. */
	uint32_t nets[TF_ROCE_MAX_PORTS];
	int nn = 0;
	for (int i = 0; i < nl; i++)
		nets[nn++] = net24(local[i]);
	qsort(nets, (size_t)nn, sizeof nets[0], cmp_u32);
	for (int i = 0; i < nn && out->n < want; i++) {
		if (i && nets[i] == nets[i - 1])
			continue;
		for (int k = 0; out->n < want; k++) {
			int a = nth_in(local, nl, nets[i], k), b = nth_in(peer, np, nets[i], k);
			if (a < 0 || b < 0)
				break;
			out->mine[out->n] = a, out->peer[out->n] = b, out->n++;
		}
	}
	if (out->n) {
		out->shared = true;
		return;
	}
	int n = want < nl ? want : nl;
	n = n < np ? n : np;
	for (int i = 0; i < n; i++)
		out->mine[i] = out->peer[i] = i;
	out->n = n;
}

tf_status tf_roce_parse_hca(const char *s, char names[TF_ROCE_MAX_HCA][64], int gids[TF_ROCE_MAX_HCA],
			    int *n)
{
	*n = 0;
	if (!s || !*s)
		return TF_OK;
	const char *p = s;
	for (;;) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		const char *colon = memchr(p, ':', len);
		size_t nlen = colon ? (size_t)(colon - p) : len;
		if (*n == TF_ROCE_MAX_HCA)
			return tf_err(TF_ERR_CONFIG, "TF_TP_ROCE_HCA=%s: expected at most %d HCAs", s,
				      TF_ROCE_MAX_HCA);
		if (nlen == 0 || nlen >= 64)
			return tf_err(TF_ERR_CONFIG, "TF_TP_ROCE_HCA=%s: expected name[:gid],...", s);
		memcpy(names[*n], p, nlen);
		names[*n][nlen] = 0;
		gids[*n] = -1;
		if (colon) {
			char num[16];
			size_t glen = len - nlen - 1;
			char *e;
			if (glen == 0 || glen >= sizeof num)
				return tf_err(TF_ERR_CONFIG, "TF_TP_ROCE_HCA=%s: bad GID index", s);
			memcpy(num, colon + 1, glen);
			num[glen] = 0;
			long v = strtol(num, &e, 10);
			if (*e || v < 0 || v > 255)
				return tf_err(TF_ERR_CONFIG, "TF_TP_ROCE_HCA=%s: bad GID index '%s'", s, num);
			gids[*n] = (int)v;
		}
		for (int i = 0; i < *n; i++)
			if (!strcmp(names[i], names[*n]))
				return tf_err(TF_ERR_CONFIG, "TF_TP_ROCE_HCA=%s: '%s' named twice", s, names[i]);
		(*n)++;
		if (!end)
			return TF_OK;
		p = end + 1;
	}
}
