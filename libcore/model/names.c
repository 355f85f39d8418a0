/* names.c: DeepSeek-V4.1 tensor names, splits and shapes (facts: dsv41-
 * model-facts.md §3 and the reference's names table). */
#include "model/names.h"

#include <stdio.h>
#include <string.h>

void tf_names_block(const struct tf_config *c, uint32_t layer, char *buf)
{
	if (layer < c->layers)
		snprintf(buf, TF_NAME_MAX, "layers.%u", layer);
	else
		snprintf(buf, TF_NAME_MAX, "mtp.%u", layer - c->layers);
}

struct glist {
	struct tf_group_spec *out;
	int cap, n;
};

static void gpush(struct glist *l, enum tf_proj p, const char *block, const char *suffix,
		  enum tf_split split, uint32_t k, uint32_t n, uint32_t layer, uint32_t index)
{
	if (l->out && l->n < l->cap) {
		struct tf_group_spec *g = &l->out[l->n];
		g->proj = p;
		snprintf(g->name, sizeof g->name, "%s%s%s", block, *block ? "." : "", suffix);
		g->split = split;
		g->k = k;
		g->n = n;
		g->layer = layer;
		g->index = index;
	}
	l->n++;
}

int tf_names_block_groups(const struct tf_config *c, uint32_t layer, struct tf_group_spec *out,
			  int cap)
{
	struct glist l = {out, cap, 0};
	char b[TF_NAME_MAX], s[TF_NAME_MAX];
	tf_names_block(c, layer, b);
	uint32_t per_group_k = c->heads / c->o_groups * c->head_dim;
	gpush(&l, TF_PROJ_WQ_A, b, "attn.wq_a", TF_SPLIT_WHOLE, c->hidden, c->q_lora, layer, 0);
	gpush(&l, TF_PROJ_WKV, b, "attn.wkv", TF_SPLIT_WHOLE, c->hidden, c->head_dim, layer, 0);
	gpush(&l, TF_PROJ_WQ_B, b, "attn.wq_b", TF_SPLIT_COL, c->q_lora, c->heads * c->head_dim,
	      layer, 0);
	for (uint32_t g = 0; g < c->o_groups; g++) {
		snprintf(s, sizeof s, "attn.wo_a.slice.%u", g);
		gpush(&l, TF_PROJ_WO_A, b, s, TF_SPLIT_WHOLE, per_group_k, c->o_lora, layer, g);
	}
	gpush(&l, TF_PROJ_WO_B, b, "attn.wo_b", TF_SPLIT_ROW, c->o_groups * c->o_lora, c->hidden,
	      layer, 0);
	if (tf_config_is_kv_source(c, layer)) {
		gpush(&l, TF_PROJ_COMP_WKV, b, "attn.compressor.wkv", TF_SPLIT_WHOLE, c->hidden,
		      c->head_dim, layer, 0);
		if (tf_config_ratio(c, layer) > 1)
			gpush(&l, TF_PROJ_COMP_WGATE, b, "attn.compressor.wgate", TF_SPLIT_WHOLE,
			      c->hidden, c->head_dim, layer, 0);
		gpush(&l, TF_PROJ_IX_WK, b, "attn.indexer.wk", TF_SPLIT_WHOLE, c->head_dim,
		      c->index_dim, layer, 0);
	}
	if (tf_config_is_index_source(c, layer))
		gpush(&l, TF_PROJ_IX_WQ_B, b, "attn.indexer.wq_b", TF_SPLIT_WHOLE, c->q_lora,
		      c->index_heads * c->index_dim, layer, 0);
	gpush(&l, TF_PROJ_SHARED_W1, b, "ffn.shared_experts.w1", TF_SPLIT_COL, c->hidden,
	      c->expert_width, layer, 0);
	gpush(&l, TF_PROJ_SHARED_W2, b, "ffn.shared_experts.w2", TF_SPLIT_ROW, c->expert_width,
	      c->hidden, layer, 0);
	gpush(&l, TF_PROJ_SHARED_W3, b, "ffn.shared_experts.w3", TF_SPLIT_COL, c->hidden,
	      c->expert_width, layer, 0);
	if (tf_config_is_engram(c, layer))
		gpush(&l, TF_PROJ_ENGRAM_WKV, b, "engram.wkv", TF_SPLIT_WHOLE,
		      tf_config_hash_cols(c) * c->engram_head_dim,
		      (c->engram_max_ngram + 1) * c->hidden, layer, 0);
	uint32_t ne = tf_config_experts_of(c, layer);
	for (uint32_t e = 0; e < ne; e++) {
		snprintf(s, sizeof s, "ffn.experts.%u.w1", e);
		gpush(&l, TF_PROJ_EXPERT_W1, b, s, TF_SPLIT_COL, c->hidden, c->expert_width, layer, e);
		snprintf(s, sizeof s, "ffn.experts.%u.w2", e);
		gpush(&l, TF_PROJ_EXPERT_W2, b, s, TF_SPLIT_ROW, c->expert_width, c->hidden, layer, e);
		snprintf(s, sizeof s, "ffn.experts.%u.w3", e);
		gpush(&l, TF_PROJ_EXPERT_W3, b, s, TF_SPLIT_COL, c->hidden, c->expert_width, layer, e);
	}
	return l.n;
}

