/* config.c: DeepSeek-V4.1 config: presets, config.json parsing, validation,
 * the CSA2 topology. Key names and release values: dsv41-model-facts.md §1
 * and the reference's config reader. */
#include "model/config.h"

#include <stddef.h>
#include <string.h>

#include "base/json.h"

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static void set_list(uint32_t *dst, uint32_t *n, const uint32_t *src, uint32_t count)
{
	memcpy(dst, src, count * sizeof *src);
	*n = count;
}

static void release(struct tf_config *c)
{
	memset(c, 0, sizeof *c);
	*c = (struct tf_config){
		.vocab = 129280, .hidden = 5120, .layers = 40, .heads = 64, .head_dim = 512,
		.rope_dim = 64, .q_lora = 1280, .o_lora = 1024, .o_groups = 8, .eps = 1e-20f,
		.window = 128, .experts = 384, .shared_experts = 1, .topk = 6,
		.expert_width = 2304, .routed_scale = 1.5f, .norm_topk = true,
		.swiglu_limit = 10.0f, .index_heads = 32, .index_dim = 128, .index_topk = 512,
		.candidate_source = 20, .candidate_blocks = 2048, .candidate_block_size = 8,
		.hc_mult = 4, .hc_sinkhorn_iters = 20, .hc_eps = 1e-6f, .hc_post_alpha = 2.0f,
		.engram_max_ngram = 4, .engram_vocab = 16000000, .engram_heads = 8,
		.engram_head_dim = 256, .engram_pad = 2, .engram_compressed_vocab = 99092,
		.engram_gate_clamp = 1e-6f, .mtp_layers = 3, .dspark_block = 5,
		.dspark_noise_token = 128799, .dspark_markov_rank = 256, .dspark_experts = 128,
		.dspark_topk = 3, .rope_theta = 1e4, .compress_rope_theta = 1.6e5,
		.rope_factor = 16, .rope_beta_fast = 32, .rope_beta_slow = 1,
		.rope_original_max = 65536, .max_positions = 1048576, .yarn = true, .bos = 0,
		.eos = 1, .pad = 2,
	};
	c->n_ratios = 43;
	for (uint32_t l = 0; l < 43; l++)
		c->compress_ratios[l] = l < 2 || l >= 40 ? 0 : l < 20 ? 2 : 1;
	static const uint32_t kv[] = {2, 8, 14, 20}, ix[] = {2, 8, 14, 20, 24, 28, 32, 36},
			      tg[] = {37, 38, 39};
	set_list(c->kv_sources, &c->n_kv_sources, kv, N_OF(kv));
	set_list(c->index_sources, &c->n_index_sources, ix, N_OF(ix));
	set_list(c->dspark_targets, &c->n_dspark_targets, tg, N_OF(tg));
	c->n_engram = 2;
	c->engram_layers[0] = 1;
	c->engram_layers[1] = 14;
	c->engram_rows[0] = 384006168;
	c->engram_rows[1] = 384016682;
}

/* Both small presets share one topology: two window layers, a ratio-2 KV
 * source (2) and its reader (3), a ratio-1 KV source that is the candidate
 * source (4) and its reader (5), a reindex layer (6) and its reader (7),
 * Engram on 1 and 5, and one DSpark block. */
static void small_topology(struct tf_config *c)
{
	static const uint32_t ratios[] = {0, 0, 2, 2, 1, 1, 1, 1, 0}, kv[] = {2, 4},
			      ix[] = {2, 4, 6}, tg[] = {5, 6, 7};
	c->layers = 8;
	c->mtp_layers = 1;
	set_list(c->compress_ratios, &c->n_ratios, ratios, N_OF(ratios));
	set_list(c->kv_sources, &c->n_kv_sources, kv, N_OF(kv));
	set_list(c->index_sources, &c->n_index_sources, ix, N_OF(ix));
	set_list(c->dspark_targets, &c->n_dspark_targets, tg, N_OF(tg));
	c->candidate_source = 4;
	c->n_engram = 2;
	c->engram_layers[0] = 1;
	c->engram_layers[1] = 5;
	c->eps = 1e-6f;
}

