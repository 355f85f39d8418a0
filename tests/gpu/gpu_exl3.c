/* gpu_exl3.c: the EXL3 kernels against the CPU codec (tf_exl3_matmul) on
 * random layers. The fused GEMV (kernels/exl3_gemv.cu, and for MUL1 at up
 * to 4 rows kernels/exl3_gemv10.cu): every bit width
 * 1..8, the three codebooks, 1..16 rows, f32 and bf16 outputs, one slice
 * and many. The prefill path (kernels/exl3_gemm.cu + cuBLAS): the decoded
 * Ŵᵀ bit-exact with tf_exl3_decode, and 17..300 rows. The ragged experts
 * launch: experts of mixed widths, routed rows, tasks of 1 and 4 rows.
 * Outputs are poisoned (NaN) before each run; the error is ‖y − ref‖/‖ref‖
 * (tolerance 4e-3 for f32 output: u and the pairwise products are fp16,
 * §5; 8e-3 for bf16), plus the largest element error over the
 * reference's RMS (tolerance 3e-2). The workspace must be zero again after
 * every launch. */
#include <math.h>
#include <string.h>

#include "base/f16.h"
#include "base/rng.h"
#include "base/thread.h"
#include "cuda/blas.h"
#include "cuda/exl3_gemm.h"
#include "cuda/exl3_gemv.h"
#include "cuda/module.h"
#include "gpu_util.h"

static struct tf_pool *pool;
static double worst_rel, worst_max, worst_gemm, worst_experts;
static int launches, clustered;   /* GEMV launches, and those as clusters */
static int elaunches, eclustered; /* the same for the experts launch */

static void ws_zero(const struct tf_cu_exl3_ws *ws);

static void one(const struct tf_cu_device *dev, struct tf_cu_exl3_ws *ws, uint32_t k, uint32_t n,
                uint32_t bits, enum tf_exl3_cb cb, uint32_t rows, bool y_bf16, int bps, uint64_t seed)
{
	struct tf_exl3_geom g = {k, n, bits, cb};
	struct tf_rng rng;
	tf_rng_seed(&rng, seed);
	size_t tb = tf_exl3_trellis_bytes(&g);
	uint16_t *tr = malloc(tb), *suh = malloc(2 * k), *svh = malloc(2 * n), *xb = malloc(2 * rows * k);
	float *x = malloc(4 * rows * k), *ref = malloc(4 * rows * n), *y = malloc(4 * rows * n);
	tf_exl3_synth(&g, &rng, tr, suh, svh);
	for (size_t i = 0; i < (size_t)rows * k; i++) {
		xb[i] = tf_f32_to_bf16(tf_rng_normal(&rng));
		x[i] = tf_bf16_to_f32(xb[i]);
	}
	struct tf_exl3_layer L = {g, tr, suh, svh, NULL};
	GPU_OK(tf_exl3_matmul(&L, x, rows, ref, pool));

	struct tf_cu_exl3_layer D = {.g = g};
	tf_cu_ptr dx, dy;
	GPU_OK(TF_CU(tf_cu->MemAlloc(&D.trellis, tb)));
	GPU_OK(TF_CU(tf_cu->MemAlloc(&D.suh, 2 * k)));
	GPU_OK(TF_CU(tf_cu->MemAlloc(&D.svh, 2 * n)));
	GPU_OK(TF_CU(tf_cu->MemAlloc(&dx, 2 * rows * k)));
	GPU_OK(TF_CU(tf_cu->MemAlloc(&dy, 4 * rows * n)));
	GPU_OK(TF_CU(tf_cu->MemcpyHtoD(D.trellis, tr, tb)));
	GPU_OK(TF_CU(tf_cu->MemcpyHtoD(D.suh, suh, 2 * k)));
	GPU_OK(TF_CU(tf_cu->MemcpyHtoD(D.svh, svh, 2 * n)));
	GPU_OK(TF_CU(tf_cu->MemcpyHtoD(dx, xb, 2 * rows * k)));
	GPU_OK(TF_CU(tf_cu->MemsetD8(dy, 0xFF, 4 * rows * n))); /* NaN in f32 and bf16 */
	/* bps < 0: plan for one processor, so the whole of K is one slice. */
	const int sms = bps < 0 ? 1 : dev->sms;
	bps = bps < 0 ? 1 : bps;
	GPU_OK(tf_cu_exl3_gemv(&D, dx, rows, dy, y_bf16, ws, sms, bps, false, NULL));
	launches++;
	clustered += tf_cu_exl3_last_cluster() > 0;
	GPU_OK(TF_CU(tf_cu->CtxSynchronize()));
	if (y_bf16) {
		uint16_t *yb = malloc(2 * rows * n);
		GPU_OK(TF_CU(tf_cu->MemcpyDtoH(yb, dy, 2 * rows * n)));
		for (size_t i = 0; i < (size_t)rows * n; i++)
			y[i] = tf_bf16_to_f32(yb[i]);
		free(yb);
	} else {
		GPU_OK(TF_CU(tf_cu->MemcpyDtoH(y, dy, 4 * rows * n)));
	}
	double num = 0, den = 0, maxe = 0;
	size_t nan = 0;
	for (size_t i = 0; i < (size_t)rows * n; i++) {
		if (!isfinite(y[i])) {
			nan++;
			continue;
		}
		double d = (double)y[i] - ref[i];
		num += d * d;
		den += (double)ref[i] * ref[i];
		if (fabs(d) > maxe)
			maxe = fabs(d);
	}
	double rel = sqrt(num / (den > 0 ? den : 1));
	double rms = sqrt(den / ((double)rows * n));
	double mx = maxe / (rms > 0 ? rms : 1);
	double tol = y_bf16 ? 8e-3 : 4e-3;
	struct tf_cu_exl3_plan p;
	tf_cu_exl3_plan(&g, rows, sms, bps, &p);
	GPU_CHECK(nan == 0 && rel <= tol && mx <= 3e-2,
	          "%ux%u b%u %s rows %u %s grid %ux%u: %zu unwritten/NaN, rel %.2e, max %.2e", k, n,
	          bits, tf_exl3_cb_name(cb), rows, y_bf16 ? "bf16" : "f32", p.grid_x, p.slices, nan,
	          rel, mx);
	if (rel > worst_rel && !y_bf16)
		worst_rel = rel;
	if (mx > worst_max && !y_bf16)
		worst_max = mx;
	/* The workspace is zero again. */
	ws_zero(ws);
	tf_cu->MemFree(D.trellis);
	tf_cu->MemFree(D.suh);
	tf_cu->MemFree(D.svh);
	tf_cu->MemFree(dx);
	tf_cu->MemFree(dy);
	free(tr);
	free(suh);
	free(svh);
	free(xb);
	free(x);
	free(ref);
	free(y);
}

