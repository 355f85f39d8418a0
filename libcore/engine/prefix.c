/* prefix.c: the prefix index of the prompt cache (prefix.h). */
#include "engine/prefix.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/digest.h"
#include "base/hmap.h"

#define KEY 16 /* digest bytes kept */

struct node {
	uint8_t key[KEY];
	bool live;
	uint32_t depth;  /* blocks */
	uint64_t used;   /* the clock when last used */
	int seq;         /* the entry's sequence, -1: seen only */
	int32_t *ids;    /* the entry's depth * block ids */
};

struct tf_prefix {
	struct tf_prefix_config c;
	struct node *nodes; /* [max_nodes] */
	uint32_t nnodes, nentries;
	struct tf_hmap map;  /* first 8 key bytes -> node index + 1 */
	uint64_t clock;
	struct tf_prefix_stats st;
	uint8_t (*chain)[KEY]; /* scratch: the digests of a prompt's blocks */
	uint32_t chain_cap;
};

tf_status tf_prefix_new(const struct tf_prefix_config *c, struct tf_prefix **out)
{
	*out = NULL;
	struct tf_prefix_config k = *c;
	if (!k.block)
		k.block = TF_PREFIX_BLOCK;
	if (k.max_entries == 0)
		return tf_err(TF_ERR_ARG, "prefix cache: no room for entries");
	if (!k.max_nodes)
		k.max_nodes = k.max_entries > 1024 ? 4 * k.max_entries : 4096;
	if (k.max_nodes <= k.max_entries)
		return tf_err(TF_ERR_ARG, "prefix cache: %u nodes cannot index %u entries",
			      k.max_nodes, k.max_entries);
	struct tf_prefix *p = tf_calloc(1, sizeof(*p));
	if (!p || !(p->nodes = tf_calloc(k.max_nodes, sizeof(*p->nodes)))) {
		free(p);
		return tf_err(TF_ERR_NOMEM, "prefix cache: %u nodes", k.max_nodes);
	}
	p->c = k;
	tf_hmap_init(&p->map, TF_HMAP_U64);
	*out = p;
	return TF_OK;
}

void tf_prefix_free(struct tf_prefix *p)
{
	if (!p)
		return;
	for (uint32_t i = 0; i < p->c.max_nodes; i++)
		free(p->nodes[i].ids);
	free(p->nodes);
	free(p->chain);
	tf_hmap_release(&p->map);
	free(p);
}

static uint64_t key64(const uint8_t *key)
{
	uint64_t k;
	memcpy(&k, key, sizeof(k));
	return k;
}

/* The digests of blocks 1..nb of ids into p->chain[0..nb). */
static tf_status digest_chain(struct tf_prefix *p, const int32_t *ids, uint32_t nb)
{
	if (nb > p->chain_cap) {
		if (tf_realloc_array(&p->chain, nb, sizeof(*p->chain)))
			return tf_err(TF_ERR_NOMEM, "prefix cache: %u block digests", nb);
		p->chain_cap = nb;
	}
	static const char root[] = "tf-prefix-root";
	uint8_t full[TF_BLAKE2B_LEN], le[4 * 64];
	tf_status st = tf_blake2b(root, sizeof(root) - 1, full);
	const uint8_t *prev = full;
	uint8_t prev_key[KEY];
	memcpy(prev_key, prev, KEY);
	for (uint32_t j = 0; j < nb && !st; j++) {
		struct tf_digest d;
		if ((st = tf_digest_init(&d, TF_DIGEST_BLAKE2B)))
			break;
		st = tf_digest_update(&d, prev_key, KEY);
		const int32_t *b = ids + (size_t)j * p->c.block;
		for (uint32_t i = 0; i < p->c.block && !st; i += 64) {
			uint32_t m = p->c.block - i < 64 ? p->c.block - i : 64;
			for (uint32_t k = 0; k < m; k++) {
				uint32_t v = (uint32_t)b[i + k];
				le[4 * k] = (uint8_t)v;
				le[4 * k + 1] = (uint8_t)(v >> 8);
				le[4 * k + 2] = (uint8_t)(v >> 16);
				le[4 * k + 3] = (uint8_t)(v >> 24);
			}
			st = tf_digest_update(&d, le, 4 * (size_t)m);
		}
		if (!st)
			st = tf_digest_final(&d, full);
		else
			tf_digest_release(&d);
		memcpy(p->chain[j], full, KEY);
		memcpy(prev_key, full, KEY);
	}
	return st;
}

static struct node *find(const struct tf_prefix *p, const uint8_t *key)
{
	uintptr_t v;
	if (!tf_hmap_get(&p->map, key64(key), &v))
		return NULL;
	struct node *n = &p->nodes[v - 1];
	return memcmp(n->key, key, KEY) ? NULL : n;
}

static bool entry_matches(const struct tf_prefix *p, const struct node *n, const int32_t *ids)
{
	return n->seq >= 0 && !memcmp(n->ids, ids, (size_t)n->depth * p->c.block * sizeof(*ids));
}

/* A node for key at depth: found, or made in a free place, or in place of
 * the least recently used node without an entry. NULL when none can be had
 * (every node holds an entry, or the first 8 key bytes collide). */