struct nlist {
	struct tf_native_spec *out;
	int cap, n;
	const char *block;
	uint32_t layer;
};

static struct tf_native_spec *npush(struct nlist *l, const char *suffix, enum tf_store store,
				    uint64_t d0, uint64_t d1)
{
	static struct tf_native_spec sink;
	struct tf_native_spec *s = l->out && l->n < l->cap ? &l->out[l->n] : &sink;
	l->n++;
	snprintf(s->name, sizeof s->name, "%s%s%s", l->block, *l->block ? "." : "", suffix);
	s->store = store;
	s->ndim = d1 ? 2 : 1;
	s->shape[0] = d0;
	s->shape[1] = d1;
	s->slice = TF_SLICE_WHOLE;
	s->layer = l->layer;
	s->optional = false;
	return s;
}

int tf_names_block_natives(const struct tf_config *c, uint32_t layer,
			   struct tf_native_spec *out, int cap)
{
	char b[TF_NAME_MAX];
	tf_names_block(c, layer, b);
	struct nlist l = {out, cap, 0, b, layer};
	uint32_t hc = c->hc_mult, mix = (2 + hc) * hc;
	npush(&l, "attn_norm.weight", TF_STORE_NORM, c->hidden, 0);
	npush(&l, "ffn_norm.weight", TF_STORE_NORM, c->hidden, 0);
	static const char *const w[] = {"attn", "ffn"};
	for (int i = 0; i < 2; i++) {
		char s[TF_NAME_MAX];
		snprintf(s, sizeof s, "hc_%s_fn", w[i]);
		npush(&l, s, TF_STORE_F32, mix, (uint64_t)hc * c->hidden);
		snprintf(s, sizeof s, "hc_%s_base", w[i]);
		npush(&l, s, TF_STORE_F32, mix, 0);
		snprintf(s, sizeof s, "hc_%s_scale", w[i]);
		npush(&l, s, TF_STORE_F32, 3, 0);
	}
	npush(&l, "attn.q_norm.weight", TF_STORE_NORM, c->q_lora, 0);
	npush(&l, "attn.kv_norm.weight", TF_STORE_NORM, c->head_dim, 0);
	npush(&l, "attn.attn_sink", TF_STORE_F32, c->heads, 0)->slice = TF_SLICE_HEADS;
	if (tf_config_is_kv_source(c, layer)) {
		npush(&l, "attn.compressor.norm.weight", TF_STORE_NORM, c->head_dim, 0);
		npush(&l, "attn.indexer.k_norm.weight", TF_STORE_NORM, c->index_dim, 0);
	}
	if (tf_config_is_index_source(c, layer))
		npush(&l, "attn.indexer.weights_proj.weight", TF_STORE_HALF, c->index_heads,
		      c->hidden);
	uint32_t ne = tf_config_experts_of(c, layer);
	npush(&l, "ffn.gate.weight", TF_STORE_HALF, ne, c->hidden);
	npush(&l, "ffn.gate.bias", TF_STORE_F32, ne, 0);
	int ei = tf_config_engram_index(c, layer);
	if (ei >= 0) {
		npush(&l, "engram.q_weight", TF_STORE_NORM, hc, c->hidden);
		npush(&l, "engram.k_weight", TF_STORE_NORM, hc, c->hidden);
		npush(&l, "engram.table", TF_STORE_TABLE, c->engram_rows[ei], TF_ENGRAM_ROW_BYTES)
			->slice = TF_SLICE_ENGRAM;
	}
	if (layer >= c->layers && layer == c->layers) {
		/* DSpark's shared pieces live on its first block. */
		npush(&l, "main_norm.weight", TF_STORE_NORM, c->hidden, 0);
	}
	if (layer >= c->layers && layer + 1 == c->layers + c->mtp_layers) {
		npush(&l, "norm.weight", TF_STORE_NORM, c->hidden, 0);
		npush(&l, "markov_head.embed.weight", TF_STORE_HALF, c->vocab, c->dspark_markov_rank);
		npush(&l, "markov_head.head.weight", TF_STORE_HALF, c->vocab, c->dspark_markov_rank);
		npush(&l, "confidence_head.proj.weight", TF_STORE_F32,
		      c->hidden + c->dspark_markov_rank, 0)->optional = true;
	}
	return l.n;
}

