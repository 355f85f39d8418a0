/* bpe.c: the merge table and encode: added tokens, the Split steps, and
 * byte-level BPE per piece with Hugging Face's merge_all semantics.
 *
 * Each thread that encodes keeps one scratch block (PCRE2 match blocks, a
 * JIT stack, the symbol and heap arrays, a word cache), created on its
 * first encode and freed when the thread exits; it is keyed by the
 * tokenizer's serial, so a thread that moves to another tokenizer starts
 * with an empty cache. Nothing is allocated per byte: the arrays only grow
 * to the longest piece seen. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "text/detok.h"
#include "text/pretok_fast.h"
#include "text/tok_impl.h"

/* ---- the merge table ---- */

#define EMPTY UINT64_MAX

static inline uint64_t pair_key(uint32_t a, uint32_t b)
{
	return (uint64_t)a << 32 | b;
}

static inline uint64_t mix(uint64_t k)
{
	k ^= k >> 31;
	k *= 0x9E3779B97F4A7C15ull;
	return k ^ (k >> 29);
}

/* The (rank << 32 | merged id) of a pair, or EMPTY. */
static inline uint64_t merge_get(const struct merge_table *t, uint32_t a, uint32_t b)
{
	uint64_t k = pair_key(a, b);
	for (uint64_t i = mix(k) & t->mask;; i = (i + 1) & t->mask) {
		if (t->slots[i].key == k)
			return t->slots[i].val;
		if (t->slots[i].key == EMPTY)
			return EMPTY;
	}
}

/* Split a merge "a b" (or ["a", "b"]) into its two vocab ids. */
static tf_status merge_ids(const struct tf_tok *tok, const json_t *m, size_t rank,
			   uint32_t ids[2], const char *what, bool *pairs)
{
	const char *part[2];
	size_t len[2];
	if (json_is_string(m)) {
		const char *s = json_string_value(m), *sp = memchr(s, ' ', json_string_length(m));
		if (!sp || memchr(sp + 1, ' ', json_string_length(m) - (size_t)(sp + 1 - s)))
			return tf_err(TF_ERR_FORMAT, "%s: merge %zu '%s' is not two tokens", what,
				      rank, s);
		part[0] = s;
		len[0] = (size_t)(sp - s);
		part[1] = sp + 1;
		len[1] = json_string_length(m) - len[0] - 1;
		*pairs = false;
	} else if (json_is_array(m) && json_array_size(m) == 2 &&
		   json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
		for (int k = 0; k < 2; k++) {
			part[k] = json_string_value(json_array_get(m, k));
			len[k] = json_string_length(json_array_get(m, k));
		}
		*pairs = true;
	} else {
		return tf_err(TF_ERR_FORMAT, "%s: merge %zu is neither \"a b\" nor [a, b]", what,
			      rank);
	}
	for (int k = 0; k < 2; k++) {
		ids[k] = tok_vocab_find(tok, part[k], len[k]);
		if (ids[k] == TOK_NONE)
			return tf_err(TF_ERR_FORMAT, "%s: merge %zu: '%.*s' is not in the vocab",
				      what, rank, (int)len[k], part[k]);
	}
	return TF_OK;
}

