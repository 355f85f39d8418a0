/* kernels_cuda.c: tf-bench kernels on the GPU: for every shape × bits ×
 * codebook × rows, the EXL3 matmul (the fused GEMV up to 16 rows; above,
 * the prefill path, decode + cuBLAS, next to the GEMV run once per 16 rows)
 * timed from CUDA graph replays of back-to-back launches over rotating
 * copies of the weights (more bytes than the L2 holds), the median of many
 * replays after a warm-up; reported as µs per launch, GB/s of packed
 * weights (the trellis), % of the device-to-device copy bandwidth measured
 * in the same run, and the same product as a bf16 cuBLAS GEMM. With
 * --experts N, rows ≤ 4 also time N experts of the shape in one launch
 * (the MoE kernel). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "base/f16.h"
#include "base/json.h"
#include "base/log.h"
#include "base/num.h"
#include "base/rng.h"
#include "cuda/blas.h"
#include "cuda/driver.h"
#include "cuda/exl3_gemm.h"
#include "cuda/exl3_gemv.h"
#include "cuda/graph.h"
#include "cuda/module.h"
#include "bench/bench.h"


static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return (x > y) - (x < y);
}

/* Time body (launches launches per call) by graph replays: the median µs
 * per launch over bench.iters replays after 3 warm-ups. */
struct timer {
	struct tf_graph_cache *gc, *gc_blas; /* cuBLAS apart: its capture may fail */
	tf_cu_stream s;
	tf_cu_event e0, e1;
	uint64_t fp;
};

static tf_status time_body(struct timer *t, struct tf_graph_cache *gc, tf_graph_body_fn body,
                           void *arg, int launches, double *us)
{
	float *ms = calloc((size_t)bench.iters, sizeof(float));
	if (!ms)
		return tf_err(TF_ERR_NOMEM, "out of memory");
	t->fp++; /* a new case: new buffers, drop the last graph */
	/* One eager run first: kernels load before any capture. */
	tf_status st = body(arg, t->s);
	if (st)
		goto out;
	for (int i = -3; i < bench.iters; i++) {
		if ((st = TF_CU(tf_cu->EventRecord(t->e0, t->s))) ||
		    (st = tf_graph_run(gc, "case", t->fp, t->s, body, arg)) ||
		    (st = TF_CU(tf_cu->EventRecord(t->e1, t->s))) ||
		    (st = TF_CU(tf_cu->EventSynchronize(t->e1))))
			goto out;
		if (i >= 0 && (st = TF_CU(tf_cu->EventElapsedTime(&ms[i], t->e0, t->e1))))
			goto out;
	}
	qsort(ms, (size_t)bench.iters, sizeof(float), cmp_float);
	*us = ms[bench.iters / 2] * 1e3 / launches;
out:
	free(ms);
	return st;
}

/* The copy kernel over 1 GiB: read+write GB/s. */
struct copy_case {
	tf_cu_func f;
	tf_cu_ptr a, b;
	unsigned long long n;
	unsigned grid;
};

static tf_status copy_body(void *arg, void *stream)
{
	struct copy_case *c = arg;
	void *p[] = {&c->b, &c->a, &c->n};
	return tf_cu_launch(c->f, c->grid, 256, 0, stream, p);
}

struct gemv_case {
	struct tf_cu_exl3_layer *L; /* copies */
	int copies, launches;
	tf_cu_ptr x, y;
	uint32_t rows;
	const struct tf_cu_exl3_ws *ws;
	int sms;
};

static tf_status gemv_body(void *arg, void *stream)
{
	struct gemv_case *c = arg;
	for (int i = 0; i < c->launches; i++) {
		tf_status st = tf_cu_exl3_gemv(&c->L[i % c->copies], c->x, c->rows, c->y, false, c->ws,
		                               c->sms, (int)bench.blocks_per_sm, bench.invariant, stream);
		if (st)
			return st;
	}
	return TF_OK;
}

