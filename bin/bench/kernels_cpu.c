/* kernels_cpu.c: tf-bench kernels --backend cpu: CPU EXL3 GEMV/GEMM throughput on synthetic layers, in GB/s of
 * packed trellis per core, for each bit width asked, beside two anchors
 * measured in the same run: the portable C path of the same op, and a plain
 * read of the same packed bytes (what "memory-bound" would mean here). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/cli.h"
#include "base/f16.h"
#include "base/num.h"
#include "base/progress.h"
#include "base/rng.h"
#include "base/thread.h"
#include "model/exl3.h"
#include "bench/bench.h"

/* CPU seconds used by every thread of this process. */
static double cpu_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

struct timing {
	double wall; /* the fastest call, seconds */
	double cpu;  /* the least CPU time of a call, all threads, seconds */
};

/* Call fn(ctx) repeatedly for about bench.seconds (after one warm-up call)
 * and keep the fastest call's wall time and the least CPU time of a call:
 * on a shared machine the minimum is the figure that repeats (the mean
 * moves with the neighbours' load), and CPU time does not count the time a
 * thread waited for a core. */
static struct timing time_calls(tf_status (*fn)(void *), void *ctx)
{
	tf_status st = fn(ctx);
	if (st)
		tf_die_status(st, "warm-up");
	struct timing best = {1e30, 1e30};
	double t0 = tf_now(), now = t0;
	do {
		double t = now, c = cpu_now();
		if ((st = fn(ctx)))
			tf_die_status(st, "measurement");
		c = cpu_now() - c;
		now = tf_now();
		if (now - t < best.wall)
			best.wall = now - t;
		if (c < best.cpu)
			best.cpu = c;
	} while (now - t0 < bench.seconds);
	return best;
}

struct kcase {
	struct tf_exl3_layer L;
	const float *x;
	float *y;
	struct tf_pool *pool;
	enum tf_exl3_impl impl;
	size_t rows, bytes;
	volatile uint64_t sink;
};

static tf_status run_matmul(void *p)
{
	struct kcase *c = p;
	return tf_exl3_matmul_impl(&c->L, c->x, c->rows, c->y, c->pool, c->impl);
}

struct read_job {
	const uint64_t *w;
	size_t n;
	uint64_t part[64];
};

static void read_part(void *ctx, size_t begin, size_t end, int worker)
{
	struct read_job *j = ctx;
	uint64_t s = 0;
	for (size_t i = begin; i < end; i++)
		s += j->w[i];
	j->part[worker % 64] += s;
}

/* The anchor: read the packed bytes once, summing them (same threads). */
static tf_status run_read(void *p)
{
	struct kcase *c = p;
	struct read_job j = {.w = (const uint64_t *)c->L.trellis, .n = c->bytes / 8};
	tf_pool_for(c->pool, j.n, 4096, read_part, &j);
	for (int i = 0; i < 64; i++)
		c->sink += j.part[i];
	return TF_OK;
}

static void report(const char *what, unsigned bits, const struct kcase *c, struct timing tm,
		   int threads, int *first)
{
	double sec = tm.wall, gbs = (double)c->bytes / sec / 1e9, gcpu = (double)c->bytes / tm.cpu / 1e9;
	/* weights per second; a plain read has none */
	double gw = strcmp(what, "read") ? (double)c->L.g.k * c->L.g.n * (double)c->rows / sec / 1e9 : 0;
	if (bench.json) {
		printf("%s{\"op\":\"%s\",\"bits\":%u,\"codebook\":\"%s\",\"k\":%u,\"n\":%u,\"rows\":%zu,"
		       "\"threads\":%d,\"us\":%.2f,\"gbps\":%.4f,\"gbps_per_thread\":%.4f,\"gweights\":%.4f,"
		       "\"cpu_us\":%.2f,\"gbps_per_cpu\":%.4f}",
		       *first ? "" : ",\n", what, bits, tf_exl3_cb_name(c->L.g.cb), c->L.g.k, c->L.g.n,
		       c->rows, threads, sec * 1e6, gbs, gbs / threads, gw, tm.cpu * 1e6, gcpu);
		*first = 0;
		return;
	}
	printf("%-12s %4u %-6s %6ux%-6u %5zu %7d %10.1f %8.3f %9.3f %9.3f %10.1f %9.3f\n", what, bits,
	       tf_exl3_cb_name(c->L.g.cb), c->L.g.k, c->L.g.n, c->rows, threads, sec * 1e6, gbs,
	       gbs / threads, gw, tm.cpu * 1e6, gcpu);
}

