/* ops.c: tf-bench kernels --ops: every op of the CUDA backend (compute/
 * ops.h, tf_cuda_be_new) timed at the release's shapes: decode (1, 4, 16
 * and 64 rows; 1K and 32K context where the op reads context: attention's
 * key table, index_score's and index_topk's N, cache_read's rows) and
 * prefill (4096 rows); each case beside its byte floor, the bytes the op
 * must read and write over the copy kernel's bandwidth measured in the same
 * run. Then one decode row of one layer of the release (layer 8: a KV and
 * index source at ratio 2, context 32K): the sum of its non-matmul ops
 * against its EXL3 matmuls at the q28 pack's widths.
 *
 * Timing: the op table offers no stream, so each figure is wall-clock time
 * around back-to-back calls ended by the backend's sync: after one call and
 * three warm-ups, batches of n calls (n doubled until a batch takes 1 ms),
 * the median over --iters batches, divided by n. It includes the host's
 * launch cost (no graphs). Inputs are random and stay in the L2 cache
 * between calls when they fit in it, so small cases may run under their
 * floor; the layer's matmuls are also timed as one sequence, which streams
 * their weights from memory as a forward does. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "base/f16.h"
#include "base/json.h"
#include "base/progress.h"
#include "base/rng.h"
#include "compute/kvrow.h"
#include "compute/ops.h"
#include "compute/sample.h"
#include "cuda/driver.h"
#include "cuda/module.h"
#include "model/config.h"
#include "model/exl3.h"
#include "model/names.h"
#include "model/q28.h"
#include "bench/bench.h"

static struct tf_be *be;
static struct tf_config rc;     /* the release preset */
static struct tf_rng rng;
static double copy_gbs;
static json_t *cases, *layer_json; /* --json: the cases, and the root object */
static bool quiet;              /* the layer's cases: timed, not printed */

/* ---- tensors ---- */

/* One timed call: its tensors and the arguments of the op. */
struct call {
	struct tf_tensor t[12];
	int nt;
	int i0, i1;
	float f0;
	int64_t l0, l1;
	const void *p0;
	const void *p1;
	int32_t *tokens;
};

typedef tf_status (*op_fn)(struct call *c);

static void die_st(tf_status st, const char *what)
{
	if (st)
		tf_die_status(st, "%s", what);
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		tf_die(71, "out of memory (%zu bytes)", n);
	return p;
}

/* Random f32 and bf16 host patterns uploaded in pieces into big tensors. */
#define PAT (1 << 22)
static float pat_f32[PAT];
static uint16_t pat_bf16[PAT];

/* Fill t with random values (floats), or host's bytes. */
static void fill(struct tf_tensor *t, const void *host)
{
	if (host) {
		die_st(be->ops->upload(be, t, host), "upload");
		return;
	}
	if (t->dt == TF_DT_I32 || t->dt == TF_DT_F16)
		return; /* zeros (alloc) */
	/* u8 (trellis words, cache rows) takes the bf16 pattern's bytes */
	struct tf_tensor flat = tf_tensor_view(t, 1, tf_tensor_numel(t));
	const void *src = t->dt == TF_DT_F32 ? (const void *)pat_f32 : (const void *)pat_bf16;
	for (int64_t i = 0; i < flat.shape[0]; i += PAT) {
		int64_t m = flat.shape[0] - i < PAT ? flat.shape[0] - i : PAT;
		struct tf_tensor v = tf_tensor_rows_of(&flat, i, m);
		die_st(be->ops->upload(be, &v, src), "upload");
	}
}

/* A tensor of c of dt and shape: random floats, zeros, or host's bytes. */
static struct tf_tensor *ten(struct call *c, enum tf_dt dt, int ndim, const int64_t *shape,
			     const void *host)
{
	struct tf_tensor *t = &c->t[c->nt++];
	*t = (struct tf_tensor){.dt = dt, .ndim = ndim};
	for (int i = 0; i < TF_TENSOR_MAXDIM; i++)
		t->shape[i] = i < ndim ? shape[i] : 1;
	die_st(be->ops->alloc(be, t), "alloc");
	fill(t, host);
	return t;
}

#define DIMS(...) \
	(int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]){__VA_ARGS__}

static double bytes_of(const struct call *c)
{
	double b = 0;
	for (int i = 0; i < c->nt; i++)
		b += (double)tf_tensor_bytes(&c->t[i]);
	return b;
}

static int32_t *ivec(int64_t n)
{
	return xmalloc((size_t)n * sizeof(int32_t));
}

/* ---- timing ---- */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double batch(op_fn f, struct call *c, int n, const char *op)
{
	double t0 = tf_now();
	for (int i = 0; i < n; i++)
		die_st(f(c), op);
	die_st(be->ops->sync(be), op);
	return tf_now() - t0;
}

/* Microseconds per call of f: the median over bench.iters batches (NAN
 * when the backend leaves the op out). */
static double time_calls(op_fn f, struct call *c, const char *op)
{
	tf_status st = f(c);
	if (st == TF_ERR_UNSUPPORTED) {
		tf_warn("%s: not timed: %s", op, tf_errmsg(st));
		return NAN;
	}
	die_st(st, op);
	batch(f, c, 3, op);
	int n = 1;
	while (n < (1 << 14) && batch(f, c, n, op) < 1e-3)
		n *= 2;
	double *v = xmalloc(sizeof(double) * (size_t)bench.iters);
	for (int i = 0; i < bench.iters; i++)
		v[i] = batch(f, c, n, op) / n;
	qsort(v, (size_t)bench.iters, sizeof *v, cmp_double);
	double us = v[bench.iters / 2] * 1e6;
	free(v);
	return us;
}

/* Time c's op, report it, release c's tensors; returns µs per call. */
static double finish(struct call *c, op_fn f, const char *op, const char *shape, int64_t rows,
		     int64_t ctx, double bytes)
{
	double us = time_calls(f, c, op);
	double floor_us = bytes / (copy_gbs * 1e3);
	if (!quiet && bench.json) { /* an op left out: us and ratio -1 */
		json_array_append_new(cases, json_pack("{s:s,s:s,s:I,s:I,s:f,s:f,s:f,s:f}", "op", op,
						       "shape", shape, "rows", (json_int_t)rows, "ctx",
						       (json_int_t)ctx, "us", isnan(us) ? -1 : us,
						       "bytes", bytes, "floor_us", floor_us, "ratio",
						       isnan(us) ? -1 : us / floor_us));
	} else if (!quiet) {
		char cx[16] = "-";
		if (ctx)
			snprintf(cx, sizeof cx, "%lldK", (long long)ctx / 1024);
		printf("%-20s %-40s %5lld %5s %10.2f %10.3f %10.2f %8.1f\n", op, shape, (long long)rows,
		       cx, us, bytes / 1e6, floor_us, us / floor_us);
		fflush(stdout);
	}
	for (int i = 0; i < c->nt; i++)
		be->ops->release(be, &c->t[i]);
	return us;
}

