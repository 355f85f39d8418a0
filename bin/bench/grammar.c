/* grammar.c: tf-bench grammar: the cost of constrained output on the
 * CPU. For each schema of a file (a JSON list of {"name", "schema"}, as
 * tests/data/grammar/schemas.json), over a vocabulary (a tokenizer.json's
 * plain-text tokens, or a synthetic one of --vocab ids shaped like a
 * byte-level BPE vocabulary):
 * compile time, the time to the first mask (compile + the start state's
 * mask), then seeded random walks drawing allowed tokens: the mean cost of
 * a step (the mask, computed or cached, and the move), the mean cost of a
 * mask computed afresh, and the worst step. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/cli.h"
#include "base/json.h"
#include "base/rng.h"
#include "bench/bench.h"
#include "grammar/grammar.h"
#include "text/tokenizer.h"

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static const uint8_t *tok_bytes(void *ctx, uint32_t id, size_t *len)
{
	struct tf_tok *tok = ctx;
	if (tf_tok_added_flags(tok, id) >= 0)
		return NULL;
	return tf_tok_bytes(tok, id, len);
}

/* A synthetic vocabulary shaped like a byte-level BPE one: the 256 bytes,
 * then seeded pieces of 2 to 12 bytes, mostly letters, a third with a
 * leading space, some with JSON punctuation, digits or CJK characters. */
struct synth {
	uint8_t *blob;
	size_t *off;
};

static const uint8_t *synth_bytes(void *ctx, uint32_t id, size_t *len)
{
	const struct synth *s = ctx;
	*len = s->off[id + 1] - s->off[id];
	return s->blob + s->off[id];
}

static void synth_build(uint32_t n, struct synth *s)
{
	static const char punct[] = "\"{}[],: .-_\n";
	struct tf_rng rng;
	tf_rng_seed(&rng, 42);
	s->off = calloc((size_t)n + 1, sizeof(*s->off));
	s->blob = malloc((size_t)n * 16);
	if (!s->off || !s->blob)
		tf_die(70, "out of memory");
	size_t at = 0;
	for (uint32_t id = 0; id < n; id++) {
		s->off[id] = at;
		if (id < 256) {
			s->blob[at++] = (uint8_t)id;
			continue;
		}
		size_t len = 2 + tf_rng_below(&rng, 11);
		size_t k = 0;
		if (tf_rng_below(&rng, 3) == 0)
			s->blob[at + k++] = ' ';
		uint64_t kind = tf_rng_below(&rng, 20);
		while (k < len) {
			uint8_t *b = s->blob + at + k;
			if (kind == 0 && k + 3 <= len) { /* CJK */
				uint32_t c = 0x4E00 + (uint32_t)tf_rng_below(&rng, 0x5000);
				b[0] = (uint8_t)(0xE0 | (c >> 12));
				b[1] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
				b[2] = (uint8_t)(0x80 | (c & 0x3F));
				k += 3;
			} else if (kind == 1 || tf_rng_below(&rng, 25) == 0) {
				b[0] = (uint8_t)punct[tf_rng_below(&rng, sizeof(punct) - 1)];
				k++;
			} else if (kind == 2) {
				b[0] = (uint8_t)('0' + tf_rng_below(&rng, 10));
				k++;
			} else {
				b[0] = (uint8_t)((tf_rng_below(&rng, 8) ? 'a' : 'A') + tf_rng_below(&rng, 26));
				k++;
			}
		}
		at += len > k ? len : k;
	}
	s->off[n] = at;
}

struct result {
	const char *name;
	double compile_ms, first_ms, step_us, fresh_us, worst_us;
	long steps, fresh;
	size_t states, cache;
};

static void walk(struct tf_grammar *g, struct tf_rng *rng, struct result *r)
{
	int32_t st = tf_grammar_start(g);
	for (int64_t k = 0; k < bench.steps; k++) {
		struct tf_grammar_stats before, after;
		tf_grammar_stats(g, &before);
		double t0 = now();
		uint32_t count;
		const uint64_t *m = tf_grammar_mask(g, st, &count);
		if (!m)
			tf_die(70, "'%s': mask: %s", r->name, tf_errmsg(TF_ERR_UNSUPPORTED));
		if (!count)
			break; /* whole: only end-of-sequence may follow */
		uint32_t pick = (uint32_t)tf_rng_below(rng, count), id = 0;
		for (uint32_t w = 0;; w++) {
			uint32_t c = (uint32_t)__builtin_popcountll(m[w]);
			if (pick < c) {
				uint64_t bits = m[w];
				for (; pick; pick--)
					bits &= bits - 1;
				id = w * 64 + (uint32_t)__builtin_ctzll(bits);
				break;
			}
			pick -= c;
		}
		st = tf_grammar_next_token(g, st, id);
		double dt = (now() - t0) * 1e6;
		tf_grammar_stats(g, &after);
		r->steps++;
		r->step_us += dt;
		if (after.masks > before.masks)
			r->fresh++, r->fresh_us += dt;
		if (dt > r->worst_us)
			r->worst_us = dt;
		if (st < 0)
			tf_die(70, "'%s': an allowed token led nowhere (a bug)", r->name);
	}
}

