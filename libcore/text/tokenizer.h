/* tokenizer.h: the byte-level BPE tokenizer of the DeepSeek family, loaded
 * from a Hugging Face tokenizer.json.
 *
 * What it implements, exactly as Hugging Face `tokenizers` does with
 * add_special_tokens=False: added tokens (non-normalized ones matched on the
 * raw text first, leftmost-longest, then normalized ones in the gaps), the
 * empty normalizer, a pre-tokenizer Sequence of Split(Isolated, regex or
 * string) steps ending in ByteLevel, the BPE model (merges by rank with a
 * priority queue, as Word::merge_all), and the ByteLevel decoder. Anything
 * else a file may carry (other models, normalizers, split behaviours,
 * dropout, single_word, lstrip/rstrip, \w in a regex...) is refused at load
 * with the reason, never silently approximated. The post-processor is not
 * applied: encode never adds BOS (the chat template does).
 *
 * Regexes run on PCRE2 (JIT, UTF, UCP) after translating the Oniguruma
 * spellings whose meaning differs (\s is Unicode White_Space, \h a hex
 * digit). Unicode property tables are PCRE2's.
 *
 * Thread safety: a loaded tokenizer is read-only; any number of threads may
 * encode and decode with it at once (each thread keeps its own scratch and
 * word cache). tf_tok_add_token and tf_tok_add_v41_markers modify it and
 * must not run concurrently with anything else on the same tokenizer. */
#ifndef TF_TEXT_TOKENIZER_H
#define TF_TEXT_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/status.h"

struct tf_tok;

/* A growable array of token ids. struct tf_ids v = TF_IDS_INIT; ...
 * tf_ids_release(&v). */
struct tf_ids {
	uint32_t *v;
	size_t n;
	size_t cap;
};
#define TF_IDS_INIT {NULL, 0, 0}
tf_status tf_ids_push(struct tf_ids *ids, uint32_t id);
tf_status tf_ids_reserve(struct tf_ids *ids, size_t more);
void tf_ids_release(struct tf_ids *ids);

/* Flags of an added token. */
enum {
	TF_TOK_SPECIAL = 1u << 0,    /* "special": true */
	TF_TOK_NORMALIZED = 1u << 1, /* "normalized": true (matched in the second pass) */
};

/* Load a tokenizer.json file ("-" is stdin). On error *out is NULL and the
 * detail names the file and the reason (TF_ERR_FORMAT for malformed data,
 * TF_ERR_UNSUPPORTED for a feature not implemented). The caller frees with
 * tf_tok_free. */
tf_status tf_tok_load(const char *path, struct tf_tok **out);
/* The same from n bytes of JSON text; what names the source in messages. */
tf_status tf_tok_load_mem(const char *text, size_t n, const char *what, struct tf_tok **out);
void tf_tok_free(struct tf_tok *tok);

/* Append the ids of n bytes of text to out. Invalid UTF-8 is first replaced
 * by U+FFFD per maximal invalid subpart. Never allocates per byte: scratch
 * and the word cache are per thread and reused. Thread safe. */
tf_status tf_tok_encode(const struct tf_tok *tok, const char *text, size_t n, struct tf_ids *out);

/* Whether encode splits with the built-in DeepSeek pre-tokenizer (a hand-
 * written equivalent of the file's three Split regexes, tested identical to
 * them) instead of PCRE2. It is on by default when the file carries exactly
 * those regexes and PCRE2's Unicode version is the built-in table's, unless
 * TF_TOK_PCRE is set at load. Returns whether it is now on. Not thread
 * safe; for tests and benchmarks. */
bool tf_tok_set_fast_split(struct tf_tok *tok, bool on);

/* One past the largest id (vocab and added tokens). */
uint32_t tf_tok_vocab_size(const struct tf_tok *tok);
/* The id of a token string (the added token's content, or the model's
 * byte-level vocab key such as "Ġthe"), or -1. */
int64_t tf_tok_id_of(const struct tf_tok *tok, const char *piece);
/* The token string of id (borrowed, NUL-terminated; *len its length when
 * len is non-NULL), or NULL when no token has that id. */
const char *tf_tok_piece(const struct tf_tok *tok, uint32_t id, size_t *len);
/* The bytes id decodes to (borrowed until the tokenizer is modified; not
 * NUL-terminated), or NULL for an unknown id. */
const uint8_t *tf_tok_bytes(const struct tf_tok *tok, uint32_t id, size_t *len);
/* The added-token flags of id, or -1 when id is not an added token. */
int tf_tok_added_flags(const struct tf_tok *tok, uint32_t id);
/* Count of the model's vocab entries, merges and added tokens. */
void tf_tok_counts(const struct tf_tok *tok, size_t *vocab, size_t *merges, size_t *added);

/* Add an added token with content at id and flags. The id must be unused
 * (TF_ERR_ARG otherwise) or, when the content is already that id's added
 * token with the same flags, this is a no-op. Not thread safe. */
tf_status tf_tok_add_token(struct tf_tok *tok, const char *content, uint32_t id, unsigned flags);

/* Derive a DeepSeek-V4.1-style tokenizer: add each V4.1 marker the
 * tokenizer lacks (<｜System｜>, <｜User｜>, <｜Assistant｜>, <think>,
 * </think>, ｜DSML｜, <｜latest_reminder｜> not special and normalized;
 * <｜deepseek_image｜> special, not normalized) at the lowest unused ids
 * below limit (129280 for the release config), in that order. A marker
 * already present must carry those flags (TF_ERR_FORMAT otherwise). Not
 * thread safe. */
tf_status tf_tok_add_v41_markers(struct tf_tok *tok, uint32_t limit);
#define TF_TOK_V41_VOCAB 129280u

/* Serialise the tokenizer as tokenizer.json text (appended to out):
 * the loaded file's settings, its vocab and merges (in their original form)
 * and every added token, so that loading it gives the same tokenizer. */
tf_status tf_tok_save(const struct tf_tok *tok, struct tf_buf *out);

#endif