/* The workspace is all zero again. */
static void ws_zero(const struct tf_cu_exl3_ws *ws)
{
	size_t nacc = 16 * (size_t)ws->n_max, ncnt = tf_cu_exl3_ws_counters(ws->n_max);
	float *acc = malloc(4 * nacc);
	uint32_t *cnt = malloc(4 * ncnt);
	GPU_OK(TF_CU(tf_cu->MemcpyDtoH(acc, ws->acc, 4 * nacc)));
	GPU_OK(TF_CU(tf_cu->MemcpyDtoH(cnt, ws->count, 4 * ncnt)));
	size_t nz = 0;
	for (size_t i = 0; i < nacc; i++)
		nz += acc[i] != 0;
	for (size_t i = 0; i < ncnt; i++)
		nz += cnt[i] != 0;
	GPU_CHECK(nz == 0, "%zu workspace words left non-zero", nz);
	free(acc);
	free(cnt);
}

/* ‖y − ref‖/‖ref‖ and max|y − ref|/rms(ref) over count values; NaNs and
 * infinities counted apart. */
static size_t compare(const float *y, const float *ref, size_t count, double *rel, double *mx)
{
	double num = 0, den = 0, maxe = 0;
	size_t nan = 0;
	for (size_t i = 0; i < count; i++) {
		if (!isfinite(y[i])) {
			nan++;
			continue;
		}
		double d = (double)y[i] - ref[i];
		num += d * d;
		den += (double)ref[i] * ref[i];
		if (fabs(d) > maxe)
			maxe = fabs(d);
	}
	*rel = sqrt(num / (den > 0 ? den : 1));
	double rms = sqrt(den / (double)(count ? count : 1));
	*mx = maxe / (rms > 0 ? rms : 1);
	return nan;
}

/* Read back count outputs (f32 or bf16) as floats. */
static void fetch(tf_cu_ptr dy, size_t count, bool y_bf16, float *y)
{
	if (y_bf16) {
		uint16_t *yb = malloc(2 * count);
		GPU_OK(TF_CU(tf_cu->MemcpyDtoH(yb, dy, 2 * count)));
		for (size_t i = 0; i < count; i++)
			y[i] = tf_bf16_to_f32(yb[i]);
		free(yb);
	} else {
		GPU_OK(TF_CU(tf_cu->MemcpyDtoH(y, dy, 4 * count)));
	}
}