static struct node *find_or_add(struct tf_prefix *p, const uint8_t *key, uint32_t depth)
{
	struct node *n = find(p, key);
	if (n)
		return n;
	uintptr_t other;
	if (tf_hmap_get(&p->map, key64(key), &other))
		return NULL; /* another prefix with the same first 8 bytes keeps its place */
	struct node *slot = NULL;
	if (p->nnodes < p->c.max_nodes) {
		for (uint32_t i = 0; i < p->c.max_nodes && !slot; i++)
			if (!p->nodes[i].live)
				slot = &p->nodes[i];
	} else {
		for (uint32_t i = 0; i < p->c.max_nodes; i++) {
			struct node *c = &p->nodes[i];
			if (c->seq < 0 && (!slot || c->used < slot->used))
				slot = c;
		}
		if (!slot)
			return NULL;
		tf_hmap_del(&p->map, key64(slot->key), NULL);
		p->nnodes--;
	}
	if (tf_hmap_put(&p->map, key64(key), (uintptr_t)(slot - p->nodes) + 1)) {
		slot->live = false;
		return NULL;
	}
	memcpy(slot->key, key, KEY);
	slot->live = true;
	slot->depth = depth;
	slot->seq = -1;
	slot->used = 0;
	p->nnodes++;
	return slot;
}

tf_status tf_prefix_lookup(struct tf_prefix *p, const int32_t *ids, uint32_t n,
			   struct tf_prefix_plan *out)
{
	memset(out, 0, sizeof(*out));
	out->seq = -1;
	p->st.lookups++;
	uint32_t B = p->c.block, J = n ? (n - 1) / B : 0; /* blocks before the last token */
	if (J == 0)
		return TF_OK;
	tf_status st = digest_chain(p, ids, J);
	if (st)
		return st;
	uint32_t hit = 0, seen = 0;
	struct node *hn = NULL;
	for (uint32_t j = 1; j <= J; j++) {
		struct node *x = find(p, p->chain[j - 1]);
		if (!x)
			continue;
		seen = j;
		if (entry_matches(p, x, ids)) {
			hit = j;
			hn = x;
		}
	}
	uint64_t now = ++p->clock;
	if (hn) {
		hn->used = now;
		out->hit = hit * B;
		out->seq = hn->seq;
	}
	int k = 0;
	if (seen > hit && seen < J)
		out->save[k++] = seen * B;
	if (J > hit)
		out->save[k++] = J * B;
	/* Mark the chain seen, the deepest block the most recently used so
	 * that the stem outlives nothing it leads to. */
	for (uint32_t j = 1; j <= J; j++) {
		struct node *x = find_or_add(p, p->chain[j - 1], j);
		if (x && x->used < now)
			x->used = now;
	}
	return TF_OK;
}

void tf_prefix_resumed(struct tf_prefix *p, uint32_t tokens)
{
	p->st.hits++;
	p->st.hit_tokens += tokens;
}

/* The node whose entry holds exactly ids[0..len), or NULL. */
static struct node *entry_of(struct tf_prefix *p, const int32_t *ids, uint32_t len)
{
	if (len == 0 || len % p->c.block || digest_chain(p, ids, len / p->c.block))
		return NULL;
	struct node *n = find(p, p->chain[len / p->c.block - 1]);
	return n && n->depth == len / p->c.block && entry_matches(p, n, ids) ? n : NULL;
}

bool tf_prefix_holds(struct tf_prefix *p, const int32_t *ids, uint32_t len)
{
	struct node *n = entry_of(p, ids, len);
	if (n)
		n->used = ++p->clock;
	return n != NULL;
}

bool tf_prefix_full(const struct tf_prefix *p)
{
	return p->nentries >= p->c.max_entries;
}

tf_status tf_prefix_insert(struct tf_prefix *p, const int32_t *ids, uint32_t len, int seq)
{
	uint32_t B = p->c.block;
	if (len == 0 || len % B || seq < 0)
		return tf_err(TF_ERR_ARG, "prefix cache: an entry of %u tokens (blocks of %u)", len, B);
	if (tf_prefix_full(p))
		return tf_err(TF_ERR_RANGE, "prefix cache: all %u entries are taken", p->c.max_entries);
	tf_status st = digest_chain(p, ids, len / B);
	if (st)
		return st;
	struct node *n = find_or_add(p, p->chain[len / B - 1], len / B);
	if (!n)
		return tf_err(TF_ERR_RANGE, "prefix cache: no node for a prefix of %u tokens", len);
	if (n->seq >= 0)
		return tf_err(TF_ERR_RANGE, "prefix cache: a prefix of %u tokens is held already", len);
	int32_t *copy = tf_alloc_array(len, sizeof(*copy));
	if (!copy)
		return tf_err(TF_ERR_NOMEM, "prefix cache: %u ids", len);
	memcpy(copy, ids, (size_t)len * sizeof(*ids));
	free(n->ids);
	n->ids = copy;
	n->seq = seq;
	n->used = ++p->clock;
	p->nentries++;
	p->st.saves++;
	return TF_OK;
}

int tf_prefix_evict(struct tf_prefix *p)
{
	struct node *lru = NULL;
	for (uint32_t i = 0; i < p->c.max_nodes; i++) {
		struct node *n = &p->nodes[i];
		if (n->live && n->seq >= 0 && (!lru || n->used < lru->used))
			lru = n;
	}
	if (!lru)
		return -1;
	int seq = lru->seq;
	lru->seq = -1;
	free(lru->ids);
	lru->ids = NULL;
	p->nentries--;
	p->st.evictions++;
	return seq;
}

void tf_prefix_stats(const struct tf_prefix *p, struct tf_prefix_stats *out)
{
	*out = p->st;
	out->entries = p->nentries;
	out->nodes = p->nnodes;
}