static void tiny(struct tf_config *c)
{
	release(c);
	small_topology(c);
	c->vocab = 512;
	c->hidden = 256;
	c->heads = 8;
	c->head_dim = 128;
	c->rope_dim = 32;
	c->q_lora = 128;
	c->o_lora = 128;
	c->o_groups = 4;
	c->window = 4;
	c->experts = 8;
	c->topk = 2;
	c->expert_width = 512;
	c->index_heads = 2;
	c->index_dim = 128;
	c->index_topk = 3;
	c->candidate_blocks = 2;
	c->candidate_block_size = 2;
	c->engram_max_ngram = 3;
	c->engram_heads = 2;
	c->engram_head_dim = 32;
	c->engram_vocab = 1000;
	c->engram_rows[0] = 4062; /* the first 4 primes above 999, then the next 4 */
	c->engram_rows[1] = 4152;
	c->engram_compressed_vocab = 512;
	c->dspark_block = 3;
	c->dspark_noise_token = 500;
	c->dspark_markov_rank = 16;
	c->dspark_experts = 4;
	c->dspark_topk = 2;
	c->rope_factor = 4;
	c->rope_original_max = 1024;
	c->max_positions = 4096;
}

static void small(struct tf_config *c)
{
	release(c);
	small_topology(c);
	c->vocab = 8192;
	c->hidden = 512;
	c->heads = 8;
	c->head_dim = 128;
	c->rope_dim = 64;
	c->q_lora = 256;
	c->o_lora = 256;
	c->o_groups = 4;
	c->window = 64;
	c->experts = 16;
	c->topk = 2;
	c->expert_width = 512;
	c->index_heads = 4;
	c->index_dim = 128;
	c->index_topk = 64;
	c->candidate_blocks = 16;
	c->candidate_block_size = 8;
	c->engram_max_ngram = 4;
	c->engram_heads = 4;
	c->engram_head_dim = 64;
	c->engram_vocab = 5000;
	c->engram_rows[0] = 60560; /* the first 12 primes above 4999, then the next 12 */
	c->engram_rows[1] = 61852;
	c->engram_compressed_vocab = 8192;
	c->dspark_block = 5;
	c->dspark_noise_token = 8000;
	c->dspark_markov_rank = 32;
	c->dspark_experts = 8;
	c->dspark_topk = 2;
	c->rope_factor = 4;
	c->rope_original_max = 4096;
	c->max_positions = 16384;
}

const char *tf_config_preset_names(void)
{
	return "tiny|small|release";
}

tf_status tf_config_preset(struct tf_config *c, const char *name)
{
	if (!strcmp(name, "release"))
		release(c);
	else if (!strcmp(name, "tiny"))
		tiny(c);
	else if (!strcmp(name, "small"))
		small(c);
	else
		return tf_err(TF_ERR_ARG, "unknown preset '%s' (want %s)", name,
			      tf_config_preset_names());
	return TF_OK;
}

/* Read helpers: a missing key keeps the default; a bad one fails. */
static tf_status get_u32(const json_t *o, const char *what, const char *key, uint32_t *v)
{
	int64_t x;
	tf_status st = tf_json_i64(o, what, key, 0, UINT32_MAX, &x);
	if (st == TF_OK)
		*v = (uint32_t)x;
	return st == TF_ERR_NOTFOUND ? TF_OK : st;
}

static tf_status get_u64(const json_t *o, const char *what, const char *key, uint64_t *v)
{
	int64_t x;
	tf_status st = tf_json_i64(o, what, key, 0, INT64_MAX, &x);
	if (st == TF_OK)
		*v = (uint64_t)x;
	return st == TF_ERR_NOTFOUND ? TF_OK : st;
}

static tf_status get_f(const json_t *o, const char *what, const char *key, double *v)
{
	tf_status st = tf_json_f64(o, what, key, v);
	return st == TF_ERR_NOTFOUND ? TF_OK : st;
}

static tf_status get_f32(const json_t *o, const char *what, const char *key, float *v)
{
	double d = *v;
	tf_status st = get_f(o, what, key, &d);
	*v = (float)d;
	return st;
}

static tf_status get_list(const json_t *o, const char *what, const char *key, uint64_t *dst,
			  uint32_t *n, uint32_t cap)
{
	const json_t *a = json_object_get(o, key);
	if (!a || json_is_null(a))
		return TF_OK;
	if (!json_is_array(a))
		return tf_err(TF_ERR_FORMAT, "%s: '%s' is not a list", what, key);
	if (json_array_size(a) > cap)
		return tf_err(TF_ERR_FORMAT, "%s: '%s' has %zu entries (at most %u)", what, key,
			      json_array_size(a), cap);
	for (size_t i = 0; i < json_array_size(a); i++) {
		const json_t *x = json_array_get(a, i);
		if (!json_is_integer(x) || json_integer_value(x) < 0)
			return tf_err(TF_ERR_FORMAT, "%s: '%s'[%zu] is not a non-negative integer",
				      what, key, i);
		dst[i] = (uint64_t)json_integer_value(x);
	}
	*n = (uint32_t)json_array_size(a);
	return TF_OK;
}

