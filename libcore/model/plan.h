/* plan.h: a rank's weight plan: for a config, a pack's headers, a rank and a
 * world size, which part of each EXL3 group and native tensor the rank
 * loads, with byte totals. Splits cut on multiples of world x 128.
 *
 * Building the plan is also the pack's full check: every expected tensor
 * must exist with the right dtype and shape (trellis [K/16, N/16, 16 x bits],
 * bits 1..8; suh F16 [K]; svh F16 [N]; markers I32 scalars; the experts of
 * one projection share a codebook), and every tensor in the pack must be
 * planned, ignored (vision, aligner, image_*, *.ffn.gate.bias_vl) or a
 * "X.weight" beside an "X.trellis". */
#ifndef TF_MODEL_PLAN_H
#define TF_MODEL_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "model/config.h"
#include "model/exl3.h"
#include "model/names.h"
#include "pack/pack.h"

struct tf_plan_group {
	struct tf_group_spec spec;
	uint32_t bits;              /* bits per weight, 1..8 */
	enum tf_codebook codebook;
	uint32_t k0, k1, n0, n1;    /* this rank's rows [k0,k1) and columns [n0,n1) */
	uint64_t trellis_bytes;     /* of the part */
	uint64_t scale_bytes;       /* suh and svh parts */
	const struct tf_pack_tensor *trellis, *suh, *svh, *marker;
};

struct tf_plan_native {
	struct tf_native_spec spec;
	const struct tf_pack_tensor *t;
	uint64_t r0, r1;            /* this rank's rows [r0, r1) of dimension 0 */
	uint64_t bytes;             /* of the part, as stored in the pack */
};

struct tf_plan_layer {
	uint64_t attn_bytes, expert_bytes, shared_bytes, other_bytes, native_bytes;
};

struct tf_plan {
	uint32_t rank, world;
	struct tf_plan_group *groups;
	size_t ngroups;
	struct tf_plan_native *natives;
	size_t nnatives;
	struct tf_plan_layer layers[TF_CONFIG_MAX_LAYERS]; /* per block */
	uint64_t group_bytes;       /* trellis + scales of every part */
	uint64_t native_bytes;      /* natives the rank loads (Engram tables excluded) */
	uint64_t engram_bytes;      /* Engram tables (whole: each rank reads its columns' rows) */
	uint64_t total_bytes;       /* group_bytes + native_bytes */
	size_t nignored;            /* pack tensors skipped on purpose */
};

/* Build rank's plan. TF_ERR_CONFIG when the world does not divide the
 * model; TF_ERR_FORMAT naming the tensor when the pack is wrong. Release
 * with tf_plan_release. The plan borrows from pack (keep it open). */
tf_status tf_plan_build(struct tf_plan *p, const struct tf_config *c, const struct tf_pack *pack,
			uint32_t rank, uint32_t world);
void tf_plan_release(struct tf_plan *p);
/* The bytes of one trellis tile at a width: 256 weights x bits / 8. */
static inline uint64_t tf_tile_bytes(uint32_t bits)
{
	return 32u * bits;
}

/* The EXL3 part of one of the plan's groups for the plan's rank (geometry
 * and runs in the whole trellis), checked against the plan's cut:
 * TF_ERR_INTERNAL when the two disagree. */
tf_status tf_plan_exl3_part(const struct tf_plan *plan, const struct tf_plan_group *g,
			    struct tf_exl3_part *part);

#endif
