/* gpu_model.c: the DeepSeek-V4.1 model on the CUDA backend against the same
 * model on the CPU backend, through compute/model.h alone (tf_model_open
 * with TF_MODEL_CUDA, tf_model_forward, tf_model_draft), on synthetic packs
 * (tf_synth_write, the packs tf-pack-synth writes: EXL3 at 2, 3 and 4
 * bits, mixed codebooks) of the tiny and small presets, seeds 1, 2 and 3.
 * Both presets hold every CSA2 mode (window, ratio-2 and ratio-1 KV
 * sources and their readers, the candidate source, a reindex layer), two
 * Engram layers and DSpark blocks (model/config.c), so every row below
 * runs through all of them.
 *
 * Each pack is opened three times: cpu (the reference), cuda (the device),
 * and cpu with noise (the yardstick, below). Per case (preset, seed):
 *   prefill  prompts of 3, 40, 150 and 600 rows, each as one call on a
 *            fresh sequence, then the 600-row one forked and 16 greedy
 *            decode steps of both sequences batched (the reference's picks
 *            fed to every model, so that rows stay comparable);
 *   drafts   DSpark after every prompt and every decode step, anchored on
 *            the reference's pick: draft tokens equal, confidences' error;
 *   chunks   on the device alone, the 150- and 600-row prompts again in
 *            chunks of 37 rows and one row at a time, against its own one
 *            call (decode == prefill, chunked == whole);
 *   greedy   40 prompts of 3..40 rows, then 32 greedy tokens each, every
 *            model on its own picks (40 sequences batched): the prompts
 *            whose 32 tokens equal the reference's, and the mean length of
 *            the agreeing prefix.
 * Figures per comparison: median relative logit error over the rows
 * (||a - b|| / ||a||, a the reference's row, L2 over the vocabulary), the
 * worst row, and top-1 agreement (argmax equal).
 *
 * The bounds are relative to a yardstick, because these random-weight
 * models are chaotic: routing, the indexer's selections and the Sinkhorn
 * turn a rounding-sized difference into a different expert or key within
 * a few dozen rows, so two correct implementations that differ only in
 * rounding disagree far past 1e-2 (tests/gpu/gpu_forward.c, 2026-12-02:
 * median 0.1 and top-1 74% between the CPU and itself with 1e-6 noise),
 * and no fixed bound of 1e-2 and 99% can hold. The yardstick is the CPU
 * model whose matmul outputs carry the device's documented deviation: each
 * EXL3 output (exl3_matmul, exl3_matmul_experts) times 1 + 5e-4 N(0,1)
 * (the device rounds the rotated activations and the products to fp16:
 * gpu_exl3's worst ||d||/||ref|| on the H200 is 2e-4 for the GEMM and 7e-4
 * for the GEMV), each dense output (linear, linear_experts) times
 * 1 + 1e-6 N(0,1) (fp32 sums in another order), a bf16 output rounded
 * again; every other op is exact. So, per case:
 *   median(device) <= 2 median(yardstick) + 2e-3,
 *   top-1(device)  >= top-1(yardstick) - 5 points,
 *   no NaN, median(device) <= 0.25 (never like unrelated logits);
 *   chunks and one row at a time against the device's one call: the same
 *   two bounds against the yardstick's figures on those prompts;
 *   drafts: token agreement >= the yardstick's - 10 points;
 *   greedy (over the three seeds of a preset, 120 prompts: one seed's 40
 *   are too few to compare two fractions): prompts equal >= min(90%, the
 *   yardstick's - 15 points), mean agreeing prefix >= 0.7 the yardstick's.
 * The aim (median <= 1e-2, top-1 >= 99%) is printed beside each
 * line as "aim met" or not; it bounds nothing. On these EXL3 packs the
 * yardstick stays near it (2026-12-02, TF_GPU_MODEL_REF=cpu, seed 1):
 * median 0.0052 (tiny) and 0.0048 (small) over 825 rows, top-1 98.1% and
 * 98.8%, drafts 96% and 91% equal, greedy 50% (tiny) and 97.5% (small) of
 * 40 prompts equal over 32 tokens; even the 3-row prompts read 0.004, so
 * the median is the model's amplification of any rounding, and chunks of
 * 37 on the CPU (whose GEMM sums past 16 rows in another order) read 0.0045.
 * Sensitivity, the same runs with --break: rmsnorm, rope and moe_route fail
 * every bound (--quick: median 0.04-0.06, top-1 87-90%, greedy 0-10%).
 * The subtle moe_route_small (routed experts 5% too strong) reads median
 * 1.6-2.3 times the yardstick's and top-1 1-3 points under it in the six
 * full cases, inside the per-case bounds; the full run fails it on tiny's
 * greedy bound (39% of 120 prompts equal against 57%). A bug that small
 * hides under twice the noise; the factor 2 allows for a device whose
 * EXL3 deviation is up to twice the noise's, and may come down to 1.5
 * once the H200's figures are in. --kv bf16 hardly moves the yardstick
 * (0.0045 against 0.0052): the amplification is the model's, not the FP8
 * cache's.
 *
 * Usage: gpu_model [--quick] [--break OP] [--preset tiny|small]
 *                  [--seed N] [--threads N] [--kv fp8|bf16] [--batch-invariant]
 *   --quick      the tiny preset, seed 1, prompts of 3, 40 and 150 rows, 8
 *                decode steps, 10 greedy prompts of 16 tokens.
 *   --break OP   (or TF_GPU_MODEL_BREAK=OP) break one op of the device's
 *                table, by its arguments only (so CUDA graphs capture the
 *                break too): rmsnorm (eps + 0.5), rope (the inverse
 *                rotation), moe_route (scale 1.25 times), moe_route_small
 *                (scale 1.05 times, a subtle bug). Every case must then
 *                FAIL and the program exit 1: the proof that the bounds can
 *                fail (tools/gpu-check.sh).
 *   --preset P, --seed N   only that preset, only that seed.
 *   --threads N  CPU backend workers (0, the default: one per CPU).
 *   --kv F       the caches' rows (window, pool, index): fp8 (the default,
 *                as tf-serve runs) or bf16.
 *   --batch-invariant  the device model on the batch-invariant path
 *                (model.h), under the same bounds.
 * TF_GPU_MODEL_REF=cpu opens the "device" on the CPU backend: a check of
 * this program without a GPU (the device rows then equal the reference's
 * exactly, except chunks: the CPU's GEMM sums past 16 rows in another
 * order). TF_DEVICE=N picks the device (0).
 *
 * The noise and the break reach the models' op tables through tf_model_be
 * (model.h), referenced weakly: a libcore without it links, and the
 * program then says so and exits 70. Exit 0 when every bound held, 1 when
 * one failed, 77 when there is no GPU. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/f16.h"
#include "base/num.h"
#include "base/rng.h"
#include "compute/model.h"
#include "compute/ops.h"
#include "model/config.h"
#include "model/synth.h"
#include "gpu_util.h"

/* Weak: this links against a model.c that predates tf_model_be (main
 * says so and exits 70); once compute/model.c defines it, this may go. */
