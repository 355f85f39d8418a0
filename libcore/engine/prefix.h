/* prefix.h: the prefix index of the engine's prompt cache: which saved
 * cache sequences hold which prompt prefixes, in blocks of `block` tokens
 * (TF_PREFIX_BLOCK, a KV page).
 *
 * A node stands for a whole prefix of j blocks, keyed by a chained digest
 * (server-engine-facts.md §4): d0 = BLAKE2b("tf-prefix-root"), dj =
 * BLAKE2b(d(j-1) || the ids of block j as little-endian i32), each cut to
 * 16 bytes. A node is "seen" once a prompt went through it, and may hold an
 * entry: the caller's sequence id (a cache sequence holding exactly those
 * j*block positions) and a copy of its ids, compared in full before a hit,
 * so a digest collision can never resume the wrong tokens.
 *
 * The policy (tf_prefix_lookup), for a prompt of n ids:
 *   - the hit is the deepest entry that is a prefix of the prompt and
 *     leaves at least the last prompt token to run (the first generated
 *     token is drawn from its logits);
 *   - the prefixes to save while the prompt runs: its deepest block
 *     boundary before the last token (the same prompt again, or the next
 *     turn of the conversation, resumes there), and, when the prompt shares
 *     seen blocks with an earlier prompt beyond its hit, the end of that
 *     shared stem (a third prompt with the same system prompt or history
 *     resumes there, although the first two went on differently).
 *
 * Memory is bounded: at most max_entries entries (their ids copied) and
 * max_nodes nodes. Nodes without an entry go least recently used first
 * when the table is full; entries go only through tf_prefix_evict, least
 * recently used first, which the caller runs when it is short of sequences
 * or cache pages (it frees the sequence it gets back).
 *
 * Not thread safe: the engine thread owns it. */
#ifndef TF_ENGINE_PREFIX_H
#define TF_ENGINE_PREFIX_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"

#define TF_PREFIX_BLOCK 256 /* tokens a block: one KV page (compute/kv.h) */
#define TF_PREFIX_SAVES 2   /* prefixes one prompt may save */

struct tf_prefix_config {
	uint32_t block;       /* tokens a block (0: TF_PREFIX_BLOCK) */
	uint32_t max_entries; /* saved prefixes at once (at least 1) */
	uint32_t max_nodes;   /* nodes at once (0: 4096, or 4 * max_entries if more) */
};

/* Counters since tf_prefix_new. */
struct tf_prefix_stats {
	uint64_t lookups;    /* prompts looked up */
	uint64_t hits;       /* of which resumed from an entry (tf_prefix_resumed) */
	uint64_t hit_tokens; /* prompt tokens resumed */
	uint64_t saves;      /* entries inserted */
	uint64_t evictions;  /* entries evicted */
	uint32_t entries, nodes;
};

/* What a lookup found and what the prompt should save. */
struct tf_prefix_plan {
	uint32_t hit;                   /* prompt tokens the entry holds (0: none) */
	int seq;                        /* the entry's sequence, -1 when none */
	uint32_t save[TF_PREFIX_SAVES]; /* prefix lengths to save, ascending; 0 ends the list */
};

struct tf_prefix;

/* A new, empty index (c validated: TF_ERR_ARG). */
tf_status tf_prefix_new(const struct tf_prefix_config *c, struct tf_prefix **out);
/* Free the index; the sequences of its entries are the caller's (free them
 * first with tf_prefix_evict, or together with the cache). NULL is a no-op. */
void tf_prefix_free(struct tf_prefix *p);

/* Look up ids[0..n) (see the policy above) and mark its blocks seen. The
 * hit entry counts as used now. TF_ERR_NOMEM leaves *out empty. */
tf_status tf_prefix_lookup(struct tf_prefix *p, const int32_t *ids, uint32_t n,
			   struct tf_prefix_plan *out);

/* Count a prompt that resumed `tokens` tokens of a lookup's hit (the
 * caller may lose the hit before it resumes: it is counted only then). */
void tf_prefix_resumed(struct tf_prefix *p, uint32_t tokens);

/* True when an entry holds exactly ids[0..len) (it counts as used now). */
bool tf_prefix_holds(struct tf_prefix *p, const int32_t *ids, uint32_t len);

/* True when inserting needs an eviction first. */
bool tf_prefix_full(const struct tf_prefix *p);

/* Record that sequence seq holds ids[0..len), len a non-zero multiple of
 * the block. The ids are copied. TF_ERR_ARG for a bad len, TF_ERR_RANGE
 * when full or when an entry already holds that prefix (the caller keeps
 * seq then). */
tf_status tf_prefix_insert(struct tf_prefix *p, const int32_t *ids, uint32_t len, int seq);

/* Drop the least recently used entry and return its sequence for the
 * caller to free; -1 when there is none. Its node stays seen. */
int tf_prefix_evict(struct tf_prefix *p);

void tf_prefix_stats(const struct tf_prefix *p, struct tf_prefix_stats *out);

#endif