int bench_grammar(void)
{
	if (!bench.schemas)
		tf_usage_error("grammar needs --schemas FILE");
	json_t *list = NULL;
	tf_status st = tf_json_load(bench.schemas, 64 << 20, &list);
	if (st)
		tf_die(tf_status_exit(st), "%s", tf_errmsg(st));
	if (!json_is_array(list))
		tf_die(65, "'%s': not a JSON list of {\"name\", \"schema\"}", bench.schemas);
	struct tf_tok *tok = NULL;
	struct synth syn = {0};
	uint32_t n;
	if (bench.tokenizer) {
		if ((st = tf_tok_load(bench.tokenizer, &tok)))
			tf_die(tf_status_exit(st), "%s", tf_errmsg(st));
		n = tf_tok_vocab_size(tok);
	} else {
		n = (uint32_t)bench.vocab;
		synth_build(n, &syn);
	}
	double t0 = now();
	struct tf_gvocab *v;
	if ((st = tok ? tf_gvocab_new(n, tok_bytes, tok, &v) : tf_gvocab_new(n, synth_bytes, &syn, &v)))
		tf_die(tf_status_exit(st), "%s", tf_errmsg(st));
	double vocab_ms = (now() - t0) * 1e3;
	size_t ns = json_array_size(list);
	struct result *res = calloc(ns ? ns : 1, sizeof(*res));
	if (!res)
		tf_die(70, "out of memory");
	struct tf_rng rng;
	tf_rng_seed(&rng, 1);
	for (size_t i = 0; i < ns; i++) {
		const json_t *x = json_array_get(list, i);
		struct result *r = &res[i];
		r->name = json_string_value(json_object_get(x, "name"));
		if (!r->name)
			r->name = "?";
		struct tf_grammar *g = NULL;
		double a = now();
		if ((st = tf_grammar_schema(v, json_object_get(x, "schema"), &g)))
			tf_die(tf_status_exit(st), "'%s': %s", r->name, tf_errmsg(st));
		double b = now();
		uint32_t count;
		if (!tf_grammar_mask(g, tf_grammar_start(g), &count))
			tf_die(70, "'%s': %s", r->name, tf_errmsg(TF_ERR_UNSUPPORTED));
		r->compile_ms = (b - a) * 1e3;
		r->first_ms = (now() - a) * 1e3;
		for (int64_t w = 0; w < bench.walks; w++)
			walk(g, &rng, r);
		struct tf_grammar_stats s;
		tf_grammar_stats(g, &s);
		r->states = s.dfa_states;
		r->cache = s.mask_bytes;
		tf_grammar_free(g);
	}
	double all_steps = 0, all_us = 0, all_fresh = 0, all_fresh_us = 0, worst = 0;
	if (bench.json)
		printf("{\"vocab\":%u,\"trie_nodes\":%zu,\"vocab_ms\":%.3f,\"schemas\":[", n, tf_gvocab_nodes(v),
		       vocab_ms);
	else
		printf("vocabulary: %u ids, %zu trie nodes, built in %.1f ms\n%-22s %10s %10s %10s %10s %10s %7s %9s\n",
		       n, tf_gvocab_nodes(v), vocab_ms, "schema", "compile_ms", "first_ms", "step_us",
		       "fresh_us", "worst_us", "states", "cache_KiB");
	for (size_t i = 0; i < ns; i++) {
		const struct result *r = &res[i];
		double step = r->steps ? r->step_us / (double)r->steps : 0;
		double fresh = r->fresh ? r->fresh_us / (double)r->fresh : 0;
		all_steps += (double)r->steps, all_us += r->step_us;
		all_fresh += (double)r->fresh, all_fresh_us += r->fresh_us;
		if (r->worst_us > worst)
			worst = r->worst_us;
		if (bench.json)
			printf("%s{\"name\":\"%s\",\"compile_ms\":%.3f,\"first_mask_ms\":%.3f,\"step_us\":%.2f,"
			       "\"fresh_mask_us\":%.2f,\"worst_step_us\":%.2f,\"steps\":%ld,\"states\":%zu,"
			       "\"cache_bytes\":%zu}", i ? "," : "", r->name, r->compile_ms, r->first_ms, step,
			       fresh, r->worst_us, r->steps, r->states, r->cache);
		else
			printf("%-22.22s %10.2f %10.2f %10.2f %10.1f %10.1f %7zu %9zu\n", r->name, r->compile_ms,
			       r->first_ms, step, fresh, r->worst_us, r->states, r->cache >> 10);
	}
	double mean = all_steps ? all_us / all_steps : 0, mfresh = all_fresh ? all_fresh_us / all_fresh : 0;
	if (bench.json)
		printf("],\"step_us\":%.2f,\"fresh_mask_us\":%.2f,\"worst_step_us\":%.2f}\n", mean, mfresh, worst);
	else
		printf("all: %.0f steps, %.2f us a step, %.1f us a fresh mask (%.0f of them), worst %.1f us\n",
		       all_steps, mean, mfresh, all_fresh, worst);
	free(res);
	tf_gvocab_free(v);
	tf_tok_free(tok);
	free(syn.blob);
	free(syn.off);
	json_decref(list);
	return 0;
}
