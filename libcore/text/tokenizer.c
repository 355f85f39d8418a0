/* tokenizer.c: loading a tokenizer.json (validation, vocab, added tokens,
 * the byte-level alphabet), lookups, adding tokens and the V4.1 derivation.
 * Encoding lives in bpe.c, the pre-tokenizer in pretok.c and pretok_fast.c,
 * saving in tok_save.c, decoding in detok.c. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/file.h"
#include "base/json.h"
#include "text/tok_impl.h"

/* Largest id accepted: arrays are indexed by id. */
#define MAX_IDS (1u << 24)
/* Largest tokenizer.json read. */
#define MAX_FILE (1ull << 30)

static _Atomic uint64_t next_serial = 1;

/* ---- ids ---- */

tf_status tf_ids_reserve(struct tf_ids *ids, size_t more)
{
	if (ids->cap - ids->n >= more)
		return TF_OK;
	size_t cap = ids->cap ? ids->cap : 64;
	while (cap - ids->n < more)
		cap *= 2;
	if (tf_realloc_array(&ids->v, cap, sizeof *ids->v))
		return tf_err(TF_ERR_NOMEM, "token ids: out of memory");
	ids->cap = cap;
	return TF_OK;
}

tf_status tf_ids_push(struct tf_ids *ids, uint32_t id)
{
	if (ids->n == ids->cap) {
		tf_status st = tf_ids_reserve(ids, 1);
		if (st)
			return st;
	}
	ids->v[ids->n++] = id;
	return TF_OK;
}

void tf_ids_release(struct tf_ids *ids)
{
	free(ids->v);
	ids->v = NULL;
	ids->n = ids->cap = 0;
}

/* ---- the byte-level alphabet (GPT-2 bytes_to_unicode) ---- */

/* cp_of[b]: the code point standing for byte b; byte_of[cp]: the byte a code
 * point below 324 stands for, or -1. */
static uint16_t cp_of[256];
static int16_t byte_of[324];

static void alphabet_init(void)
{
	static _Atomic int done;
	if (atomic_load(&done))
		return;
	int extra = 0;
	for (int cp = 0; cp < 324; cp++)
		byte_of[cp] = -1;
	for (int b = 0; b < 256; b++) {
		bool self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
		cp_of[b] = (uint16_t)(self ? b : 256 + extra++);
		byte_of[cp_of[b]] = (int16_t)b;
	}
	atomic_store(&done, 1);
}

