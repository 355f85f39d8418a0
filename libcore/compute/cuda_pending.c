/* cuda_pending.c: TEMPORARY stand-ins for the CUDA ops other files will
 * bring (cuda_rows.c, cuda_attn.c, cuda_moe.c, cuda_mhc.c, cuda_sample.c),
 * so that the table in cuda.c links before they are merged: each says it
 * is not there yet. The lead removes this file at the merge. */
#include "compute/cuda_impl.h"

#define PENDING(op) return tf_err(TF_ERR_UNSUPPORTED, "cuda: %s is not built yet", op)

tf_status cuda_rows_copy(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *xi,
			 struct tf_tensor *y, const struct tf_tensor *yi)
{
	PENDING("rows_copy");
}

tf_status cuda_cache_write(struct tf_be *be, const struct tf_rowfmt *f, const struct tf_tensor *x,
			   const struct tf_tensor *idx, struct tf_tensor *cache)
{
	PENDING("cache_write");
}

tf_status cuda_cache_read(struct tf_be *be, const struct tf_rowfmt *f,
			  const struct tf_tensor *cache, const struct tf_tensor *idx,
			  struct tf_tensor *out)
{
	PENDING("cache_read");
}

tf_status cuda_page_rows(struct tf_be *be, const struct tf_tensor *pt, int rpp,
			 const struct tf_tensor *logical, struct tf_tensor *out)
{
	PENDING("page_rows");
}

tf_status cuda_moe_route(struct tf_be *be, const struct tf_tensor *lg, const struct tf_tensor *bias,
			 int k, float scale, struct tf_tensor *ids, struct tf_tensor *weights)
{
	PENDING("moe_route");
}

tf_status cuda_moe_group(struct tf_be *be, const struct tf_tensor *ids, int E,
			 struct tf_tensor *offsets, struct tf_tensor *pair, struct tf_tensor *src)
{
	PENDING("moe_group");
}

tf_status cuda_swiglu(struct tf_be *be, const struct tf_tensor *gate, const struct tf_tensor *up,
		      float limit, struct tf_tensor *a)
{
	PENDING("swiglu");
}

tf_status cuda_moe_combine(struct tf_be *be, const struct tf_tensor *y, const struct tf_tensor *w,
			   const struct tf_tensor *shared, struct tf_tensor *branch)
{
	PENDING("moe_combine");
}

tf_status cuda_hc_mix(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *fn,
		      const struct tf_tensor *base, const struct tf_tensor *scale, float eps,
		      float hc_eps, int iters, float post_alpha, struct tf_tensor *pre,
		      struct tf_tensor *post, struct tf_tensor *comb)
{
	PENDING("hc_mix");
}

tf_status cuda_hc_collapse(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *pre,
			   struct tf_tensor *c)
{
	PENDING("hc_collapse");
}

tf_status cuda_hc_post(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *b,
		       const struct tf_tensor *post, const struct tf_tensor *comb,
		       struct tf_tensor *out)
{
	PENDING("hc_post");
}

tf_status cuda_engram_gate(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *kv,
			   const struct tf_tensor *qk, const struct tf_tensor *blocked, float eps,
			   float clamp, struct tf_tensor *out)
{
	PENDING("engram_gate");
}

tf_status cuda_stream_mean(struct tf_be *be, const struct tf_tensor *x, struct tf_tensor *out)
{
	PENDING("stream_mean");
}

tf_status cuda_sample(struct tf_be *be, const struct tf_tensor *logits,
		      const struct tf_sample_params *params, const int64_t *positions,
		      int32_t *tokens)
{
	PENDING("sample");
}
