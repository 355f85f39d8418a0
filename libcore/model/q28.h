/* q28.h: the width mix of the real 2.8-bits-per-weight DeepSeek-V4.1-Flash
 * EXL3 pack, so release-shaped synthetic packs and benchmarks carry the real
 * mix, ragged layers included.
 *
 * tf_q28_experts: per layer "L w1 w2 w3 s1,s2,s3 bytes": each of w1/w2/w3 a
 * list K2:count (K2 = 2 x bits) over the routed experts, then the shared
 * expert's K2 for w1,w2,w3, then a TP-2 rank's expert+shared trellis bytes.
 * tf_q28_dense: "L<i>.<group> K2" per dense group (wo_a by local index 0..3
 * of a TP-2 rank), and "head K2". */
#ifndef TF_MODEL_Q28_H
#define TF_MODEL_Q28_H

#include <stdint.h>

#include "base/status.h"
#include "model/names.h"

extern const char tf_q28_experts[];
extern const char tf_q28_dense[];

/* Bits per weight of a group in the q28 pack (spec from tf_names_*), or 0
 * when the tables do not cover it. */
uint32_t tf_q28_bits(const struct tf_config *c, const struct tf_group_spec *g);
/* A layer's TP-2 rank bytes of routed and shared trellis, or 0. */
uint64_t tf_q28_rank_bytes(uint32_t layer);

#endif