/* One layer shape, width, codebook and row count: the op, its portable C
 * path and the plain read, each timed. */
static void run_case(unsigned k, unsigned n, unsigned bits, enum tf_exl3_cb cb, size_t rows,
		     struct tf_pool *pool, struct tf_rng *rng, int *first)
{
	struct tf_exl3_geom g = {k, n, bits, cb};
	tf_status st = tf_exl3_geom_check(&g);
	if (st)
		tf_usage_error("shape %ux%u: %s", k, n, tf_errmsg(st));
	uint16_t *tr = malloc(tf_exl3_trellis_bytes(&g)), *suh = malloc(2 * (size_t)k),
		 *svh = malloc(2 * (size_t)n);
	float *x = malloc(sizeof(float) * rows * k), *y = malloc(sizeof(float) * rows * n);
	if (!tr || !suh || !svh || !x || !y)
		tf_die(71, "out of memory for a %ux%u layer", k, n);
	for (size_t i = 0; i < rows * k; i++)
		x[i] = tf_rng_normal(rng);
	tf_exl3_synth(&g, rng, tr, suh, svh);
	int threads = tf_pool_size(pool);
	struct kcase c = {.L = {g, tr, suh, svh, NULL}, .x = x, .y = y, .pool = pool,
			  .rows = rows, .bytes = tf_exl3_trellis_bytes(&g)};
	c.impl = TF_EXL3_IMPL_AUTO;
	report("exl3-gemm", bits, &c, time_calls(run_matmul, &c), threads, first);
	c.impl = TF_EXL3_IMPL_C;
	report("exl3-gemm-c", bits, &c, time_calls(run_matmul, &c), threads, first);
	report("read", bits, &c, time_calls(run_read, &c), threads, first);
	free(tr);
	free(suh);
	free(svh);
	free(x);
	free(y);
}

int bench_kernels_cpu(void)
{
	uint32_t shapes[32][2];
	int64_t bits[8], rows[16];
	int cbs[3];
	int nshapes = bench_parse_shapes(bench.shapes, shapes, 32);
	int nbits = bench_parse_list(bench.bits, "bits", 1, 8, bits, 8);
	int nrows = bench_parse_list(bench.rows, "rows", 1, 4096, rows, 16);
	int ncb = bench_parse_codebooks(bench.codebook, cbs);
	static const enum tf_exl3_cb cb_of[] = {TF_EXL3_CB_3INST, TF_EXL3_CB_MCG, TF_EXL3_CB_MUL1};
	struct tf_pool *pool = NULL;
	tf_status st = tf_pool_new((int)bench.threads, &pool);
	if (st)
		tf_die_status(st, "cannot start threads");
	struct tf_rng rng;
	tf_rng_seed(&rng, 1);
	if (!bench.json)
		printf("%-12s %4s %-6s %13s %5s %7s %10s %8s %9s %9s %10s %9s\n", "op", "bits", "cb", "shape",
		       "rows", "threads", "us/call", "GB/s", "GB/s/thr", "Gw/s", "cpu-us", "GB/cpu-s");
	else
		printf("[");
	int first = 1;
	for (int si = 0; si < nshapes; si++)
		for (int ci = 0; ci < ncb; ci++)
			for (int bi = 0; bi < nbits; bi++)
				for (int ri = 0; ri < nrows; ri++)
					run_case(shapes[si][0], shapes[si][1], (unsigned)bits[bi], cb_of[cbs[ci]],
						 (size_t)rows[ri], pool, &rng, &first);
	if (bench.json)
		printf("]\n");
	tf_pool_free(pool);
	return 0;
}
