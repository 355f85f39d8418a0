/* cpu_sample.c: the CPU sampling op: rows drawn in parallel, each with its
 * worker's sampler scratch (the rule is sample.h's). */
#include <stdlib.h>

#include "base/alloc.h"
#include "compute/cpu_impl.h"
#include "compute/ops_args.h"
#include "compute/sample.h"

struct sample_job {
	const float *logits;
	const struct tf_sample_params *params;
	const int64_t *positions;
	int32_t *tokens;
	struct tf_sampler **samplers;
	int64_t V;
};

static void sample_part(void *ctx, size_t begin, size_t end, int worker)
{
	struct sample_job *j = ctx;
	for (size_t r = begin; r < end; r++)
		j->tokens[r] = tf_sample_row(j->samplers[worker], j->logits + (int64_t)r * j->V,
					     (size_t)j->V, (uint64_t)j->positions[r], &j->params[r]);
}

tf_status cpu_sample(struct tf_be *be, const struct tf_tensor *logits,
		     const struct tf_sample_params *params, const int64_t *positions,
		     int32_t *tokens)
{
	tf_status st;
	int64_t R, V;
	if ((st = tf_args_sample(logits, &R, &V)))
		return st;
	/* one row runs inline; more take every worker (tf_pool_for's ids) */
	int workers = R > 1 ? tf_pool_size(cpu_pool(be)) : 1;
	struct tf_sampler **samplers = calloc((size_t)workers, sizeof *samplers);
	if (!samplers)
		return tf_err(TF_ERR_NOMEM, "sample: out of memory");
	for (int w = 0; w < workers && !st; w++)
		st = tf_sampler_new((size_t)V, &samplers[w]);
	if (!st) {
		struct sample_job j = {.logits = logits->data, .params = params,
				       .positions = positions, .tokens = tokens,
				       .samplers = samplers, .V = V};
		if (workers > 1)
			tf_pool_for(cpu_pool(be), (size_t)R, 1, sample_part, &j);
		else
			sample_part(&j, 0, (size_t)R, 0);
	}
	for (int w = 0; w < workers; w++)
		tf_sampler_free(samplers[w]);
	free(samplers);
	return st;
}