/* More than 16 rows through the GEMV: one launch per 16 rows. */
static tf_status gemv16_body(void *arg, void *stream)
{
	struct gemv_case *c = arg;
	const struct tf_exl3_geom *g = &c->L[0].g;
	for (int i = 0; i < c->launches; i++)
		for (uint32_t r = 0; r < c->rows; r += 16) {
			uint32_t m = c->rows - r < 16 ? c->rows - r : 16;
			tf_status st = tf_cu_exl3_gemv(&c->L[i % c->copies], c->x + (size_t)2 * r * g->k, m,
			                               c->y + (size_t)4 * r * g->n, false, c->ws, c->sms,
			                               (int)bench.blocks_per_sm, bench.invariant, stream);
			if (st)
				return st;
		}
	return TF_OK;
}

/* The prefill path: decode + cuBLAS. */
struct gemm_case {
	struct gemv_case *v;
	struct tf_cu_blas *blas;
	tf_cu_ptr scratch;
	size_t scratch_bytes;
};

static tf_status gemm_body(void *arg, void *stream)
{
	struct gemm_case *c = arg;
	for (int i = 0; i < c->v->launches; i++) {
		tf_status st = tf_cu_exl3_gemm(&c->v->L[i % c->v->copies], c->v->x, c->v->rows, c->v->y, false,
		                               c->blas, c->scratch, c->scratch_bytes, stream);
		if (st)
			return st;
	}
	return TF_OK;
}

/* N experts of one shape and width in one launch, each on rows rows. */
struct experts_case {
	struct tf_cu_exl3_experts *E; /* copies */
	int copies, launches;
	tf_cu_ptr tasks, xrow, x, y;
	uint32_t ntasks, rows_max;
	const struct tf_cu_exl3_ws *ws;
	int sms;
};

static tf_status experts_body(void *arg, void *stream)
{
	struct experts_case *c = arg;
	for (int i = 0; i < c->launches; i++) {
		tf_status st = tf_cu_exl3_experts(&c->E[i % c->copies], c->tasks, c->ntasks, c->rows_max, c->xrow,
		                                  c->x, c->y, false, c->ws, c->sms, (int)bench.blocks_per_sm,
		                                  bench.invariant, stream);
		if (st)
			return st;
	}
	return TF_OK;
}

/* The launch floor: an empty kernel on a GEMV's grid, launched as often. */
struct empty_case {
	tf_cu_func f;
	unsigned gx, gy;
	int launches;
};

static tf_status empty_body(void *arg, void *stream)
{
	struct empty_case *c = arg;
	int unused = 0;
	void *p[] = {&unused};
	for (int i = 0; i < c->launches; i++) {
		tf_status st = TF_CU(tf_cu->LaunchKernel(c->f, c->gx, c->gy, 1, 256, 1, 1, 0, stream, p, NULL));
		if (st)
			return st;
	}
	return TF_OK;
}

struct blas_case {
	struct tf_cu_blas *b;
	tf_cu_ptr *w;
	int copies, launches;
	tf_cu_ptr x, y;
	int rows, k, n;
};

static tf_status blas_body(void *arg, void *stream)
{
	struct blas_case *c = arg;
	for (int i = 0; i < c->launches; i++) {
		tf_status st = tf_cu_blas_linear_bf16(c->b, c->x, c->w[i % c->copies], c->y, c->rows, c->k,
		                                      c->n, false, stream);
		if (st)
			return st;
	}
	return TF_OK;
}

/* Fill n bytes at p with random valid bf16 (or fp16 scales) from a host
 * pattern of up to 64 MiB. */
static tf_status fill_pattern(tf_cu_ptr p, size_t n, const uint16_t *pat, size_t pat_bytes)
{
	for (size_t off = 0; off < n; off += pat_bytes) {
		size_t m = n - off < pat_bytes ? n - off : pat_bytes;
		tf_status st = TF_CU(tf_cu->MemcpyHtoD(p + off, pat, m));
		if (st)
			return st;
	}
	return TF_OK;
}

static int copies_for(size_t bytes, size_t l2, int max)
{
	size_t c = (4 * l2 + bytes - 1) / bytes + 1;
	return c > (size_t)max ? max : (int)c;
}

static void die_st(tf_status st, const char *what)
{
	if (st)
		tf_die_status(st, "%s", what);
}