static tf_status get_list32(const json_t *o, const char *what, const char *key, uint32_t *dst,
			    uint32_t *n, uint32_t cap)
{
	uint64_t tmp[TF_CONFIG_MAX_LAYERS];
	uint32_t m = *n;
	tf_status st = get_list(o, what, key, tmp, &m, cap);
	if (st || !json_object_get(o, key))
		return st;
	for (uint32_t i = 0; i < m; i++) {
		if (tmp[i] > UINT32_MAX)
			return tf_err(TF_ERR_FORMAT, "%s: '%s'[%u] is too large", what, key, i);
		dst[i] = (uint32_t)tmp[i];
	}
	*n = m;
	return TF_OK;
}

static tf_status parse_rope(struct tf_config *c, const json_t *t, const char *what)
{
	tf_status st;
	if ((st = get_f(t, what, "rope_theta", &c->rope_theta)) ||
	    (st = get_f(t, what, "compress_rope_theta", &c->compress_rope_theta)) ||
	    (st = get_u64(t, what, "max_position_embeddings", &c->max_positions)))
		return st;
	const json_t *s = json_object_get(t, "rope_scaling");
	if (!s)
		s = json_object_get(t, "rope_parameters");
	if (!s)
		return TF_OK; /* the release defaults: YaRN x16 over 65536 */
	c->rope_factor = 1;
	c->rope_original_max = c->max_positions;
	c->yarn = false;
	if (json_is_null(s))
		return TF_OK;
	if (!json_is_object(s))
		return tf_err(TF_ERR_FORMAT, "%s: 'rope_scaling' is not an object", what);
	if ((st = get_f(s, what, "factor", &c->rope_factor)) ||
	    (st = get_u64(s, what, "original_max_position_embeddings", &c->rope_original_max)) ||
	    (st = get_f(s, what, "beta_fast", &c->rope_beta_fast)) ||
	    (st = get_f(s, what, "beta_slow", &c->rope_beta_slow)))
		return st;
	const json_t *kind = json_object_get(s, "rope_type");
	if (!kind)
		kind = json_object_get(s, "type");
	c->yarn = json_is_string(kind) && strcmp(json_string_value(kind), "default");
	return TF_OK;
}

/* The u32 fields of config.json and where they go. */
static const struct {
	const char *key;
	size_t off;
} ints[] = {
#define F(k, f) {k, offsetof(struct tf_config, f)}
	F("vocab_size", vocab), F("hidden_size", hidden), F("num_hidden_layers", layers),
	F("num_attention_heads", heads), F("head_dim", head_dim),
	F("qk_rope_head_dim", rope_dim), F("q_lora_rank", q_lora),
	F("o_lora_rank", o_lora), F("o_groups", o_groups), F("sliding_window", window),
	F("n_routed_experts", experts), F("n_shared_experts", shared_experts),
	F("num_experts_per_tok", topk), F("moe_intermediate_size", expert_width),
	F("index_n_heads", index_heads), F("index_head_dim", index_dim),
	F("index_topk", index_topk), F("candidate_topk_blocks", candidate_blocks),
	F("candidate_block_size", candidate_block_size), F("hc_mult", hc_mult),
	F("hc_sinkhorn_iters", hc_sinkhorn_iters),
	F("engram_max_ngram_size", engram_max_ngram), F("engram_n_heads", engram_heads),
	F("engram_head_dim", engram_head_dim), F("engram_pad_token_id", engram_pad),
	F("engram_compressed_vocab_size", engram_compressed_vocab),
	F("num_nextn_predict_layers", mtp_layers), F("dspark_block_size", dspark_block),
	F("dspark_noise_token_id", dspark_noise_token),
	F("dspark_markov_rank", dspark_markov_rank),
	F("dspark_n_routed_experts", dspark_experts),
	F("dspark_num_experts_per_tok", dspark_topk),
#undef F
};