tf_status tok_merges_build(struct tf_tok *tok, const json_t *merges, const char *what)
{
	size_t n = json_array_size(merges), cap = 16;
	while (cap < 2 * n + 16)
		cap *= 2;
	struct merge_table *t = &tok->merges;
	t->slots = tf_alloc_array(cap, sizeof *t->slots);
	tok->merge_list = tf_alloc_array(n ? n : 1, sizeof *tok->merge_list);
	if (!t->slots || !tok->merge_list)
		return tf_err(TF_ERR_NOMEM, "tokenizer: out of memory");
	memset(t->slots, 0xFF, cap * sizeof *t->slots);
	t->mask = cap - 1;
	if (n >= (1u << 24))
		return tf_err(TF_ERR_FORMAT, "%s: %zu merges is too many", what, n);
	char *joined = NULL;
	size_t jcap = 0;
	tf_status st = TF_OK;
	for (size_t r = 0; r < n; r++) {
		uint32_t ids[2] = {0, 0};
		bool pairs = false;
		if ((st = merge_ids(tok, json_array_get(merges, r), r, ids, what, &pairs)))
			break;
		if (r == 0)
			tok->merges_as_pairs = pairs;
		size_t a = tok->vkey_len[ids[0]], b = tok->vkey_len[ids[1]];
		if (a + b > jcap) {
			jcap = 2 * (a + b);
			free(joined);
			if (!(joined = malloc(jcap))) {
				st = tf_err(TF_ERR_NOMEM, "tokenizer: out of memory");
				break;
			}
		}
		memcpy(joined, tok->vkey[ids[0]], a);
		memcpy(joined + a, tok->vkey[ids[1]], b);
		uint32_t merged = tok_vocab_find(tok, joined, a + b);
		if (merged == TOK_NONE) {
			st = tf_err(TF_ERR_FORMAT, "%s: merge %zu: '%.*s' is not in the vocab", what,
				    r, (int)(a + b), joined);
			break;
		}
		/* A repeated pair takes its last rank, as Hugging Face's map
		 * built from the list in order does. */
		uint64_t k = pair_key(ids[0], ids[1]);
		uint64_t i = mix(k) & t->mask;
		while (t->slots[i].key != EMPTY && t->slots[i].key != k)
			i = (i + 1) & t->mask;
		t->slots[i].key = k;
		t->slots[i].val = (uint64_t)r << 32 | merged;
		tok->merge_list[r][0] = ids[0];
		tok->merge_list[r][1] = ids[1];
		tok->nmerges++;
	}
	free(joined);
	return st;
}

void tok_merges_free(struct tf_tok *tok)
{
	free(tok->merges.slots);
	free(tok->merge_list);
}

/* ---- per-thread scratch ---- */

/* A direct-mapped cache of words up to 62 bytes: bytes -> ids (at most 14),
 * 128 bytes a slot, 4 MiB of address space a thread, touched as used. */
#define CACHE_SLOTS 32768
#define CACHE_KEY 62
#define CACHE_IDS 14
struct cache_ent {
	uint64_t hash;
	uint8_t klen, nids;
	char key[CACHE_KEY];
	uint32_t ids[CACHE_IDS];
};

struct heap_ent {
	uint64_t key; /* rank << 40 | position: the smallest pops first */
	uint32_t new_id;
};

struct scratch {
	uint64_t serial;
	pcre2_match_data *md[TOK_MAX_STEPS];
	pcre2_match_context *mc;
	pcre2_jit_stack *js;
	struct tf_buf clean; /* the input with invalid UTF-8 replaced */
	uint32_t *sym;       /* [cap] symbol ids */
	int32_t *prev, *next;/* linked list of live symbols, -1 at the ends */
	uint8_t *alive;      /* 0 once merged into its left neighbour */
	struct heap_ent *heap;
	size_t cap, heapcap;
	struct cache_ent *cache;
};

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static __thread struct scratch *tls;

static void scratch_free(void *p)
{
	struct scratch *sc = p;
	if (!sc)
		return;
	for (int i = 0; i < TOK_MAX_STEPS; i++)
		pcre2_match_data_free(sc->md[i]);
	pcre2_match_context_free(sc->mc);
	pcre2_jit_stack_free(sc->js);
	tf_buf_release(&sc->clean);
	free(sc->sym);
	free(sc->prev);
	free(sc->next);
	free(sc->alive);
	free(sc->heap);
	free(sc->cache);
	free(sc);
}

static void scratch_key_init(void)
{
	pthread_key_create(&scratch_key, scratch_free);
}

static struct scratch *scratch_get(const struct tf_tok *tok)
{
	struct scratch *sc = tls;
	if (!sc) {
		pthread_once(&scratch_once, scratch_key_init);
		if (!(sc = calloc(1, sizeof *sc)))
			return NULL;
		sc->mc = pcre2_match_context_create(NULL);
		sc->js = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
		sc->cache = calloc(CACHE_SLOTS, sizeof *sc->cache);
		bool ok = sc->mc && sc->js && sc->cache;
		for (int i = 0; i < TOK_MAX_STEPS && ok; i++)
			ok = (sc->md[i] = pcre2_match_data_create(1, NULL)) != NULL;
		if (!ok) {
			scratch_free(sc);
			return NULL;
		}
		pcre2_jit_stack_assign(sc->mc, NULL, sc->js);
		pthread_setspecific(scratch_key, sc);
		tls = sc;
	}
	if (sc->serial != tok->serial) {
		if (sc->serial) /* a fresh cache is zero already */
			memset(sc->cache, 0, CACHE_SLOTS * sizeof *sc->cache);
		sc->serial = tok->serial;
	}
	return sc;
}

