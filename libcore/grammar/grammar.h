/* grammar.h: constrained decoding: a grammar (a JSON schema, any JSON
 * object, a regex, a list of choices) compiled to a byte automaton, and per
 * automaton state the mask of vocabulary ids whose bytes can continue the
 * output so that it can still be completed.
 *
 * The pieces: a vocabulary (tf_gvocab: every id's byte string in a trie,
 * built once per tokenizer, read-only after) and a grammar (tf_grammar: a
 * Thompson NFA from the compiled pattern, pruned to the states that can
 * still reach a match, determinised lazily; each DFA state keeps its
 * transitions and, once asked, its token mask, so a state's mask costs one
 * trie walk the first time and a pointer after).
 *
 * What it is not: it knows byte strings, not HTTP, tokenizers or the
 * engine. A state is a small integer; the caller keeps one per stream and
 * moves it with tf_grammar_next_token after each drawn token. Special
 * tokens (ids without bytes) are never in a mask: the caller allows its
 * end-of-sequence id where tf_grammar_accepting says the output is whole.
 *
 * Enforced exactly, or refused: a schema keyword or regex construct the
 * compiler cannot enforce is TF_ERR_UNSUPPORTED with the keyword named in
 * tf_errmsg ("json schema: 'not' is not supported"); malformed input is
 * TF_ERR_FORMAT. The language is sometimes a subset of what the schema
 * allows (properties in schema order, bounded whitespace and digits, no
 * extra properties, oneOf as anyOf): every output is valid, not every valid
 * document is an output.
 *
 * Thread safety: a vocabulary is read-only once built; any number of
 * grammars on any threads may share it. A grammar grows as it is used
 * (lazy states, cached masks): one thread at a time. */
#ifndef TF_GRAMMAR_GRAMMAR_H
#define TF_GRAMMAR_GRAMMAR_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

struct tf_gvocab;
struct tf_grammar;

/* The bytes of id (*len of them), or NULL for an id that stands for no
 * text the grammar may use (special and undefined ids). */
typedef const uint8_t *(*tf_gvocab_fn)(void *ctx, uint32_t id, size_t *len);

/* A vocabulary of n ids whose bytes fn gives (copied). The caller frees
 * with tf_gvocab_free; it must outlive every grammar compiled over it. */
tf_status tf_gvocab_new(uint32_t n, tf_gvocab_fn fn, void *ctx, struct tf_gvocab **out);
void tf_gvocab_free(struct tf_gvocab *v);
uint32_t tf_gvocab_size(const struct tf_gvocab *v);
/* Trie nodes (the work of one uncached mask is at most this many steps). */
size_t tf_gvocab_nodes(const struct tf_gvocab *v);

/* Compile a grammar over v; *out is the caller's (tf_grammar_free). */

/* A regex (PCRE2 syntax, the subset: literals, ., classes, \d \w \s and
 * their negations, groups, alternation, * + ? {n,m} (lazy forms too), ^ at
 * the start and $ at the end); the whole output must match. */
tf_status tf_grammar_regex(const struct tf_gvocab *v, const char *re, size_t n,
			   struct tf_grammar **out);
/* A JSON schema (the document: $ref resolves within it). */
tf_status tf_grammar_schema(const struct tf_gvocab *v, const json_t *schema,
			    struct tf_grammar **out);
/* Any JSON object (OpenAI's json_object), nested up to a fixed depth. */
tf_status tf_grammar_json_object(const struct tf_gvocab *v, struct tf_grammar **out);
/* Exactly one of n strings (vLLM's guided_choice); n >= 1. */
tf_status tf_grammar_choice(const struct tf_gvocab *v, const char *const *choices, size_t n,
			    struct tf_grammar **out);

/* A tool the DSML grammar may call: params is its parameters schema, or
 * NULL for any parameters (names and values unchecked). */
struct tf_gdsml_tool {
	const char *name;
	const json_t *params;
};
/* DeepSeek-V4.1's DSML tool-call markup (dsv41-text-facts.md):
 *   content "\n\n"? <｜DSML｜ calls>\n INVOKE (\n INVOKE)* \n</｜DSML｜ calls>
 *   INVOKE = <｜DSML｜ invoke name="NAME">\n PARAM (\n PARAM)* \n</｜DSML｜ invoke>
 *   PARAM  = <｜DSML｜ parameter name="K" string="true|false">V</｜DSML｜ parameter>
 * calling one of the n tools. With a schema, the parameters are its
 * properties in schema order (the required ones always), each value what
 * the DSML reader turns into a valid argument: a string-typed property's
 * raw text (string="true": no '<', its enum, const, minLength and
 * maxLength kept), any other property's JSON under its schema
 * (string="false"); a keyword that cannot be kept is TF_ERR_UNSUPPORTED.
 * forced: the reply is the calls block alone; otherwise content comes
 * first (any text without "<｜") and the block is optional. */
tf_status tf_grammar_dsml(const struct tf_gvocab *v, const struct tf_gdsml_tool *tools, size_t n,
			  bool forced, struct tf_grammar **out);
/* Whether tf_grammar_dsml can keep params (a tool that is not strict is
 * called with any parameters where it cannot). */
bool tf_grammar_dsml_fits(const char *name, const json_t *params);
void tf_grammar_free(struct tf_grammar *g);

/* The size of the vocabulary g was compiled over. */
uint32_t tf_grammar_vocab(const struct tf_grammar *g);
/* The start state (0). */
int32_t tf_grammar_start(const struct tf_grammar *g);
/* The state after n bytes from state, or -1 when they cannot be part of a
 * completable output (or state is -1). */
int32_t tf_grammar_next(struct tf_grammar *g, int32_t state, const uint8_t *bytes, size_t n);
/* The state after token id (-1 for an id without bytes). */
int32_t tf_grammar_next_token(struct tf_grammar *g, int32_t state, uint32_t id);
/* True when the output up to state is a whole match. */
bool tf_grammar_accepting(struct tf_grammar *g, int32_t state);
/* True when no byte can follow state (the output must end there). */
bool tf_grammar_final(struct tf_grammar *g, int32_t state);
/* The ids allowed after state: bit (id & 63) of word id / 64, for ids 0 ..
 * vocab-1, (vocab + 63) / 64 words. Borrowed: valid until the next call on
 * g. NULL when out of memory or the automaton outgrew its limit (tf_errmsg
 * says which). *count, when set, gets the number of allowed ids. */
const uint64_t *tf_grammar_mask(struct tf_grammar *g, int32_t state, uint32_t *count);
/* True when the whole of n bytes is an output of g. */
bool tf_grammar_matches(struct tf_grammar *g, const uint8_t *bytes, size_t n);

struct tf_grammar_stats {
	size_t nfa_states;  /* after compile */
	size_t dfa_states;  /* built so far */
	size_t masks;       /* computed so far */
	size_t mask_bytes;  /* held in the cache */
};
void tf_grammar_stats(const struct tf_grammar *g, struct tf_grammar_stats *out);

#endif
