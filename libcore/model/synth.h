/* synth.h: write a complete, valid synthetic DeepSeek-V4.1 EXL3 pack for any
 * config: config.json, tokenizer.json, sharded safetensors with an index,
 * EXL3 groups (random trellis bits, suh random signs, svh = +-1/sqrt(K) so a
 * layer keeps activations near unit scale), native tensors, and Engram
 * tables (random e4m3 rows with modest UE8M0 scales).
 *
 * Every tensor's data depends only on (seed, tensor name), so packs with
 * other shard sizes hold the same tensors. Data is generated and written in
 * bounded chunks: memory stays flat in the pack size. Sparse packs write
 * real headers and leave the data as holes. */
#ifndef TF_MODEL_SYNTH_H
#define TF_MODEL_SYNTH_H

#include <stdbool.h>
#include <stdint.h>

#include "base/progress.h"
#include "base/status.h"
#include "model/config.h"
#include "model/names.h"

enum tf_synth_codebooks { TF_SYNTH_3INST, TF_SYNTH_MCG, TF_SYNTH_MUL1, TF_SYNTH_MIXED };

struct tf_synth_opts {
	const struct tf_config *config;
	uint64_t seed;
	bool sparse;
	bool q28;                 /* widths of the real 2.8-bpw release pack */
	uint32_t bits[8];         /* otherwise: widths drawn from this list */
	int nbits;
	enum tf_synth_codebooks codebooks;
	uint64_t shard_bytes;     /* start a new shard past this many bytes */
	bool index;               /* write model.safetensors.index.json */
	const char *tokenizer;    /* take this tokenizer.json (V4.1 markers added
				   * below the vocabulary when missing), or NULL to
				   * synthesise one */
	struct tf_progress *progress; /* or NULL */
};

struct tf_synth_stats {
	uint64_t tensors, shards, bytes, data_bytes;
};

/* Write the pack into dir (created if missing; files replaced atomically). */
tf_status tf_synth_write(const struct tf_synth_opts *o, const char *dir,
			 struct tf_synth_stats *stats);
/* Rewrite the pack in dir (one tf_synth_write wrote, with DSpark blocks)
 * so that its drafts are right: the backbone's greedy next token of t is
 * targets[t mod R] and every DSpark draft is the backbone's own next token
 * (synth_chain.c says how), so speculative decoding accepts every draft of
 * a greedy run. R, the config's Markov rank, goes to *rank; targets holds
 * max entries at least. The weights are no model's: for measuring and
 * testing the accept path. TF_ERR_CONFIG without DSpark blocks or with a
 * rank past max. */
tf_status tf_synth_chain(const char *dir, int32_t *targets, int max, int *rank);
/* A synthetic pack's data without writing the pack: bytes [off, off + n)
 * of tensor `name` as tf_synth_write(o) writes them (o->config, o->seed and
 * the widths; o->progress is not used). Each read generates the tensor
 * from its start (the cost grows with off + n), so it suits the small
 * tensors and the first rows of large ones. TF_ERR_NOTFOUND for a name the
 * pack has not, TF_ERR_RANGE past its end. */
struct tf_synth_src;
tf_status tf_synth_src_new(const struct tf_synth_opts *o, struct tf_synth_src **out);
tf_status tf_synth_src_read(struct tf_synth_src *s, const char *name, uint64_t off, void *buf,
			    uint64_t n);
void tf_synth_src_free(struct tf_synth_src *s);

/* The width a synthetic pack gives a group (exposed for tests). */
uint32_t tf_synth_bits(const struct tf_synth_opts *o, const struct tf_group_spec *g);
/* The codebook a synthetic pack gives a group. */
enum tf_codebook tf_synth_codebook(const struct tf_synth_opts *o, const struct tf_group_spec *g);

#endif