static tf_status scratch_fit(struct scratch *sc, size_t n)
{
	if (n <= sc->cap)
		return TF_OK;
	size_t cap = sc->cap ? sc->cap : 64;
	while (cap < n)
		cap *= 2;
	if (tf_realloc_array(&sc->sym, cap, sizeof *sc->sym) ||
	    tf_realloc_array(&sc->prev, cap, sizeof *sc->prev) ||
	    tf_realloc_array(&sc->next, cap, sizeof *sc->next) ||
	    tf_realloc_array(&sc->alive, cap, sizeof *sc->alive))
		return tf_err(TF_ERR_NOMEM, "tokenizer: out of memory");
	sc->cap = cap;
	return TF_OK;
}

/* ---- the merge heap ---- */

static tf_status heap_push(struct scratch *sc, size_t *n, uint64_t key, uint32_t new_id)
{
	if (*n == sc->heapcap) {
		size_t cap = sc->heapcap ? sc->heapcap * 2 : 64;
		if (tf_realloc_array(&sc->heap, cap, sizeof *sc->heap))
			return tf_err(TF_ERR_NOMEM, "tokenizer: out of memory");
		sc->heapcap = cap;
	}
	struct heap_ent *h = sc->heap;
	size_t i = (*n)++;
	while (i && h[(i - 1) / 2].key > key) {
		h[i] = h[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h[i] = (struct heap_ent){key, new_id};
	return TF_OK;
}

static struct heap_ent heap_pop(struct heap_ent *h, size_t *n)
{
	struct heap_ent top = h[0], last = h[--*n];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= *n)
			break;
		if (c + 1 < *n && h[c + 1].key < h[c].key)
			c++;
		if (h[c].key >= last.key)
			break;
		h[i] = h[c];
		i = c;
	}
	if (*n)
		h[i] = last;
	return top;
}

static tf_status push_pair(const struct tf_tok *tok, struct scratch *sc, size_t *nh, int32_t pos)
{
	int32_t nx = sc->next[pos];
	if (nx < 0)
		return TF_OK;
	uint64_t v = merge_get(&tok->merges, sc->sym[pos], sc->sym[nx]);
	if (v == EMPTY)
		return TF_OK;
	return heap_push(sc, nh, (v >> 32) << 40 | (uint64_t)pos, (uint32_t)v);
}

/* ---- BPE of one piece ---- */

/* Short keys compare faster inline than through memcmp. */
static inline bool same_bytes(const char *a, const char *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (a[i] != b[i])
			return false;
	return true;
}

/* BPE of the piece s[0..n); h is its hash when n <= CACHE_KEY. */
static tf_status bpe_word(const struct tf_tok *tok, struct scratch *sc, const char *s, size_t n,
			  uint64_t h, struct tf_ids *out)
{
	tf_status st;
	if (n == 1) {
		uint32_t id = tok->byte_id[(uint8_t)s[0]];
		return id == TOK_NONE ? TF_OK : tf_ids_push(out, id);
	}
	struct cache_ent *ce = NULL;
	if (n <= CACHE_KEY) {
		ce = &sc->cache[h & (CACHE_SLOTS - 1)];
		if (ce->hash == h && ce->klen == n && same_bytes(ce->key, s, n)) {
			if ((st = tf_ids_reserve(out, ce->nids)))
				return st;
			memcpy(out->v + out->n, ce->ids, ce->nids * sizeof *ce->ids);
			out->n += ce->nids;
			return TF_OK;
		}
	}
	if ((st = scratch_fit(sc, n)))
		return st;
	/* Symbols: one per byte that has a token (a byte without one is
	 * dropped, as Hugging Face drops an unknown character without unk). */
	if (n > INT32_MAX)
		return tf_err(TF_ERR_RANGE, "tokenizer: a piece of %zu bytes is too long", n);
	int32_t m = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t id = tok->byte_id[(uint8_t)s[i]];
		if (id == TOK_NONE)
			continue;
		sc->sym[m] = id;
		sc->alive[m] = 1;
		sc->prev[m] = m - 1;
		sc->next[m] = m + 1;
		m++;
	}
	if (!m)
		return TF_OK;
	sc->next[m - 1] = -1;
	/* The first pair lookups are independent: start their loads together. */
	for (int32_t i = 0; i + 1 < m; i++)
		__builtin_prefetch(&tok->merges.slots[mix(pair_key(sc->sym[i], sc->sym[i + 1])) &
						      tok->merges.mask]);
	size_t nh = 0;
	for (int32_t i = 0; i + 1 < m; i++)
		if ((st = push_pair(tok, sc, &nh, i)))
			return st;
	while (nh) {
		struct heap_ent top = heap_pop(sc->heap, &nh);
		int32_t pos = (int32_t)(top.key & ((1ull << 40) - 1));
		int32_t nx = sc->next[pos];
		if (!sc->alive[pos] || nx < 0)
			continue;
		uint64_t v = merge_get(&tok->merges, sc->sym[pos], sc->sym[nx]);
		if (v == EMPTY || (uint32_t)v != top.new_id)
			continue;
		sc->sym[pos] = top.new_id;
		sc->alive[nx] = 0;
		sc->next[pos] = sc->next[nx];
		if (sc->next[nx] >= 0)
			sc->prev[sc->next[nx]] = pos;
		if (sc->prev[pos] >= 0 && (st = push_pair(tok, sc, &nh, sc->prev[pos])))
			return st;
		if ((st = push_pair(tok, sc, &nh, pos)))
			return st;
	}
	size_t first = out->n;
	for (int32_t i = 0; i >= 0; i = sc->next[i])
		if ((st = tf_ids_push(out, sc->sym[i])))
			return st;
	size_t k = out->n - first;
	if (ce && k <= CACHE_IDS) {
		ce->hash = h;
		ce->klen = (uint8_t)n;
		ce->nids = (uint8_t)k;
		memcpy(ce->key, s, n);
		memcpy(ce->ids, out->v + first, k * sizeof *ce->ids);
	}
	return TF_OK;
}