/* A stream, two events and two graph caches (cuBLAS apart). */
static void timer_open(struct timer *t)
{
	die_st(TF_CU(tf_cu->StreamCreate(&t->s, TF_CU_STREAM_NON_BLOCKING)), "stream");
	die_st(TF_CU(tf_cu->EventCreate(&t->e0, 0)), "event");
	die_st(TF_CU(tf_cu->EventCreate(&t->e1, 0)), "event");
	struct tf_graph_backend gbe;
	struct tf_graph_opts gopt = {.max = 2, .min_keep = 0};
	die_st(tf_graph_backend_cuda(0, &gbe), "graph backend");
	die_st(tf_graph_cache_new(&gbe, &gopt, &t->gc), "graph cache");
	die_st(tf_graph_backend_cuda(0, &gbe), "graph backend");
	die_st(tf_graph_cache_new(&gbe, &gopt, &t->gc_blas), "graph cache");
}

double bench_cuda_copy_gbs(const struct tf_cu_device *dev)
{
	struct timer t = {0};
	timer_open(&t);
	struct copy_case cc = {.n = ((size_t)1 << 30) / 16, .grid = (unsigned)dev->sms * 4};
	die_st(tf_cu_kernel("tf_copy_u128", &cc.f), "copy kernel");
	die_st(TF_CU(tf_cu->MemAlloc(&cc.a, (size_t)1 << 30)), "copy buffers");
	die_st(TF_CU(tf_cu->MemAlloc(&cc.b, (size_t)1 << 30)), "copy buffers");
	die_st(TF_CU(tf_cu->MemsetD8(cc.a, 0x5A, (size_t)1 << 30)), "copy buffers");
	double copy_us;
	die_st(time_body(&t, t.gc, copy_body, &cc, 1, &copy_us), "copy timing");
	tf_cu->MemFree(cc.a);
	tf_cu->MemFree(cc.b);
	tf_graph_cache_free(t.gc);
	tf_graph_cache_free(t.gc_blas);
	tf_cu->EventDestroy(t.e0);
	tf_cu->EventDestroy(t.e1);
	tf_cu->StreamDestroy(t.s);
	return 2.0 * ((size_t)1 << 30) / (copy_us * 1e-6) / 1e9;
}

/* N experts of shape g (all of g's width) in one launch on rows rows
 * each: µs per launch against N single GEMV launches (gemv_us each). */