/* The prefill path: Ŵᵀ bit-exact, then y for rows rows. */
static void gemm_one(struct tf_cu_blas *blas, uint32_t k, uint32_t n, uint32_t bits, enum tf_exl3_cb cb,
                     uint32_t rows, bool y_bf16, uint64_t seed)
{
	struct tf_exl3_geom g = {k, n, bits, cb};
	struct tf_rng rng;
	tf_rng_seed(&rng, seed);
	size_t tb = tf_exl3_trellis_bytes(&g), kn = (size_t)k * n, rk = (size_t)rows * k, rn = (size_t)rows * n;
	uint16_t *tr = malloc(tb), *suh = malloc(2 * k), *svh = malloc(2 * n), *xb = malloc(2 * rk);
	uint16_t *What = malloc(2 * kn), *wt = malloc(2 * kn);
	float *x = malloc(4 * rk), *ref = malloc(4 * rn), *y = malloc(4 * rn);
	tf_exl3_synth(&g, &rng, tr, suh, svh);
	for (size_t i = 0; i < rk; i++) {
		xb[i] = tf_f32_to_bf16(tf_rng_normal(&rng));
		x[i] = tf_bf16_to_f32(xb[i]);
	}
	struct tf_exl3_layer L = {g, tr, suh, svh, NULL};
	GPU_OK(tf_exl3_matmul(&L, x, rows, ref, pool));
	tf_exl3_decode(&g, tr, What);

	struct tf_cu_exl3_layer D = {.g = g};
	size_t sb = tf_cu_exl3_gemm_scratch(&g, rows);
	tf_cu_ptr dx, dy, scratch;
	GPU_OK(TF_CU(tf_cu->MemAlloc(&D.trellis, tb)));
	GPU_OK(TF_CU(tf_cu->MemAlloc(&D.suh, 2 * k)));
	GPU_OK(TF_CU(tf_cu->MemAlloc(&D.svh, 2 * n)));
	GPU_OK(TF_CU(tf_cu->MemAlloc(&dx, 2 * rk)));
	GPU_OK(TF_CU(tf_cu->MemAlloc(&dy, 4 * rn)));
	GPU_OK(TF_CU(tf_cu->MemAlloc(&scratch, sb)));
	GPU_OK(TF_CU(tf_cu->MemcpyHtoD(D.trellis, tr, tb)));
	GPU_OK(TF_CU(tf_cu->MemcpyHtoD(D.suh, suh, 2 * k)));
	GPU_OK(TF_CU(tf_cu->MemcpyHtoD(D.svh, svh, 2 * n)));
	GPU_OK(TF_CU(tf_cu->MemcpyHtoD(dx, xb, 2 * rk)));

	/* Ŵᵀ[j][i] == Ŵ[i][j], every bit. */
	GPU_OK(TF_CU(tf_cu->MemsetD8(scratch, 0xFF, 2 * kn)));
	GPU_OK(tf_cu_exl3_decode(&D, scratch, NULL));
	GPU_OK(TF_CU(tf_cu->CtxSynchronize()));
	GPU_OK(TF_CU(tf_cu->MemcpyDtoH(wt, scratch, 2 * kn)));
	size_t bad = 0;
	for (uint32_t i = 0; i < k; i++)
		for (uint32_t j = 0; j < n; j++)
			bad += wt[(size_t)j * k + i] != What[(size_t)i * n + j];
	GPU_CHECK(bad == 0, "decode %ux%u b%u %s: %zu of %zu weights differ", k, n, bits,
	          tf_exl3_cb_name(cb), bad, kn);

	GPU_OK(TF_CU(tf_cu->MemsetD8(dy, 0xFF, 4 * rn)));
	GPU_OK(TF_CU(tf_cu->MemsetD8(scratch, 0xFF, sb)));
	GPU_OK(tf_cu_exl3_gemm(&D, dx, rows, dy, y_bf16, blas, scratch, sb, NULL));
	GPU_OK(TF_CU(tf_cu->CtxSynchronize()));
	fetch(dy, rn, y_bf16, y);
	double rel, mx;
	size_t nan = compare(y, ref, rn, &rel, &mx);
	double tol = y_bf16 ? 8e-3 : 4e-3;
	GPU_CHECK(nan == 0 && rel <= tol && mx <= 3e-2,
	          "gemm %ux%u b%u %s rows %u %s: %zu unwritten/NaN, rel %.2e, max %.2e", k, n, bits,
	          tf_exl3_cb_name(cb), rows, y_bf16 ? "bf16" : "f32", nan, rel, mx);
	if (rel > worst_gemm && !y_bf16)
		worst_gemm = rel;
	tf_cu->MemFree(D.trellis);
	tf_cu->MemFree(D.suh);
	tf_cu->MemFree(D.svh);
	tf_cu->MemFree(dx);
	tf_cu->MemFree(dy);
	tf_cu->MemFree(scratch);
	free(tr), free(suh), free(svh), free(xb), free(What), free(wt), free(x), free(ref), free(y);
}

