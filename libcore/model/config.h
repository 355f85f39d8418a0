/* config.h: the DeepSeek-V4.1 model config (config.json: "text_config", else
 * the top level; bos/eos from the top level) and its per-layer CSA2 topology.
 *
 * A key missing from the file keeps the release (DSv4.1-Flash) value. The
 * named presets: "tiny" (unit tests: every CSA2 mode, both Engram layers, a
 * DSpark block, small everything), "small" (the CPU demo) and "release".
 * Layers are numbered 0..layers-1 for the backbone, then layers..layers+
 * mtp_layers-1 for the DSpark (MTP) blocks. */
#ifndef TF_MODEL_CONFIG_H
#define TF_MODEL_CONFIG_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"

#define TF_CONFIG_MAX_LAYERS 64
#define TF_CONFIG_MAX_ENGRAM 8

/* The attention a layer runs. */
enum tf_layer_mode {
	TF_MODE_SWA,     /* ratio 0: sliding window only */
	TF_MODE_FULL,    /* a KV source: own compressor, pool rows, index keys, selection */
	TF_MODE_REINDEX, /* an index source that is not a KV source */
	TF_MODE_REUSE,   /* reads the latest sources' selection and pool */
};

struct tf_config {
	uint32_t vocab, hidden, layers, heads, head_dim, rope_dim, q_lora, o_lora, o_groups;
	float eps;
	uint32_t window;
	uint32_t experts, shared_experts, topk, expert_width;
	float routed_scale;
	bool norm_topk;
	float swiglu_limit;
	uint32_t n_ratios;
	uint32_t compress_ratios[TF_CONFIG_MAX_LAYERS];
	uint32_t n_kv_sources, kv_sources[TF_CONFIG_MAX_LAYERS];
	uint32_t n_index_sources, index_sources[TF_CONFIG_MAX_LAYERS];
	uint32_t index_heads, index_dim, index_topk;
	int64_t candidate_source;
	uint32_t candidate_blocks, candidate_block_size;
	uint32_t hc_mult, hc_sinkhorn_iters;
	float hc_eps, hc_post_alpha;
	uint32_t n_engram;
	uint32_t engram_layers[TF_CONFIG_MAX_ENGRAM];
	uint64_t engram_rows[TF_CONFIG_MAX_ENGRAM];
	uint32_t engram_max_ngram;
	uint64_t engram_vocab;
	uint32_t engram_heads, engram_head_dim, engram_pad, engram_compressed_vocab;
	float engram_gate_clamp;
	uint32_t mtp_layers, dspark_block, dspark_noise_token;
	uint32_t n_dspark_targets, dspark_targets[8];
	uint32_t dspark_markov_rank, dspark_experts, dspark_topk;
	double rope_theta, compress_rope_theta, rope_factor, rope_beta_fast, rope_beta_slow;
	uint64_t rope_original_max, max_positions;
	bool yarn;
	uint32_t bos, eos, pad;
};

/* Fill c with a named preset: "tiny", "small" or "release". TF_ERR_ARG for
 * another name. */
tf_status tf_config_preset(struct tf_config *c, const char *name);
/* The preset names, "tiny|small|release". */
const char *tf_config_preset_names(void);
/* Keep the first n backbone layers of c (1 <= n <= c->layers), with the
 * DSpark blocks after them: sources, Engram layers and the candidate
 * source past them are dropped, the DSpark targets become the last three
 * layers kept. TF_ERR_CONFIG when the result does not validate (e.g. a
 * compressed layer left without a source, or a reindexing one without its
 * candidate source). */
tf_status tf_config_first_layers(struct tf_config *c, uint32_t n);
/* Parse config.json text/JSON (the release values are the defaults) and
 * validate. what names the source in messages. */
tf_status tf_config_from_json(struct tf_config *c, const json_t *root, const char *what);
/* Read and parse a config.json file. */
tf_status tf_config_load(struct tf_config *c, const char *path);
/* The shapes the loader and kernels assume; TF_ERR_CONFIG naming the rule. */
tf_status tf_config_validate(const struct tf_config *c);
/* config.json for c (with "text_config" and the top-level ids); caller
 * json_decrefs. */
json_t *tf_config_to_json(const struct tf_config *c);

uint32_t tf_config_all_layers(const struct tf_config *c);
uint32_t tf_config_ratio(const struct tf_config *c, uint32_t layer);
bool tf_config_is_backbone(const struct tf_config *c, uint32_t layer);
bool tf_config_is_kv_source(const struct tf_config *c, uint32_t layer);
bool tf_config_is_index_source(const struct tf_config *c, uint32_t layer);
bool tf_config_is_engram(const struct tf_config *c, uint32_t layer);
/* The latest KV / index source at or before a compressed layer, or -1. */
int tf_config_kv_source(const struct tf_config *c, uint32_t layer);
int tf_config_index_source(const struct tf_config *c, uint32_t layer);
enum tf_layer_mode tf_config_mode(const struct tf_config *c, uint32_t layer);
const char *tf_config_mode_name(enum tf_layer_mode m);
/* Routed experts and top-k of a layer (DSpark blocks have their own). */
uint32_t tf_config_experts_of(const struct tf_config *c, uint32_t layer);
uint32_t tf_config_topk_of(const struct tf_config *c, uint32_t layer);
/* Engram hash columns: (max n-gram - 1) x heads. */
uint32_t tf_config_hash_cols(const struct tf_config *c);
/* Engram layer index (0-based within engram_layers) or -1. */
int tf_config_engram_index(const struct tf_config *c, uint32_t layer);

#endif