/* ---- the Split steps ---- */

/* The pieces of s[0..n) after steps [step, nsteps), handed to fn. */
static tf_status split(const struct tf_tok *tok, struct scratch *sc, size_t step, const char *s,
		       size_t n, tok_piece_fn fn, void *ctx)
{
	if (!n)
		return TF_OK;
	if (step == tok->nsteps)
		return fn(ctx, s, n);
	const struct pretok_step *ps = &tok->steps[step];
	pcre2_match_data *md = sc->md[step];
	PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
	size_t prev = 0, at = 0, last_end = SIZE_MAX;
	tf_status st;
	while (at <= n) {
		int rc = ps->jit ? pcre2_jit_match(ps->re, (PCRE2_SPTR)s, n, at, 0, md, sc->mc)
				 : pcre2_match(ps->re, (PCRE2_SPTR)s, n, at, PCRE2_NO_UTF_CHECK, md,
					       sc->mc);
		if (rc == PCRE2_ERROR_NOMATCH)
			break;
		if (rc < 0) {
			PCRE2_UCHAR msg[256];
			pcre2_get_error_message(rc, msg, sizeof msg);
			return tf_err(TF_ERR_INTERNAL, "pre-tokenizer regex failed: %s",
				      (const char *)msg);
		}
		size_t ms = ov[0], me = ov[1];
		if (ms == me) {
			/* An empty match splits the text there, except right
			 * after the previous match; the search moves one
			 * character on. */
			if (ms != last_end) {
				if ((st = split(tok, sc, step + 1, s + prev, ms - prev, fn, ctx)))
					return st;
				prev = ms;
			}
			if (ms >= n)
				break;
			at = ms + 1;
			while (at < n && ((uint8_t)s[at] & 0xC0) == 0x80)
				at++;
			last_end = me;
			continue;
		}
		if ((st = split(tok, sc, step + 1, s + prev, ms - prev, fn, ctx)) ||
		    (st = split(tok, sc, step + 1, s + ms, me - ms, fn, ctx)))
			return st;
		prev = at = last_end = me;
	}
	return split(tok, sc, step + 1, s + prev, n - prev, fn, ctx);
}

/* The built-in splitter hands its pieces to BPE through this. */
/* The splitter hands pieces to BPE through a short queue: a piece's cache
 * slot is prefetched when it arrives and looked up PIECE_QUEUE pieces later,
 * so the (4 MiB, mostly out of cache) word cache's latency overlaps the
 * splitting of the next pieces. Order is kept. */
#define PIECE_QUEUE 8
struct piece_ctx {
	const struct tf_tok *tok;
	struct scratch *sc;
	struct tf_ids *out;
	size_t head, n;
	struct {
		const char *s;
		size_t n;
		uint64_t h;
	} q[PIECE_QUEUE];
};

