/* depth.h: how many drafts a decode row verifies, from measured costs.
 *
 * The backend times each forward against the rows it ran and keeps a
 * decayed least-squares fit seconds = fixed + rows * per_row. A lane whose
 * drafts were accepted at rate a (accepted / (accepted + rejections), with
 * one of each as a prior) expects 1 + a + a^2 + .. + a^k tokens from a row
 * of k drafts, at the price of its share of the round (fixed / lanes) plus
 * (1 + k) rows. The rule takes the k in 0..max with the most tokens a
 * second; a lane left at 0 tries one draft every TF_DEPTH_PROBE rows, so
 * that a lane whose text turns predictable is noticed. Until
 * TF_DEPTH_WARMUP rounds were timed, and with `fixed`, every row takes max.
 *
 * What this is not: it never changes which tokens come out (drafts are
 * verified), only how many rows a round spends on them. */
#ifndef TF_ENGINE_DEPTH_H
#define TF_ENGINE_DEPTH_H

#include <stdbool.h>
#include <stdint.h>

#define TF_DEPTH_WARMUP 8
#define TF_DEPTH_PROBE 16

struct tf_depth {
	bool fixed;
	uint64_t rounds;
	double w, sx, sy, sxx, sxy; /* decayed sums over rounds of rows x and seconds y */
};

void tf_depth_init(struct tf_depth *d, bool fixed);
/* A forward of `rows` rows took `seconds`. */
void tf_depth_observe(struct tf_depth *d, uint32_t rows, double seconds);
/* The fitted costs (seconds): fixed per forward and per row. */
void tf_depth_costs(const struct tf_depth *d, double *fixed, double *per_row);
/* Drafts for a lane with `accepted` drafts accepted and `rejects` rows
 * that rejected one, `idle` rows since it last drafted, in a round of
 * `lanes` decode rows; at most max. */
uint32_t tf_depth_choose(const struct tf_depth *d, uint64_t accepted, uint64_t rejects,
			 uint32_t idle, uint32_t lanes, uint32_t max);

#endif