static void time_experts(struct timer *t, const struct tf_cu_device *dev, const struct tf_exl3_geom *g,
                         tf_cu_ptr suh1, tf_cu_ptr svh1, tf_cu_ptr x, uint32_t rows, uint32_t nexp,
                         const struct tf_cu_exl3_ws *ws, double gemv_us, double copy_gbs, json_t *cases)
{
	const size_t tb = tf_exl3_trellis_bytes(g), all = tb * nexp;
	struct experts_case ec = {.ntasks = nexp, .rows_max = rows <= 1 && !bench.invariant ? 1 : 4, .ws = ws, .sms = dev->sms, .x = x};
	ec.copies = copies_for(all, (size_t)dev->l2_bytes, 64);
	ec.launches = ec.copies < 16 ? 16 : ec.copies;
	ec.E = calloc((size_t)ec.copies, sizeof(*ec.E));
	struct tf_exl3_geom *gs = calloc(nexp, sizeof(*gs));
	uint64_t *off = calloc(nexp, sizeof(*off));
	unsigned char *table = calloc(nexp, TF_CU_EXL3_EXPERT_BYTES);
	struct tf_cu_exl3_task *tasks = calloc(nexp, sizeof(*tasks));
	int32_t *xrow = calloc((size_t)nexp * rows, sizeof(*xrow));
	if (!ec.E || !gs || !off || !table || !tasks || !xrow)
		tf_die(71, "out of memory");
	for (uint32_t e = 0; e < nexp; e++) {
		gs[e] = *g;
		tasks[e] = (struct tf_cu_exl3_task){(int32_t)e, (int32_t)(e * rows), (int32_t)rows, 0};
		for (uint32_t r = 0; r < rows; r++)
			xrow[e * rows + r] = (int32_t)r;
	}
	uint64_t total;
	int ragged;
	die_st(tf_exl3_experts_layout(gs, nexp, off, &total, &ragged), "experts layout");
	tf_cu_exl3_experts_table(gs, off, nexp, table);
	tf_cu_ptr dtable, suh, svh;
	die_st(TF_CU(tf_cu->MemAlloc(&dtable, (size_t)nexp * TF_CU_EXL3_EXPERT_BYTES)), "experts");
	die_st(TF_CU(tf_cu->MemAlloc(&suh, (size_t)2 * nexp * g->k)), "experts");
	die_st(TF_CU(tf_cu->MemAlloc(&svh, (size_t)2 * nexp * g->n)), "experts");
	die_st(TF_CU(tf_cu->MemAlloc(&ec.tasks, sizeof(*tasks) * nexp)), "experts");
	die_st(TF_CU(tf_cu->MemAlloc(&ec.xrow, sizeof(*xrow) * nexp * rows)), "experts");
	die_st(TF_CU(tf_cu->MemAlloc(&ec.y, (size_t)4 * nexp * rows * g->n)), "experts");
	die_st(TF_CU(tf_cu->MemcpyHtoD(dtable, table, (size_t)nexp * TF_CU_EXL3_EXPERT_BYTES)), "experts");
	die_st(TF_CU(tf_cu->MemcpyHtoD(ec.tasks, tasks, sizeof(*tasks) * nexp)), "experts");
	die_st(TF_CU(tf_cu->MemcpyHtoD(ec.xrow, xrow, sizeof(*xrow) * nexp * rows)), "experts");
	for (uint32_t e = 0; e < nexp; e++) {
		die_st(TF_CU(tf_cu->MemcpyDtoD(suh + (size_t)2 * e * g->k, suh1, (size_t)2 * g->k)), "experts");
		die_st(TF_CU(tf_cu->MemcpyDtoD(svh + (size_t)2 * e * g->n, svh1, (size_t)2 * g->n)), "experts");
	}
	tf_cu_func fill;
	die_st(tf_cu_kernel("tf_fill_u32", &fill), "fill kernel");
	for (int i = 0; i < ec.copies; i++) {
		ec.E[i] = (struct tf_cu_exl3_experts){.k = g->k, .n = g->n, .count = nexp, .cb = g->cb,
		                                       .table = dtable, .suh = suh, .svh = svh};
		die_st(TF_CU(tf_cu->MemAlloc(&ec.E[i].trellis, total)), "experts trellis");
		unsigned long long words = total / 4;
		uint32_t seed = (uint32_t)(i * 104729 + 17);
		void *pf[] = {&ec.E[i].trellis, &words, &seed};
		die_st(tf_cu_launch(fill, (unsigned)dev->sms * 4, 256, 0, NULL, pf), "fill");
	}
	die_st(TF_CU(tf_cu->CtxSynchronize()), "fill");
	double us;
	die_st(time_body(t, t->gc, experts_body, &ec, ec.launches, &us), "experts timing");
	const unsigned cluster = tf_cu_exl3_last_cluster();
	double gbs = all / (us * 1e-6) / 1e9;
	if (bench.json) {
		json_array_append_new(cases, json_pack("{s:s,s:i,s:i,s:i,s:s,s:i,s:i,s:f,s:f,s:f,s:f,s:I,s:i,s:i}",
			"op", "experts", "k", g->k, "n", g->n, "bits", g->bits, "codebook", tf_exl3_cb_name(g->cb),
			"rows", (int)rows, "experts", (int)nexp, "us", us, "gbs", gbs, "pct_copy", 100 * gbs / copy_gbs,
			"gemv_launches_us", gemv_us * nexp, "trellis_bytes", (json_int_t)all, "copies", ec.copies,
			"cluster", (int)cluster));
	} else {
		printf("  %u experts, one launch: %9.2f us %8.0f GB/s %5.1f%%   (%u GEMV launches: %.2f us, %.2fx)\n",
		       nexp, us, gbs, 100 * gbs / copy_gbs, nexp, gemv_us * nexp, gemv_us * nexp / us);
		fflush(stdout);
	}
	for (int i = 0; i < ec.copies; i++)
		tf_cu->MemFree(ec.E[i].trellis);
	tf_cu->MemFree(dtable);
	tf_cu->MemFree(suh);
	tf_cu->MemFree(svh);
	tf_cu->MemFree(ec.tasks);
	tf_cu->MemFree(ec.xrow);
	tf_cu->MemFree(ec.y);
	free(ec.E), free(gs), free(off), free(table), free(tasks), free(xrow);
}

