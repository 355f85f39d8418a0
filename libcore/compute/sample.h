/* sample.h: keyed, deterministic token sampling (server-engine-facts.md §5).
 *
 * A draw depends only on (seed, absolute position, token id) and the row's
 * logits, so a request gives the same tokens alone or batched, drafted or
 * plain. The rule, over one row of logits (ids 0..n-1):
 *   1. order by logit descending, ties to the lower id;
 *   2. keep the top_k first (0: all);
 *   3. divide by the temperature (fp64);
 *   4. top_p in (0, 1): keep the shortest prefix whose cumulative
 *      probability reaches top_p (exp from libm, the total as numpy's
 *      pairwise sum, the cumulative sum in order);
 *   5. min_p > 0: drop scaled logits below the first + ln(min_p);
 *   6. pick the argmax of scaled logit - ln(-ln(u)), u = splitmix64 of
 *      (seed, position, id) as a (0, 1) double.
 * Temperature <= 0 is greedy: the largest logit, ties to the lower id.
 *
 * The nucleus path (tf_sample_nucleus) decides a top_p row from its top
 * `count` candidates and each TP rank's (max, sum of exp) statistics, or
 * says that the whole row is needed; it gives the same token as the whole
 * row whenever it decides. */
#ifndef TF_COMPUTE_SAMPLE_H
#define TF_COMPUTE_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

struct tf_sample_params {
	uint64_t seed;
	double temperature; /* <= 0: greedy */
	uint32_t top_k;     /* 0: no cut */
	double top_p;       /* in (0, 1): nucleus; otherwise off */
	double min_p;       /* > 0: floor relative to the best */
};

/* Candidates a row needs gathered beyond top_k so that ties resolve by id. */
#define TF_SAMPLE_MARGIN 8
/* Candidates a nucleus row gathers (the reference's default). */
#define TF_SAMPLE_NUCLEUS 512

/* The default seed of a request without one: SHA-256 of the prompt ids
 * written "1,2,3|salt" (decimal), the first 8 bytes little-endian, low 63
 * bits. */
uint64_t tf_sample_seed(const int32_t *ids, size_t n, int64_t salt);
/* The keyed uniform in (0, 1): splitmix64 of seed, position, id. */
double tf_sample_uniform(uint64_t seed, uint64_t position, uint64_t id);
/* numpy's float64 pairwise sum (np.add.reduce over a contiguous array). */
double tf_sample_pairwise_sum(const double *a, size_t n);
/* True when p samples greedily (NULL or temperature <= 0). */
int tf_sample_greedy(const struct tf_sample_params *p);
/* True when p takes the nucleus path: sampled, top_k 0, 0 < top_p < 1. */
int tf_sample_is_nucleus(const struct tf_sample_params *p);
/* Candidates a row of p needs from a vocab of n: greedy 1 + margin, top_k
 * + margin, nucleus TF_SAMPLE_NUCLEUS (when nucleus != 0), else n; at most n. */
size_t tf_sample_candidates(const struct tf_sample_params *p, size_t n, size_t nucleus);

/* Scratch for rows of up to `capacity` logits; one per thread. */
struct tf_sampler;
tf_status tf_sampler_new(size_t capacity, struct tf_sampler **out);
void tf_sampler_free(struct tf_sampler *s);

/* The token drawn from a whole row of n logits at an absolute position (p
 * NULL: greedy). n must be 1..capacity. Returns the id. */
int32_t tf_sample_row(struct tf_sampler *s, const float *logits, size_t n, uint64_t position,
		      const struct tf_sample_params *p);

/* The token of a greedy or top_k row from its best candidates: values/ids
 * are the row's n best logits by rule 1 (any order; n <= capacity).
 * Returns 1 with *token set to what tf_sample_row draws from the whole row
 * when they suffice (a greedy row; a top_k row with top_k <= n), else 0
 * (rows without top_k need the whole row or tf_sample_nucleus). */
int tf_sample_top(struct tf_sampler *s, const float *values, const int32_t *ids, size_t n,
		  uint64_t position, const struct tf_sample_params *p, int32_t *token);

/* A TP rank's statistics over its slice of a row for temperature t:
 * max logit, and the sum of exp(v/t - max/t) in fp64. */
struct tf_sample_stats {
	double max, sum;
};
void tf_sample_stats(const float *logits, size_t n, double temperature,
		     struct tf_sample_stats *out);

/* The nucleus path: values/ids are a row's candidates in any order (n of
 * them, each rank's top ones); the best `count` after ordering are kept
 * (0: all); stats holds every rank's statistics. Returns 1 with *token set
 * when the candidates decide the row, 0 when the whole row is needed (the
 * cumulative probability comes within 1e-9 of top_p, runs past the
 * candidates, or the candidates do not hold the row's maximum). */
int tf_sample_nucleus(struct tf_sampler *s, const float *values, const int32_t *ids, size_t n,
		      size_t count, const struct tf_sample_stats *stats, int nstats,
		      uint64_t position, const struct tf_sample_params *p, int32_t *token);

/* Log-probabilities under the row's own softmax (no temperature): *lp of
 * `token`, and the top_n (<= 20) most likely tokens in order (ties to the
 * lower id) into top_ids/top_lp. */
void tf_sample_logprobs(struct tf_sampler *s, const float *logits, size_t n, int32_t token,
			int top_n, float *lp, int32_t *top_ids, float *top_lp);

#endif