tf_status tf_config_from_json(struct tf_config *c, const json_t *root, const char *what)
{
	release(c);
	if (!json_is_object(root))
		return tf_err(TF_ERR_FORMAT, "%s: not a JSON object", what);
	const json_t *t = json_object_get(root, "text_config");
	if (t && !json_is_object(t))
		return tf_err(TF_ERR_FORMAT, "%s: 'text_config' is not an object", what);
	if (!t)
		t = root;
	tf_status st;
	for (size_t i = 0; i < N_OF(ints); i++)
		if ((st = get_u32(t, what, ints[i].key, (uint32_t *)((char *)c + ints[i].off))))
			return st;
	int64_t cand = c->candidate_source;
	st = tf_json_i64(t, what, "candidate_source_layer_id", -1, TF_CONFIG_MAX_LAYERS, &cand);
	if (st && st != TF_ERR_NOTFOUND)
		return st;
	c->candidate_source = cand;
	if ((st = get_u64(t, what, "engram_vocab_size", &c->engram_vocab)) ||
	    (st = get_f32(t, what, "rms_norm_eps", &c->eps)) ||
	    (st = get_f32(t, what, "routed_scaling_factor", &c->routed_scale)) ||
	    (st = get_f32(t, what, "swiglu_limit", &c->swiglu_limit)) ||
	    (st = get_f32(t, what, "hc_eps", &c->hc_eps)) ||
	    (st = get_f32(t, what, "hc_post_alpha", &c->hc_post_alpha)) ||
	    (st = get_f32(t, what, "engram_gate_clamp", &c->engram_gate_clamp)))
		return st;
	st = tf_json_bool(t, what, "norm_topk_prob", &c->norm_topk);
	if (st && st != TF_ERR_NOTFOUND)
		return st;
	uint32_t n_rows = c->n_engram;
	if ((st = get_list32(t, what, "compress_ratios", c->compress_ratios, &c->n_ratios,
			     TF_CONFIG_MAX_LAYERS)) ||
	    (st = get_list32(t, what, "kv_source_layer_ids", c->kv_sources, &c->n_kv_sources,
			     TF_CONFIG_MAX_LAYERS)) ||
	    (st = get_list32(t, what, "index_source_layer_ids", c->index_sources,
			     &c->n_index_sources, TF_CONFIG_MAX_LAYERS)) ||
	    (st = get_list32(t, what, "engram_layer_ids", c->engram_layers, &c->n_engram,
			     TF_CONFIG_MAX_ENGRAM)) ||
	    (st = get_list32(t, what, "dspark_target_layer_ids", c->dspark_targets,
			     &c->n_dspark_targets, N_OF(c->dspark_targets))) ||
	    (st = get_list(t, what, "engram_num_embeddings", c->engram_rows, &n_rows,
			   TF_CONFIG_MAX_ENGRAM)))
		return st;
	if (n_rows != c->n_engram)
		return tf_err(TF_ERR_CONFIG, "%s: %u engram_layer_ids but %u engram_num_embeddings",
			      what, c->n_engram, n_rows);
	const char *s;
	if (tf_json_str(t, what, "scoring_func", &s) == TF_OK && strcmp(s, "sqrtsoftplus"))
		return tf_err(TF_ERR_UNSUPPORTED, "%s: scoring_func '%s' (only sqrtsoftplus)", what, s);
	if (tf_json_str(t, what, "topk_method", &s) == TF_OK && strcmp(s, "noaux_tc"))
		return tf_err(TF_ERR_UNSUPPORTED, "%s: topk_method '%s' (only noaux_tc)", what, s);
	if ((st = parse_rope(c, t, what)) ||
	    (st = get_u32(root, what, "bos_token_id", &c->bos)) ||
	    (st = get_u32(root, what, "eos_token_id", &c->eos)) ||
	    (st = get_u32(root, what, "pad_token_id", &c->pad)))
		return st;
	st = tf_config_validate(c);
	return st ? tf_err_wrap(st, "%s: ", what) : TF_OK;
}

tf_status tf_config_load(struct tf_config *c, const char *path)
{
	json_t *j;
	tf_status st = tf_json_load(path, 16u << 20, &j);
	if (st)
		return st;
	st = tf_config_from_json(c, j, path);
	json_decref(j);
	return st;
}

static bool contains(const uint32_t *v, uint32_t n, uint32_t x)
{
	for (uint32_t i = 0; i < n; i++)
		if (v[i] == x)
			return true;
	return false;
}