int bench_kernels_cuda(void)
{
	uint32_t shapes[32][2];
	int64_t bits[8], rows[16];
	int cbs[3];
	int nshapes = bench_parse_shapes(bench.shapes, shapes, 32);
	int nbits = bench_parse_list(bench.bits, "bits", 1, 8, bits, 8);
	int nrows = bench_parse_list(bench.rows, "rows", 1, 4096, rows, 16);
	int ncb = bench_parse_codebooks(bench.codebook, cbs);
	uint32_t rows_max = 16;
	for (int r = 0; r < nrows; r++)
		rows_max = (uint32_t)rows[r] > rows_max ? (uint32_t)rows[r] : rows_max;
	const uint32_t nexp = (uint32_t)bench.experts;

	struct tf_cu_device dev;
	tf_status st = tf_cu_device_open((int)bench.device, &dev);
	if (st)
		tf_die_status(st, "cannot open CUDA device %lld", (long long)bench.device);
	die_st(tf_cu_module_load(), "cannot load the kernels");
	struct timer t = {0};
	timer_open(&t);
	const double copy_gbs = bench_cuda_copy_gbs(&dev);

	/* Random host patterns: bf16 activations/weights near unit scale,
	 * fp16 scales of the synthetic layers (exl3-format.md §7). */
	struct tf_rng rng;
	tf_rng_seed(&rng, 42);
	const size_t pat_n = (size_t)8 << 20;
	uint16_t *pat_bf = malloc(2 * pat_n), *pat_su = malloc(2 * 65536), *pat_sv = malloc(2 * 262144);
	if (!pat_bf || !pat_su || !pat_sv)
		tf_die(71, "out of memory");
	for (size_t i = 0; i < pat_n; i++)
		pat_bf[i] = tf_f32_to_bf16(tf_rng_normal(&rng) * 0.05f);

	struct tf_cu_exl3_ws ws;
	uint32_t n_max = 0;
	for (int s = 0; s < nshapes; s++)
		n_max = shapes[s][1] > n_max ? shapes[s][1] : n_max;
	die_st(tf_cu_exl3_ws_init(&ws, n_max), "workspace");

	struct tf_cu_blas *blas = NULL;
	if (!bench.no_cublas && (st = tf_cu_blas_new(&blas)))
		tf_warn("no cuBLAS comparison: %s", tf_errmsg(st));

	json_t *cases = json_array();
	if (!bench.json) {
		printf("device: %s, %d SMs, L2 %d MiB; copy kernel %.0f GB/s (read+write, 1 GiB)\n",
		       dev.name, dev.sms, dev.l2_bytes >> 20, copy_gbs);
		printf("%-12s %4s %5s %4s %9s %8s %6s %10s %8s %7s %10s %8s\n", "shape KxN", "bits", "cb", "rows",
		       "exl3 us", "GB/s", "%copy", "bf16 us", "GB/s", "speedup", "gemv16 us", "floor us");
	}
	const unsigned l2 = (unsigned)dev.l2_bytes;
	for (int s = 0; s < nshapes; s++) {
		uint32_t k = shapes[s][0], n = shapes[s][1];
		for (int i = 0; i < (int)k; i++)
			pat_su[i] = tf_f32_to_f16((tf_rng_u64(&rng) & 1 ? 1.f : -1.f) / (TF_EXL3_CB_RMS * sqrtf((float)k)));
		for (int i = 0; i < (int)n; i++)
			pat_sv[i] = tf_f32_to_f16(tf_rng_u64(&rng) & 1 ? 1.f : -1.f);
		tf_cu_ptr x, y, suh, svh;
		die_st(TF_CU(tf_cu->MemAlloc(&x, (size_t)2 * rows_max * k)), "x");
		die_st(TF_CU(tf_cu->MemAlloc(&y, (size_t)4 * rows_max * n)), "y");
		die_st(TF_CU(tf_cu->MemAlloc(&suh, (size_t)2 * k)), "suh");
		die_st(TF_CU(tf_cu->MemAlloc(&svh, (size_t)2 * n)), "svh");
		die_st(fill_pattern(x, (size_t)2 * rows_max * k, pat_bf, 2 * pat_n), "x");
		die_st(TF_CU(tf_cu->MemcpyHtoD(suh, pat_su, (size_t)2 * k)), "suh");
		die_st(TF_CU(tf_cu->MemcpyHtoD(svh, pat_sv, (size_t)2 * n)), "svh");
		/* bf16 weights [N][K] for cuBLAS, rotating copies. */
		double bf_us[16];
		for (int r = 0; r < nrows; r++)
			bf_us[r] = NAN;
		if (blas) {
			size_t wb = (size_t)2 * k * n;
			struct blas_case bc = {.b = blas, .x = x, .y = y, .k = (int)k, .n = (int)n};
			bc.copies = copies_for(wb, l2, 16);
			bc.launches = bc.copies < 8 ? 8 : bc.copies;
			bc.w = calloc((size_t)bc.copies, sizeof(*bc.w));
			for (int c = 0; c < bc.copies; c++) {
				die_st(TF_CU(tf_cu->MemAlloc(&bc.w[c], wb)), "bf16 weights");
				die_st(fill_pattern(bc.w[c], wb, pat_bf, 2 * pat_n), "bf16 weights");
			}
			for (int r = 0; r < nrows; r++) {
				bc.rows = (int)rows[r];
				die_st(time_body(&t, t.gc_blas, blas_body, &bc, bc.launches, &bf_us[r]), "cuBLAS timing");
			}
			for (int c = 0; c < bc.copies; c++)
				tf_cu->MemFree(bc.w[c]);
			free(bc.w);
		}
		for (int b = 0; b < nbits; b++)
			for (int c = 0; c < ncb; c++) {
				struct tf_exl3_geom g = {k, n, (uint32_t)bits[b], (enum tf_exl3_cb)cbs[c]};
				size_t tb = tf_exl3_trellis_bytes(&g);
				struct gemv_case gc = {.x = x, .y = y, .ws = &ws, .sms = dev.sms};
				gc.copies = copies_for(tb, l2, 64);
				gc.launches = gc.copies < 16 ? 16 : gc.copies;
				gc.L = calloc((size_t)gc.copies, sizeof(*gc.L));
				tf_cu_func fill;
				die_st(tf_cu_kernel("tf_fill_u32", &fill), "fill kernel");
				for (int i = 0; i < gc.copies; i++) {
					gc.L[i] = (struct tf_cu_exl3_layer){.g = g, .suh = suh, .svh = svh};
					die_st(TF_CU(tf_cu->MemAlloc(&gc.L[i].trellis, tb)), "trellis");
					unsigned long long words = tb / 4;
					uint32_t seed = (uint32_t)(i * 7919 + b * 31 + c);
					void *pf[] = {&gc.L[i].trellis, &words, &seed};
					die_st(tf_cu_launch(fill, (unsigned)dev.sms * 4, 256, 0, NULL, pf), "fill");
				}
				die_st(TF_CU(tf_cu->CtxSynchronize()), "fill");
				struct gemm_case gm = {.v = &gc, .blas = blas};
				if (rows_max > TF_CU_EXL3_ROWS_MAX && blas) {
					gm.scratch_bytes = tf_cu_exl3_gemm_scratch(&g, rows_max);
					die_st(TF_CU(tf_cu->MemAlloc(&gm.scratch, gm.scratch_bytes)), "gemm scratch");
				}
				for (int r = 0; r < nrows; r++) {
					gc.rows = (uint32_t)rows[r];
					double us, us16 = NAN; /* gemm: the GEMV per 16 rows */
					double floor_us = NAN; /* an empty kernel on the GEMV's grid */
					unsigned cluster = 0;  /* the GEMV's slices as one cluster of this many */
					const char *op = "gemv";
					if (rows[r] > TF_CU_EXL3_ROWS_MAX) {
						if (!blas) {
							tf_warn("%ux%u rows %lld: skipped (the prefill path needs cuBLAS)", k, n,
							        (long long)rows[r]);
							continue;
						}
						op = "gemm";
						die_st(time_body(&t, t.gc_blas, gemm_body, &gm, gc.launches, &us), "exl3 gemm timing");
						die_st(time_body(&t, t.gc, gemv16_body, &gc, gc.launches, &us16), "exl3 gemv16 timing");
					} else {
						die_st(time_body(&t, t.gc, gemv_body, &gc, gc.launches, &us), "exl3 timing");
						cluster = tf_cu_exl3_last_cluster();
						struct tf_cu_exl3_plan p;
						tf_cu_exl3_plan(&g, gc.rows, dev.sms, (int)bench.blocks_per_sm, &p);
						struct empty_case ec = {.gx = p.grid_x, .gy = p.slices, .launches = gc.launches};
						die_st(tf_cu_kernel("tf_empty", &ec.f), "empty kernel");
						die_st(time_body(&t, t.gc, empty_body, &ec, ec.launches, &floor_us), "floor timing");
					}
					double gbs = tb / (us * 1e-6) / 1e9;
					double bgbs = (double)2 * k * n / (bf_us[r] * 1e-6) / 1e9;
					if (bench.json) {
						json_array_append_new(cases, json_pack("{s:s,s:i,s:i,s:i,s:s,s:i,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:I,s:i,s:i}",
							"op", op, "k", k, "n", n, "bits", g.bits, "codebook", tf_exl3_cb_name(g.cb),
							"rows", (int)rows[r], "us", us, "gbs", gbs, "pct_copy",
							100 * gbs / copy_gbs, "bf16_us", isnan(bf_us[r]) ? -1.0 : bf_us[r],
							"bf16_gbs", isnan(bf_us[r]) ? -1.0 : bgbs, "gemv16_us", isnan(us16) ? -1.0 : us16,
							"floor_us", isnan(floor_us) ? -1.0 : floor_us, "trellis_bytes", (json_int_t)tb, "copies", gc.copies,
							"cluster", (int)cluster));
					} else {
						char shape[32];
						snprintf(shape, sizeof(shape), "%ux%u", k, n);
						printf("%-12s %4u %5s %4lld %9.2f %8.0f %5.1f%% %10.2f %8.0f %6.2fx %10.2f %8.2f\n", shape,
						       g.bits, tf_exl3_cb_name(g.cb), (long long)rows[r], us, gbs,
						       100 * gbs / copy_gbs, bf_us[r], bgbs, bf_us[r] / us, us16, floor_us);
						fflush(stdout);
					}
					if (nexp && rows[r] <= 4)
						time_experts(&t, &dev, &g, suh, svh, x, (uint32_t)rows[r], nexp, &ws, us, copy_gbs,
						             cases);
				}
				if (gm.scratch)
					tf_cu->MemFree(gm.scratch);
				for (int i = 0; i < gc.copies; i++)
					tf_cu->MemFree(gc.L[i].trellis);
				free(gc.L);
			}
		tf_cu->MemFree(x);
		tf_cu->MemFree(y);
		tf_cu->MemFree(suh);
		tf_cu->MemFree(svh);
	}
	if (bench.json) {
		json_t *root = json_pack("{s:s,s:i,s:i,s:f,s:s,s:i,s:o}", "device", dev.name, "sms", dev.sms,
		                         "l2_bytes", dev.l2_bytes, "copy_gbs", copy_gbs, "cublas",
		                         blas ? tf_cu_blas_path(blas) : "", "blocks_per_sm",
		                         (int)bench.blocks_per_sm, "cases", cases);
		char *s = json_dumps(root, JSON_INDENT(1));
		puts(s);
		free(s);
		json_decref(root);
	} else {
		json_decref(cases);
	}
	tf_cu_blas_free(blas);
	tf_cu_exl3_ws_release(&ws);
	struct tf_graph_stats gs, gsb;
	tf_graph_stats(t.gc, &gs);
	tf_graph_stats(t.gc_blas, &gsb);
	if (gs.failed || gsb.failed)
		tf_warn("timed without graphs (eager launches) for %s: capture failed",
		        gs.failed ? "the EXL3 kernels" : "cuBLAS");
	tf_graph_cache_free(t.gc);
	tf_graph_cache_free(t.gc_blas);
	free(pat_bf);
	free(pat_su);
	free(pat_sv);
	tf_cu_module_unload();
	tf_cu_device_close(&dev);
	return 0;
}
