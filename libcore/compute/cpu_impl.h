/* cpu_impl.h: what the CPU backend's files (cpu_*.c) share: the backend
 * state, row loads and stores in fp32, and argument checks. Internal to
 * libcore/compute; the public interface is ops.h. */
#ifndef TF_COMPUTE_CPU_IMPL_H
#define TF_COMPUTE_CPU_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/f16.h"
#include "base/thread.h"
#include "compute/ops.h"

struct cpu_be {
	struct tf_pool *pool;
};

static inline struct tf_pool *cpu_pool(struct tf_be *be)
{
	return ((struct cpu_be *)be->impl)->pool;
}


/* n values of t from element offset off, as fp32. */
static inline void cpu_load(const struct tf_tensor *t, int64_t off, int64_t n, float *dst)
{
	switch (t->dt) {
	case TF_DT_F32: {
		const float *s = (const float *)t->data + off;
		for (int64_t i = 0; i < n; i++)
			dst[i] = s[i];
		break;
	}
	case TF_DT_BF16: {
		const uint16_t *s = (const uint16_t *)t->data + off;
		for (int64_t i = 0; i < n; i++)
			dst[i] = tf_bf16_to_f32(s[i]);
		break;
	}
	case TF_DT_F16: {
		const uint16_t *s = (const uint16_t *)t->data + off;
		for (int64_t i = 0; i < n; i++)
			dst[i] = tf_f16_to_f32(s[i]);
		break;
	}
	default:
		for (int64_t i = 0; i < n; i++)
			dst[i] = 0;
	}
}

/* n fp32 values into t from element offset off, rounded to nearest even
 * when t is bf16 or f16. */
static inline void cpu_store(struct tf_tensor *t, int64_t off, int64_t n, const float *src)
{
	switch (t->dt) {
	case TF_DT_F32: {
		float *d = (float *)t->data + off;
		for (int64_t i = 0; i < n; i++)
			d[i] = src[i];
		break;
	}
	case TF_DT_BF16: {
		uint16_t *d = (uint16_t *)t->data + off;
		for (int64_t i = 0; i < n; i++)
			d[i] = tf_f32_to_bf16(src[i]);
		break;
	}
	case TF_DT_F16: {
		uint16_t *d = (uint16_t *)t->data + off;
		for (int64_t i = 0; i < n; i++)
			d[i] = tf_f32_to_f16(src[i]);
		break;
	}
	default:
		break;
	}
}

static inline const int32_t *cpu_i32(const struct tf_tensor *t)
{
	return (const int32_t *)t->data;
}

/* The fp32 dot product of n values in 8 interleaved partial sums (a fixed
 * order the compiler can vectorise), the partials added pairwise. */