/* ---- the ops: one runner each over a call's tensors ---- */

/* An op, TF_ERR_UNSUPPORTED where the backend's slot is empty. */
#define OP(slot, ...) \
	(be->ops->slot ? be->ops->slot(be, __VA_ARGS__) \
		       : tf_err(TF_ERR_UNSUPPORTED, "the %s backend has no %s", be->ops->name, #slot))
#define A(i) (&c->t[i])

static tf_status run_convert(struct call *c) { return OP(convert, A(0), A(1)); }
static tf_status run_linear(struct call *c) { return OP(linear, A(0), A(1), A(2)); }
static tf_status run_embed(struct call *c) { return OP(embed, A(0), c->l0, A(1), A(2)); }
static tf_status run_rmsnorm(struct call *c) { return OP(rmsnorm, A(0), A(1), c->f0, A(2)); }
static tf_status run_rope(struct call *c) { return OP(rope, A(0), A(1), c->p0, c->i0, A(2)); }
static tf_status run_attention(struct call *c)
{
	return OP(attention, A(0), A(1), A(2), A(3), A(4), A(5));
}
static tf_status run_compressor(struct call *c) { return OP(compressor, A(0), A(1), A(2), c->f0, A(3)); }
static tf_status run_index_score(struct call *c)
{
	return OP(index_score, A(0), A(1), A(2), A(3), NULL, 0, A(4));
}
static tf_status run_index_topk(struct call *c) { return OP(index_topk, A(0), A(1), c->i0, A(2), A(3)); }
static tf_status run_blocks(struct call *c)
{
	return OP(candidate_blocks, A(0), A(1), c->i0, c->i1, A(2));
}
static tf_status run_route(struct call *c) { return OP(moe_route, A(0), A(1), c->i0, c->f0, A(2), A(3)); }
static tf_status run_swiglu(struct call *c) { return OP(swiglu, A(0), A(1), c->f0, A(2)); }
static tf_status run_combine(struct call *c) { return OP(moe_combine, A(0), A(1), A(2), A(3)); }
static tf_status run_group(struct call *c) { return OP(moe_group, A(0), c->i0, A(1), A(2), A(3)); }
static tf_status run_mix(struct call *c)
{
	return OP(hc_mix, A(0), A(1), A(2), A(3), rc.eps, rc.hc_eps, (int)rc.hc_sinkhorn_iters,
		  rc.hc_post_alpha, A(4), A(5), A(6));
}
static tf_status run_collapse(struct call *c) { return OP(hc_collapse, A(0), A(1), A(2)); }
static tf_status run_post(struct call *c) { return OP(hc_post, A(0), A(1), A(2), A(3), A(4)); }
static tf_status run_engram(struct call *c)
{
	return OP(engram_gate, A(0), A(1), A(2), NULL, rc.eps, rc.engram_gate_clamp, A(3));
}
static tf_status run_mean(struct call *c) { return OP(stream_mean, A(0), A(1)); }
static tf_status run_rows_copy(struct call *c) { return OP(rows_copy, A(0), A(1), A(2), NULL); }
static tf_status run_cache_write(struct call *c) { return OP(cache_write, c->p0, A(0), A(1), A(2)); }
static tf_status run_cache_read(struct call *c) { return OP(cache_read, c->p0, A(0), A(1), A(2)); }
static tf_status run_page_rows(struct call *c) { return OP(page_rows, A(0), c->i0, A(1), A(2)); }
static tf_status run_attn_keys(struct call *c)
{
	return OP(attn_keys, A(0), A(1), 1, c->l0, (int)rc.window, 0, c->l1, 0, A(2), A(3));
}
static tf_status run_sample(struct call *c) { return OP(sample, A(0), c->p0, c->p1, c->tokens); }
static tf_status run_exl3(struct call *c) { return OP(exl3_matmul, c->p0, A(0), A(1)); }
static tf_status run_experts(struct call *c)
{
	return OP(exl3_matmul_experts, c->p0, c->i0, A(0), A(1), A(2), A(3));
}

/* ---- cases ---- */

static char shape[128];

#define SHAPE(...) (snprintf(shape, sizeof shape, __VA_ARGS__), shape)

static double b_convert(int64_t R)
{
	struct call c = {0};
	ten(&c, TF_DT_F32, DIMS(R, rc.hidden), NULL);
	ten(&c, TF_DT_BF16, DIMS(R, rc.hidden), NULL);
	return finish(&c, run_convert, "convert", SHAPE("f32 -> bf16 [%lld, %u]", (long long)R, rc.hidden),
		      R, 0, bytes_of(&c));
}

static double b_linear(const char *what, int64_t R, int64_t N)
{
	struct call c = {0};
	ten(&c, TF_DT_BF16, DIMS(R, rc.hidden), NULL);
	ten(&c, TF_DT_BF16, DIMS(N, rc.hidden), NULL);
	ten(&c, TF_DT_F32, DIMS(R, N), NULL);
	return finish(&c, run_linear, "linear", SHAPE("%s %u -> %lld", what, rc.hidden, (long long)N), R,
		      0, bytes_of(&c));
}

static double b_embed(int64_t R)
{
	struct call c = {0};
	int32_t *ids = ivec(R);
	for (int64_t r = 0; r < R; r++)
		ids[r] = (int32_t)tf_rng_below(&rng, rc.vocab);
	ten(&c, TF_DT_BF16, DIMS(rc.vocab, rc.hidden), NULL);
	ten(&c, TF_DT_I32, DIMS(R), ids);
	ten(&c, TF_DT_BF16, DIMS(R, rc.hc_mult, rc.hidden), NULL);
	free(ids);
	double bytes = (double)R * rc.hidden * 2 + (double)tf_tensor_bytes(&c.t[2]) + 4.0 * R;
	return finish(&c, run_embed, "embed", SHAPE("table [%u, %u] out [%lld, %u, %u]", rc.vocab,
						    rc.hidden, (long long)R, rc.hc_mult, rc.hidden),
		      R, 0, bytes);
}

static double b_rmsnorm(int64_t R, int64_t n, enum tf_dt xd)
{
	struct call c = {.f0 = rc.eps};
	ten(&c, xd, DIMS(R, n), NULL);
	ten(&c, TF_DT_F32, DIMS(n), NULL);
	ten(&c, TF_DT_BF16, DIMS(R, n), NULL);
	return finish(&c, run_rmsnorm, "rmsnorm", SHAPE("x %s [%lld, %lld] y bf16", tf_dt_name(xd),
							(long long)R, (long long)n),
		      R, 0, bytes_of(&c));
}

static double b_rope(int64_t R, int64_t H, int64_t n, enum tf_dt xd, int inverse)
{
	static struct tf_rope_freqs rf;
	tf_rope_freqs_yarn(&rf, (int)rc.rope_dim, rc.compress_rope_theta, rc.rope_factor,
			   (double)rc.rope_original_max, rc.rope_beta_fast, rc.rope_beta_slow);
	struct call c = {.p0 = &rf, .i0 = inverse};
	int32_t *pos = ivec(R);
	for (int64_t r = 0; r < R; r++)
		pos[r] = (int32_t)(32768 + r);
	ten(&c, xd, DIMS(R, H, n), NULL);
	ten(&c, TF_DT_I32, DIMS(R), pos);
	ten(&c, TF_DT_BF16, DIMS(R, H, n), NULL);
	free(pos);
	return finish(&c, run_rope, "rope", SHAPE("x %s [%lld, %lld, %lld]%s y bf16", tf_dt_name(xd),
						  (long long)R, (long long)H, (long long)n,
						  inverse ? " inverse" : ""),
		      R, 0, bytes_of(&c));
}

/* The layer's keys at context ctx (ratio 2): the pool's rows then the
 * window's; each row attends to its window and 512 selected pool rows (all
 * of them when fewer). */
static double b_attention(int64_t R, int64_t ctx)
{
	const int64_t H = rc.heads, D = rc.head_dim, W = rc.window, pool = ctx / 2;
	const int64_t sel = pool < rc.index_topk ? pool : rc.index_topk, per = W + sel;
	const int64_t NK = pool + W + R;
	int32_t *off = ivec(R + 1), *idx = ivec(R * per);
	for (int64_t r = 0; r <= R; r++)
		off[r] = (int32_t)(r * per);
	for (int64_t r = 0; r < R; r++) {
		for (int64_t j = 0; j < sel; j++)
			idx[r * per + j] = (int32_t)(sel == pool ? j : (int64_t)tf_rng_below(&rng, (uint64_t)pool));
		for (int64_t j = 0; j < W; j++)
			idx[r * per + sel + j] = (int32_t)(pool + r + j);
	}
	struct call c = {0};
	ten(&c, TF_DT_BF16, DIMS(R, H, D), NULL);
	ten(&c, TF_DT_BF16, DIMS(NK, D), NULL);
	ten(&c, TF_DT_I32, DIMS(R + 1), off);
	ten(&c, TF_DT_I32, DIMS(R * per), idx);
	ten(&c, TF_DT_F32, DIMS(H), NULL);
	ten(&c, TF_DT_F32, DIMS(R, H, D), NULL);
	free(off);
	free(idx);
	double touched = (double)(NK < R * per ? NK : R * per) * D * 2;
	double bytes = bytes_of(&c) - (double)tf_tensor_bytes(&c.t[1]) + touched;
	return finish(&c, run_attention, "attention", SHAPE("q [%lld, %lld, %lld] %lld keys a row",
							    (long long)R, (long long)H, (long long)D,
							    (long long)per),
		      R, ctx, bytes);
}

static double b_compressor(int64_t E)
{
	const int64_t W = rc.head_dim;
	struct call c = {.f0 = rc.eps};
	ten(&c, TF_DT_F32, DIMS(E, 2, W), NULL);
	ten(&c, TF_DT_F32, DIMS(E, 2, W), NULL);
	ten(&c, TF_DT_F32, DIMS(W), NULL);
	ten(&c, TF_DT_BF16, DIMS(E, W), NULL);
	return finish(&c, run_compressor, "compressor", SHAPE("u, g [%lld, 2, %lld]", (long long)E,
							      (long long)W),
		      E, 0, bytes_of(&c));
}

static int32_t *filled(int64_t n, int32_t v)
{
	int32_t *a = ivec(n);
	for (int64_t i = 0; i < n; i++)
		a[i] = v;
	return a;
}

static double b_index_score(int64_t R, int64_t N)
{
	const int64_t Hi = rc.index_heads, Di = rc.index_dim;
	int32_t *nv = filled(R, (int32_t)N);
	struct call c = {0};
	ten(&c, TF_DT_BF16, DIMS(R, Hi, Di), NULL);
	ten(&c, TF_DT_F32, DIMS(R, Hi), NULL);
	ten(&c, TF_DT_BF16, DIMS(N, Di), NULL);
	ten(&c, TF_DT_I32, DIMS(R), nv);
	ten(&c, TF_DT_F32, DIMS(R, N), NULL);
	free(nv);
	return finish(&c, run_index_score, "index_score", SHAPE("iq [%lld, %lld, %lld] keys [%lld]",
								(long long)R, (long long)Hi, (long long)Di,
								(long long)N),
		      R, N, bytes_of(&c));
}

static double b_topk(int64_t R, int64_t N)
{
	int32_t *nv = filled(R, (int32_t)N);
	struct call c = {.i0 = (int)rc.index_topk};
	ten(&c, TF_DT_F32, DIMS(R, N), NULL);
	ten(&c, TF_DT_I32, DIMS(R), nv);
	ten(&c, TF_DT_I32, DIMS(R, rc.index_topk), NULL);
	ten(&c, TF_DT_I32, DIMS(R), NULL);
	free(nv);
	return finish(&c, run_index_topk, "index_topk", SHAPE("scores [%lld, %lld] k %u", (long long)R,
							      (long long)N, rc.index_topk),
		      R, N, bytes_of(&c));
}

static double b_blocks(int64_t R, int64_t N)
{
	const int bs = (int)rc.candidate_block_size;
	int32_t *nv = filled(R, (int32_t)N);
	struct call c = {.i0 = bs, .i1 = (int)rc.candidate_blocks};
	ten(&c, TF_DT_F32, DIMS(R, N), NULL);
	ten(&c, TF_DT_I32, DIMS(R), nv);
	ten(&c, TF_DT_U8, DIMS(R, (N + bs - 1) / bs), NULL);
	free(nv);
	return finish(&c, run_blocks, "candidate_blocks", SHAPE("scores [%lld, %lld] top %u of %d",
								(long long)R, (long long)N,
								rc.candidate_blocks, bs),
		      R, N, bytes_of(&c));
}

static double b_route(int64_t R)
{
	struct call c = {.i0 = (int)rc.topk, .f0 = rc.routed_scale};
	ten(&c, TF_DT_F32, DIMS(R, rc.experts), NULL);
	ten(&c, TF_DT_F32, DIMS(rc.experts), NULL);
	ten(&c, TF_DT_I32, DIMS(R, rc.topk), NULL);
	ten(&c, TF_DT_F32, DIMS(R, rc.topk), NULL);
	return finish(&c, run_route, "moe_route", SHAPE("lg [%lld, %u] top %u", (long long)R, rc.experts,
							rc.topk),
		      R, 0, bytes_of(&c));
}

static double b_swiglu(int64_t R)
{
	const int64_t P = R * (rc.topk + 1), n = rc.expert_width;
	struct call c = {.f0 = rc.swiglu_limit};
	ten(&c, TF_DT_F32, DIMS(P, n), NULL);
	ten(&c, TF_DT_F32, DIMS(P, n), NULL);
	ten(&c, TF_DT_BF16, DIMS(P, n), NULL);
	return finish(&c, run_swiglu, "swiglu", SHAPE("gate, up [%lld, %lld] a bf16", (long long)P,
						      (long long)n),
		      R, 0, bytes_of(&c));
}

static double b_combine(int64_t R)
{
	const int64_t k = rc.topk, D = rc.hidden;
	struct call c = {0};
	ten(&c, TF_DT_F32, DIMS(R, k, D), NULL);
	ten(&c, TF_DT_F32, DIMS(R, k), NULL);
	ten(&c, TF_DT_F32, DIMS(R, D), NULL);
	ten(&c, TF_DT_BF16, DIMS(R, D), NULL);
	return finish(&c, run_combine, "moe_combine", SHAPE("y [%lld, %lld, %lld] + shared",
							    (long long)R, (long long)k, (long long)D),
		      R, 0, bytes_of(&c));
}

static double b_group(int64_t R)
{
	const int64_t k = rc.topk;
	int32_t *ids = ivec(R * k);
	for (int64_t i = 0; i < R * k; i++)
		ids[i] = (int32_t)tf_rng_below(&rng, rc.experts);
	struct call c = {.i0 = (int)rc.experts};
	ten(&c, TF_DT_I32, DIMS(R, k), ids);
	ten(&c, TF_DT_I32, DIMS(rc.experts + 1), NULL);
	ten(&c, TF_DT_I32, DIMS(R * k), NULL);
	ten(&c, TF_DT_I32, DIMS(R * k), NULL);
	free(ids);
	return finish(&c, run_group, "moe_group", SHAPE("ids [%lld, %lld] of %u", (long long)R,
							(long long)k, rc.experts),
		      R, 0, bytes_of(&c));
}

/* The streams [R, S, D] bf16 and what an mHC op takes besides. */
static struct call streams(int64_t R)
{
	struct call c = {0};
	ten(&c, TF_DT_BF16, DIMS(R, rc.hc_mult, rc.hidden), NULL);
	return c;
}

#define SHAPE_X(R) SHAPE("x [%lld, %u, %u]", (long long)(R), rc.hc_mult, rc.hidden)

static double b_mix(int64_t R)
{
	const int64_t S = rc.hc_mult, M = 2 * S + S * S;
	struct call c = streams(R);
	ten(&c, TF_DT_F32, DIMS(M, S * rc.hidden), NULL);
	ten(&c, TF_DT_F32, DIMS(M), NULL);
	ten(&c, TF_DT_F32, DIMS(3), NULL);
	ten(&c, TF_DT_F32, DIMS(R, S), NULL);
	ten(&c, TF_DT_F32, DIMS(R, S), NULL);
	ten(&c, TF_DT_F32, DIMS(R, S, S), NULL);
	return finish(&c, run_mix, "hc_mix", SHAPE_X(R), R, 0, bytes_of(&c));
}

static double b_collapse(int64_t R)
{
	struct call c = streams(R);
	ten(&c, TF_DT_F32, DIMS(R, rc.hc_mult), NULL);
	ten(&c, TF_DT_BF16, DIMS(R, rc.hidden), NULL);
	return finish(&c, run_collapse, "hc_collapse", SHAPE_X(R), R, 0, bytes_of(&c));
}

static double b_post(int64_t R)
{
	const int64_t S = rc.hc_mult;
	struct call c = streams(R);
	ten(&c, TF_DT_BF16, DIMS(R, rc.hidden), NULL);
	ten(&c, TF_DT_F32, DIMS(R, S), NULL);
	ten(&c, TF_DT_F32, DIMS(R, S, S), NULL);
	ten(&c, TF_DT_BF16, DIMS(R, S, rc.hidden), NULL);
	return finish(&c, run_post, "hc_post", SHAPE_X(R), R, 0, bytes_of(&c));
}

static double b_engram(int64_t R)
{
	const int64_t S = rc.hc_mult;
	struct call c = streams(R);
	ten(&c, TF_DT_BF16, DIMS(R, (S + 1) * rc.hidden), NULL);
	ten(&c, TF_DT_F32, DIMS(S, rc.hidden), NULL);
	ten(&c, TF_DT_BF16, DIMS(R, S, rc.hidden), NULL);
	return finish(&c, run_engram, "engram_gate", SHAPE_X(R), R, 0, bytes_of(&c));
}

static double b_mean(int64_t R)
{
	struct call c = streams(R);
	ten(&c, TF_DT_BF16, DIMS(R, rc.hidden), NULL);
	return finish(&c, run_mean, "stream_mean", SHAPE_X(R), R, 0, bytes_of(&c));
}

/* The experts' gather: x [R, D] rows into [R * k, D] in route order. */
static double b_rows_copy(int64_t R)
{
	const int64_t n = R * rc.topk, D = rc.hidden;
	int32_t *xi = ivec(n);
	for (int64_t m = 0; m < n; m++)
		xi[m] = (int32_t)(m / rc.topk);
	struct call c = {0};
	ten(&c, TF_DT_BF16, DIMS(R, D), NULL);
	ten(&c, TF_DT_I32, DIMS(n), xi);
	ten(&c, TF_DT_BF16, DIMS(n, D), NULL);
	free(xi);
	double bytes = (double)n * D * 2 * 2 + 4.0 * n;
	return finish(&c, run_rows_copy, "rows_copy", SHAPE("bf16 rows of %lld: %lld moves", (long long)D,
							    (long long)n),
		      R, 0, bytes);
}

static const struct tf_rowfmt *row_fmt(int index_key)
{
	static struct tf_rowfmt win, ik;
	win = (struct tf_rowfmt){TF_KV_FP8, (int)rc.head_dim, (int)rc.rope_dim, 0};
	ik = (struct tf_rowfmt){TF_KV_FP8, (int)rc.index_dim, 0, 1};
	return index_key ? &ik : &win;
}

static int32_t *row_indices(int64_t n, int64_t rows)
{
	int32_t *idx = ivec(n);
	for (int64_t m = 0; m < n; m++)
		idx[m] = (int32_t)((m * 7919) % rows); /* distinct while n <= rows */
	return idx;
}

static double b_cache_write(int64_t n, int index_key, int64_t rows)
{
	const struct tf_rowfmt *f = row_fmt(index_key);
	const int64_t rb = (int64_t)tf_rowfmt_bytes(f);
	int32_t *idx = row_indices(n, rows);
	struct call c = {.p0 = f};
	ten(&c, TF_DT_BF16, DIMS(n, f->dim), NULL);
	ten(&c, TF_DT_I32, DIMS(n), idx);
	ten(&c, TF_DT_U8, DIMS(rows, rb), NULL);
	free(idx);
	double bytes = (double)n * (2.0 * f->dim + (double)rb + 4);
	return finish(&c, run_cache_write, "cache_write",
		      SHAPE("fp8 %s %d: %lld rows", index_key ? "index key" : "row", f->dim, (long long)n),
		      n, 0, bytes);
}

static double b_cache_read(int64_t n, int index_key, int64_t rows, int64_t ctx)
{
	const struct tf_rowfmt *f = row_fmt(index_key);
	const int64_t rb = (int64_t)tf_rowfmt_bytes(f);
	int32_t *idx = row_indices(n, rows);
	struct call c = {.p0 = f};
	ten(&c, TF_DT_U8, DIMS(rows, rb), NULL);
	ten(&c, TF_DT_I32, DIMS(n), idx);
	ten(&c, TF_DT_BF16, DIMS(n, f->dim), NULL);
	free(idx);
	double bytes = (double)n * (2.0 * f->dim + (double)rb + 4);
	return finish(&c, run_cache_read, "cache_read",
		      SHAPE("fp8 %s %d: %lld rows to bf16", index_key ? "index key" : "row", f->dim,
			    (long long)n),
		      n, ctx, bytes);
}

static double b_page_rows(int64_t n)
{
	const int64_t P = 2048, rpp = 64;
	int32_t *pt = ivec(P), *l = ivec(n);
	for (int64_t i = 0; i < P; i++)
		pt[i] = (int32_t)(P - 1 - i);
	for (int64_t m = 0; m < n; m++)
		l[m] = (int32_t)((m * 7919) % (P * rpp));
	struct call c = {.i0 = (int)rpp};
	ten(&c, TF_DT_I32, DIMS(P), pt);
	ten(&c, TF_DT_I32, DIMS(n), l);
	ten(&c, TF_DT_I32, DIMS(n), NULL);
	free(pt);
	free(l);
	return finish(&c, run_page_rows, "page_rows", SHAPE("%lld rows, pages of %lld", (long long)n,
							    (long long)rpp),
		      n, 0, bytes_of(&c));
}

/* Key lists of R rows at the end of ctx: 512 direct selections each. */
static double b_attn_keys(int64_t R, int64_t ctx)
{
	const int64_t k = rc.index_topk, pool = ctx / 2;
	int32_t *sel = ivec(R * k), *ns = filled(R, (int32_t)(k < pool ? k : pool));
	for (int64_t i = 0; i < R * k; i++)
		sel[i] = (int32_t)(i % k * (pool / k ? pool / k : 1));
	struct call c = {.l0 = ctx - R, .l1 = pool};
	ten(&c, TF_DT_I32, DIMS(R, k), sel);
	ten(&c, TF_DT_I32, DIMS(R), ns);
	ten(&c, TF_DT_I32, DIMS(R + 1), NULL);
	ten(&c, TF_DT_I32, DIMS(R * (k + rc.window)), NULL);
	free(sel);
	free(ns);
	return finish(&c, run_attn_keys, "attn_keys", SHAPE("rows %lld, %lld selected + window %u",
							    (long long)R, (long long)k, rc.window),
		      R, ctx, bytes_of(&c));
}

static double b_sample(int64_t R, int nucleus)
{
	struct tf_sample_params *p = xmalloc(sizeof *p * (size_t)R);
	int64_t *pos = xmalloc(sizeof *pos * (size_t)R);
	for (int64_t r = 0; r < R; r++) {
		p[r] = (struct tf_sample_params){.seed = 1 + (uint64_t)r, .temperature = nucleus ? 0.7 : 0,
						 .top_p = nucleus ? 0.9 : 1};
		pos[r] = 1000 + r;
	}
	struct call c = {.p0 = p, .p1 = pos, .tokens = ivec(R)};
	ten(&c, TF_DT_F32, DIMS(R, rc.vocab), NULL);
	double us = finish(&c, run_sample, "sample", SHAPE("logits [%lld, %u] %s", (long long)R, rc.vocab,
							   nucleus ? "top_p 0.9" : "greedy"),
			   R, 0, bytes_of(&c));
	free(p);
	free(pos);
	free(c.tokens);
	return us;
}

/* ---- EXL3 ---- */

/* count random EXL3 layers of K x N and widths bits[e] on the device in
 * one trellis buffer (the model's layout, tf_exl3_experts_layout), suh
 * [count, K] and svh [count, N] (±1/(rms·√K) and ±1, as synthetic packs
 * hold them). */
struct xl {
	struct tf_exl3_layer L[8];
	struct tf_tensor tr, su, sv;
	double bytes; /* trellis and scales */
};

static void xl_make(struct xl *x, uint32_t k, uint32_t n, const uint32_t *bits, int count)
{
	struct tf_exl3_geom g[8];
	uint64_t off[8], total;
	int ragged;
	for (int e = 0; e < count; e++)
		g[e] = (struct tf_exl3_geom){k, n, bits[e], TF_EXL3_CB_MUL1};
	die_st(tf_exl3_experts_layout(g, (uint32_t)count, off, &total, &ragged), "experts layout");
	uint16_t *su = xmalloc(2 * (size_t)count * k), *sv = xmalloc(2 * (size_t)count * n);
	for (size_t i = 0; i < (size_t)count * k; i++)
		su[i] = tf_f32_to_f16((tf_rng_u64(&rng) & 1 ? 1.f : -1.f) / (TF_EXL3_CB_RMS * sqrtf((float)k)));
	for (size_t i = 0; i < (size_t)count * n; i++)
		sv[i] = tf_f32_to_f16(tf_rng_u64(&rng) & 1 ? 1.f : -1.f);
	x->tr = (struct tf_tensor){.dt = TF_DT_U8, .ndim = 1, .shape = {(int64_t)total, 1, 1, 1}};
	x->su = (struct tf_tensor){.dt = TF_DT_U8, .ndim = 1, .shape = {2 * (int64_t)count * k, 1, 1, 1}};
	x->sv = (struct tf_tensor){.dt = TF_DT_U8, .ndim = 1, .shape = {2 * (int64_t)count * n, 1, 1, 1}};
	die_st(be->ops->alloc(be, &x->tr), "alloc");
	die_st(be->ops->alloc(be, &x->su), "alloc");
	die_st(be->ops->alloc(be, &x->sv), "alloc");
	fill(&x->tr, NULL);
	fill(&x->su, su);
	fill(&x->sv, sv);
	free(su);
	free(sv);
	for (int e = 0; e < count; e++)
		x->L[e] = (struct tf_exl3_layer){g[e], (const uint16_t *)((char *)x->tr.data + off[e]),
						 (const uint16_t *)x->su.data + (size_t)e * k,
						 (const uint16_t *)x->sv.data + (size_t)e * n, NULL};
	x->bytes = (double)(total + 2 * (uint64_t)count * (k + n));
}

static void xl_free(struct xl *x)
{
	be->ops->release(be, &x->tr);
	be->ops->release(be, &x->su);
	be->ops->release(be, &x->sv);
}

/* One projection: x bf16 [R, K], y f32 [R, N]. Call c keeps its tensors
 * when keep (the layer's sequence). */
static double b_exl3(const char *name, const struct xl *x, int64_t R, struct call *keep)
{
	const struct tf_exl3_geom *g = &x->L[0].g;
	struct call c = {.p0 = &x->L[0]};
	ten(&c, TF_DT_BF16, DIMS(R, g->k), NULL);
	ten(&c, TF_DT_F32, DIMS(R, g->n), NULL);
	if (keep) {
		*keep = c;
		return 0;
	}
	return finish(&c, run_exl3, "exl3_matmul", SHAPE("%s %ux%u %u bits", name, g->k, g->n, g->bits), R,
		      0, bytes_of(&c) + x->bytes);
}

/* count experts in one launch, R rows each (expert e on rows e·R..). */
static double b_experts(const char *name, const struct xl *x, int count, int64_t R,
			struct call *keep)
{
	const struct tf_exl3_geom *g = &x->L[0].g;
	int32_t ids[9], off[9];
	for (int e = 0; e <= count; e++)
		ids[e] = e, off[e] = (int32_t)(e * R);
	struct call c = {.p0 = x->L, .i0 = count};
	ten(&c, TF_DT_I32, DIMS(count), ids);
	ten(&c, TF_DT_I32, DIMS(count + 1), off);
	ten(&c, TF_DT_BF16, DIMS(count * R, g->k), NULL);
	ten(&c, TF_DT_F32, DIMS(count * R, g->n), NULL);
	if (keep) {
		*keep = c;
		return 0;
	}
	return finish(&c, run_experts, "exl3_matmul_experts",
		      SHAPE("%s %ux%u, %d experts", name, g->k, g->n, count), R, 0, bytes_of(&c) + x->bytes);
}

/* ---- one decode row of one layer ---- */

/* A projection of the layer, its inputs kept for the sequence. */
struct mm {
	char name[48];
	struct xl x;
	struct call c;
	int experts; /* 0: exl3_matmul; else this many experts in one launch */
	double us;
};

static struct mm *seq;
static int nseq;

static op_fn mm_fn(const struct mm *m)
{
	return m->experts ? run_experts : run_exl3;
}

static tf_status run_seq(struct call *unused)
{
	for (int i = 0; i < nseq; i++) {
		tf_status st = mm_fn(&seq[i])(&seq[i].c);
		if (st)
			return st;
	}
	return TF_OK;
}

/* q28's width of a group, or 4 bits where its tables have none. */
static uint32_t bits_of(const struct tf_group_spec *g, int *guessed)
{
	uint32_t b = tf_q28_bits(&rc, g);
	*guessed |= !b;
	return b ? b : 4;
}

/* The layer's EXL3 projections at one decode row: each dense group, then
 * the routed experts 0..topk-1 of w1, w3 and w2 as one launch each. */
static int layer_matmuls(uint32_t L, int *guessed)
{
	int ng = tf_names_block_groups(&rc, L, NULL, 0);
	struct tf_group_spec *g = xmalloc(sizeof *g * (size_t)ng);
	tf_names_block_groups(&rc, L, g, ng);
	seq = calloc((size_t)ng, sizeof *seq);
	if (!seq)
		tf_die(71, "out of memory");
	nseq = 0;
	for (int i = 0; i < ng; i++) {
		if (g[i].proj >= TF_PROJ_EXPERT_W1 && g[i].proj <= TF_PROJ_EXPERT_W3)
			continue;
		struct mm *m = &seq[nseq++];
		uint32_t b = bits_of(&g[i], guessed);
		const char *p = strchr(g[i].name, '.'); /* "layers.8.attn.wq_a": "attn.wq_a" */
		p = p ? strchr(p + 1, '.') : NULL;
		snprintf(m->name, sizeof m->name, "%s", p ? p + 1 : g[i].name);
		xl_make(&m->x, g[i].k, g[i].n, &b, 1);
		b_exl3(m->name, &m->x, 1, &m->c);
	}
	static const enum tf_proj order[] = {TF_PROJ_EXPERT_W1, TF_PROJ_EXPERT_W3, TF_PROJ_EXPERT_W2};
	for (int w = 0; w < 3; w++) {
		struct mm *m = &seq[nseq];
		uint32_t b[8], k = 0, n = 0;
		int count = 0;
		for (int i = 0; i < ng && count < (int)rc.topk && count < 8; i++)
			if (g[i].proj == order[w] && g[i].index == (uint32_t)count) {
				b[count++] = bits_of(&g[i], guessed);
				k = g[i].k, n = g[i].n;
			}
		if (!count)
			continue;
		snprintf(m->name, sizeof m->name, "%s x%d", tf_proj_name(order[w]), count);
		xl_make(&m->x, k, n, b, count);
		b_experts(m->name, &m->x, count, 1, &m->c);
		m->experts = count;
		nseq++;
	}
	free(g);
	return nseq;
}

struct part {
	const char *what;
	double count, us;
};

/* Layer 8 (ratio 2, a KV and index source: compressor, indexer and
 * selection) at one decode row and context 32K: the pool and the index
 * keys hold 16K rows; pool rows and index keys are written every other
 * token (count 0.5). */
static void layer_summary(void)
{
	const uint32_t L = 8;
	const int64_t ctx = 32768, pool = ctx / 2, D = rc.hidden, keys = rc.window + rc.index_topk;
	struct part p[48];
	int np = 0;
#define ADD(w, n, e) (p[np].what = (w), p[np].count = (n), p[np++].us = (e))
	quiet = true;
	ADD("hc_mix", 2, b_mix(1));
	ADD("hc_collapse", 2, b_collapse(1));
	ADD("rmsnorm attn, ffn", 2, b_rmsnorm(1, D, TF_DT_BF16));
	ADD("rmsnorm q", 1, b_rmsnorm(1, rc.q_lora, TF_DT_F32));
	ADD("rmsnorm kv", 1, b_rmsnorm(1, rc.head_dim, TF_DT_F32));
	ADD("rmsnorm index key", 0.5, b_rmsnorm(1, rc.index_dim, TF_DT_F32));
	ADD("rope q", 1, b_rope(1, rc.heads, rc.head_dim, TF_DT_BF16, 0));
	ADD("rope kv, pool row", 1.5, b_rope(1, 1, rc.head_dim, TF_DT_BF16, 0));
	ADD("rope index q", 1, b_rope(1, rc.index_heads, rc.index_dim, TF_DT_BF16, 0));
	ADD("rope index key", 0.5, b_rope(1, 1, rc.index_dim, TF_DT_BF16, 0));
	ADD("rope out (inverse)", 1, b_rope(1, rc.heads, rc.head_dim, TF_DT_F32, 1));
	ADD("compressor", 0.5, b_compressor(1));
	ADD("cache_write window, pool", 1.5, b_cache_write(1, 0, ctx));
	ADD("cache_write index key", 0.5, b_cache_write(1, 1, pool));
	ADD("page_rows keys", 1, b_page_rows(keys));
	ADD("page_rows index keys", 1, b_page_rows(pool));
	ADD("cache_read keys", 1, b_cache_read(keys, 0, ctx, ctx));
	ADD("cache_read index keys", 1, b_cache_read(pool, 1, pool, ctx));
	ADD("linear weights_proj", 1, b_linear("weights_proj", 1, rc.index_heads));
	ADD("index_score", 1, b_index_score(1, pool));
	ADD("index_topk", 1, b_topk(1, pool));
	ADD("attn_keys", 1, b_attn_keys(1, ctx));
	ADD("attention", 1, b_attention(1, ctx));
	ADD("linear router gate", 1, b_linear("router gate", 1, rc.experts));
	ADD("moe_route", 1, b_route(1));
	ADD("moe_group", 1, b_group(1));
	ADD("rows_copy", 1, b_rows_copy(1));
	ADD("swiglu", 1, b_swiglu(1));
	ADD("moe_combine", 1, b_combine(1));
	ADD("hc_post", 2, b_post(1));
#undef ADD
	double ops_us = 0;
	int untimed = 0; /* ops the backend left out */
	for (int i = 0; i < np; i++)
		if (isnan(p[i].us))
			untimed++;
		else
			ops_us += p[i].count * p[i].us;

	int guessed = 0;
	layer_matmuls(L, &guessed);
	double mm_us = 0;
	for (int i = 0; i < nseq; i++)
		mm_us += seq[i].us = time_calls(mm_fn(&seq[i]), &seq[i].c, seq[i].name);
	double seq_us = time_calls(run_seq, NULL, "the layer's matmuls");
	quiet = false;

	if (bench.json) {
		json_t *jo = json_array(), *jm = json_array();
		for (int i = 0; i < np; i++)
			json_array_append_new(jo, json_pack("{s:s,s:f,s:f}", "op", p[i].what, "count",
							    p[i].count, "us", isnan(p[i].us) ? -1 : p[i].us));
		for (int i = 0; i < nseq; i++) {
			const struct tf_exl3_geom *g = &seq[i].x.L[0].g;
			json_array_append_new(jm, json_pack("{s:s,s:i,s:i,s:i,s:i,s:f}", "name", seq[i].name,
							    "k", (int)g->k, "n", (int)g->n, "bits",
							    (int)g->bits, "experts", seq[i].experts,
							    "us", seq[i].us));
		}
		json_object_set_new(layer_json, "layer", json_pack(
			"{s:i,s:I,s:i,s:i,s:f,s:f,s:f,s:f,s:o,s:o}", "layer", (int)L, "ctx",
			(json_int_t)ctx, "q28", !guessed, "untimed", untimed, "ops_us", ops_us,
			"matmuls_us", mm_us, "matmuls_seq_us", seq_us, "ratio", ops_us / seq_us, "ops", jo,
			"matmuls", jm));
	} else {
		printf("\nlayer %u, one decode row, context %lldK: the ops besides the matmuls\n", L,
		       (long long)ctx / 1024);
		printf("  %-28s %6s %10s %10s\n", "op", "count", "us", "us total");
		for (int i = 0; i < np; i++)
			printf("  %-28s %6.1f %10.2f %10.2f\n", p[i].what, p[i].count, p[i].us,
			       p[i].count * p[i].us);
		printf("  %-28s %6s %10s %10.2f%s\n", "sum", "", "", ops_us,
		       untimed ? " (without the ops not timed)" : "");
		printf("the EXL3 matmuls at %s (one row; routed experts: one launch of %u rows)\n",
		       guessed ? "q28's widths, 4 bits where its tables have none" : "q28's widths",
		       rc.topk);
		printf("  %-28s %12s %4s %10s\n", "projection", "K x N", "bits", "us");
		for (int i = 0; i < nseq; i++) {
			const struct tf_exl3_geom *g = &seq[i].x.L[0].g;
			char kn[32];
			snprintf(kn, sizeof kn, "%ux%u", g->k, g->n);
			printf("  %-28s %12s %4u %10.2f\n", seq[i].name, kn, g->bits, seq[i].us);
		}
		printf("  %-28s %12s %4s %10.2f\n", "sum, each alone", "", "", mm_us);
		printf("  %-28s %12s %4s %10.2f\n", "as one sequence", "", "", seq_us);
		printf("non-matmul ops %.2f us against matmuls %.2f us (as one sequence): %.2fx\n", ops_us,
		       seq_us, ops_us / seq_us);
	}
	for (int i = 0; i < nseq; i++) {
		for (int t = 0; t < seq[i].c.nt; t++)
			be->ops->release(be, &seq[i].c.t[t]);
		xl_free(&seq[i].x);
	}
	free(seq);
}

/* ---- the table ---- */

static void cases_all(void)
{
	static const int64_t rows[] = {1, 4, 16, 64, 4096}, ctxs[] = {1024, 32768};
	const int64_t pre = 4096, keys = rc.window + rc.index_topk;
	for (int r = 0; r < 5; r++)
		b_convert(rows[r]);
	for (int r = 0; r < 5; r++)
		b_linear("router gate", rows[r], rc.experts);
	for (int r = 0; r < 5; r++)
		b_embed(rows[r]);
	for (int r = 0; r < 5; r++)
		b_rmsnorm(rows[r], rc.hidden, TF_DT_BF16);
	for (int r = 0; r < 5; r++)
		b_rope(rows[r], rc.heads, rc.head_dim, TF_DT_BF16, 0);
	for (int x = 0; x < 2; x++)
		for (int r = 0; r < 4; r++)
			b_attention(rows[r], ctxs[x]);
	b_attention(pre, pre);
	for (int r = 0; r < 5; r++)
		b_compressor(rows[r] / 2 ? rows[r] / 2 : 1);
	for (int x = 0; x < 2; x++)
		for (int r = 0; r < 4; r++)
			b_index_score(rows[r], ctxs[x]);
	b_index_score(pre, pre);
	for (int x = 0; x < 2; x++)
		for (int r = 0; r < 4; r++)
			b_topk(rows[r], ctxs[x]);
	b_topk(pre, pre);
	for (int x = 0; x < 2; x++)
		for (int r = 0; r < 4; r++)
			b_blocks(rows[r], ctxs[x]);
	b_blocks(pre, pre);
	for (int r = 0; r < 5; r++)
		b_route(rows[r]);
	for (int r = 0; r < 5; r++)
		b_group(rows[r]);
	for (int r = 0; r < 5; r++)
		b_rows_copy(rows[r]);
	for (int r = 0; r < 5; r++)
		b_swiglu(rows[r]);
	for (int r = 0; r < 5; r++)
		b_combine(rows[r]);
	double (*const per_streams[])(int64_t) = {b_mix, b_collapse, b_post, b_engram, b_mean};
	for (size_t f = 0; f < sizeof per_streams / sizeof *per_streams; f++)
		for (int r = 0; r < 5; r++)
			per_streams[f](rows[r]);
	for (int r = 0; r < 5; r++)
		b_cache_write(rows[r], 0, 2 * pre > 32768 ? 2 * pre : 32768);
	for (int x = 0; x < 2; x++)
		for (int r = 0; r < 4; r++) { /* a window and selection of keys; the index keys */
			b_cache_read(rows[r] * keys, 0, ctxs[x] > rows[r] * keys ? ctxs[x] : rows[r] * keys,
				     ctxs[x]);
			b_cache_read(rows[r] * ctxs[x] / 2, 1, rows[r] * ctxs[x] / 2, ctxs[x]);
		}
	for (int r = 0; r < 4; r++)
		b_page_rows(rows[r] * keys);
	for (int x = 0; x < 2; x++)
		for (int r = 0; r < 4; r++)
			b_attn_keys(rows[r], ctxs[x]);
	b_attn_keys(pre, pre);
	for (int r = 0; r < 4; r++) {
		b_sample(rows[r], 0);
		b_sample(rows[r], 1);
	}
}

/* The release's projections at layer 8's q28 widths (4 bits where the
 * tables have none), 1..64 rows and prefill; the routed experts six in a
 * launch, 1..64 rows each. */
static void cases_exl3(void)
{
	static const int64_t rows[] = {1, 4, 16, 64, 4096};
	int guessed = 0;
	layer_matmuls(8, &guessed);
	for (int i = 0; i < nseq; i++) {
		struct mm *m = &seq[i];
		bool dup = false; /* one of each shape and width (wo_a's groups alike) */
		for (int j = 0; j < i; j++)
			dup |= seq[j].x.L[0].g.k == m->x.L[0].g.k && seq[j].x.L[0].g.n == m->x.L[0].g.n &&
			       seq[j].x.L[0].g.bits == m->x.L[0].g.bits && seq[j].experts == m->experts;
		/* experts: 1..64 rows each (a prefill's 4096 rows give each of
		 * the 384 experts about 64) */
		for (int r = 0; r < (m->experts ? 4 : 5) && !dup; r++) {
			if (m->experts)
				b_experts(m->name, &m->x, m->experts, rows[r], NULL);
			else
				b_exl3(m->name, &m->x, rows[r], NULL);
		}
		for (int t = 0; t < m->c.nt; t++)
			be->ops->release(be, &m->c.t[t]);
		xl_free(&m->x);
	}
	free(seq);
	if (guessed)
		tf_warn("the q28 tables have no width for some of layer 8's projections: 4 bits");
}

int bench_kernels_ops(void)
{
	struct tf_cu_device dev;
	tf_status st = tf_cu_device_open((int)bench.device, &dev);
	if (st)
		tf_die_status(st, "cannot open CUDA device %lld", (long long)bench.device);
	die_st(tf_cu_module_load(), "cannot load the kernels");
	copy_gbs = bench_cuda_copy_gbs(&dev);
	if ((st = tf_cuda_be_new((int)bench.device, &be)))
		tf_die_status(st, "cannot start the CUDA backend on device %lld", (long long)bench.device);
	die_st(tf_config_preset(&rc, "release"), "release preset");
	tf_rng_seed(&rng, 42);
	for (int i = 0; i < PAT; i++) {
		pat_f32[i] = tf_rng_normal(&rng);
		pat_bf16[i] = tf_f32_to_bf16(pat_f32[i]);
	}
	cases = json_array();
	layer_json = json_object();
	if (!bench.json) {
		printf("device: %s, %d SMs; copy kernel %.0f GB/s (read+write, 1 GiB); backend %s\n",
		       dev.name, dev.sms, copy_gbs, be->ops->name);
		printf("%-20s %-40s %5s %5s %10s %10s %10s %8s\n", "op", "shape", "rows", "ctx", "us",
		       "MB", "floor us", "x floor");
	}
	cases_all();
	cases_exl3();
	layer_summary();
	if (bench.json) {
		json_t *top = json_pack("{s:s,s:i,s:f,s:i,s:o}", "device", dev.name, "sms", dev.sms,
					"copy_gbs", copy_gbs, "iters", (int)bench.iters, "cases", cases);
		json_object_update(layer_json, top);
		json_decref(top);
		char *s = json_dumps(layer_json, JSON_INDENT(1));
		puts(s);
		free(s);
	} else {
		json_decref(cases);
	}
	json_decref(layer_json);
	tf_be_free(be);
	tf_cu_module_unload();
	tf_cu_device_close(&dev);
	return 0;
}