tf_status tf_config_validate(const struct tf_config *c)
{
#define NEED(cond, ...) \
	do { \
		if (!(cond)) \
			return tf_err(TF_ERR_CONFIG, __VA_ARGS__); \
	} while (0)
	/* Bounds far above any real model keep every size product in range. */
	NEED(c->hidden <= 65536 && c->expert_width <= 65536 && c->vocab <= (1u << 24) &&
	     c->heads <= 1024 && c->head_dim <= 4096 && c->q_lora <= 65536 && c->o_lora <= 65536 &&
	     c->o_groups <= 1024 && c->experts <= 4096 && c->dspark_experts <= 4096 &&
	     c->index_heads <= 1024 && c->index_dim <= 4096 && c->engram_heads <= 64 &&
	     c->engram_head_dim <= 4096 && c->engram_max_ngram <= 8 && c->window <= (1u << 20) &&
	     c->hc_sinkhorn_iters <= 1000 && c->dspark_markov_rank <= 65536 &&
	     c->candidate_block_size <= 65536 && c->index_topk <= (1u << 20),
	     "a size is beyond the supported limits (hidden, widths and dims up to 65536, "
	     "vocab up to 2^24)");
	NEED(c->hidden && c->hidden % 128 == 0, "hidden_size %u is not a positive multiple of 128",
	     c->hidden);
	NEED(c->expert_width && c->expert_width % 128 == 0,
	     "moe_intermediate_size %u is not a positive multiple of 128", c->expert_width);
	NEED(c->vocab && c->vocab % 128 == 0, "vocab_size %u is not a positive multiple of 128",
	     c->vocab);
	NEED(c->layers >= 1 && c->layers + c->mtp_layers <= TF_CONFIG_MAX_LAYERS,
	     "%u layers and %u MTP layers (at most %d in all)", c->layers, c->mtp_layers,
	     TF_CONFIG_MAX_LAYERS);
	NEED(c->o_groups && c->heads % c->o_groups == 0,
	     "num_attention_heads %u is not a multiple of o_groups %u", c->heads, c->o_groups);
	NEED(c->rope_dim % 2 == 0 && c->rope_dim <= c->head_dim,
	     "qk_rope_head_dim %u must be even and at most head_dim %u", c->rope_dim, c->head_dim);
	NEED(c->topk >= 1 && c->topk <= c->experts, "num_experts_per_tok %u exceeds %u experts",
	     c->topk, c->experts);
	NEED(c->dspark_experts == 0 || c->dspark_topk <= c->dspark_experts,
	     "dspark top-k %u exceeds %u experts", c->dspark_topk, c->dspark_experts);
	NEED(c->hc_mult == 4, "hc_mult %u (only 4 is supported)", c->hc_mult);
	NEED(c->shared_experts == 1, "n_shared_experts %u (only 1 is supported)",
	     c->shared_experts);
	NEED(c->n_ratios >= c->layers, "compress_ratios has %u entries for %u layers",
	     c->n_ratios, c->layers);
	for (uint32_t i = 0; i < c->n_ratios; i++)
		NEED(c->compress_ratios[i] <= 2, "compress_ratios[%u] = %u (at most 2)", i,
		     c->compress_ratios[i]);
	for (uint32_t i = 0; i < c->n_kv_sources; i++)
		NEED(c->kv_sources[i] < c->layers && tf_config_ratio(c, c->kv_sources[i]),
		     "KV source %u is not a compressed backbone layer", c->kv_sources[i]);
	for (uint32_t i = 0; i < c->n_index_sources; i++)
		NEED(c->index_sources[i] < c->layers && tf_config_ratio(c, c->index_sources[i]),
		     "index source %u is not a compressed backbone layer", c->index_sources[i]);
	for (uint32_t l = 0; l < c->layers; l++)
		NEED(!tf_config_ratio(c, l) ||
		     (tf_config_kv_source(c, l) >= 0 && tf_config_index_source(c, l) >= 0),
		     "compressed layer %u has no KV or index source at or before it", l);
	for (uint32_t i = 0; i < c->n_engram; i++)
		NEED(c->engram_layers[i] < c->layers, "Engram layer %u is not a backbone layer",
		     c->engram_layers[i]);
	NEED(c->n_engram == 0 || (c->engram_max_ngram >= 2 && c->engram_heads >= 1),
	     "Engram needs n-grams of 2 or more and at least one head");
	NEED(c->mtp_layers == 0 || c->n_dspark_targets == 3,
	     "DSpark needs 3 target layers (has %u)", c->n_dspark_targets);
	for (uint32_t i = 0; i < c->n_dspark_targets; i++)
		NEED(c->dspark_targets[i] < c->layers, "DSpark target %u is not a backbone layer",
		     c->dspark_targets[i]);
	NEED(c->bos < c->vocab && c->eos < c->vocab && c->pad < c->vocab,
	     "bos/eos/pad ids must be below vocab_size %u", c->vocab);
	NEED(c->index_topk >= 1 && c->window >= 1, "index_topk and sliding_window must be positive");
#undef NEED
	return TF_OK;
}

