/* vocab.c: a vocabulary's byte strings in a trie laid out in depth-first
 * order (grammar_impl.h's tf_gvocab): ids sorted by their bytes, a node per
 * distinct prefix, each node's subtree ending where skip points. A mask is
 * one pass over the nodes that skips every subtree whose prefix the
 * automaton refuses. */
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "grammar/grammar_impl.h"

/* Tokens longer than this are left out of masks (none are in practice). */
#define MAX_TOKEN 1024

static int cmp_ids(const void *a, const void *b, void *ctx)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	const struct tf_gvocab *v = ctx;
	size_t lx = v->off[x + 1] - v->off[x], ly = v->off[y + 1] - v->off[y];
	int c = memcmp(v->blob + v->off[x], v->blob + v->off[y], lx < ly ? lx : ly);
	if (c)
		return c;
	if (lx != ly)
		return lx < ly ? -1 : 1;
	return x < y ? -1 : x > y;
}

static tf_status build_trie(struct tf_gvocab *v, uint32_t nids)
{
	size_t cap = 0;
	for (uint32_t i = 0; i < nids; i++)
		cap += v->off[v->ids[i] + 1] - v->off[v->ids[i]];
	if (!(v->byte = tf_alloc_array(cap + 1, 1)) ||
	    !(v->depth = tf_alloc_array(cap + 1, sizeof(*v->depth))) ||
	    !(v->skip = tf_alloc_array(cap + 1, sizeof(*v->skip))) ||
	    !(v->tfirst = tf_alloc_array(cap + 1, sizeof(*v->tfirst))) ||
	    !(v->tcount = tf_calloc(cap + 1, sizeof(*v->tcount))))
		return tf_err(TF_ERR_NOMEM, "grammar: out of memory");
	/* path[d]: the node at depth d + 1 on the current path */
	uint32_t path[MAX_TOKEN];
	const uint8_t *prev = NULL;
	size_t plen = 0, n = 0;
	for (uint32_t i = 0; i < nids; i++) {
		uint32_t id = v->ids[i];
		const uint8_t *b = v->blob + v->off[id];
		size_t len = v->off[id + 1] - v->off[id], lcp = 0;
		while (prev && lcp < len && lcp < plen && b[lcp] == prev[lcp])
			lcp++;
		for (size_t d = lcp; d < len; d++) {
			v->byte[n] = b[d];
			v->depth[n] = (uint16_t)(d + 1);
			v->tfirst[n] = i;
			path[d] = (uint32_t)n++;
		}
		uint32_t at = path[len - 1];
		if (!v->tcount[at])
			v->tfirst[at] = i;
		v->tcount[at]++;
		prev = b;
		plen = len;
	}
	/* skip: the first later node no deeper than this one */
	uint32_t open[MAX_TOKEN + 1];
	size_t top = 0;
	for (size_t i = 0; i < n; i++) {
		while (top && v->depth[open[top - 1]] >= v->depth[i])
			v->skip[open[--top]] = (uint32_t)i;
		open[top++] = (uint32_t)i;
	}
	while (top)
		v->skip[open[--top]] = (uint32_t)n;
	v->nodes = n;
	return TF_OK;
}

tf_status tf_gvocab_new(uint32_t n, tf_gvocab_fn fn, void *ctx, struct tf_gvocab **out)
{
	*out = NULL;
	struct tf_gvocab *v = tf_calloc(1, sizeof(*v));
	tf_status st = TF_OK;
	if (!v || !(v->off = tf_calloc((size_t)n + 1, sizeof(*v->off))) ||
	    !(v->has = tf_calloc(n ? n : 1, sizeof(*v->has))) ||
	    !(v->ids = tf_alloc_array(n ? n : 1, sizeof(*v->ids))))
		goto nomem;
	v->n = n;
	size_t total = 0, cap = 0;
	uint32_t nids = 0;
	for (uint32_t id = 0; id < n; id++) {
		size_t len = 0;
		const uint8_t *b = fn(ctx, id, &len);
		v->off[id] = total;
		if (!b || !len || len > MAX_TOKEN)
			continue;
		if (total + len > cap) {
			size_t c = cap ? cap * 2 : 1 << 16;
			while (c < total + len)
				c *= 2;
			if (tf_realloc_array(&v->blob, c, 1))
				goto nomem;
			cap = c;
		}
		memcpy(v->blob + total, b, len);
		total += len;
		v->has[id] = true;
		v->ids[nids++] = id;
		if (len > v->maxdepth)
			v->maxdepth = (uint32_t)len;
	}
	v->off[n] = total;
	if (!v->blob && !(v->blob = tf_alloc_array(1, 1)))
		goto nomem;
	qsort_r(v->ids, nids, sizeof(*v->ids), cmp_ids, v);
	if ((st = build_trie(v, nids)))
		goto fail;
	*out = v;
	return TF_OK;
nomem:
	st = tf_err(TF_ERR_NOMEM, "grammar: out of memory building the vocabulary");
fail:
	tf_gvocab_free(v);
	return st;
}

void tf_gvocab_free(struct tf_gvocab *v)
{
	if (!v)
		return;
	free(v->byte);
	free(v->depth);
	free(v->skip);
	free(v->tfirst);
	free(v->tcount);
	free(v->ids);
	free(v->blob);
	free(v->off);
	free(v->has);
	free(v);
}

uint32_t tf_gvocab_size(const struct tf_gvocab *v)
{
	return v->n;
}

size_t tf_gvocab_nodes(const struct tf_gvocab *v)
{
	return v->nodes;
}
