/* tok_impl.h: the inside of struct tf_tok, shared by the tokenizer's files
 * (tokenizer.c: loading, saving, lookups; pretok.c: the Split steps;
 * bpe.c: merges and encode). Not a public header. */
#ifndef TF_TEXT_TOK_IMPL_H
#define TF_TEXT_TOK_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/hmap.h"
#include "text/pretok_fast.h"
#include "text/tokenizer.h"

#define TOK_NONE UINT32_MAX

/* Most steps a pre-tokenizer may have (the encoder keeps one PCRE2 match
 * block per step and thread). */
#define TOK_MAX_STEPS 16

/* One Split(Isolated) step of the pre-tokenizer. */
struct pretok_step {
	pcre2_code *re;
	char *src;    /* the pattern as the file spells it */
	bool literal; /* a String pattern, not a Regex */
	bool jit;
};

/* A byte trie of added-token contents for leftmost-longest matching. */
struct trie_node {
	uint32_t child; /* first child, or 0 */
	uint32_t next;  /* next sibling, or 0 */
	uint32_t id;    /* token ending here, or TOK_NONE */
	uint8_t byte;
};
struct trie {
	struct trie_node *nodes; /* nodes[0] is the root */
	uint32_t n, cap;
	uint8_t first[256];      /* 1 when some token starts with that byte */
};

/* The merge table: (left id, right id) -> (rank, merged id), open addressing
 * with linear probing on a power-of-two table of u64 keys. */
struct merge_slot {
	uint64_t key; /* left << 32 | right, or UINT64_MAX for empty */
	uint64_t val; /* rank << 32 | merged id */
};
struct merge_table {
	struct merge_slot *slots;
	uint64_t mask;
};

struct added {
	char *content;
	uint32_t len, id;
	unsigned flags;
};

struct tf_tok {
	uint64_t serial;          /* unique per load: keys the per-thread caches */
	uint32_t nids;            /* one past the largest id */
	char **vkey;              /* [nids] the model's vocab key of each id (in
				   * vkeys), or NULL */
	uint32_t *vkey_len;       /* [nids] */
	char *vkeys;              /* every vocab key, NUL-terminated, one block */
	uint64_t *vtab;           /* vocab key -> id: hash tag << 32 | (id + 1), 0 empty */
	uint64_t vmask;
	uint32_t *boff;           /* [nids] offset of the decoded bytes in arena, or
				   * TOK_NONE for no token */
	uint32_t *blen;           /* [nids] */
	struct tf_buf arena;      /* every token's decoded bytes, then 16 zero bytes */
	int32_t *added_idx;       /* [nids] index into added, or -1 */
	size_t nvocab;
	uint32_t byte_id[256];    /* id of each byte's symbol, TOK_NONE if absent */
	struct merge_table merges;
	uint32_t (*merge_list)[2];/* [nmerges] (left, right) in rank order */
	size_t nmerges;
	bool merges_as_pairs;     /* the file wrote merges as ["a", "b"] */
	struct added *added;      /* in file order, then in order of addition */
	size_t nadded, capadded;
	struct tf_hmap added_map; /* content -> index into added (keys borrowed) */
	struct trie raw_trie;     /* non-normalized added tokens */
	struct trie norm_trie;    /* normalized added tokens */
	struct pretok_step *steps;
	size_t nsteps;
	bool fast_ok;             /* the steps are DeepSeek's: pretok_fast.c applies */
	bool fast;                /* encode uses pretok_fast.c */
	json_t *rest;             /* the file without vocab, merges and added tokens */
};

/* tokenizer.c */
/* The id of the model's vocab key s[0..n), or TOK_NONE. */
uint32_t tok_vocab_find(const struct tf_tok *tok, const char *s, size_t n);

/* pretok.c */
tf_status tok_pretok_load(struct tf_tok *tok, const json_t *pre, const char *what);
void tok_pretok_free(struct tf_tok *tok);

/* bpe.c */
/* The pieces the pre-tokenizer cuts n bytes of valid UTF-8 into, by the
 * built-in splitter (fast) or by the PCRE2 steps; for tests. */
tf_status tok_pretok_pieces(const struct tf_tok *tok, bool fast, const char *s, size_t n,
			    tok_piece_fn fn, void *ctx);
tf_status tok_merges_build(struct tf_tok *tok, const json_t *merges, const char *what);
void tok_merges_free(struct tf_tok *tok);

#endif