/* Ragged experts: nexp experts of widths bits[e] (one codebook), rows
 * routed rows choosing topk experts each at random, tasks of rows_max;
 * each pair against tf_exl3_matmul of its expert on its row. */
/* Whether 1024x5120 plans a cluster launch on this GPU for every kernel
 * (the plan at four blocks an SM, and at three for the v10 widths with
 * three words a tile): on an H200's 132 SMs, 40 × 8 slices, 320 blocks,
 * three an SM. */
static bool clusters_planned(const struct tf_cu_device *dev)
{
	const struct tf_exl3_geom g = {1024, 5120, 4, TF_EXL3_CB_MUL1};
	for (int bps = 3; bps <= 4; bps++) {
		struct tf_cu_exl3_plan p;
		tf_cu_exl3_plan(&g, 1, dev->sms, bps, &p);
		if (!tf_cu_exl3_cluster_size(p.grid_x * p.slices, p.slices, dev->sms, TF_CU_EXL3_CLUSTER_PORTABLE))
			return false;
	}
	return true;
}

static void experts_one(const struct tf_cu_device *dev, struct tf_cu_exl3_ws *ws, uint32_t k,
                        uint32_t n, const uint32_t *bits, uint32_t nexp, enum tf_exl3_cb cb,
                        uint32_t rows, uint32_t topk, uint32_t rows_max, bool y_bf16, int bps,
                        uint64_t seed)
{
	struct tf_rng rng;
	tf_rng_seed(&rng, seed);
	struct tf_exl3_geom g[16];
	uint64_t off[16], total;
	int ragged;
	for (uint32_t e = 0; e < nexp; e++)
		g[e] = (struct tf_exl3_geom){k, n, bits[e], cb};
	GPU_OK(tf_exl3_experts_layout(g, nexp, off, &total, &ragged));
	uint8_t *tr = calloc(1, total);
	uint16_t *suh = malloc(2 * (size_t)nexp * k), *svh = malloc(2 * (size_t)nexp * n);
	for (uint32_t e = 0; e < nexp; e++)
		tf_exl3_synth(&g[e], &rng, (uint16_t *)(tr + off[e]), suh + (size_t)e * k, svh + (size_t)e * n);
	uint16_t *xb = malloc(2 * (size_t)rows * k);
	float *x = malloc(4 * (size_t)rows * k);
	for (size_t i = 0; i < (size_t)rows * k; i++) {
		xb[i] = tf_f32_to_bf16(tf_rng_normal(&rng));
		x[i] = tf_bf16_to_f32(xb[i]);
	}
	/* Routing: topk distinct experts per row. */
	int32_t *sel = malloc(4 * (size_t)rows * topk), *xrow = malloc(4 * (size_t)rows * topk);
	int32_t *pair_of = malloc(4 * (size_t)rows * topk);
	struct tf_cu_exl3_task *tasks = malloc(sizeof(*tasks) * rows * topk);
	for (uint32_t r = 0; r < rows; r++)
		for (uint32_t j = 0; j < topk; j++) {
			int32_t e;
			bool dup;
			do {
				e = (int32_t)(tf_rng_u64(&rng) % nexp);
				dup = false;
				for (uint32_t i = 0; i < j; i++)
					dup |= sel[r * topk + i] == e;
			} while (dup);
			sel[r * topk + j] = e;
		}
	uint32_t npairs, ntasks = tf_cu_exl3_route(sel, rows, topk, nexp, rows_max, tasks, xrow, pair_of, &npairs);
	GPU_CHECK(npairs == rows * topk, "route: %u pairs of %u", npairs, rows * topk);
	/* The reference, pair by pair. */
	float *ref = malloc(4 * (size_t)npairs * n), *y = malloc(4 * (size_t)npairs * n);
	for (uint32_t i = 0; i < rows * topk; i++) {
		int32_t e = sel[i], p = pair_of[i];
		struct tf_exl3_layer L = {g[e], (const uint16_t *)(tr + off[e]), suh + (size_t)e * k,
		                          svh + (size_t)e * n, NULL};
		GPU_OK(tf_exl3_matmul(&L, x + (size_t)(i / topk) * k, 1, ref + (size_t)p * n, NULL));
	}
	unsigned char table[16 * TF_CU_EXL3_EXPERT_BYTES];
	tf_cu_exl3_experts_table(g, off, nexp, table);
	struct tf_cu_exl3_experts E = {.k = k, .n = n, .count = nexp, .cb = cb};
	tf_cu_ptr dtasks, dxrow, dx, dy;
	GPU_OK(TF_CU(tf_cu->MemAlloc(&E.trellis, total)));
	GPU_OK(TF_CU(tf_cu->MemAlloc(&E.table, sizeof(table))));
	GPU_OK(TF_CU(tf_cu->MemAlloc(&E.suh, 2 * (size_t)nexp * k)));
	GPU_OK(TF_CU(tf_cu->MemAlloc(&E.svh, 2 * (size_t)nexp * n)));
	GPU_OK(TF_CU(tf_cu->MemAlloc(&dtasks, sizeof(*tasks) * ntasks)));
	GPU_OK(TF_CU(tf_cu->MemAlloc(&dxrow, 4 * (size_t)npairs)));
	GPU_OK(TF_CU(tf_cu->MemAlloc(&dx, 2 * (size_t)rows * k)));
	GPU_OK(TF_CU(tf_cu->MemAlloc(&dy, 4 * (size_t)npairs * n)));
	GPU_OK(TF_CU(tf_cu->MemcpyHtoD(E.trellis, tr, total)));
	GPU_OK(TF_CU(tf_cu->MemcpyHtoD(E.table, table, sizeof(table))));
	GPU_OK(TF_CU(tf_cu->MemcpyHtoD(E.suh, suh, 2 * (size_t)nexp * k)));
	GPU_OK(TF_CU(tf_cu->MemcpyHtoD(E.svh, svh, 2 * (size_t)nexp * n)));
	GPU_OK(TF_CU(tf_cu->MemcpyHtoD(dtasks, tasks, sizeof(*tasks) * ntasks)));
	GPU_OK(TF_CU(tf_cu->MemcpyHtoD(dxrow, xrow, 4 * (size_t)npairs)));
	GPU_OK(TF_CU(tf_cu->MemcpyHtoD(dx, xb, 2 * (size_t)rows * k)));
	GPU_OK(TF_CU(tf_cu->MemsetD8(dy, 0xFF, 4 * (size_t)npairs * n)));
	const int sms = bps < 0 ? 1 : dev->sms;
	bps = bps < 0 ? 1 : bps;
	GPU_OK(tf_cu_exl3_experts(&E, dtasks, ntasks, rows_max, dxrow, dx, dy, y_bf16, ws, sms, bps, false, NULL));
	elaunches++;
	eclustered += tf_cu_exl3_last_cluster() > 0;
	GPU_OK(TF_CU(tf_cu->CtxSynchronize()));
	fetch(dy, (size_t)npairs * n, y_bf16, y);
	double rel, mx;
	size_t nan = compare(y, ref, (size_t)npairs * n, &rel, &mx);
	double tol = y_bf16 ? 8e-3 : 4e-3;
	GPU_CHECK(nan == 0 && rel <= tol && mx <= 3e-2,
	          "experts %ux%u %s x%u rows %u top%u tasks %u (≤%u rows) %s: %zu unwritten/NaN, rel %.2e, max %.2e",
	          k, n, tf_exl3_cb_name(cb), nexp, rows, topk, ntasks, rows_max, y_bf16 ? "bf16" : "f32",
	          nan, rel, mx);
	if (rel > worst_experts && !y_bf16)
		worst_experts = rel;
	ws_zero(ws);
	tf_cu->MemFree(E.trellis);
	tf_cu->MemFree(E.table);
	tf_cu->MemFree(E.suh);
	tf_cu->MemFree(E.svh);
	tf_cu->MemFree(dtasks);
	tf_cu->MemFree(dxrow);
	tf_cu->MemFree(dx);
	tf_cu->MemFree(dy);
	free(tr), free(suh), free(svh), free(xb), free(x), free(sel), free(xrow), free(pair_of);
	free(tasks), free(ref), free(y);
}