int tf_names_top_groups(const struct tf_config *c, struct tf_group_spec *out, int cap)
{
	struct glist l = {out, cap, 0};
	gpush(&l, TF_PROJ_HEAD, "", "head", TF_SPLIT_COL, c->hidden, c->vocab, UINT32_MAX, 0);
	if (c->mtp_layers)
		gpush(&l, TF_PROJ_MAIN_PROJ, "mtp.0", "main_proj", TF_SPLIT_WHOLE,
		      c->n_dspark_targets * c->hidden, c->hidden, c->layers, 0);
	return l.n;
}

int tf_names_top_natives(const struct tf_config *c, struct tf_native_spec *out, int cap)
{
	struct nlist l = {out, cap, 0, "", UINT32_MAX};
	npush(&l, "embed.weight", TF_STORE_HALF, c->vocab, c->hidden)->slice = TF_SLICE_VOCAB_ROWS;
	npush(&l, "norm.weight", TF_STORE_NORM, c->hidden, 0);
	return l.n;
}

bool tf_store_accepts(enum tf_store s, enum tf_dtype d)
{
	switch (s) {
	case TF_STORE_NORM: return d == TF_DTYPE_BF16 || d == TF_DTYPE_F32;
	case TF_STORE_F32: return d == TF_DTYPE_F32;
	case TF_STORE_HALF: return d == TF_DTYPE_BF16 || d == TF_DTYPE_F16;
	case TF_STORE_TABLE: return d == TF_DTYPE_U8;
	}
	return false;
}

const char *tf_split_name(enum tf_split s)
{
	return s == TF_SPLIT_ROW ? "row" : s == TF_SPLIT_COL ? "col" : "whole";
}

const char *tf_proj_name(enum tf_proj p)
{
	static const char *const n[] = {
		"wq_a", "wkv", "wq_b", "wo_a", "wo_b", "comp_wkv", "comp_wgate", "ix_wq_b",
		"ix_wk", "shared.w1", "shared.w2", "shared.w3", "engram.wkv", "expert.w1",
		"expert.w2", "expert.w3", "head", "main_proj",
	};
	return (unsigned)p < sizeof n / sizeof n[0] ? n[p] : "?";
}

bool tf_names_ignored(const char *name)
{
	static const char *const prefixes[] = {"vision.", "aligner.", "image_"};
	for (size_t i = 0; i < 3; i++)
		if (!strncmp(name, prefixes[i], strlen(prefixes[i])))
			return true;
	size_t n = strlen(name), m = strlen(".ffn.gate.bias_vl");
	return n >= m && !strcmp(name + n - m, ".ffn.gate.bias_vl");
}

const char *tf_codebook_name(enum tf_codebook cb)
{
	return cb == TF_CODEBOOK_MCG ? "mcg" : cb == TF_CODEBOOK_MUL1 ? "mul1" : "3inst";
}
