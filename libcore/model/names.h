/* names.h: the pack's tensor names for DeepSeek-V4.1, the TP split of each
 * EXL3 group, the shapes the forward expects, and the names the text engine
 * never reads. Blocks are "layers.L" for the backbone and "mtp.i" for DSpark
 * block i (layer = layers + i).
 *
 * An EXL3 group <p> is the tensors <p>.trellis I16 [K/16, N/16, 16*bits],
 * <p>.suh F16 [K], <p>.svh F16 [N] and optionally <p>.mcg or <p>.mul1 (I32
 * scalar codebook markers). */
#ifndef TF_MODEL_NAMES_H
#define TF_MODEL_NAMES_H

#include <stdbool.h>
#include <stdint.h>

#include "model/config.h"
#include "model/engram_rows.h" /* TF_ENGRAM_ROW_BYTES: the table row size */
#include "pack/dtype.h"

#define TF_NAME_MAX 96

enum tf_split {
	TF_SPLIT_WHOLE, /* every rank holds all of it */
	TF_SPLIT_ROW,   /* ranks hold contiguous K rows (and suh); sum the outputs */
	TF_SPLIT_COL,   /* ranks hold contiguous N columns (and svh); concatenate */
};

enum tf_proj {
	TF_PROJ_WQ_A, TF_PROJ_WKV, TF_PROJ_WQ_B, TF_PROJ_WO_A, TF_PROJ_WO_B,
	TF_PROJ_COMP_WKV, TF_PROJ_COMP_WGATE, TF_PROJ_IX_WQ_B, TF_PROJ_IX_WK,
	TF_PROJ_SHARED_W1, TF_PROJ_SHARED_W2, TF_PROJ_SHARED_W3, TF_PROJ_ENGRAM_WKV,
	TF_PROJ_EXPERT_W1, TF_PROJ_EXPERT_W2, TF_PROJ_EXPERT_W3, TF_PROJ_HEAD,
	TF_PROJ_MAIN_PROJ,
};

struct tf_group_spec {
	enum tf_proj proj;
	char name[TF_NAME_MAX]; /* the group prefix, e.g. "layers.3.attn.wq_b" */
	enum tf_split split;
	uint32_t k, n;
	uint32_t layer;         /* UINT32_MAX for top-level groups */
	uint32_t index;         /* wo_a: the global group; experts: the expert id */
};

/* How a native tensor may be stored. */
enum tf_store {
	TF_STORE_NORM, /* bf16 or f32 (the forward holds f32) */
	TF_STORE_F32,  /* f32 only */
	TF_STORE_HALF, /* f16 or bf16, rounded to bf16 once */
	TF_STORE_TABLE,/* Engram rows: u8 [rows, 264] */
};

/* How ranks hold a native tensor. */
enum tf_slice {
	TF_SLICE_WHOLE,
	TF_SLICE_HEADS,      /* split with the attention heads */
	TF_SLICE_VOCAB_ROWS, /* split by vocabulary rows */
	TF_SLICE_ENGRAM,     /* Engram rows: read by row from shards, never loaded whole */
};

struct tf_native_spec {
	char name[TF_NAME_MAX];
	enum tf_store store;
	int ndim;
	uint64_t shape[2];
	enum tf_slice slice;
	uint32_t layer;         /* UINT32_MAX for top-level tensors */
	bool optional;          /* a pack may lack it */
};

/* EXL3 codebooks, chosen by a group's marker tensor (none: 3INST). */
enum tf_codebook { TF_CODEBOOK_3INST, TF_CODEBOOK_MCG, TF_CODEBOOK_MUL1 };
#define TF_CODEBOOK_MCG_MARKER 0xCBAC1FEDu
#define TF_CODEBOOK_MUL1_MARKER 0x83DCD12Du
const char *tf_codebook_name(enum tf_codebook cb);

/* "layers.L" or "mtp.i" into buf (TF_NAME_MAX). */
void tf_names_block(const struct tf_config *c, uint32_t layer, char *buf);
/* Every EXL3 group of a block (all wo_a slices, routed experts included), in
 * a stable order; returns the count written (at most cap), or the count
 * needed when out is NULL. */
int tf_names_block_groups(const struct tf_config *c, uint32_t layer, struct tf_group_spec *out,
			  int cap);
/* Every native tensor of a block. */
int tf_names_block_natives(const struct tf_config *c, uint32_t layer,
			   struct tf_native_spec *out, int cap);
/* Top-level groups (head; DSpark main_proj) and natives (embed, norm,
 * DSpark heads). */
int tf_names_top_groups(const struct tf_config *c, struct tf_group_spec *out, int cap);
int tf_names_top_natives(const struct tf_config *c, struct tf_native_spec *out, int cap);
/* Whether a store accepts a dtype. */
bool tf_store_accepts(enum tf_store s, enum tf_dtype d);
const char *tf_split_name(enum tf_split s);
/* The short name of a projection ("wq_a", "expert.w2", ...). */
const char *tf_proj_name(enum tf_proj p);
/* Names the text engine never reads: vision tower, aligner, image markers,
 * image routing bias. (A "X.weight" whose "X.trellis" exists is also
 * skipped; the caller checks that, having the pack.) */
bool tf_names_ignored(const char *name);

#endif