/* The bf16 cuBLAS GEMM that tf-bench compares with, on the dequantised
 * weight of a random layer: checks its argument order. */
static void blas_check(void)
{
	struct tf_cu_blas *b;
	tf_status st = tf_cu_blas_new(&b);
	if (st) {
		printf("cublas: not checked: %s\n", tf_errmsg(st));
		return;
	}
	const uint32_t k = 1024, n = 512, rows = 4;
	struct tf_exl3_geom g = {k, n, 4, TF_EXL3_CB_MUL1};
	struct tf_rng rng;
	tf_rng_seed(&rng, 77);
	uint16_t *tr = malloc(tf_exl3_trellis_bytes(&g)), *suh = malloc(2 * k), *svh = malloc(2 * n);
	float *W = malloc(4 * (size_t)k * n), *x = malloc(4 * rows * k), *ref = malloc(4 * rows * n);
	float *y = malloc(4 * rows * n);
	uint16_t *wt = malloc(2 * (size_t)k * n), *xb = malloc(2 * rows * k);
	tf_exl3_synth(&g, &rng, tr, suh, svh);
	struct tf_exl3_layer L = {g, tr, suh, svh, NULL};
	GPU_OK(tf_exl3_dequant(&L, W));
	for (uint32_t i = 0; i < k; i++)
		for (uint32_t j = 0; j < n; j++)
			wt[(size_t)j * k + i] = tf_f32_to_bf16(W[(size_t)i * n + j]);
	for (size_t i = 0; i < (size_t)rows * k; i++) {
		xb[i] = tf_f32_to_bf16(tf_rng_normal(&rng));
		x[i] = tf_bf16_to_f32(xb[i]);
	}
	GPU_OK(tf_exl3_matmul(&L, x, rows, ref, NULL));
	tf_cu_ptr dw, dx, dy;
	GPU_OK(TF_CU(tf_cu->MemAlloc(&dw, 2 * (size_t)k * n)));
	GPU_OK(TF_CU(tf_cu->MemAlloc(&dx, 2 * rows * k)));
	GPU_OK(TF_CU(tf_cu->MemAlloc(&dy, 4 * rows * n)));
	GPU_OK(TF_CU(tf_cu->MemcpyHtoD(dw, wt, 2 * (size_t)k * n)));
	GPU_OK(TF_CU(tf_cu->MemcpyHtoD(dx, xb, 2 * rows * k)));
	GPU_OK(TF_CU(tf_cu->MemsetD8(dy, 0xFF, 4 * rows * n)));
	GPU_OK(tf_cu_blas_linear_bf16(b, dx, dw, dy, rows, k, n, false, NULL));
	GPU_OK(TF_CU(tf_cu->CtxSynchronize()));
	GPU_OK(TF_CU(tf_cu->MemcpyDtoH(y, dy, 4 * rows * n)));
	double num = 0, den = 0;
	for (size_t i = 0; i < (size_t)rows * n; i++) {
		double d = (double)y[i] - ref[i];
		num += isfinite(y[i]) ? d * d : 1e30;
		den += (double)ref[i] * ref[i];
	}
	double rel = sqrt(num / den);
	printf("cublas (%s) bf16 GEMM vs the CPU codec: rel %.2e\n", tf_cu_blas_path(b), rel);
	GPU_CHECK(rel < 1e-2, "cuBLAS bf16 GEMM rel error %.2e", rel);
	tf_cu->MemFree(dw);
	tf_cu->MemFree(dx);
	tf_cu->MemFree(dy);
	free(tr), free(suh), free(svh), free(W), free(x), free(ref), free(y), free(wt), free(xb);
	tf_cu_blas_free(b);
}