#pragma weak tf_model_be

enum { MAXLENS = 4, NGREEDY = 40, GSTEPS = 32, MAXB = 16 };

static struct {
	bool quick, self, invariant;
	const char *brk, *preset;
	int seed, threads, device;
	enum tf_kv_row_fmt kv;
	int lens[MAXLENS], nlens, steps, ngreedy, gsteps;
} opt;

/* ---- the yardstick's noise and the device's break ---- */

static struct tf_rng noise;
static const struct tf_ops *cpu_ops;
static struct tf_ops noisy_ops;
static const struct tf_ops *dev_ops;
static struct tf_ops broken_ops;

/* y's values times 1 + sigma N(0,1); bf16 values rounded again. */
static void jitter(struct tf_tensor *y, double sigma)
{
	int64_t n = tf_tensor_numel(y);
	if (y->dt == TF_DT_F32) {
		float *v = y->data;
		for (int64_t i = 0; i < n; i++)
			v[i] *= (float)(1 + sigma * tf_rng_normal(&noise));
	} else if (y->dt == TF_DT_BF16) {
		uint16_t *v = y->data;
		for (int64_t i = 0; i < n; i++)
			v[i] = tf_f32_to_bf16(tf_bf16_to_f32(v[i]) *
					      (float)(1 + sigma * tf_rng_normal(&noise)));
	}
}

#define SIGMA_EXL3 5e-4
#define SIGMA_DENSE 1e-6

static tf_status noisy_linear(struct tf_be *be, const struct tf_tensor *x,
			      const struct tf_tensor *w, struct tf_tensor *y)
{
	tf_status st = cpu_ops->linear(be, x, w, y);
	if (!st)
		jitter(y, SIGMA_DENSE);
	return st;
}

static tf_status noisy_exl3(struct tf_be *be, const struct tf_exl3_layer *w,
			    const struct tf_tensor *x, struct tf_tensor *y)
{
	tf_status st = cpu_ops->exl3_matmul(be, w, x, y);
	if (!st)
		jitter(y, SIGMA_EXL3);
	return st;
}