uint32_t tf_config_all_layers(const struct tf_config *c)
{
	return c->layers + c->mtp_layers;
}

uint32_t tf_config_ratio(const struct tf_config *c, uint32_t layer)
{
	return layer < c->n_ratios ? c->compress_ratios[layer] : 0;
}

bool tf_config_is_backbone(const struct tf_config *c, uint32_t layer)
{
	return layer < c->layers;
}

bool tf_config_is_kv_source(const struct tf_config *c, uint32_t layer)
{
	return layer < c->layers && contains(c->kv_sources, c->n_kv_sources, layer);
}

bool tf_config_is_index_source(const struct tf_config *c, uint32_t layer)
{
	return layer < c->layers && contains(c->index_sources, c->n_index_sources, layer);
}

bool tf_config_is_engram(const struct tf_config *c, uint32_t layer)
{
	return contains(c->engram_layers, c->n_engram, layer);
}

int tf_config_engram_index(const struct tf_config *c, uint32_t layer)
{
	for (uint32_t i = 0; i < c->n_engram; i++)
		if (c->engram_layers[i] == layer)
			return (int)i;
	return -1;
}

static int latest(const struct tf_config *c, const uint32_t *src, uint32_t n, uint32_t layer)
{
	if (!tf_config_ratio(c, layer))
		return -1;
	int best = -1;
	for (uint32_t i = 0; i < n; i++)
		if (src[i] <= layer && (int)src[i] > best)
			best = (int)src[i];
	return best;
}

int tf_config_kv_source(const struct tf_config *c, uint32_t layer)
{
	return latest(c, c->kv_sources, c->n_kv_sources, layer);
}

int tf_config_index_source(const struct tf_config *c, uint32_t layer)
{
	return latest(c, c->index_sources, c->n_index_sources, layer);
}

enum tf_layer_mode tf_config_mode(const struct tf_config *c, uint32_t layer)
{
	if (!tf_config_ratio(c, layer))
		return TF_MODE_SWA;
	if (tf_config_is_kv_source(c, layer))
		return TF_MODE_FULL;
	if (tf_config_is_index_source(c, layer))
		return TF_MODE_REINDEX;
	return TF_MODE_REUSE;
}

const char *tf_config_mode_name(enum tf_layer_mode m)
{
	static const char *const n[] = {"swa", "full", "reindex", "reuse"};
	return (unsigned)m < 4 ? n[m] : "?";
}

uint32_t tf_config_experts_of(const struct tf_config *c, uint32_t layer)
{
	return layer < c->layers || !c->dspark_experts ? c->experts : c->dspark_experts;
}

uint32_t tf_config_topk_of(const struct tf_config *c, uint32_t layer)
{
	return layer < c->layers || !c->dspark_topk ? c->topk : c->dspark_topk;
}

uint32_t tf_config_hash_cols(const struct tf_config *c)
{
	return (c->engram_max_ngram - 1) * c->engram_heads;
}

static json_t *u32_list(const uint32_t *v, uint32_t n)
{
	json_t *a = json_array();
	for (uint32_t i = 0; i < n; i++)
		json_array_append_new(a, json_integer(v[i]));
	return a;
}

