/* gpu_exl3.c: the fused EXL3 GEMV (kernels/exl3_gemv.cu) against the CPU
 * codec (tf_exl3_matmul) on random layers: every bit width 1..8, the three
 * codebooks, 1..16 rows, f32 and bf16 outputs, one slice and many. The
 * output is poisoned (NaN) before each run; the error is ‖y − ref‖/‖ref‖
 * (tolerance 4e-3: u and the pairwise products are fp16, §5), plus the
 * largest element error over the reference's RMS (tolerance 3e-2). The
 * workspace must be zero again after every launch. */
#include <math.h>
#include <string.h>

#include "base/f16.h"
#include "base/rng.h"
#include "base/thread.h"
#include "cuda/blas.h"
#include "cuda/exl3_gemv.h"
#include "cuda/module.h"
#include "gpu_util.h"

static struct tf_pool *pool;
static double worst_rel, worst_max;

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
	GPU_OK(tf_cu_exl3_gemv(&D, dx, rows, dy, y_bf16, ws, sms, bps, NULL));
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
	float *acc = malloc(4 * 16 * (size_t)ws->n_max);
	uint32_t *cnt = malloc(4 * (ws->n_max / 128 + 1));
	GPU_OK(TF_CU(tf_cu->MemcpyDtoH(acc, ws->acc, 4 * 16 * (size_t)ws->n_max)));
	GPU_OK(TF_CU(tf_cu->MemcpyDtoH(cnt, ws->count, 4 * (ws->n_max / 128 + 1))));
	size_t nz = 0;
	for (size_t i = 0; i < 16 * (size_t)ws->n_max; i++)
		nz += acc[i] != 0;
	for (size_t i = 0; i < ws->n_max / 128 + 1; i++)
		nz += cnt[i] != 0;
	GPU_CHECK(nz == 0, "%zu workspace words left non-zero", nz);
	free(acc);
	free(cnt);
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
	tf_cu_exl3_ws_release(&ws);
	tf_pool_free(pool);
	tf_cu_module_unload();
	tf_cu_device_close(&dev);
	return gpu_result("gpu_exl3");
}
