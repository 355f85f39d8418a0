/* cuda_impl.h: what the CUDA backend's files (cuda_*.c) share: the backend
 * state, device addresses of tensors, kernel lookup and launch, scratch
 * memory, and each file's op entry points for the table in cuda.c.
 * Internal to libcore/compute; the public interface is ops.h
 * (tf_cuda_be_new).
 *
 * Every op checks its arguments on the host exactly as the CPU twin does
 * (tf_op_check, the same shapes and dtypes, the same TF_ERR_ARG cases) and
 * then only queues work on the backend's one stream: no op reads device
 * memory on the host or waits for the device, except download, sync and
 * sample's tokens. Kernels live in kernels/<family>.cu, each opening with
 * its math, layout, accumulation type and launch limits; the CPU twin of
 * each is the cpu_*.c op of the same name. */
#ifndef TF_COMPUTE_CUDA_IMPL_H
#define TF_COMPUTE_CUDA_IMPL_H

#include <stdint.h>

#include "compute/ops.h"
#include "cuda/driver.h"

struct cuda_be; /* cuda.c */

/* The device address of t's data. */
static inline tf_cu_ptr cuda_ptr(const struct tf_tensor *t)
{
	return (tf_cu_ptr)(uintptr_t)t->data;
}

/* The backend's stream and SM count. */
tf_cu_stream cuda_stream(struct tf_be *be);
int cuda_sms(struct tf_be *be);
/* True inside a graphed call's dry or captured pass (cuda_graph.c): an op
 * that must wait for the device or change the backend's lasting state
 * refuses then (TF_ERR_UNSUPPORTED), and the call runs eagerly instead. */
int cuda_recording(struct tf_be *be);

/* A kernel looked up by its extern "C" name once per module load. */
struct cuda_fn {
	const char *name;
	tf_cu_func f;
	unsigned generation;
};
/* Launch fn on be's stream with a grid of (gx, gy) blocks of `block`
 * threads and shmem bytes of dynamic shared memory; the failure names the
 * kernel and the op. */
tf_status cuda_launch(struct tf_be *be, struct cuda_fn *fn, unsigned gx, unsigned gy,
		      unsigned block, unsigned shmem, void **params);

/* Scratch device memory of n bytes for an op's own use, from the
 * backend's arena. Work queued on the one stream is ordered, so scratch
 * released right after the op's launches are queued may be handed to the
 * next op. Release in the reverse order of allocation: the arena's free
 * lists then come back as they were, so the same work gets the same
 * addresses again (a graphed call's replays depend on it: cuda_graph.c). */
tf_status cuda_scratch(struct tf_be *be, size_t n, tf_cu_ptr *p);
void cuda_scratch_release(struct tf_be *be, tf_cu_ptr p);

/* hc_mix's completion counters (kernels/mhc.cu tf_mhc_mix_*: one a row
 * group of a launch, counted up by the group's blocks and set back to 0 by
 * the last, so they read 0 between launches and across graph replays):
 * CUDA_MIX_COUNTERS u32 of device memory, zeroed when the backend is made,
 * for the one stream's launches. */
#define CUDA_MIX_COUNTERS 4096
tf_cu_ptr cuda_mix_counters(struct tf_be *be);

/* Op entry points by file, so cuda.c can fill the table. */
/* cuda.c (memory), cuda_dense.c (convert, linear, embed, rmsnorm, rope): cuda_be.h */
/* cuda_exl3.c */
tf_status cuda_exl3_matmul(struct tf_be *be, const struct tf_exl3_layer *w,
			   const struct tf_tensor *x, struct tf_tensor *y);
tf_status cuda_exl3_matmul_experts(struct tf_be *be, const struct tf_exl3_layer *experts,
				   int n_experts, const struct tf_tensor *expert_ids,
				   const struct tf_tensor *offsets, const struct tf_tensor *x,
				   struct tf_tensor *y);
tf_status cuda_linear_experts(struct tf_be *be, const struct tf_tensor *w, int n_experts,
			      const struct tf_tensor *expert_ids, const struct tf_tensor *offsets,
			      const struct tf_tensor *x, struct tf_tensor *y);