/* Decode one UTF-8 character of a valid string; returns its length. */
static size_t utf8_next(const uint8_t *s, size_t n, uint32_t *cp)
{
	if (s[0] < 0x80 || n < 2) {
		*cp = s[0];
		return 1;
	}
	if (s[0] < 0xE0) {
		*cp = (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F);
		return 2;
	}
	if (s[0] < 0xF0 || n < 4) {
		*cp = (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
		return 3;
	}
	*cp = (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 |
	      (uint32_t)(s[2] & 0x3F) << 6 | (s[3] & 0x3F);
	return 4;
}

/* Set the bytes id decodes to (ByteLevel decoder) from its token string:
 * every character in the alphabet maps to its byte, else the string's own
 * UTF-8. They are appended to the arena, which keeps 16 zero bytes after
 * its end so that decode may copy 16 bytes at a time. */
static tf_status token_bytes(struct tf_tok *tok, uint32_t id, const char *s, size_t n)
{
	if (tok->arena.len + n + 16 > UINT32_MAX)
		return tf_err(TF_ERR_RANGE, "tokenizer: token strings exceed 4 GiB");
	tf_status st = tf_buf_reserve(&tok->arena, n + 16);
	if (st)
		return st;
	uint8_t *b = (uint8_t *)tok->arena.data + tok->arena.len;
	size_t i = 0, k = 0;
	while (i < n) {
		uint32_t cp;
		i += utf8_next((const uint8_t *)s + i, n - i, &cp);
		if (cp >= 324 || byte_of[cp] < 0) {
			memcpy(b, s, n);
			k = n;
			break;
		}
		b[k++] = (uint8_t)byte_of[cp];
	}
	memset(b + k, 0, 16);
	tok->boff[id] = (uint32_t)tok->arena.len;
	tok->blen[id] = (uint32_t)k;
	tok->arena.len += k;
	return TF_OK;
}

/* ---- id-indexed arrays ---- */

static tf_status grow_ids(struct tf_tok *tok, uint32_t nids)
{
	if (nids <= tok->nids)
		return TF_OK;
	if (tf_realloc_array(&tok->vkey, nids, sizeof *tok->vkey) ||
	    tf_realloc_array(&tok->vkey_len, nids, sizeof *tok->vkey_len) ||
	    tf_realloc_array(&tok->boff, nids, sizeof *tok->boff) ||
	    tf_realloc_array(&tok->blen, nids, sizeof *tok->blen) ||
	    tf_realloc_array(&tok->added_idx, nids, sizeof *tok->added_idx))
		return tf_err(TF_ERR_NOMEM, "tokenizer: out of memory");
	for (uint32_t i = tok->nids; i < nids; i++) {
		tok->vkey[i] = NULL;
		tok->vkey_len[i] = 0;
		tok->boff[i] = TOK_NONE;
		tok->blen[i] = 0;
		tok->added_idx[i] = -1;
	}
	tok->nids = nids;
	return TF_OK;
}

/* ---- tries of added tokens ---- */

static tf_status trie_add(struct trie *t, const char *s, size_t n, uint32_t id)
{
	uint32_t at = 0;
	for (size_t i = 0; i < n; i++) {
		uint8_t b = (uint8_t)s[i];
		uint32_t c = t->nodes[at].child;
		while (c && t->nodes[c].byte != b)
			c = t->nodes[c].next;
		if (!c) {
			if (t->n == t->cap) {
				uint32_t cap = t->cap * 2;
				if (tf_realloc_array(&t->nodes, cap, sizeof *t->nodes))
					return tf_err(TF_ERR_NOMEM, "tokenizer: out of memory");
				t->cap = cap;
			}
			c = t->n++;
			t->nodes[c] = (struct trie_node){0, t->nodes[at].child, TOK_NONE, b};
			t->nodes[at].child = c;
		}
		at = c;
	}
	t->nodes[at].id = id;
	t->first[(uint8_t)s[0]] = 1;
	return TF_OK;
}

static tf_status tries_build(struct tf_tok *tok)
{
	struct trie *ts[2] = {&tok->raw_trie, &tok->norm_trie};
	for (int k = 0; k < 2; k++) {
		struct trie *t = ts[k];
		if (!t->nodes) {
			t->cap = 64;
			if (!(t->nodes = tf_alloc_array(t->cap, sizeof *t->nodes)))
				return tf_err(TF_ERR_NOMEM, "tokenizer: out of memory");
		}
		t->n = 1;
		t->nodes[0] = (struct trie_node){0, 0, TOK_NONE, 0};
		memset(t->first, 0, sizeof t->first);
	}
	for (size_t i = 0; i < tok->nadded; i++) {
		const struct added *a = &tok->added[i];
		struct trie *t = a->flags & TF_TOK_NORMALIZED ? &tok->norm_trie : &tok->raw_trie;
		tf_status st = trie_add(t, a->content, a->len, a->id);
		if (st)
			return st;
	}
	return TF_OK;
}

/* ---- added tokens ---- */

static tf_status added_insert(struct tf_tok *tok, const char *content, size_t len, uint32_t id,
			      unsigned flags, const char *what)
{
	uintptr_t old;
	if (!len)
		return tf_err(TF_ERR_FORMAT, "%s: an added token is empty", what);
	if (id >= MAX_IDS)
		return tf_err(TF_ERR_FORMAT, "%s: added token id %u is too large", what, id);
	if (tf_hmap_get_str(&tok->added_map, content, len, &old))
		return tf_err(TF_ERR_FORMAT, "%s: added token '%.*s' appears twice", what, (int)len,
			      content);
	tf_status st = grow_ids(tok, id + 1);
	if (st)
		return st;
	if (tok->added_idx[id] >= 0)
		return tf_err(TF_ERR_FORMAT, "%s: id %u is taken by two added tokens", what, id);
	if (tok->nadded == tok->capadded) {
		size_t cap = tok->capadded ? tok->capadded * 2 : 64;
		if (tf_realloc_array(&tok->added, cap, sizeof *tok->added))
			return tf_err(TF_ERR_NOMEM, "tokenizer: out of memory");
		tok->capadded = cap;
	}
	struct added *a = &tok->added[tok->nadded];
	if (!(a->content = tf_strndup(content, len)))
		return tf_err(TF_ERR_NOMEM, "tokenizer: out of memory");
	a->len = (uint32_t)len;
	a->id = id;
	a->flags = flags;
	if ((st = tf_hmap_put_str(&tok->added_map, a->content, len, tok->nadded))) {
		free(a->content);
		return st;
	}
	if ((st = token_bytes(tok, id, a->content, len))) {
		tf_hmap_del_str(&tok->added_map, a->content, len, NULL);
		free(a->content);
		return st;
	}
	tok->added_idx[id] = (int32_t)tok->nadded++;
	return TF_OK;
}

static tf_status flag_of(const json_t *o, const char *what, const char *key, bool *v)
{
	*v = false;
	tf_status st = tf_json_bool(o, what, key, v);
	return st == TF_ERR_NOTFOUND ? TF_OK : st;
}

static tf_status load_added(struct tf_tok *tok, const json_t *arr, const char *what)
{
	if (!arr || json_is_null(arr))
		return TF_OK;
	if (!json_is_array(arr))
		return tf_err(TF_ERR_FORMAT, "%s: 'added_tokens' is not an array", what);
	size_t i;
	const json_t *o;
	json_array_foreach(arr, i, o) {
		int64_t id;
		const char *content;
		bool single, lstrip, rstrip, norm, special;
		tf_status st;
		if (!json_is_object(o))
			return tf_err(TF_ERR_FORMAT, "%s: added token %zu is not an object", what, i);
		if ((st = tf_json_i64(o, what, "id", 0, MAX_IDS - 1, &id)) ||
		    (st = tf_json_str(o, what, "content", &content)))
			return st == TF_ERR_NOTFOUND
				       ? tf_err(TF_ERR_FORMAT, "%s: added token %zu lacks id or content",
						what, i)
				       : st;
		if ((st = flag_of(o, what, "single_word", &single)) ||
		    (st = flag_of(o, what, "lstrip", &lstrip)) ||
		    (st = flag_of(o, what, "rstrip", &rstrip)) ||
		    (st = flag_of(o, what, "normalized", &norm)) ||
		    (st = flag_of(o, what, "special", &special)))
			return st;
		if (single || lstrip || rstrip)
			return tf_err(TF_ERR_UNSUPPORTED,
				      "%s: added token '%s' uses %s, which is not implemented", what,
				      content, single ? "single_word" : lstrip ? "lstrip" : "rstrip");
		size_t len = json_string_length(json_object_get(o, "content"));
		if ((st = added_insert(tok, content, len, (uint32_t)id,
				       (special ? TF_TOK_SPECIAL : 0) | (norm ? TF_TOK_NORMALIZED : 0),
				       what)))
			return st;
	}
	return TF_OK;
}

/* ---- the model ---- */

static tf_status check_model(const json_t *m, const char *what)
{
	const char *type = NULL;
	if (!json_is_object(m))
		return tf_err(TF_ERR_FORMAT, "%s: no 'model' object", what);
	tf_json_str(m, what, "type", &type);
	if (type && strcmp(type, "BPE"))
		return tf_err(TF_ERR_UNSUPPORTED, "%s: model type '%s' is not implemented (only BPE)",
			      what, type);
	const json_t *v = json_object_get(m, "dropout");
	if (v && !json_is_null(v) && !(json_is_number(v) && json_number_value(v) == 0))
		return tf_err(TF_ERR_UNSUPPORTED, "%s: BPE dropout is not implemented", what);
	static const char *const empty_str[] = {"continuing_subword_prefix", "end_of_word_suffix"};
	for (size_t i = 0; i < 2; i++) {
		v = json_object_get(m, empty_str[i]);
		if (v && !json_is_null(v) && !(json_is_string(v) && !*json_string_value(v)))
			return tf_err(TF_ERR_UNSUPPORTED, "%s: BPE %s is not implemented", what,
				      empty_str[i]);
	}
	static const char *const false_flags[] = {"byte_fallback", "ignore_merges"};
	for (size_t i = 0; i < 2; i++) {
		v = json_object_get(m, false_flags[i]);
		if (json_is_true(v))
			return tf_err(TF_ERR_UNSUPPORTED, "%s: BPE %s is not implemented", what,
				      false_flags[i]);
	}
	if (!json_is_object(json_object_get(m, "vocab")))
		return tf_err(TF_ERR_FORMAT, "%s: model 'vocab' is not an object", what);
	if (!json_is_array(json_object_get(m, "merges")))
		return tf_err(TF_ERR_FORMAT, "%s: model 'merges' is not an array", what);
	return TF_OK;
}

static inline bool key_is(const struct tf_tok *tok, uint32_t id, const char *s, size_t n)
{
	return tok->vkey_len[id] == n && !memcmp(tok->vkey[id], s, n);
}

uint32_t tok_vocab_find(const struct tf_tok *tok, const char *s, size_t n)
{
	if (!tok->vtab)
		return TOK_NONE;
	uint64_t h = tf_hash_bytes(s, n), tag = h >> 32 << 32;
	for (uint64_t i = h & tok->vmask;; i = (i + 1) & tok->vmask) {
		uint64_t e = tok->vtab[i];
		if (!e)
			return TOK_NONE;
		if ((e & ~0xFFFFFFFFull) == tag && key_is(tok, (uint32_t)e - 1, s, n))
			return (uint32_t)e - 1;
	}
}

/* The vocab: keys copied into one block, indexed by id and by a compact
 * open-addressing table (8 bytes a slot, at most half full). */
static tf_status load_vocab(struct tf_tok *tok, const json_t *vocab, const char *what)
{
	const char *key;
	size_t klen, total = 0;
	const json_t *v;
	uint32_t maxid = 0;
	json_object_keylen_foreach((json_t *)vocab, key, klen, v) {
		if (!json_is_integer(v) || json_integer_value(v) < 0 ||
		    json_integer_value(v) >= MAX_IDS)
			return tf_err(TF_ERR_FORMAT, "%s: vocab id of '%s' is not in [0, %u)", what, key,
				      MAX_IDS);
		if ((uint32_t)json_integer_value(v) > maxid)
			maxid = (uint32_t)json_integer_value(v);
		total += klen + 1;
	}
	size_t cap = 16;
	while (cap < 2 * json_object_size(vocab))
		cap *= 2;
	tf_status st = grow_ids(tok, maxid + 1);
	if (st)
		return st;
	tok->vkeys = malloc(total ? total : 1);
	tok->vtab = tf_calloc(cap, sizeof *tok->vtab);
	if (!tok->vkeys || !tok->vtab)
		return tf_err(TF_ERR_NOMEM, "tokenizer: out of memory");
	tok->vmask = cap - 1;
	char *at = tok->vkeys;
	json_object_keylen_foreach((json_t *)vocab, key, klen, v) {
		uint32_t id = (uint32_t)json_integer_value(v);
		if (tok->vkey[id])
			return tf_err(TF_ERR_FORMAT, "%s: vocab id %u is given to '%s' and '%s'", what,
				      id, tok->vkey[id], key);
		if (klen > UINT32_MAX)
			return tf_err(TF_ERR_FORMAT, "%s: a vocab key is too long", what);
		memcpy(at, key, klen);
		at[klen] = 0;
		tok->vkey[id] = at;
		tok->vkey_len[id] = (uint32_t)klen;
		at += klen + 1;
		uint64_t h = tf_hash_bytes(key, klen), i = h & tok->vmask;
		for (; tok->vtab[i]; i = (i + 1) & tok->vmask)
			if (key_is(tok, (uint32_t)tok->vtab[i] - 1, key, klen))
				return tf_err(TF_ERR_FORMAT, "%s: vocab key '%s' appears twice", what, key);
		tok->vtab[i] = h >> 32 << 32 | (id + 1);
		if ((st = token_bytes(tok, id, key, klen)))
			return st;
		tok->nvocab++;
	}
	for (int b = 0; b < 256; b++) {
		char s[4];
		size_t n = 0;
		uint32_t cp = cp_of[b];
		if (cp < 0x80) {
			s[n++] = (char)cp;
		} else {
			s[n++] = (char)(0xC0 | cp >> 6);
			s[n++] = (char)(0x80 | (cp & 0x3F));
		}
		tok->byte_id[b] = tok_vocab_find(tok, s, n);
	}
	return TF_OK;
}

/* Settings around the model that change encode: only the forms implemented
 * here are accepted. */
static tf_status check_settings(const json_t *root, const char *what)
{
	const json_t *norm = json_object_get(root, "normalizer");
	if (norm && !json_is_null(norm)) {
		const char *type = NULL;
		tf_json_str(norm, what, "type", &type);
		const json_t *list = json_object_get(norm, "normalizers");
		if (!type || strcmp(type, "Sequence") || !json_is_array(list) ||
		    json_array_size(list))
			return tf_err(TF_ERR_UNSUPPORTED,
				      "%s: normalizer '%s' is not implemented (only an empty Sequence)",
				      what, type ? type : "?");
	}
	const json_t *dec = json_object_get(root, "decoder");
	if (dec && !json_is_null(dec)) {
		const char *type = NULL;
		tf_json_str(dec, what, "type", &type);
		if (!type || strcmp(type, "ByteLevel"))
			return tf_err(TF_ERR_UNSUPPORTED,
				      "%s: decoder '%s' is not implemented (only ByteLevel)", what,
				      type ? type : "?");
	}
	return TF_OK;
}

static tf_status load_root(struct tf_tok *tok, json_t *root, const char *what)
{
	tf_status st;
	if (!json_is_object(root))
		return tf_err(TF_ERR_FORMAT, "%s: not a JSON object", what);
	json_t *model = json_object_get(root, "model");
	if ((st = check_model(model, what)) || (st = check_settings(root, what)) ||
	    (st = load_vocab(tok, json_object_get(model, "vocab"), what)) ||
	    (st = tok_merges_build(tok, json_object_get(model, "merges"), what)) ||
	    (st = load_added(tok, json_object_get(root, "added_tokens"), what)) ||
	    (st = tries_build(tok)) ||
	    (st = tok_pretok_load(tok, json_object_get(root, "pre_tokenizer"), what)))
		return st;
	/* Keep the rest of the file for tf_tok_save; placeholders keep the
	 * keys' order. */
	json_object_set_new(model, "vocab", json_null());
	json_object_set_new(model, "merges", json_null());
	json_object_set_new(root, "added_tokens", json_null());
	tok->rest = json_incref(root);
	return TF_OK;
}

tf_status tf_tok_load_mem(const char *text, size_t n, const char *what, struct tf_tok **out)
{
	json_t *root = NULL;
	struct tf_tok *tok = NULL;
	*out = NULL;
	alphabet_init();
	tf_status st = tf_json_parse(text, n, what, &root);
	if (st)
		return st;
	if (!(tok = tf_calloc(1, sizeof *tok))) {
		st = tf_err(TF_ERR_NOMEM, "tokenizer: out of memory");
		goto out;
	}
	tok->serial = atomic_fetch_add(&next_serial, 1);
	tf_hmap_init(&tok->added_map, TF_HMAP_STR);
	if ((st = load_root(tok, root, what)))
		goto out;
	*out = tok;
	tok = NULL;
out:
	json_decref(root);
	tf_tok_free(tok);
	return st;
}

tf_status tf_tok_load(const char *path, struct tf_tok **out)
{
	char *text;
	size_t n;
	*out = NULL;
	tf_status st = tf_file_read_all(path, MAX_FILE, &text, &n);
	if (st)
		return st;
	st = tf_tok_load_mem(text, n, path, out);
	free(text);
	return st;
}

void tf_tok_free(struct tf_tok *tok)
{
	if (!tok)
		return;
	free(tok->vkeys);
	free(tok->vtab);
	free(tok->vkey);
	free(tok->vkey_len);
	free(tok->boff);
	free(tok->blen);
	tf_buf_release(&tok->arena);
	free(tok->added_idx);
	for (size_t i = 0; i < tok->nadded; i++)
		free(tok->added[i].content);
	free(tok->added);
	tf_hmap_release(&tok->added_map);
	free(tok->raw_trie.nodes);
	free(tok->norm_trie.nodes);
	tok_merges_free(tok);
	tok_pretok_free(tok);
	json_decref(tok->rest);
	free(tok);
}

/* ---- lookups ---- */

uint32_t tf_tok_vocab_size(const struct tf_tok *tok)
{
	return tok->nids;
}

int64_t tf_tok_id_of(const struct tf_tok *tok, const char *piece)
{
	uintptr_t v;
	size_t n = strlen(piece);
	if (tf_hmap_get_str(&tok->added_map, piece, n, &v))
		return tok->added[v].id;
	uint32_t id = tok_vocab_find(tok, piece, n);
	return id == TOK_NONE ? -1 : (int64_t)id;
}

const char *tf_tok_piece(const struct tf_tok *tok, uint32_t id, size_t *len)
{
	if (id >= tok->nids)
		return NULL;
	if (tok->added_idx[id] >= 0) {
		const struct added *a = &tok->added[tok->added_idx[id]];
		if (len)
			*len = a->len;
		return a->content;
	}
	if (len)
		*len = tok->vkey_len[id];
	return tok->vkey[id];
}

const uint8_t *tf_tok_bytes(const struct tf_tok *tok, uint32_t id, size_t *len)
{
	if (id >= tok->nids || tok->boff[id] == TOK_NONE)
		return NULL;
	*len = tok->blen[id];
	return (const uint8_t *)tok->arena.data + tok->boff[id];
}

int tf_tok_added_flags(const struct tf_tok *tok, uint32_t id)
{
	if (id >= tok->nids || tok->added_idx[id] < 0)
		return -1;
	return (int)tok->added[tok->added_idx[id]].flags;
}

void tf_tok_counts(const struct tf_tok *tok, size_t *vocab, size_t *merges, size_t *added)
{
	if (vocab)
		*vocab = tok->nvocab;
	if (merges)
		*merges = tok->nmerges;
	if (added)
		*added = tok->nadded;
}

/* ---- adding tokens ---- */

tf_status tf_tok_add_token(struct tf_tok *tok, const char *content, uint32_t id, unsigned flags)
{
	size_t len = strlen(content);
	uintptr_t v;
	if (flags & ~(unsigned)(TF_TOK_SPECIAL | TF_TOK_NORMALIZED))
		return tf_err(TF_ERR_ARG, "added token '%s': unknown flags %#x", content, flags);
	if (tf_hmap_get_str(&tok->added_map, content, len, &v)) {
		const struct added *a = &tok->added[v];
		if (a->id == id && a->flags == flags)
			return TF_OK;
		return tf_err(TF_ERR_ARG, "added token '%s' already exists as id %u", content, a->id);
	}
	if (id < tok->nids && (tok->vkey[id] || tok->added_idx[id] >= 0))
		return tf_err(TF_ERR_ARG, "added token '%s': id %u is taken", content, id);
	tf_status st = added_insert(tok, content, len, id, flags, "added token");
	return st ? st : tries_build(tok);
}

static const struct {
	const char *content;
	unsigned flags;
} v41_markers[] = {
	{"<｜System｜>", TF_TOK_NORMALIZED},
	{"<｜User｜>", TF_TOK_NORMALIZED},
	{"<｜Assistant｜>", TF_TOK_NORMALIZED},
	{"<think>", TF_TOK_NORMALIZED},
	{"</think>", TF_TOK_NORMALIZED},
	{"｜DSML｜", TF_TOK_NORMALIZED},
	{"<｜latest_reminder｜>", TF_TOK_NORMALIZED},
	{"<｜deepseek_image｜>", TF_TOK_SPECIAL},
};

tf_status tf_tok_add_v41_markers(struct tf_tok *tok, uint32_t limit)
{
	uint32_t next = 0;
	for (size_t i = 0; i < sizeof v41_markers / sizeof v41_markers[0]; i++) {
		const char *c = v41_markers[i].content;
		uintptr_t v;
		if (tf_hmap_get_str(&tok->added_map, c, strlen(c), &v)) {
			if (tok->added[v].flags != v41_markers[i].flags)
				return tf_err(TF_ERR_FORMAT,
					      "added token '%s' (id %u) has flags %#x, V4.1 wants %#x", c,
					      tok->added[v].id, tok->added[v].flags,
					      v41_markers[i].flags);
			continue;
		}
		while (next < tok->nids && (tok->vkey[next] || tok->added_idx[next] >= 0))
			next++;
		if (next >= limit)
			return tf_err(TF_ERR_RANGE, "no unused id below %u for '%s'", limit, c);
		tf_status st = tf_tok_add_token(tok, c, next, v41_markers[i].flags);
		if (st)
			return st;
	}
	return TF_OK;
}