static tf_status noisy_exl3_experts(struct tf_be *be, const struct tf_exl3_layer *e, int n,
				    const struct tf_tensor *ids, const struct tf_tensor *off,
				    const struct tf_tensor *x, struct tf_tensor *y)
{
	tf_status st = cpu_ops->exl3_matmul_experts(be, e, n, ids, off, x, y);
	if (!st)
		jitter(y, SIGMA_EXL3);
	return st;
}

static tf_status noisy_linear_experts(struct tf_be *be, const struct tf_tensor *w, int n,
				      const struct tf_tensor *ids, const struct tf_tensor *off,
				      const struct tf_tensor *x, struct tf_tensor *y)
{
	tf_status st = cpu_ops->linear_experts(be, w, n, ids, off, x, y);
	if (!st)
		jitter(y, SIGMA_DENSE);
	return st;
}

static tf_status broken_rmsnorm(struct tf_be *be, const struct tf_tensor *x,
				const struct tf_tensor *w, float eps, struct tf_tensor *y)
{
	return dev_ops->rmsnorm(be, x, w, eps + 0.5f, y);
}

static tf_status broken_rope(struct tf_be *be, const struct tf_tensor *x,
			     const struct tf_tensor *pos, const struct tf_rope_freqs *rf, int inverse,
			     struct tf_tensor *y)
{
	return dev_ops->rope(be, x, pos, rf, !inverse, y);
}

static float route_gain;

static tf_status broken_moe_route(struct tf_be *be, const struct tf_tensor *lg,
				  const struct tf_tensor *bias, int k, float scale,
				  struct tf_tensor *ids, struct tf_tensor *w)
{
	return dev_ops->moe_route(be, lg, bias, k, scale * route_gain, ids, w);
}

static const char *const breaks[] = {"rmsnorm", "rope", "moe_route", "moe_route_small"};

/* Put the noise into the yardstick's table; the break into the device's. */
static void wire(struct tf_model *yard, struct tf_model *dev)
{
	struct tf_be *y = tf_model_be(yard), *d = tf_model_be(dev);
	cpu_ops = y->ops;
	noisy_ops = *cpu_ops;
	noisy_ops.linear = noisy_linear;
	noisy_ops.exl3_matmul = noisy_exl3;
	noisy_ops.exl3_matmul_experts = noisy_exl3_experts;
	noisy_ops.linear_experts = noisy_linear_experts;
	y->ops = &noisy_ops;
	if (!opt.self)
		GPU_CHECK(d->ops->device && !strcmp(d->ops->name, "cuda"),
			  "the cuda model runs on the '%s' backend", d->ops->name);
	if (!opt.brk)
		return;
	dev_ops = d->ops;
	broken_ops = *dev_ops;
	if (!strcmp(opt.brk, "rmsnorm"))
		broken_ops.rmsnorm = broken_rmsnorm;
	else if (!strcmp(opt.brk, "rope"))
		broken_ops.rope = broken_rope;
	else {
		route_gain = !strcmp(opt.brk, "moe_route") ? 1.25f : 1.05f;
		broken_ops.moe_route = broken_moe_route;
	}
	d->ops = &broken_ops;
}

/* Give the tables back before the models free their backends. */
static void unwire(struct tf_model *yard, struct tf_model *dev)
{
	tf_model_be(yard)->ops = cpu_ops;
	if (opt.brk)
		tf_model_be(dev)->ops = dev_ops;
}

/* ---- figures ---- */

struct stats {
	double *rel;
	int n, cap, top1, worst_row;
	double worst;
};