int main(void)
{
	struct tf_cu_device dev;
	gpu_open(&dev);
	GPU_OK(tf_pool_new(0, &pool));
	struct tf_cu_exl3_ws ws;
	GPU_OK(tf_cu_exl3_ws_init(&ws, 8192));
	static const uint32_t rows_list[] = {1, 2, 3, 4, 5, 8, 11, 16};
	/* TF_GPU_QUICK=1: a few small cases (for compute-sanitizer). */
	const bool quick = getenv("TF_GPU_QUICK") && !strcmp(getenv("TF_GPU_QUICK"), "1");
	int cases = 0;
	uint64_t seed = 1;
	for (uint32_t bits = 1; bits <= 8; bits++)
		for (int cb = 0; cb < 3; cb++) {
			if (quick && (bits % 3 != 1 || cb != (int)bits % 3))
				continue;
			for (int i = 0; i < (quick ? 1 : 3); i++) {
				uint32_t rows = rows_list[(bits * 3 + cb + i * 3) % 8];
				/* a few slices, many slices, one slice */
				one(&dev, &ws, 512, 384, bits, cb, rows, false, 0, seed++);
				one(&dev, &ws, 2048, 256, bits, cb, rows, i == 2, 0, seed++);
				one(&dev, &ws, 1024, 1152, bits, cb, rows, false, -1, seed++);
				cases += 3;
			}
		}
	/* Slices meeting in a cluster: 1024x5120 plans 40 column blocks × 8
	 * slices, 320 blocks on 132 SMs, which takes clusters of 8 (the
	 * default); then the same through the workspace. Every width and
	 * codebook, rows 1, 2 and 4 (v10 for MUL1), f32 and bf16. */
	for (int cl = 1; cl >= 0; cl--) {
		GPU_OK(tf_cu_exl3_variant(cl ? "tuned" : "no-cluster"));
		const int l0 = launches, c0 = clustered;
		for (uint32_t bits = 1; bits <= 8; bits++)
			for (int cb = 0; cb < 3; cb++) {
				if (quick && (bits % 3 != 1 || cb != (int)bits % 3))
					continue;
				for (uint32_t rows = 1; rows <= 4; rows *= 2) {
					one(&dev, &ws, 1024, 5120, bits, cb, rows, (bits + rows) % 2 == 1, 0, seed++);
					cases++;
					if (cl && !tf_cu_exl3_last_cluster())
						printf("exl3 gemv: 1024x5120 b%u %s rows %u not as clusters\n", bits,
						       tf_exl3_cb_name(cb), rows);
				}
			}
		printf("exl3 gemv, %s: %d of %d launches as clusters\n", cl ? "clusters on" : "clusters off",
		       clustered - c0, launches - l0);
		if (cl && clusters_planned(&dev))
			GPU_CHECK(clustered - c0 == launches - l0, "%d of %d launches were cluster launches",
			          clustered - c0, launches - l0);
		else if (!cl)
			GPU_CHECK(clustered == c0, "a launch was a cluster launch with clusters off");
	}
	GPU_OK(tf_cu_exl3_variant("tuned"));
	/* One row with every launch a programmatic dependent launch
	 * (the variant pdl-all; by default only v10 launches are): v7 and v10
	 * wait for the launch before them before reading x or the workspace.
	 * Every width and codebook, one slice and many, and the cluster
	 * shape above. */
	GPU_OK(tf_cu_exl3_variant("pdl-all"));
	for (uint32_t bits = 1; bits <= 8; bits++)
		for (int cb = 0; cb < 3; cb++) {
			if (quick && (bits % 3 != 1 || cb != (int)bits % 3))
				continue;
			one(&dev, &ws, 2304, 384, bits, cb, 1, (bits + (uint32_t)cb) % 2 == 1, 0, seed++);
			one(&dev, &ws, 8192, 256, bits, cb, 1, false, 0, seed++);
			one(&dev, &ws, 1024, 5120, bits, cb, 1, false, 0, seed++);
			cases += 3;
		}
	GPU_OK(tf_cu_exl3_variant("tuned"));
	/* MUL1 at 1..4 rows on v10 (int8 tensor cores, the default) and on the
	 * fp16 bodies (v7 for one row, the MMA body for more): every width, one
	 * slice of 20 chunks (three groups of u at 1 and 2 rows, five at 3 and
	 * 4) and many slices of one chunk, f32 and bf16 output. */
	for (int v10 = 1; v10 >= 0; v10--) {
		GPU_OK(tf_cu_exl3_variant(v10 ? "tuned" : "no-v10"));
		double before = worst_rel;
		worst_rel = 0;
		for (uint32_t bits = 1; bits <= 8; bits++) {
			if (quick && bits % 3 != 1)
				continue;
			for (uint32_t rows = 1; rows <= 4; rows++) {
				one(&dev, &ws, 2560, 256, bits, TF_EXL3_CB_MUL1, rows, false, -1, seed++);
				one(&dev, &ws, 5120, 384, bits, TF_EXL3_CB_MUL1, rows, (bits + rows) % 2 == 0, 16, seed++);
				cases += 2;
			}
		}
		printf("exl3 gemv MUL1 1-4 rows %s: worst rel %.2e (f32 output)\n", v10 ? "v10" : "fp16", worst_rel);
		if (before > worst_rel)
			worst_rel = before;
	}
	GPU_OK(tf_cu_exl3_variant("tuned"));
	/* Release shapes of DeepSeek-V4.1 at the common widths. */
	static const uint32_t shapes[][2] = {{5120, 2304}, {2304, 5120}, {4096, 1024}, {1280, 8192}};
	for (size_t s = 0; s < (quick ? 0u : 4u); s++)
		for (uint32_t bits = 2; bits <= 4; bits += 2)
			for (uint32_t rows = 1; rows <= 16; rows *= 4) {
				one(&dev, &ws, shapes[s][0], shapes[s][1], bits, TF_EXL3_CB_MUL1, rows, false, 0, seed++);
				cases++;
			}
	printf("exl3 gemv: %d cases, worst rel %.2e, worst max/rms %.2e (f32 output)\n", cases,
	       worst_rel, worst_max);
	if (!quick)
		blas_check();

	/* The prefill path: every width and codebook, rows past the GEMV. */
	struct tf_cu_blas *blas;
	tf_status bst = tf_cu_blas_new(&blas);
	GPU_CHECK(bst == TF_OK, "no cuBLAS for the prefill path: %s", tf_errmsg(bst));
	int gcases = 0;
	for (uint32_t bits = 1; bits <= 8 && !bst; bits++)
		for (int cb = 0; cb < 3; cb++) {
			if (quick && (bits % 3 != 1 || cb != (int)bits % 3))
				continue;
			static const uint32_t grows[] = {17, 64, 300};
			gemm_one(blas, 512, 384, bits, cb, grows[(bits + cb) % 3], (bits + cb) % 4 == 0, seed++);
			gcases++;
			if (!quick && cb == 2 && (bits == 2 || bits == 4)) {
				gemm_one(blas, 5120, 2304, bits, cb, 64, false, seed++);
				gemm_one(blas, 2304, 5120, bits, cb, 33, false, seed++);
				gcases += 2;
			}
		}
	printf("exl3 gemm: %d cases, worst rel %.2e (f32 output)\n", gcases, worst_gemm);
	if (!bst)
		tf_cu_blas_free(blas);

	/* Ragged experts in one launch: a task's slices meeting in a cluster
	 * (the default; the first pass must have had some) and in the
	 * workspace. */
	static const uint32_t ebits[8] = {2, 3, 4, 2, 5, 8, 1, 6};
	int ecases = 0;
	for (int cl = 1; cl >= 0; cl--) {
		GPU_OK(tf_cu_exl3_variant(cl ? "tuned" : "no-cluster"));
		for (int cb = 0; cb < 3; cb++) {
			experts_one(&dev, &ws, 1024, 384, ebits, 8, cb, 1, 6, 1, false, 0, seed++);
			experts_one(&dev, &ws, 512, 256, ebits, 8, cb, 5, 3, 4, cb == 1, 0, seed++);
			experts_one(&dev, &ws, 512, 384, ebits, 8, cb, 40, 2, 4, false, 0, seed++);
			experts_one(&dev, &ws, 1024, 384, ebits, 6, cb, 3, 4, 1, false, -1, seed++);
			ecases += 4;
		}
		/* 6 tasks of 4096x1280: 10 column blocks × 6 slices × 6 = 360
		 * blocks, clusters of 6 */
		experts_one(&dev, &ws, 4096, 1280, ebits, 6, TF_EXL3_CB_MUL1, 1, 6, 1, false, 0, seed++);
		experts_one(&dev, &ws, 4096, 1280, ebits, 6, TF_EXL3_CB_3INST, 1, 6, 1, true, 0, seed++);
		ecases += 2;
		if (cl) {
			printf("exl3 experts: %d of %d launches as clusters\n", eclustered, elaunches);
			GPU_CHECK(eclustered > 0, "no experts launch was a cluster launch");
		}
	}
	GPU_OK(tf_cu_exl3_variant("tuned"));
	/* MUL1 on the fp16 bodies too (v10 is the default): one and four
	 * routed rows. */
	GPU_OK(tf_cu_exl3_variant("no-v10"));
	experts_one(&dev, &ws, 1024, 384, ebits, 8, TF_EXL3_CB_MUL1, 1, 6, 1, false, 0, seed++);
	experts_one(&dev, &ws, 1024, 384, ebits, 6, TF_EXL3_CB_MUL1, 3, 4, 1, false, -1, seed++);
	experts_one(&dev, &ws, 512, 384, ebits, 8, TF_EXL3_CB_MUL1, 40, 2, 4, false, 0, seed++);
	ecases += 3;
	GPU_OK(tf_cu_exl3_variant("tuned"));
	static const uint32_t dsv[6] = {2, 4, 2, 4, 3, 2};
	if (!quick) {
		experts_one(&dev, &ws, 5120, 2304, dsv, 6, TF_EXL3_CB_MUL1, 1, 6, 1, false, 0, seed++);
		experts_one(&dev, &ws, 2304, 5120, dsv, 6, TF_EXL3_CB_MUL1, 4, 6, 4, false, 0, seed++);
		ecases += 2;
	}
	printf("exl3 experts: %d cases, worst rel %.2e (f32 output)\n", ecases, worst_experts);
	tf_cu_exl3_ws_release(&ws);
	tf_pool_free(pool);
	tf_cu_module_unload();
	tf_cu_device_close(&dev);
	return gpu_result("gpu_exl3");
}