/* cuda_rows.c */
tf_status cuda_fill_random(struct tf_be *be, struct tf_tensor *t, uint64_t seed);
tf_status cuda_rows_copy(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *xi,
			 struct tf_tensor *y, const struct tf_tensor *yi);
tf_status cuda_cache_write(struct tf_be *be, const struct tf_rowfmt *f, const struct tf_tensor *x,
			   const struct tf_tensor *idx, struct tf_tensor *cache);
tf_status cuda_cache_read(struct tf_be *be, const struct tf_rowfmt *f,
			  const struct tf_tensor *cache, const struct tf_tensor *idx,
			  struct tf_tensor *out);
tf_status cuda_page_rows(struct tf_be *be, const struct tf_tensor *pt, int rpp,
			 const struct tf_tensor *logical, struct tf_tensor *out);
/* cuda_attn.c */
tf_status cuda_attention(struct tf_be *be, const struct tf_tensor *q, const struct tf_tensor *keys,
			 const struct tf_tensor *key_off, const struct tf_tensor *key_idx,
			 const struct tf_tensor *sink, struct tf_tensor *out);
tf_status cuda_compressor(struct tf_be *be, const struct tf_tensor *u, const struct tf_tensor *g,
			  const struct tf_tensor *w, float eps, struct tf_tensor *lat);
tf_status cuda_index_score(struct tf_be *be, const struct tf_tensor *iq,
			   const struct tf_tensor *iw, const struct tf_tensor *keys,
			   const struct tf_tensor *n_vis, const struct tf_tensor *blocks, int bs,
			   struct tf_tensor *scores);
tf_status cuda_index_topk(struct tf_be *be, const struct tf_tensor *scores,
			  const struct tf_tensor *n_vis, int k, struct tf_tensor *sel,
			  struct tf_tensor *n_sel);
tf_status cuda_candidate_blocks(struct tf_be *be, const struct tf_tensor *scores,
				const struct tf_tensor *n_vis, int bs, int topb,
				struct tf_tensor *blocks);
tf_status cuda_attn_keys(struct tf_be *be, const struct tf_tensor *sel,
			 const struct tf_tensor *n_sel, int direct, int64_t p0, int window,
			 int64_t pbase, int64_t wbase, int append, struct tf_tensor *key_off, struct tf_tensor *key_idx);
/* cuda_moe.c */
tf_status cuda_moe_route(struct tf_be *be, const struct tf_tensor *lg, const struct tf_tensor *bias,
			 int k, float scale, struct tf_tensor *ids, struct tf_tensor *weights);
tf_status cuda_moe_group(struct tf_be *be, const struct tf_tensor *ids, int E,
			 struct tf_tensor *offsets, struct tf_tensor *pair, struct tf_tensor *src);
tf_status cuda_swiglu(struct tf_be *be, const struct tf_tensor *gate, const struct tf_tensor *up,
		      float limit, struct tf_tensor *a);
tf_status cuda_moe_combine(struct tf_be *be, const struct tf_tensor *y, const struct tf_tensor *w,
			   const struct tf_tensor *shared, struct tf_tensor *branch);
/* cuda_mhc.c */
tf_status cuda_hc_mix(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *fn,
		      const struct tf_tensor *base, const struct tf_tensor *scale, float eps,
		      float hc_eps, int iters, float post_alpha, struct tf_tensor *pre,
		      struct tf_tensor *post, struct tf_tensor *comb);
tf_status cuda_hc_collapse(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *pre,
			   struct tf_tensor *c);
tf_status cuda_hc_post(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *b,
		       const struct tf_tensor *post, const struct tf_tensor *comb,
		       struct tf_tensor *out);
tf_status cuda_engram_gate(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *kv,
			   const struct tf_tensor *qk, const struct tf_tensor *blocked, float eps,
			   float clamp, struct tf_tensor *out);
tf_status cuda_stream_mean(struct tf_be *be, const struct tf_tensor *x, struct tf_tensor *out);
/* cuda_sample.c */
tf_status cuda_sample(struct tf_be *be, const struct tf_tensor *logits,
		      const struct tf_sample_params *params, const int64_t *positions,
		      int32_t *tokens);

#endif
