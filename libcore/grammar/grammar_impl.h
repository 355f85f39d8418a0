/* grammar_impl.h: what the grammar's files share: the pattern tree the
 * compilers (regex.c, schema.c) build and the automaton (automaton.c)
 * compiles. Not a public interface. */
#ifndef TF_GRAMMAR_IMPL_H
#define TF_GRAMMAR_IMPL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "grammar/grammar.h"

/* Pattern tree nodes: a node is an index into gast.v (a DAG: a node may
 * be used many times; each use becomes its own NFA states). -1 is a failed
 * node: every builder returns -1 when given one, and the tree's err says
 * why. */
enum {
	G_SET,    /* one byte of set a (gast.sets) */
	G_CAT,    /* a then b */
	G_ALT,    /* a or b */
	G_REP,    /* a, min..max times (max -1: unbounded) */
	G_EMPTY,  /* the empty string */
	G_NONE,   /* nothing */
	G_SEQOPT, /* items list[a .. a+2b) as (node, required) pairs, in order,
		   * the optional ones may be left out, separated by node min */
	G_LIST,   /* a (b a)*, or nothing too when min is 0: one copy of a */
};

struct gnode {
	uint8_t kind;
	int32_t a, b, min, max;
};

struct gast {
	struct gnode *v;
	size_t n, cap;
	uint8_t (*sets)[32];
	size_t nsets, capsets;
	int32_t *list;
	size_t nlist, caplist;
	tf_status err; /* the first failure (its tf_err detail was recorded then) */
};

void gast_release(struct gast *t);
/* Record a failure (the first one stays) and return -1. */
int32_t gast_fail(struct gast *t, tf_status st);
int32_t g_set(struct gast *t, const uint8_t set[32]);
int32_t g_byte(struct gast *t, uint8_t c);
int32_t g_range(struct gast *t, uint8_t lo, uint8_t hi);
int32_t g_lit(struct gast *t, const char *s, size_t n);
int32_t g_str(struct gast *t, const char *s);
int32_t g_cat(struct gast *t, int32_t a, int32_t b);
int32_t g_alt(struct gast *t, int32_t a, int32_t b);
int32_t g_rep(struct gast *t, int32_t a, int32_t min, int32_t max);
int32_t g_opt(struct gast *t, int32_t a);
int32_t g_empty(struct gast *t);
int32_t g_none(struct gast *t);
int32_t g_list(struct gast *t, int32_t item, int32_t sep, bool may_be_empty);
int32_t g_seqopt(struct gast *t, const int32_t *items, const bool *required, size_t n, int32_t sep);
/* Codepoints lo..hi (surrogates left out) as UTF-8. */
int32_t g_cprange(struct gast *t, uint32_t lo, uint32_t hi);

/* A set of codepoint ranges. */
struct cpset {
	uint32_t (*r)[2];
	size_t n, cap;
};
void cpset_release(struct cpset *s);
tf_status cpset_add(struct cpset *s, uint32_t lo, uint32_t hi);
/* Sort and merge. */
void cpset_norm(struct cpset *s);
/* The complement within 0..0x10FFFF (normalised first). */
tf_status cpset_negate(struct cpset *s);
/* Remove lo..hi. */
tf_status cpset_remove(struct cpset *s, uint32_t lo, uint32_t hi);
int32_t g_cpset(struct gast *t, struct cpset *s);

/* Regex text to a tree node. in_string: the regex describes the decoded
 * content of a JSON string (a schema's pattern): characters come out as
 * JSON string text (" and \ and controls escaped; classes lose the
 * characters that would need escaping) and unanchored ends match any
 * content (JSON Schema's search semantics). what names the source in
 * messages. */
int32_t grx_parse(struct gast *t, const char *re, size_t n, bool in_string, const char *what);

/* A JSON value valid under schema s (a part of the document root, where
 * $ref resolves), as a node of t (schema.c). */
int32_t gschema_value(struct gast *t, const json_t *root, const json_t *s);

/* Compile the tree at root into a grammar over v (takes nothing over). */
tf_status gauto_new(const struct tf_gvocab *v, struct gast *t, int32_t root, struct tf_grammar **out);

/* The vocabulary as automaton.c walks it. */
struct tf_gvocab {
	uint32_t n;          /* ids */
	uint32_t maxdepth;   /* the longest token's bytes */
	size_t nodes;        /* trie nodes, in depth-first order */
	uint8_t *byte;       /* [nodes] the byte into the node */
	uint16_t *depth;     /* [nodes] 1 for a first byte */
	uint32_t *skip;      /* [nodes] the next node outside its subtree */
	uint32_t *tfirst;    /* [nodes] its ids: ids[tfirst .. tfirst + tcount) */
	uint32_t *tcount;
	uint32_t *ids;       /* ids with bytes, in trie order */
	uint8_t *blob;       /* every id's bytes */
	size_t *off;         /* [n + 1] id's bytes: blob[off[id] .. off[id + 1]) */
	bool *has;           /* [n] the id has bytes */
};

#endif