/* Rows of b against the reference's rows a ([R, V] each). */
static void stats_add(struct stats *s, const float *a, const float *b, int R, int64_t V)
{
	for (int r = 0; r < R; r++) {
		const float *x = a + (size_t)r * V, *y = b + (size_t)r * V;
		double m = 0, d = 0;
		for (int64_t i = 0; i < V; i++) {
			double e = (double)x[i] - y[i];
			m += (double)x[i] * x[i];
			d += e * e;
		}
		double rel = sqrt(d) / (m > 0 ? sqrt(m) : 1);
		if (rel != rel || isinf(rel))
			rel = INFINITY;
		if (s->n == s->cap) {
			s->cap = s->cap ? 2 * s->cap : 1024;
			s->rel = realloc(s->rel, sizeof *s->rel * (size_t)s->cap);
			if (!s->rel)
				GPU_OK(TF_ERR_NOMEM);
		}
		if (rel > s->worst || !s->n) {
			s->worst = rel;
			s->worst_row = s->n;
		}
		s->rel[s->n++] = rel;
		s->top1 += gpu_argmax(x, V) == gpu_argmax(y, V);
	}
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(const struct stats *s)
{
	if (!s->n)
		return 0;
	double *v = malloc(sizeof *v * (size_t)s->n);
	memcpy(v, s->rel, sizeof *v * (size_t)s->n);
	qsort(v, (size_t)s->n, sizeof *v, cmp_double);
	double m = v[s->n / 2];
	free(v);
	return m;
}

static double top1(const struct stats *s)
{
	return s->n ? (double)s->top1 / s->n : 1;
}

static void report(const char *what, const struct stats *s)
{
	double md = median(s), t = top1(s);
	printf("  %-30s %5d rows: median rel %.3g, worst %.3g (row %d), top-1 %.1f%%%s\n", what,
	       s->n, md, s->worst, s->worst_row, 100 * t,
	       md <= 1e-2 && t >= 0.99 ? " (aim met)" : "");
}

/* The device's figures s against the yardstick's y (the header's rule). */
static void bound(const char *what, const struct stats *s, const struct stats *y)
{
	double md = median(s), my = median(y);
	GPU_CHECK(md <= 2 * my + 2e-3, "%s: median %.3g against the yardstick's %.3g", what, md,
		  my);
	GPU_CHECK(top1(s) >= top1(y) - 0.05, "%s: top-1 %.1f%% against the yardstick's %.1f%%",
		  what, 100 * top1(s), 100 * top1(y));
	GPU_CHECK(md <= 0.25 && isfinite(s->worst), "%s: median %.3g, worst %.3g", what, md,
		  s->worst);
}

static void stats_free(struct stats *s)
{
	free(s->rel);
	memset(s, 0, sizeof *s);
}

/* Drafts: tokens equal, confidences' errors (relative to the reference's). */
struct drafts {
	int n, equal;
	double worst_conf;
};

static void drafts_add(struct drafts *d, const int32_t *ta, const float *ca, const int32_t *tb,
		       const float *cb, int n)
{
	for (int i = 0; i < n; i++) {
		d->n++;
		d->equal += ta[i] == tb[i];
		double e = ca[i] != ca[i] && cb[i] != cb[i] ? 0 : fabs((double)ca[i] - cb[i]);
		if (e != e || e > d->worst_conf)
			d->worst_conf = e != e ? INFINITY : e;
	}
}

/* ---- running the three models ---- */

enum { REF, YARD, DEV, NM };

struct models {
	struct tf_model *m[NM];
	int64_t V;
	int block; /* DSpark tokens per draft (0: none) */
};

/* Logits [n, V] of ids on seq from position p0, in calls of chunk rows. */
static void feed(struct tf_model *m, int seq, int64_t p0, int n, const int32_t *ids, int chunk,
		 float *lg)
{
	int64_t V = tf_model_config(m)->vocab;
	int64_t *pos = malloc(sizeof *pos * (size_t)n);
	int *sq = malloc(sizeof *sq * (size_t)n);
	for (int i = 0; i < n; i++) {
		pos[i] = p0 + i;
		sq[i] = seq;
	}
	for (int p = 0; p < n; p += chunk) {
		int R = p + chunk > n ? n - p : chunk;
		GPU_OK(tf_model_forward(m, R, ids + p, pos + p, sq + p, lg + (size_t)p * V));
	}
	free(pos);
	free(sq);
}

/* Every model drafts for its sequences seq[k][0..n) on the anchors. */
static void draft_all(const struct models *M, int seq[NM][NGREEDY], const int32_t *anchor, int n,
		      struct drafts *dd, struct drafts *dy)
{
	if (!M->block)
		return;
	int32_t tok[NM][NGREEDY * MAXB];
	float conf[NM][NGREEDY * MAXB];
	for (int k = 0; k < NM; k++)
		GPU_OK(tf_model_draft(M->m[k], n, seq[k], anchor, NULL, tok[k], conf[k]));
	drafts_add(dd, tok[REF], conf[REF], tok[DEV], conf[DEV], n * M->block);
	drafts_add(dy, tok[REF], conf[REF], tok[YARD], conf[YARD], n * M->block);
}

static void random_ids(struct tf_rng *r, int32_t *ids, int n, int64_t V)
{
	for (int i = 0; i < n; i++)
		ids[i] = (int32_t)(3 + tf_rng_below(r, (uint64_t)V - 3));
}

/* What one case gathers. */
struct figures {
	struct stats dev, yard;                 /* every prefill and decode row */
	struct stats len_dev[MAXLENS], len_yard[MAXLENS];
	struct stats chunk[MAXLENS], step[MAXLENS]; /* device against itself */
	struct drafts draft_dev, draft_yard;
	int g_equal[NM], g_prefix[NM], g_n;     /* greedy: against the reference */
};

/* The device's one-call logits of prompt k against its chunks of 37 rows
 * and its rows one at a time (decode == prefill). */
static void chunks(const struct models *M, int k, const int32_t *ids, int n, const float *whole,
		   float *lg, struct figures *f)
{
	struct tf_model *d = M->m[DEV];
	int s;
	GPU_OK(tf_model_seq_new(d, &s));
	feed(d, s, 0, n, ids, 37, lg);
	stats_add(&f->chunk[k], whole, lg, n, M->V);
	tf_model_seq_free(d, s);
	GPU_OK(tf_model_seq_new(d, &s));
	feed(d, s, 0, n, ids, 1, lg);
	stats_add(&f->step[k], whole, lg, n, M->V);
	tf_model_seq_free(d, s);
}

/* Prefill of every prompt length, drafts, chunks; then the longest
 * prompt forked and opt.steps decode steps of both batched. */
static void prefill_decode(const struct models *M, struct tf_rng *r, struct figures *f)
{
	int64_t V = M->V;
	int nmax = opt.lens[opt.nlens - 1];
	int32_t *ids = malloc(sizeof *ids * (size_t)nmax);
	float *lg[NM], *tmp = malloc(sizeof(float) * (size_t)nmax * V);
	for (int k = 0; k < NM; k++)
		lg[k] = malloc(sizeof(float) * (size_t)nmax * V);
	int seq[NM][NGREEDY];
	for (int L = 0; L < opt.nlens; L++) {
		int n = opt.lens[L];
		random_ids(r, ids, n, V);
		for (int k = 0; k < NM; k++) {
			GPU_OK(tf_model_seq_new(M->m[k], &seq[k][0]));
			feed(M->m[k], seq[k][0], 0, n, ids, n, lg[k]);
		}
		stats_add(&f->dev, lg[REF], lg[DEV], n, V);
		stats_add(&f->yard, lg[REF], lg[YARD], n, V);
		stats_add(&f->len_dev[L], lg[REF], lg[DEV], n, V);
		stats_add(&f->len_yard[L], lg[REF], lg[YARD], n, V);
		int32_t anchor = gpu_argmax(lg[REF] + (size_t)(n - 1) * V, V);
		draft_all(M, seq, &anchor, 1, &f->draft_dev, &f->draft_yard);
		if (n >= 100)
			chunks(M, L, ids, n, lg[DEV], tmp, f);
		if (L < opt.nlens - 1)
			for (int k = 0; k < NM; k++)
				tf_model_seq_free(M->m[k], seq[k][0]);
	}
	for (int k = 0; k < NM; k++)
		GPU_OK(tf_model_seq_fork(M->m[k], seq[k][0], &seq[k][1]));
	int32_t next[2] = {gpu_argmax(lg[REF] + (size_t)(nmax - 1) * V, V), 7};
	for (int t = 0; t < opt.steps; t++) {
		int64_t pos[2] = {nmax + t, nmax + t};
		draft_all(M, seq, next, 2, &f->draft_dev, &f->draft_yard);
		for (int k = 0; k < NM; k++)
			GPU_OK(tf_model_forward(M->m[k], 2, next, pos, seq[k], lg[k]));
		stats_add(&f->dev, lg[REF], lg[DEV], 2, V);
		stats_add(&f->yard, lg[REF], lg[YARD], 2, V);
		for (int q = 0; q < 2; q++)
			next[q] = gpu_argmax(lg[REF] + q * V, V);
	}
	for (int k = 0; k < NM; k++)
		for (int q = 0; q < 2; q++)
			tf_model_seq_free(M->m[k], seq[k][q]);
	for (int k = 0; k < NM; k++)
		free(lg[k]);
	free(tmp);
	free(ids);
}

/* opt.ngreedy prompts of 3..40 rows (prefilled together in one call),
 * then opt.gsteps greedy tokens, each model on its own picks; the
 * prompts' drafts anchored on the reference's first pick. */
static void greedy(const struct models *M, struct tf_rng *r, struct figures *f)
{
	int64_t V = M->V;
	int np = opt.ngreedy, len[NGREEDY], total = 0;
	for (int p = 0; p < np; p++)
		total += len[p] = 3 + (int)tf_rng_below(r, 38);
	int32_t *ids = malloc(sizeof *ids * (size_t)total);
	int64_t *pos = malloc(sizeof *pos * (size_t)total);
	int *sq = malloc(sizeof *sq * (size_t)total), seq[NM][NGREEDY];
	float *lg = malloc(sizeof(float) * (size_t)total * V);
	int32_t tok[NM][NGREEDY][GSTEPS], anchor[NGREEDY];
	random_ids(r, ids, total, V);
	for (int k = 0; k < NM; k++) {
		int row = 0;
		for (int p = 0; p < np; p++) {
			GPU_OK(tf_model_seq_new(M->m[k], &seq[k][p]));
			for (int i = 0; i < len[p]; i++, row++) {
				pos[row] = i;
				sq[row] = seq[k][p];
			}
		}
		GPU_OK(tf_model_forward(M->m[k], total, ids, pos, sq, lg));
		for (int p = 0, end = 0; p < np; p++) {
			end += len[p];
			tok[k][p][0] = gpu_argmax(lg + (size_t)(end - 1) * V, V);
		}
	}
	for (int p = 0; p < np; p++)
		anchor[p] = tok[REF][p][0];
	draft_all(M, seq, anchor, np, &f->draft_dev, &f->draft_yard);
	for (int k = 0; k < NM; k++)
		for (int t = 1; t < opt.gsteps; t++) {
			int32_t in[NGREEDY];
			int64_t at[NGREEDY];
			for (int p = 0; p < np; p++) {
				in[p] = tok[k][p][t - 1];
				at[p] = len[p] + t - 1;
			}
			GPU_OK(tf_model_forward(M->m[k], np, in, at, seq[k], lg));
			for (int p = 0; p < np; p++)
				tok[k][p][t] = gpu_argmax(lg + (size_t)p * V, V);
		}
	for (int k = 0; k < NM; k++)
		for (int p = 0; p < np; p++) {
			int t = 0;
			while (t < opt.gsteps && tok[k][p][t] == tok[REF][p][t])
				t++;
			f->g_prefix[k] += t;
			f->g_equal[k] += t == opt.gsteps;
			tf_model_seq_free(M->m[k], seq[k][p]);
		}
	f->g_n += np;
	free(ids);
	free(pos);
	free(sq);
	free(lg);
}

static void figures_free(struct figures *f)
{
	stats_free(&f->dev);
	stats_free(&f->yard);
	for (int L = 0; L < MAXLENS; L++) {
		stats_free(&f->len_dev[L]);
		stats_free(&f->len_yard[L]);
		stats_free(&f->chunk[L]);
		stats_free(&f->step[L]);
	}
}

/* ---- a case: one pack, three models ---- */

static char tmpdir[64];

/* The packs' folder goes at any exit (77 and failed calls included). */
static void drop_tmpdir(void)
{
	char cmd[100];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	if (*tmpdir && system(cmd))
		fprintf(stderr, "gpu_model: cannot remove '%s'\n", tmpdir);
}

static void make_pack(const char *preset, int seed, char *pack, size_t size)
{
	struct tf_config c;
	GPU_OK(tf_config_preset(&c, preset));
	snprintf(pack, size, "%s/%s-%d", tmpdir, preset, seed);
	struct tf_synth_opts so = {.config = &c, .seed = (uint64_t)seed, .bits = {2, 3, 4},
				   .nbits = 3, .codebooks = TF_SYNTH_MIXED,
				   .shard_bytes = 64u << 20, .index = true};
	struct tf_synth_stats ss;
	GPU_OK(tf_synth_write(&so, pack, &ss));
}

static tf_status open_model(const char *pack, bool device, struct tf_model **m)
{
	struct tf_model_opts o = {.backend = device && !opt.self ? TF_MODEL_CUDA : TF_MODEL_CPU,
				  .device = opt.device, .threads = opt.threads,
				  .slots = NGREEDY + 4, .max_positions = 1024,
				  .window_fmt = opt.kv, .pool_fmt = opt.kv, .index_fmt = opt.kv,
				  .batch_invariant = device && !opt.self && opt.invariant};
	return tf_model_open(pack, &o, m);
}

static void case_drafts(const char *what, const struct drafts *d, const struct drafts *y)
{
	if (!d->n)
		return;
	printf("  %-30s %5d tokens: %.1f%% equal (yardstick %.1f%%), worst confidence error "
	       "%.3g (yardstick %.3g)\n", what, d->n, 100.0 * d->equal / d->n,
	       100.0 * y->equal / y->n, d->worst_conf, y->worst_conf);
	GPU_CHECK(d->equal >= y->equal - y->n / 10, "drafts: %d of %d equal, the yardstick %d",
		  d->equal, d->n, y->equal);
}

/* Run one case and check its bounds; greedy counts add into g. */
static void run_case(const char *preset, int seed, struct figures *g)
{
	char pack[128], what[64];
	make_pack(preset, seed, pack, sizeof pack);
	struct models M = {0};
	for (int k = 0; k < NM; k++) {
		tf_status st = open_model(pack, k == DEV, &M.m[k]);
		if (st == TF_ERR_UNAVAILABLE && k == DEV) {
			fprintf(stderr, "skip: %s\n", tf_errmsg(st));
			exit(77);
		}
		GPU_OK(st);
	}
	wire(M.m[YARD], M.m[DEV]);
	M.V = tf_model_config(M.m[REF])->vocab;
	M.block = tf_model_draft_block(M.m[REF]);
	GPU_CHECK(M.block <= MAXB && M.block == tf_model_draft_block(M.m[DEV]), "draft block %d",
		  M.block);
	if (M.block > MAXB)
		exit(1);
	struct tf_rng r;
	tf_rng_seed(&r, 1000 + (uint64_t)seed);
	tf_rng_seed(&noise, 99 + (uint64_t)seed);
	static struct figures f;
	memset(&f, 0, sizeof f);
	prefill_decode(&M, &r, &f);
	greedy(&M, &r, &f);
	printf("%s, seed %d (%s against cpu; yardstick: cpu with the device's rounding noise)\n",
	       preset, seed, opt.self ? "cpu as the device" : "cuda");
	report("device: every row", &f.dev);
	report("yardstick: every row", &f.yard);
	bound("every row", &f.dev, &f.yard);
	for (int L = 0; L < opt.nlens; L++) {
		snprintf(what, sizeof what, "device: prompt of %d", opt.lens[L]);
		report(what, &f.len_dev[L]);
		snprintf(what, sizeof what, "yardstick: prompt of %d", opt.lens[L]);
		report(what, &f.len_yard[L]);
		if (!f.chunk[L].n)
			continue;
		snprintf(what, sizeof what, "device chunks of 37 (%d)", opt.lens[L]);
		report(what, &f.chunk[L]);
		bound(what, &f.chunk[L], &f.len_yard[L]);
		snprintf(what, sizeof what, "device row by row (%d)", opt.lens[L]);
		report(what, &f.step[L]);
		bound(what, &f.step[L], &f.len_yard[L]);
	}
	case_drafts("dspark drafts", &f.draft_dev, &f.draft_yard);
	printf("  %-30s %5d prompts: device %d equal (prefix %.1f of %d), yardstick %d (%.1f)\n",
	       "greedy continuations", f.g_n, f.g_equal[DEV], (double)f.g_prefix[DEV] / f.g_n,
	       opt.gsteps, f.g_equal[YARD], (double)f.g_prefix[YARD] / f.g_n);
	for (int k = YARD; k <= DEV; k++) {
		g->g_equal[k] += f.g_equal[k];
		g->g_prefix[k] += f.g_prefix[k];
	}
	g->g_n += f.g_n;
	figures_free(&f);
	unwire(M.m[YARD], M.m[DEV]);
	for (int k = 0; k < NM; k++)
		tf_model_free(M.m[k]);
	char cmd[200];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", pack);
	if (system(cmd))
		fprintf(stderr, "gpu_model: cannot remove '%s'\n", pack);
	fflush(stdout);
}

/* Greedy bounds over a preset's seeds (the header's rule). */
static void greedy_bound(const char *preset, const struct figures *g)
{
	double fd = (double)g->g_equal[DEV] / g->g_n, fy = (double)g->g_equal[YARD] / g->g_n;
	double pd = (double)g->g_prefix[DEV] / g->g_n, py = (double)g->g_prefix[YARD] / g->g_n;
	printf("%s greedy, %d prompts of %d tokens: device %.1f%% equal (mean agreeing prefix "
	       "%.1f), yardstick %.1f%% (%.1f)%s\n", preset, g->g_n, opt.gsteps, 100 * fd, pd,
	       100 * fy, py, fd >= 0.9 ? " (aim met)" : "");
	GPU_CHECK(fd >= fmin(0.9, fy - 0.15), "%s greedy: %.1f%% equal, the yardstick %.1f%%", preset,
		  100 * fd, 100 * fy);
	GPU_CHECK(pd >= 0.7 * py, "%s greedy: agreeing prefix %.1f, the yardstick %.1f", preset, pd,
		  py);
}

/* ---- options ---- */

static void usage(FILE *f)
{
	fputs("usage: gpu_model [--quick] [--break OP] [--preset tiny|small] [--seed N] "
	      "[--threads N] [--kv fp8|bf16] [--batch-invariant]\n", f);
}

static int int_arg(const char *name, const char *v, int lo, int hi)
{
	int64_t x;
	if (tf_parse_i64(v, lo, hi, false, &x)) {
		fprintf(stderr, "gpu_model: %s: '%s' is not a number in %d..%d\n", name, v, lo, hi);
		exit(64);
	}
	return (int)x;
}

static void parse(int argc, char **argv)
{
	const char *ref = getenv("TF_GPU_MODEL_REF"), *dev = getenv("TF_DEVICE");
	opt.self = ref && !strcmp(ref, "cpu");
	opt.brk = getenv("TF_GPU_MODEL_BREAK");
	opt.device = dev && *dev ? int_arg("TF_DEVICE", dev, 0, 1023) : 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--quick"))
			opt.quick = true;
		else if (!strcmp(a, "--batch-invariant"))
			opt.invariant = true;
		else if (!strcmp(a, "--break") && v)
			opt.brk = argv[++i];
		else if (!strcmp(a, "--preset") && v)
			opt.preset = argv[++i];
		else if (!strcmp(a, "--seed") && v)
			opt.seed = int_arg("--seed", argv[++i], 1, 1 << 30);
		else if (!strcmp(a, "--kv") && v && (!strcmp(v, "fp8") || !strcmp(v, "bf16")))
			opt.kv = !strcmp(argv[++i], "bf16") ? TF_KV_BF16 : TF_KV_FP8;
		else if (!strcmp(a, "--threads") && v)
			opt.threads = int_arg("--threads", argv[++i], 0, 1024);
		else if (!strcmp(a, "--help")) {
			usage(stdout);
			exit(0);
		} else {
			usage(stderr);
			exit(64);
		}
	}
	if (opt.brk && !*opt.brk)
		opt.brk = NULL;
	bool known = !opt.brk;
	for (size_t i = 0; opt.brk && i < sizeof breaks / sizeof *breaks; i++)
		known |= !strcmp(opt.brk, breaks[i]);
	if (!known) {
		fprintf(stderr, "gpu_model: --break: no op '%s' (rmsnorm, rope, moe_route, "
			"moe_route_small)\n", opt.brk);
		exit(64);
	}
	if (opt.preset && strcmp(opt.preset, "tiny") && strcmp(opt.preset, "small")) {
		fprintf(stderr, "gpu_model: --preset: '%s' is not tiny or small\n", opt.preset);
		exit(64);
	}
	static const int full[] = {3, 40, 150, 600}, quick[] = {3, 40, 150};
	opt.nlens = opt.quick ? 3 : 4;
	memcpy(opt.lens, opt.quick ? quick : full, sizeof(int) * (size_t)opt.nlens);
	opt.steps = opt.quick ? 8 : 16;
	opt.ngreedy = opt.quick ? 10 : NGREEDY;
	opt.gsteps = opt.quick ? 16 : GSTEPS;
}

