/* q28.c: look-ups in the q28 width tables (parsed once, on first use). */
#include "model/q28.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXL 64
#define MAXMIX 8

struct mix {
	uint32_t n;
	uint32_t k2[MAXMIX], count[MAXMIX];
};

static struct {
	struct mix experts[MAXL][3];
	uint32_t shared[MAXL][3];
	uint64_t bytes[MAXL];
	uint32_t nlayers;
} T;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void parse_mix(const char *s, struct mix *m)
{
	m->n = 0;
	while (*s && m->n < MAXMIX) {
		unsigned k2, count;
		int used;
		if (sscanf(s, "%u:%u%n", &k2, &count, &used) != 2)
			return;
		m->k2[m->n] = k2;
		m->count[m->n++] = count;
		s += used;
		if (*s == ',')
			s++;
	}
}

static void parse(void)
{
	const char *p = tf_q28_experts;
	while (*p) {
		const char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);
		char line[512], w[3][128];
		unsigned layer, s1, s2, s3;
		unsigned long long bytes;
		if (len < sizeof line) {
			memcpy(line, p, len);
			line[len] = 0;
			if (sscanf(line, "%u %127s %127s %127s %u,%u,%u %llu", &layer, w[0], w[1], w[2],
				   &s1, &s2, &s3, &bytes) == 8 && layer < MAXL) {
				for (int i = 0; i < 3; i++)
					parse_mix(w[i], &T.experts[layer][i]);
				T.shared[layer][0] = s1;
				T.shared[layer][1] = s2;
				T.shared[layer][2] = s3;
				T.bytes[layer] = bytes;
				if (layer + 1 > T.nlayers)
					T.nlayers = layer + 1;
			}
		}
		p += len + (nl ? 1 : 0);
	}
}

static uint32_t dense_k2(const char *key)
{
	size_t n = strlen(key);
	for (const char *p = tf_q28_dense; *p;) {
		const char *nl = strchr(p, '\n');
		size_t len = nl ? (size_t)(nl - p) : strlen(p);
		if (len > n && !strncmp(p, key, n) && p[n] == ' ')
			return (uint32_t)strtoul(p + n + 1, NULL, 10);
		p += len + (nl ? 1 : 0);
	}
	return 0;
}

static uint32_t expert_k2(const struct mix *m, uint32_t e)
{
	uint32_t at = 0;
	for (uint32_t i = 0; i < m->n; i++) {
		at += m->count[i];
		if (e < at)
			return m->k2[i];
	}
	return 0;
}

uint32_t tf_q28_bits(const struct tf_config *c, const struct tf_group_spec *g)
{
	pthread_once(&once, parse);
	char key[TF_NAME_MAX + 16];
	uint32_t L = g->layer, k2 = 0;
	const char *suffix = NULL;
	switch (g->proj) {
	case TF_PROJ_EXPERT_W1: case TF_PROJ_EXPERT_W2: case TF_PROJ_EXPERT_W3:
		k2 = L < T.nlayers ? expert_k2(&T.experts[L][g->proj - TF_PROJ_EXPERT_W1], g->index) : 0;
		return k2 / 2;
	case TF_PROJ_SHARED_W1: case TF_PROJ_SHARED_W2: case TF_PROJ_SHARED_W3:
		return L < T.nlayers ? T.shared[L][g->proj - TF_PROJ_SHARED_W1] / 2 : 0;
	case TF_PROJ_HEAD: return dense_k2("head") / 2;
	case TF_PROJ_MAIN_PROJ: return 0;
	case TF_PROJ_WQ_A: suffix = "attn.wq_a"; break;
	case TF_PROJ_WKV: suffix = "attn.wkv"; break;
	case TF_PROJ_WQ_B: suffix = "attn.wq_b"; break;
	case TF_PROJ_WO_B: suffix = "attn.wo_b"; break;
	case TF_PROJ_COMP_WKV: suffix = "attn.comp_wkv"; break;
	case TF_PROJ_COMP_WGATE: suffix = "attn.comp_wgate"; break;
	case TF_PROJ_IX_WQ_B: suffix = "attn.ix_wq_b"; break;
	case TF_PROJ_IX_WK: suffix = "attn.ix_wk"; break;
	case TF_PROJ_ENGRAM_WKV: suffix = "engram.wkv"; break;
	case TF_PROJ_WO_A:
		snprintf(key, sizeof key, "L%u.attn.wo_a.%u", L, g->index % (c->o_groups / 2 ? c->o_groups / 2 : 1));
		return dense_k2(key) / 2;
	}
	snprintf(key, sizeof key, "L%u.%s", L, suffix);
	return dense_k2(key) / 2;
}

uint64_t tf_q28_rank_bytes(uint32_t layer)
{
	pthread_once(&once, parse);
	return layer < T.nlayers ? T.bytes[layer] : 0;
}
