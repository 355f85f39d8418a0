/* toksynth.c: a small synthetic byte-level BPE tokenizer.json. Facts:
 * dsv41-text-facts.md §1 (pipeline, added-token flags). */
#include "text/toksynth.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/hmap.h"
#include "base/rng.h"

const char tf_toksynth_split3[] =
	"[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?"
	"[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static const char *const specials[] = {
	"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>",
};
static const char *const markers[] = {
	"<｜deepseek_image｜>", "<｜System｜>", "<｜User｜>", "<｜Assistant｜>", "<think>",
	"</think>", "｜DSML｜", "<｜latest_reminder｜>",
};

static const char *const words[] = {
	"the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be",
	"by", "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but",
	"have", "an", "had", "they", "you", "were", "their", "one", "all", "we", "can", "her",
	"has", "there", "been", "if", "more", "when", "will", "would", "who", "so", "no",
	"model", "token", "layer", "weight", "expert", "matrix", "vector", "kernel", "tensor",
	"server", "request", "stream", "thinking", "answer", "question", "function", "return",
	"value", "number", "string", "object", "array", "index", "error", "result", "message",
	"system", "user", "assistant", "tool", "call", "memory", "device", "buffer", "cache",
	"attention", "window", "position", "context", "sequence", "batch", "round", "sample",
	"const", "static", "struct", "void", "int", "char", "size_t", "uint32_t", "float",
	"while", "else", "break", "include", "define", "printf", "malloc", "free", "NULL",
	"water", "light", "world", "people", "little", "small", "large", "great", "between",
	"because", "through", "during", "without", "against", "under", "around", "before",
	"after", "always", "never", "often", "again", "together", "important", "different",
	"following", "possible", "example", "problem", "program", "language", "computer",
	"network", "quantized", "trellis", "hadamard", "codebook", "decode", "encode",
};
static const char *const seps[] = {" ", " ", " ", " ", " ", ", ", ". ", "\n", "(", ")", "; ",
				   " = ", "_", "::", "->", "\t", " 2024", " 42", "\n\n", "."};

/* GPT-2's byte-to-symbol map: printable bytes stand for themselves, the
 * others map to U+0100 upwards in byte order. */
static void byte_symbols(char sym[256][4])
{
	int n = 0;
	for (int b = 0; b < 256; b++) {
		bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
		unsigned cp = keep ? (unsigned)b : 256u + (unsigned)n++;
		if (cp < 0x80) {
			sym[b][0] = (char)cp;
			sym[b][1] = 0;
		} else {
			sym[b][0] = (char)(0xc0 | (cp >> 6));
			sym[b][1] = (char)(0x80 | (cp & 0x3f));
			sym[b][2] = 0;
		}
	}
}

/* A training word: its symbols as token ids, and how often it occurs. */
struct word {
	uint32_t *ids;
	uint32_t n;
	uint32_t count;
};

static tf_status corpus_words(uint64_t seed, struct word **out, size_t *nout)
{
	struct tf_rng r;
	tf_rng_seed(&r, seed);
	struct tf_hmap seen;
	tf_hmap_init(&seen, TF_HMAP_STR);
	size_t cap = 1024, n = 0;
	struct word *w = tf_calloc(cap, sizeof *w);
	char **keys = tf_calloc(cap, sizeof *keys);
	tf_status st = w && keys ? TF_OK : tf_err(TF_ERR_NOMEM, "out of memory");
	/* Pieces are "sep+word" strings as a pre-tokenizer would roughly cut them. */
	for (int i = 0; !st && i < 20000; i++) {
		const char *sep = seps[tf_rng_below(&r, sizeof seps / sizeof *seps)];
		const char *wd = words[tf_rng_below(&r, sizeof words / sizeof *words)];
		char piece[64];
		int len = snprintf(piece, sizeof piece, "%s%s", sep[0] == ' ' && !sep[1] ? " " : "",
				   wd);
		uintptr_t at;
		if (tf_hmap_get_str(&seen, piece, (size_t)len, &at)) {
			w[at].count++;
			continue;
		}
		if (n == cap) {
			st = tf_err(TF_ERR_INTERNAL, "synthetic corpus too varied");
			break;
		}
		keys[n] = tf_strndup(piece, (size_t)len);
		w[n].ids = tf_calloc((size_t)len, sizeof *w[n].ids);
		if (!keys[n] || !w[n].ids) {
			st = tf_err(TF_ERR_NOMEM, "out of memory");
			break;
		}
		for (int j = 0; j < len; j++)
			w[n].ids[j] = 3u + (unsigned char)piece[j];
		w[n].n = (uint32_t)len;
		w[n].count = 1;
		st = tf_hmap_put_str(&seen, keys[n], (size_t)len, n);
		n++;
	}
	tf_hmap_release(&seen);
	for (size_t i = 0; keys && i < n; i++)
		free(keys[i]);
	free(keys);
	*out = w;
	*nout = n;
	return st;
}

static void free_words(struct word *w, size_t n)
{
	for (size_t i = 0; w && i < n; i++)
		free(w[i].ids);
	free(w);
}

