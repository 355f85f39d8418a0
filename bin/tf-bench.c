/* tf-bench: measure tf's kernels (and, as more modes land, decode steps and
 * a running server). One program, one subcommand per mode; each mode is a
 * row of the table below with its own run function, so adding `decode` or
 * `serve` is a new function and a new row.
 *
 * kernels: CPU EXL3 GEMV/GEMM throughput on synthetic layers, in GB/s of
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

static const char *opt_bits = "2,4,6", *opt_shape = "4096x4096", *opt_cb = "mul1";
static int64_t opt_rows = 1, opt_threads = 1;
static double opt_seconds = 0.5;
static bool opt_json;

static const struct tf_opt opts[] = {
	{"bits", 'b', TF_OPT_STR, &opt_bits, "LIST", NULL, "2,4,6", "kernels: bits per weight to measure, comma-separated (1..8)", 0, 0, NULL},
	{"shape", 0, TF_OPT_STR, &opt_shape, "KxN", NULL, "4096x4096", "kernels: layer shape, in_features x out_features (multiples of 128)", 0, 0, NULL},
	{"codebook", 'c', TF_OPT_CHOICE, &opt_cb, "CB", NULL, "mul1", "kernels: EXL3 codebook", 0, 0, "3inst|mcg|mul1"},
	{"rows", 0, TF_OPT_INT, &opt_rows, "N", NULL, "1", "kernels: input rows (1 is a GEMV)", 1, 4096, NULL},
	{"threads", 'j', TF_OPT_INT, &opt_threads, "N", "TF_THREADS", "1", "worker threads (0: one per CPU); figures are also given per thread", 0, 4096, NULL},
	{"seconds", 't', TF_OPT_DOUBLE, &opt_seconds, "S", NULL, "0.5", "time spent on each measurement", 0.01, 600, NULL},
	TF_OPT_JSON(&opt_json),
};

static const struct tf_cli cli = {
	.name = "tf-bench",
	.usage = "kernels [OPTION]...",
	.summary = "Measure tf's kernels: CPU EXL3 GEMV throughput per core, beside a plain read of the same bytes.",
	.commands = "kernels",
	.opts = opts,
	.nopts = TF_NOPTS(opts),
};

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

/* Call fn(ctx) repeatedly for about opt_seconds (after one warm-up call)
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
	} while (now - t0 < opt_seconds);
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
	if (opt_json) {
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

static int cmd_kernels(int argc, char **argv)
{
	if (argc)
		tf_usage_error("kernels: unexpected operand '%s'", argv[0]);
	unsigned k, n;
	char tail;
	if (sscanf(opt_shape, "%ux%u%c", &k, &n, &tail) != 2)
		tf_usage_error("--shape '%s': expected KxN", opt_shape);
	enum tf_exl3_cb cb = !strcmp(opt_cb, "mcg") ? TF_EXL3_CB_MCG :
			     !strcmp(opt_cb, "mul1") ? TF_EXL3_CB_MUL1 : TF_EXL3_CB_3INST;
	unsigned bits[8], nbits = 0;
	for (const char *s = opt_bits; *s;) {
		char *end;
		unsigned long b = strtoul(s, &end, 10);
		if (end == s || b < 1 || b > 8 || nbits == 8 || (*end && *end != ','))
			tf_usage_error("--bits '%s': expected a list of 1..8", opt_bits);
		bits[nbits++] = (unsigned)b;
		s = *end ? end + 1 : end;
	}
	struct tf_exl3_geom g0 = {k, n, 8, cb};
	tf_status st = tf_exl3_geom_check(&g0);
	if (st)
		tf_usage_error("--shape '%s': %s", opt_shape, tf_errmsg(st));

	struct tf_pool *pool = NULL;
	if ((st = tf_pool_new((int)opt_threads, &pool)))
		tf_die_status(st, "cannot start threads");
	int threads = tf_pool_size(pool);
	size_t rows = (size_t)opt_rows;
	uint16_t *tr = malloc(tf_exl3_trellis_bytes(&g0)), *suh = malloc(2 * (size_t)k), *svh = malloc(2 * (size_t)n);
	float *x = malloc(sizeof(float) * rows * k), *y = malloc(sizeof(float) * rows * n);
	if (!tr || !suh || !svh || !x || !y)
		tf_die(71, "out of memory for a %ux%u layer", k, n);
	struct tf_rng rng;
	tf_rng_seed(&rng, 1);
	for (size_t i = 0; i < rows * k; i++)
		x[i] = tf_rng_normal(&rng);

	if (!opt_json)
		printf("%-12s %4s %-6s %13s %5s %7s %10s %8s %9s %9s %10s %9s\n", "op", "bits", "cb", "shape",
		       "rows", "threads", "us/call", "GB/s", "GB/s/thr", "Gw/s", "cpu-us", "GB/cpu-s");
	else
		printf("[");
	int first = 1;
	for (unsigned bi = 0; bi < nbits; bi++) {
		struct tf_exl3_geom g = {k, n, bits[bi], cb};
		tf_exl3_synth(&g, &rng, tr, suh, svh);
		struct kcase c = {.L = {g, tr, suh, svh, NULL}, .x = x, .y = y, .pool = pool,
				  .rows = rows, .bytes = tf_exl3_trellis_bytes(&g)};
		c.impl = TF_EXL3_IMPL_AUTO;
		report("exl3-gemm", bits[bi], &c, time_calls(run_matmul, &c), threads, &first);
		c.impl = TF_EXL3_IMPL_C;
		report("exl3-gemm-c", bits[bi], &c, time_calls(run_matmul, &c), threads, &first);
		report("read", bits[bi], &c, time_calls(run_read, &c), threads, &first);
	}
	if (opt_json)
		printf("]\n");
	free(tr);
	free(suh);
	free(svh);
	free(x);
	free(y);
	tf_pool_free(pool);
	return 0;
}

/* The modes. Add a row (and a function) per new mode. */
static const struct {
	const char *name;
	int (*run)(int argc, char **argv);
} modes[] = {
	{"kernels", cmd_kernels},
};

int main(int argc, char **argv)
{
	int first = tf_cli_parse(&cli, argc, argv);
	if (first >= argc)
		tf_usage_error("missing the mode (kernels)");
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
		if (!strcmp(argv[first], modes[i].name))
			return modes[i].run(argc - first - 1, argv + first + 1);
	tf_usage_error("unknown mode '%s' (kernels)", argv[first]);
}