json_t *tf_config_to_json(const struct tf_config *c)
{
	json_t *rows = json_array();
	for (uint32_t i = 0; i < c->n_engram; i++)
		json_array_append_new(rows, json_integer((json_int_t)c->engram_rows[i]));
	json_t *t = json_object();
	for (size_t i = 0; i < N_OF(ints); i++)
		json_object_set_new(t, ints[i].key, json_integer(*(const uint32_t *)((const char *)c +
									ints[i].off)));
	json_object_update_new(t, json_pack("{s:f,s:f,s:b,s:f,s:s,s:s,s:I,s:I,s:f,s:f,s:f}",
		"rms_norm_eps", (double)c->eps, "routed_scaling_factor", (double)c->routed_scale,
		"norm_topk_prob", c->norm_topk, "swiglu_limit", (double)c->swiglu_limit,
		"scoring_func", "sqrtsoftplus", "topk_method", "noaux_tc",
		"candidate_source_layer_id", (json_int_t)c->candidate_source, "engram_vocab_size",
		(json_int_t)c->engram_vocab, "hc_eps", (double)c->hc_eps, "hc_post_alpha",
		(double)c->hc_post_alpha, "engram_gate_clamp", (double)c->engram_gate_clamp));
	json_object_set_new(t, "compress_ratios", u32_list(c->compress_ratios, c->n_ratios));
	json_object_set_new(t, "kv_source_layer_ids", u32_list(c->kv_sources, c->n_kv_sources));
	json_object_set_new(t, "index_source_layer_ids",
			    u32_list(c->index_sources, c->n_index_sources));
	json_object_set_new(t, "engram_layer_ids", u32_list(c->engram_layers, c->n_engram));
	json_object_set_new(t, "engram_num_embeddings", rows);
	json_object_set_new(t, "dspark_target_layer_ids",
			    u32_list(c->dspark_targets, c->n_dspark_targets));
	json_object_update_new(t, json_pack("{s:f,s:f,s:I}", "rope_theta", c->rope_theta,
		"compress_rope_theta", c->compress_rope_theta, "max_position_embeddings",
		(json_int_t)c->max_positions));
	if (c->yarn)
		json_object_set_new(t, "rope_scaling", json_pack("{s:s,s:f,s:I,s:f,s:f}",
			"type", "yarn", "factor", c->rope_factor,
			"original_max_position_embeddings", (json_int_t)c->rope_original_max,
			"beta_fast", c->rope_beta_fast, "beta_slow", c->rope_beta_slow));
	else
		json_object_set_new(t, "rope_scaling", json_null());
	return json_pack("{s:s,s:I,s:I,s:I,s:o}", "model_type", "deepseek_v41", "bos_token_id",
			 (json_int_t)c->bos, "eos_token_id", (json_int_t)c->eos, "pad_token_id",
			 (json_int_t)c->pad, "text_config", t);
}

/* Keep the list's entries below n. */
static void keep_below(uint32_t *v, uint32_t *count, uint32_t n)
{
	uint32_t k = 0;
	for (uint32_t i = 0; i < *count; i++)
		if (v[i] < n)
			v[k++] = v[i];
	*count = k;
}

tf_status tf_config_first_layers(struct tf_config *c, uint32_t n)
{
	if (n < 1 || n > c->layers)
		return tf_err(TF_ERR_CONFIG, "config: %u layers of %u", n, c->layers);
	uint32_t old = c->layers;
	for (uint32_t i = 0; i < c->mtp_layers && old + i < c->n_ratios; i++)
		c->compress_ratios[n + i] = c->compress_ratios[old + i];
	c->n_ratios = c->n_ratios > old ? n + (c->n_ratios - old) : n;
	c->layers = n;
	keep_below(c->kv_sources, &c->n_kv_sources, n);
	keep_below(c->index_sources, &c->n_index_sources, n);
	uint32_t ne = c->n_engram, k = 0;
	for (uint32_t i = 0; i < ne; i++)
		if (c->engram_layers[i] < n) {
			c->engram_layers[k] = c->engram_layers[i];
			c->engram_rows[k++] = c->engram_rows[i];
		}
	c->n_engram = k;
	if (c->candidate_source >= (int64_t)n)
		c->candidate_source = -1;
	for (uint32_t l = 0; l < n && c->candidate_source < 0; l++)
		if (tf_config_mode(c, l) == TF_MODE_REINDEX)
			return tf_err(TF_ERR_CONFIG, "config: layer %u reindexes over candidate blocks, "
				      "and the candidate source is not among the first %u layers", l, n);
	if (c->mtp_layers) { /* the last three layers (layer 0 repeated below three) */
		c->n_dspark_targets = 3;
		for (uint32_t i = 0; i < 3; i++)
			c->dspark_targets[i] = n + i >= 3 ? n + i - 3 : 0;
	}
	return tf_config_validate(c);
}