static inline float cpu_dot(const float *a, const float *b, int64_t n)
{
	float s[8] = {0};
	int64_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (int j = 0; j < 8; j++)
			s[j] += a[i + j] * b[i + j];
	for (int j = 0; i < n; i++, j++)
		s[j] += a[i] * b[i];
	return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

/* Sum of squares in the same order. */
static inline float cpu_sumsq(const float *a, int64_t n)
{
	return cpu_dot(a, a, n);
}

/* (mean(x^2) + eps)^-1/2 in fp32, the sum of squares as cpu_dot's. */
float cpu_rms_scale(const float *x, int64_t n, float eps);

/* The wide order of the n-long sums of rmsnorm and the Engram gate, which
 * their kernels (kernels/dense.cu tf_dense_rmsnorm, kernels/mhc.cu
 * tf_mhc_engram) follow bit for bit with a thread a partial: CPU_WIDE
 * interleaved fp32 partials, partial j over the elements i = j mod
 * CPU_WIDE in increasing i (IEEE products and sums, no contraction), then
 * folded in halves: for w = CPU_WIDE / 2, ..., 2, 1: s[j] = s[j] + s[j + w]
 * for j < w; the sum is s[0]. The partials' loop vectorises (no chain
 * across the 256 lanes), so it costs no more than cpu_dot's 8 partials. */
#define CPU_WIDE 256
/* sum x[i]^2 in the wide order. */
float cpu_wide_sumsq(const float *x, int64_t n);
/* sum (a[i] b[i]) c[i] in the wide order. */
float cpu_wide_dot3(const float *a, const float *b, const float *c, int64_t n);
/* (mean(x^2) + eps)^-1/2 in fp32 over cpu_wide_sumsq: 1 / sqrtf(ss / n +
 * eps). */
float cpu_wide_rms_scale(const float *x, int64_t n, float eps);

/* Per-thread scratch: n floats for worker w of a call, from one block
 * allocated by the caller (workers * n floats). */
static inline float *cpu_scratch(float *block, int worker, int64_t n)
{
	return block + (int64_t)worker * n;
}

/* The sampling op (cpu_sample.c). */
tf_status cpu_sample(struct tf_be *be, const struct tf_tensor *logits,
		     const struct tf_sample_params *params, const int64_t *positions,
		     int32_t *tokens);

/* Op entry points by file, so cpu.c can fill the table. */
/* cpu_dense.c */
tf_status cpu_convert(struct tf_be *be, const struct tf_tensor *x, struct tf_tensor *y);
tf_status cpu_linear(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *w,
		     struct tf_tensor *y);
tf_status cpu_linear_experts(struct tf_be *be, const struct tf_tensor *w, int n_experts,
			     const struct tf_tensor *expert_ids, const struct tf_tensor *offsets,
			     const struct tf_tensor *x, struct tf_tensor *y);
tf_status cpu_embed(struct tf_be *be, const struct tf_tensor *table, int64_t vocab_lo,
		    const struct tf_tensor *ids, struct tf_tensor *out);
tf_status cpu_rmsnorm(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *w,
		      float eps, struct tf_tensor *y);
tf_status cpu_rope(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *pos,
		   const struct tf_rope_freqs *rf, int inverse, struct tf_tensor *y);
tf_status cpu_exl3_matmul(struct tf_be *be, const struct tf_exl3_layer *w,
			  const struct tf_tensor *x, struct tf_tensor *y);
tf_status cpu_exl3_matmul_experts(struct tf_be *be, const struct tf_exl3_layer *experts,
				  int n_experts, const struct tf_tensor *expert_ids,
				  const struct tf_tensor *offsets, const struct tf_tensor *x,
				  struct tf_tensor *y);
tf_status cpu_attention(struct tf_be *be, const struct tf_tensor *q, const struct tf_tensor *keys,
			const struct tf_tensor *key_off, const struct tf_tensor *key_idx,
			const struct tf_tensor *sink, struct tf_tensor *out);
tf_status cpu_compressor(struct tf_be *be, const struct tf_tensor *u, const struct tf_tensor *g,
			 const struct tf_tensor *w, float eps, struct tf_tensor *lat);
tf_status cpu_index_score(struct tf_be *be, const struct tf_tensor *iq,
			  const struct tf_tensor *iw, const struct tf_tensor *keys,
			  const struct tf_tensor *n_vis, const struct tf_tensor *blocks, int bs,
			  struct tf_tensor *scores);
tf_status cpu_index_topk(struct tf_be *be, const struct tf_tensor *scores,
			 const struct tf_tensor *n_vis, int k, struct tf_tensor *sel,
			 struct tf_tensor *n_sel);
tf_status cpu_candidate_blocks(struct tf_be *be, const struct tf_tensor *scores,
			       const struct tf_tensor *n_vis, int bs, int topb,
			       struct tf_tensor *blocks);
tf_status cpu_moe_route(struct tf_be *be, const struct tf_tensor *lg, const struct tf_tensor *bias,
			int k, float scale, struct tf_tensor *ids, struct tf_tensor *weights);
tf_status cpu_swiglu(struct tf_be *be, const struct tf_tensor *gate, const struct tf_tensor *up,
		     float limit, struct tf_tensor *a);
tf_status cpu_moe_combine(struct tf_be *be, const struct tf_tensor *y, const struct tf_tensor *w,
			  const struct tf_tensor *shared, struct tf_tensor *branch);
tf_status cpu_hc_mix(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *fn,
		     const struct tf_tensor *base, const struct tf_tensor *scale, float eps,
		     float hc_eps, int iters, float post_alpha, struct tf_tensor *pre,
		     struct tf_tensor *post, struct tf_tensor *comb);
tf_status cpu_hc_collapse(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *pre,
			  struct tf_tensor *c);
tf_status cpu_hc_post(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *b,
		      const struct tf_tensor *post, const struct tf_tensor *comb,
		      struct tf_tensor *out);
tf_status cpu_engram_gate(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *kv,
			  const struct tf_tensor *qk, const struct tf_tensor *blocked, float eps,
			  float clamp, struct tf_tensor *out);
/* cpu_rows.c */
tf_status cpu_fill_random(struct tf_be *be, struct tf_tensor *t, uint64_t seed);
tf_status cpu_rows_copy(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *xi,
			struct tf_tensor *y, const struct tf_tensor *yi);
tf_status cpu_cache_write(struct tf_be *be, const struct tf_rowfmt *f, const struct tf_tensor *x,
			  const struct tf_tensor *idx, struct tf_tensor *cache);
tf_status cpu_cache_read(struct tf_be *be, const struct tf_rowfmt *f,
			 const struct tf_tensor *cache, const struct tf_tensor *idx,
			 struct tf_tensor *out);
tf_status cpu_page_rows(struct tf_be *be, const struct tf_tensor *pt, int rpp,
			const struct tf_tensor *logical, struct tf_tensor *out);
tf_status cpu_attn_keys(struct tf_be *be, const struct tf_tensor *sel,
			const struct tf_tensor *n_sel, int direct, int64_t p0, int window,
			int64_t pbase, int64_t wbase, int append, struct tf_tensor *key_off, struct tf_tensor *key_idx);
tf_status cpu_moe_group(struct tf_be *be, const struct tf_tensor *ids, int E,
			struct tf_tensor *offsets, struct tf_tensor *pair, struct tf_tensor *src);
tf_status cpu_stream_mean(struct tf_be *be, const struct tf_tensor *x, struct tf_tensor *out);

#endif
