/* cpu.c: the CPU backend: the table and memory (host memory from the C
 * heap). The ops live by family in cpu_dense.c (convert, linear, embed,
 * rmsnorm, rope), cpu_exl3.c (EXL3 matmuls), cpu_attn.c (attention,
 * compressor, indexer, key lists), cpu_moe.c (routing, grouping, SwiGLU,
 * combine), cpu_mhc.c (mHC, Engram gate, stream mean), cpu_rows.c (row
 * moves and cache rows) and cpu_sample.c; compute/cuda*.c are their CUDA
 * twins. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "compute/cpu_impl.h"

float cpu_rms_scale(const float *x, int64_t n, float eps)
{
	float ms = cpu_sumsq(x, n) / (float)n;
	return 1.0f / sqrtf(ms + eps);
}

/* The wide order's fold (cpu_impl.h): s[j] += s[j + w], w halving. */
static float wide_fold(float *s)
{
	for (int w = CPU_WIDE / 2; w > 0; w >>= 1)
		for (int j = 0; j < w; j++)
			s[j] += s[j + w];
	return s[0];
}

float cpu_wide_sumsq(const float *x, int64_t n)
{
	float s[CPU_WIDE] = {0};
	int64_t i = 0;
	for (; i + CPU_WIDE <= n; i += CPU_WIDE)
		for (int j = 0; j < CPU_WIDE; j++)
			s[j] += x[i + j] * x[i + j];
	for (int j = 0; i + j < n; j++)
		s[j] += x[i + j] * x[i + j];
	return wide_fold(s);
}

float cpu_wide_dot3(const float *a, const float *b, const float *c, int64_t n)
{
	float s[CPU_WIDE] = {0};
	int64_t i = 0;
	for (; i + CPU_WIDE <= n; i += CPU_WIDE)
		for (int j = 0; j < CPU_WIDE; j++)
			s[j] += a[i + j] * b[i + j] * c[i + j];
	for (int j = 0; i + j < n; j++)
		s[j] += a[i + j] * b[i + j] * c[i + j];
	return wide_fold(s);
}

float cpu_wide_rms_scale(const float *x, int64_t n, float eps)
{
	float ms = cpu_wide_sumsq(x, n) / (float)n;
	return 1.0f / sqrtf(ms + eps);
}

/* ---- memory ---- */

static tf_status cpu_alloc(struct tf_be *be, struct tf_tensor *t)
{
	size_t n = tf_tensor_bytes(t);
	t->data = tf_alloc_aligned(64, n ? n : 64);
	if (!t->data)
		return tf_err(TF_ERR_NOMEM, "cpu: cannot allocate %zu bytes", n);
	return TF_OK;
}

static void cpu_release(struct tf_be *be, struct tf_tensor *t)
{
	free(t->data);
	t->data = NULL;
}

static tf_status cpu_upload(struct tf_be *be, struct tf_tensor *t, const void *src)
{
	memcpy(t->data, src, tf_tensor_bytes(t));
	return TF_OK;
}

static tf_status cpu_download(struct tf_be *be, const struct tf_tensor *t, void *dst)
{
	memcpy(dst, t->data, tf_tensor_bytes(t));
	return TF_OK;
}

static tf_status cpu_host_alloc(struct tf_be *be, size_t n, void **p)
{
	(void)be;
	*p = malloc(n ? n : 1);
	return *p ? TF_OK : tf_err(TF_ERR_NOMEM, "cpu: %zu bytes of host memory", n);
}

static void cpu_host_free(struct tf_be *be, void *p)
{
	(void)be;
	free(p);
}

static tf_status cpu_sync(struct tf_be *be)
{
	return TF_OK;
}

/* ---- the table ---- */

static void cpu_free(struct tf_be *be)
{
	struct cpu_be *c = be->impl;
	tf_pool_free(c->pool);
	free(c);
	free(be);
}

static const struct tf_ops cpu_ops = {
	.name = "cpu",
	.alloc = cpu_alloc,
	.release = cpu_release,
	.upload = cpu_upload,
	.download = cpu_download,
	.host_alloc = cpu_host_alloc,
	.host_free = cpu_host_free,
	.sync = cpu_sync,
	.convert = cpu_convert,
	.fill_random = cpu_fill_random,
	.linear = cpu_linear,
	.exl3_matmul = cpu_exl3_matmul,
	.exl3_matmul_experts = cpu_exl3_matmul_experts,
	.linear_experts = cpu_linear_experts,
	.embed = cpu_embed,
	.rmsnorm = cpu_rmsnorm,
	.rope = cpu_rope,
	.attention = cpu_attention,
	.compressor = cpu_compressor,
	.index_score = cpu_index_score,
	.index_topk = cpu_index_topk,
	.candidate_blocks = cpu_candidate_blocks,
	.moe_route = cpu_moe_route,
	.swiglu = cpu_swiglu,
	.moe_combine = cpu_moe_combine,
	.hc_mix = cpu_hc_mix,
	.hc_collapse = cpu_hc_collapse,
	.hc_post = cpu_hc_post,
	.engram_gate = cpu_engram_gate,
	.rows_copy = cpu_rows_copy,
	.cache_write = cpu_cache_write,
	.cache_read = cpu_cache_read,
	.page_rows = cpu_page_rows,
	.attn_keys = cpu_attn_keys,
	.moe_group = cpu_moe_group,
	.stream_mean = cpu_stream_mean,
	.sample = cpu_sample,
	.free = cpu_free,
};

tf_status tf_cpu_be_new(int threads, struct tf_be **out)
{
	*out = NULL;
	struct tf_be *be = calloc(1, sizeof *be);
	struct cpu_be *c = calloc(1, sizeof *c);
	if (!be || !c) {
		free(be);
		free(c);
		return tf_err(TF_ERR_NOMEM, "cpu backend: out of memory");
	}
	tf_status st = tf_pool_new(threads, &c->pool);
	if (st) {
		free(be);
		free(c);
		return st;
	}
	be->ops = &cpu_ops;
	be->impl = c;
	*out = be;
	return TF_OK;
}