/* The most frequent adjacent pair (ties: the smaller ids), or false. */
static bool best_pair(const struct word *w, size_t n, struct tf_hmap *counts, uint32_t *a,
		      uint32_t *b)
{
	tf_hmap_release(counts);
	for (size_t i = 0; i < n; i++)
		for (uint32_t j = 0; j + 1 < w[i].n; j++) {
			uint64_t key = (uint64_t)w[i].ids[j] << 32 | w[i].ids[j + 1];
			uintptr_t c = 0;
			tf_hmap_get(counts, key, &c);
			if (tf_hmap_put(counts, key, c + w[i].count))
				return false;
		}
	size_t it = 0;
	const struct tf_hmap_slot *s;
	uint64_t best = 0;
	uintptr_t bestc = 0;
	while (tf_hmap_next(counts, &it, &s))
		if (s->val > bestc || (s->val == bestc && s->hash < best)) {
			best = s->hash;
			bestc = s->val;
		}
	if (!bestc)
		return false;
	*a = (uint32_t)(best >> 32);
	*b = (uint32_t)best;
	return true;
}

static void apply_merge(struct word *w, size_t n, uint32_t a, uint32_t b, uint32_t id)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t o = 0;
		for (uint32_t j = 0; j < w[i].n; j++) {
			if (j + 1 < w[i].n && w[i].ids[j] == a && w[i].ids[j + 1] == b) {
				w[i].ids[o++] = id;
				j++;
			} else {
				w[i].ids[o++] = w[i].ids[j];
			}
		}
		w[i].n = o;
	}
}

static json_t *added(uint32_t id, const char *content, bool special)
{
	return json_pack("{s:i,s:s,s:b,s:b,s:b,s:b,s:b}", "id", id, "content", content,
			 "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", !special,
			 "special", special);
}

static json_t *split(const char *pattern)
{
	return json_pack("{s:s,s:{s:s},s:s,s:b}", "type", "Split", "pattern", "Regex", pattern,
			 "behavior", "Isolated", "invert", 0);
}

tf_status tf_toksynth_build(uint32_t vocab, uint64_t seed, json_t **out)
{
	*out = NULL;
	const uint32_t nmark = sizeof markers / sizeof *markers;
	if (vocab < 512)
		return tf_err(TF_ERR_ARG, "a synthetic tokenizer needs a vocabulary of 512 or more");
	char sym[256][4];
	byte_symbols(sym);
	/* token strings by id: specials 0..2, bytes 3..258, then merges */
	uint32_t cap = vocab - nmark;
	char **tok = tf_calloc(cap, sizeof *tok);
	struct word *w = NULL;
	size_t nw = 0;
	struct tf_hmap counts;
	tf_hmap_init(&counts, TF_HMAP_U64);
	json_t *vocab_j = json_object(), *merges = json_array(), *root = NULL;
	tf_status st = tok && vocab_j && merges ? TF_OK : tf_err(TF_ERR_NOMEM, "out of memory");
	for (uint32_t b = 0; !st && b < 256; b++)
		if (!(tok[3 + b] = strdup(sym[b])))
			st = tf_err(TF_ERR_NOMEM, "out of memory");
	if (!st)
		st = corpus_words(seed, &w, &nw);
	uint32_t next = 259, a, b;
	while (!st && next < cap && best_pair(w, nw, &counts, &a, &b)) {
		size_t la = strlen(tok[a]), lb = strlen(tok[b]);
		if (!(tok[next] = malloc(la + lb + 1))) {
			st = tf_err(TF_ERR_NOMEM, "out of memory");
			break;
		}
		memcpy(tok[next], tok[a], la);
		memcpy(tok[next] + la, tok[b], lb + 1);
		char *m = malloc(la + lb + 2);
		if (!m) {
			st = tf_err(TF_ERR_NOMEM, "out of memory");
			break;
		}
		memcpy(m, tok[a], la);
		m[la] = ' ';
		memcpy(m + la + 1, tok[b], lb + 1);
		json_array_append_new(merges, json_string(m));
		free(m);
		apply_merge(w, nw, a, b, next);
		next++;
	}
	for (uint32_t i = 3; !st && i < next; i++)
		json_object_set_new(vocab_j, tok[i], json_integer(i));
	if (!st) {
		json_t *add = json_array();
		for (uint32_t i = 0; i < 3; i++)
			json_array_append_new(add, added(i, specials[i], true));
		for (uint32_t i = 0; i < nmark; i++)
			json_array_append_new(add, added(vocab - nmark + i, markers[i], i == 0));
		json_t *pre = json_pack("{s:s,s:[o,o,o,{s:s,s:b,s:b,s:b}]}", "type", "Sequence",
			"pretokenizers", split("\\p{N}{1,3}"),
			split("[一-龥぀-ゟ゠-ヿ]+"), split(tf_toksynth_split3), "type",
			"ByteLevel", "add_prefix_space", 0, "trim_offsets", 0, "use_regex", 0);
		root = json_pack("{s:s,s:n,s:n,s:o,s:{s:s,s:[]},s:o,s:n,s:{s:s,s:b,s:b,s:b},"
				 "s:{s:s,s:n,s:n,s:n,s:n,s:b,s:b,s:b,s:o,s:o}}",
			"version", "1.0", "truncation", "padding", "added_tokens", add,
			"normalizer", "type", "Sequence", "normalizers", "pre_tokenizer", pre,
			"post_processor", "decoder", "type", "ByteLevel", "add_prefix_space", 0,
			"trim_offsets", 0, "use_regex", 0, "model", "type", "BPE", "dropout",
			"unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", 0,
			"byte_fallback", 0, "ignore_merges", 0, "vocab", vocab_j, "merges", merges);
		vocab_j = merges = NULL;
		if (!root)
			st = tf_err(TF_ERR_NOMEM, "cannot build tokenizer.json");
	}
	json_decref(vocab_j);
	json_decref(merges);
	tf_hmap_release(&counts);
	free_words(w, nw);
	for (uint32_t i = 0; tok && i < cap; i++)
		free(tok[i]);
	free(tok);
	*out = root;
	return st;
}