static tf_status piece_pop(struct piece_ctx *c)
{
	size_t i = c->head;
	c->head = (c->head + 1) % PIECE_QUEUE;
	c->n--;
	return bpe_word(c->tok, c->sc, c->q[i].s, c->q[i].n, c->q[i].h, c->out);
}

static tf_status bpe_piece(void *ctx, const char *s, size_t n)
{
	struct piece_ctx *c = ctx;
	tf_status st;
	if (c->n == PIECE_QUEUE && (st = piece_pop(c)))
		return st;
	size_t i = (c->head + c->n++) % PIECE_QUEUE;
	c->q[i].s = s;
	c->q[i].n = n;
	c->q[i].h = 0;
	if (n > 1 && n <= CACHE_KEY) {
		c->q[i].h = tf_hash_bytes(s, n);
		__builtin_prefetch(&c->sc->cache[c->q[i].h & (CACHE_SLOTS - 1)]);
	}
	return TF_OK;
}

static tf_status pretokenize(const struct tf_tok *tok, struct scratch *sc, const char *s,
			     size_t n, struct tf_ids *out)
{
	struct piece_ctx c = {.tok = tok, .sc = sc, .out = out};
	tf_status st = tok->fast ? tok_fast_split(s, n, bpe_piece, &c)
				 : split(tok, sc, 0, s, n, bpe_piece, &c);
	while (!st && c.n)
		st = piece_pop(&c);
	return st;
}

tf_status tok_pretok_pieces(const struct tf_tok *tok, bool fast, const char *s, size_t n,
			    tok_piece_fn fn, void *ctx)
{
	struct scratch *sc = scratch_get(tok);
	if (!sc)
		return tf_err(TF_ERR_NOMEM, "tokenizer: out of memory");
	if (fast && !tok->fast_ok)
		return tf_err(TF_ERR_UNSUPPORTED, "the built-in splitter does not apply");
	return fast ? tok_fast_split(s, n, fn, ctx) : split(tok, sc, 0, s, n, fn, ctx);
}

/* ---- added tokens ---- */

/* The longest added token of t starting at s[0..n): its length, or 0. */
static size_t trie_match(const struct trie *t, const char *s, size_t n, uint32_t *id)
{
	uint32_t at = 0;
	size_t best = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t c = t->nodes[at].child;
		while (c && t->nodes[c].byte != (uint8_t)s[i])
			c = t->nodes[c].next;
		if (!c)
			break;
		at = c;
		if (t->nodes[at].id != TOK_NONE) {
			best = i + 1;
			*id = t->nodes[at].id;
		}
	}
	return best;
}

/* Cut s at the added tokens of t (leftmost-longest); the gaps go to the
 * next pass (the normalized tokens after the raw ones, then the steps). */
static tf_status split_added(const struct tf_tok *tok, struct scratch *sc, int pass,
			     const char *s, size_t n, struct tf_ids *out)
{
	const struct trie *t = pass == 0 ? &tok->raw_trie : &tok->norm_trie;
	size_t gap = 0;
	tf_status st;
	for (size_t i = 0; i < n; i++) {
		if (!t->first[(uint8_t)s[i]])
			continue;
		uint32_t id;
		size_t len = trie_match(t, s + i, n - i, &id);
		if (!len)
			continue;
		if ((st = pass == 0 ? split_added(tok, sc, 1, s + gap, i - gap, out)
				    : pretokenize(tok, sc, s + gap, i - gap, out)) ||
		    (st = tf_ids_push(out, id)))
			return st;
		i += len - 1;
		gap = i + 1;
	}
	return pass == 0 ? split_added(tok, sc, 1, s + gap, n - gap, out)
			 : pretokenize(tok, sc, s + gap, n - gap, out);
}

bool tf_tok_set_fast_split(struct tf_tok *tok, bool on)
{
	tok->fast = on && tok->fast_ok;
	return tok->fast;
}

tf_status tf_tok_encode(const struct tf_tok *tok, const char *text, size_t n, struct tf_ids *out)
{
	struct scratch *sc = scratch_get(tok);
	if (!sc)
		return tf_err(TF_ERR_NOMEM, "tokenizer: out of memory");
	if (!tf_utf8_valid(text, n)) {
		tf_status st;
		tf_buf_reset(&sc->clean);
		tf_utf8_lossy(text, n, true, &sc->clean, &st);
		if (st)
			return st;
		text = sc->clean.data;
		n = sc->clean.len;
	}
	return split_added(tok, sc, 0, text, n, out);
}