int main(int argc, char **argv)
{
	parse(argc, argv);
	if (!tf_model_be) {
		fprintf(stderr, "gpu_model: this libcore has no tf_model_be (compute/model.c): the "
			"yardstick and --break cannot reach the models' ops\n");
		return 70;
	}
	snprintf(tmpdir, sizeof tmpdir, "/tmp/tf-gpumodel-XXXXXX");
	if (!mkdtemp(tmpdir)) {
		perror("gpu_model: mkdtemp");
		return 71;
	}
	atexit(drop_tmpdir);
	const char *presets[] = {"tiny", "small"};
	printf("gpu_model: %s%s%s%s\n", opt.quick ? "quick" : "full",
	       opt.invariant ? ", the batch-invariant path" : "",
	       opt.brk ? "; breaking " : "", opt.brk ? opt.brk : "");
	double t0 = gpu_now();
	for (int p = 0; p < 2; p++) {
		if ((opt.quick && p) || (opt.preset && strcmp(opt.preset, presets[p])))
			continue;
		struct figures g = {0};
		int s0 = opt.seed ? opt.seed : 1, s1 = opt.seed || opt.quick ? s0 : 3;
		for (int seed = s0; seed <= s1; seed++) {
			run_case(presets[p], seed, &g);
			fflush(stdout);
		}
		if (g.g_n)
			greedy_bound(presets[p], &g);
	}
	printf("gpu_model: %.1f s\n", gpu_now() - t0);
	return gpu_result("gpu_model");
}
