/* gpu_ops.h: the harness of tests/gpu/gpu_ops.c: the two backends, a case
 * (its line, the tensors and host buffers it holds), tensors on both
 * backends, random inputs, and the comparison of an output by the rule of
 * its tolerance (gpu_ops.c's table tols[]). Included by gpu_ops.c alone. */
#ifndef TF_TESTS_GPU_OPS_H
#define TF_TESTS_GPU_OPS_H

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/f16.h"
#include "base/rng.h"
#include "compute/kvrow.h"
#include "compute/ops.h"
#include "compute/sample.h"
#include "model/config.h"
#include "model/exl3.h"

/* ---- tolerances ---- */

enum how {
	EXACT, /* every element equal, bit for bit */
	NEAR,  /* f32: |d| <= rel x the row's largest |ref|; bf16/f16: |d| <=
		* ulps x ulp(max(|a|, |b|)) in that type, or <= floor x the row's
		* largest |ref| (a rounding after an fp32 sum that cancels) */
	EXL3,  /* ||d|| / ||ref|| <= rel (twice that for bf16 y) and
		* max|d| / rms(ref) <= floor */
};

struct tol {
	const char *op, *out;
	enum how how;
	double rel, ulps, floor;
	const char *why;
};

/* The tolerance of output `out` of op (gpu_ops.c). */
static const struct tol *tol_of(const char *op, const char *out);

/* ---- the two backends, cases, tensors on both ---- */

static struct tf_be *cpu, *gpu;
static struct tf_rng rng;
static struct tf_config rc;           /* the release preset */
static const char *break_op, *only;
static int side;                      /* 0: the CPU, 1: CUDA; what T() and BE take */
static int n_cases, n_failed, n_unsupported;
static int64_t prefill = 4096, long_ctx = 32768; /* rows of prefill, keys of a long context */

#define BE (side ? gpu : cpu)
/* The tensor of a pair on the current side. */
#define T(p) (side ? &(p)->g : &(p)->c)
/* An op of a backend, TF_ERR_UNSUPPORTED when its slot is empty. */
#define CALL(be, slot, ...) ((be)->ops->slot ? (be)->ops->slot((be), __VA_ARGS__) : TF_ERR_UNSUPPORTED)
/* The op on the CPU, then on CUDA (then a sync), each status noted. */
#define BOTH(slot, ...) \
	do { \
		for (side = 0; side < 2; side++) \
			note(side, CALL(BE, slot, __VA_ARGS__)); \
	} while (0)
/* The dims of a shape: DIMS(R, D) gives "2, (const int64_t[]){R, D}". */
#define DIMS(...) \
	(int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]){__VA_ARGS__}

/* The same tensor on the CPU (c) and on CUDA (g). */
struct pair {
	struct tf_tensor c, g;
};

#define HELD 48
static struct {
	const char *op;
	char shape[128], res[1024];
	bool fail, err, broken, unsupported; /* err: an op or a copy failed */
	struct pair p[HELD];
	int np;
	struct {
		struct tf_be *be;
		struct tf_tensor t;
	} s[HELD];
	int ns;
	void *h[4 * HELD];
	int nh;
} cur;

static void die(const char *what, tf_status st)
{
	fprintf(stderr, "gpu_ops: %s: %s\n", what, tf_errmsg(st));
	exit(1);
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	size_t n = strlen(cur.res);
	va_list ap;
	va_start(ap, fmt);
	if (n < sizeof cur.res)
		vsnprintf(cur.res + n, sizeof cur.res - n, fmt, ap);
	va_end(ap);
}

static bool wanted(const char *op)
{
	if (!only)
		return true;
	size_t n = strlen(op);
	for (const char *p = only; (p = strstr(p, op)); p += n)
		if ((p == only || p[-1] == ',') && (p[n] == ',' || !p[n]))
			return true;
	return false;
}

/* Start a case of op; false when --only leaves it out. */
static bool begin(const char *op, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool begin(const char *op, const char *fmt, ...)
{
	if (!wanted(op))
		return false;
	memset(&cur, 0, sizeof cur);
	cur.op = op;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cur.shape, sizeof cur.shape, fmt, ap);
	va_end(ap);
	return true;
}

/* Print the case's line and release what it held. */
static void end(void)
{
	n_cases++;
	n_failed += cur.fail;
	printf("%-20s %-52s %s%s\n", cur.op, cur.shape, cur.res, cur.fail ? "FAIL" : "PASS");
	fflush(stdout);
	for (int i = 0; i < cur.np; i++) {
		cpu->ops->release(cpu, &cur.p[i].c);
		gpu->ops->release(gpu, &cur.p[i].g);
	}
	for (int i = 0; i < cur.ns; i++)
		cur.s[i].be->ops->release(cur.s[i].be, &cur.s[i].t);
	for (int i = 0; i < cur.nh; i++)
		free(cur.h[i]);
	cur.np = cur.ns = cur.nh = 0;
}

/* A status of side s (CUDA's followed by a sync, where queued work fails). */
static bool note(int s, tf_status st)
{
	if (s == 1 && !st)
		st = gpu->ops->sync(gpu);
	if (!st)
		return true;
	if (s == 1 && st == TF_ERR_UNSUPPORTED && !cur.unsupported) {
		cur.unsupported = true;
		n_unsupported++;
	}
	cur.fail = cur.err = true;
	say("%s: %s; ", s ? "cuda" : "cpu", st == TF_ERR_UNSUPPORTED ? "unsupported" : tf_errmsg(st));
	return false;
}

static void *hnew(size_t bytes)
{
	if (cur.nh == 4 * HELD) {
		fprintf(stderr, "gpu_ops: %s: too many host buffers\n", cur.op);
		exit(70);
	}
	void *p = calloc(1, bytes ? bytes : 1);
	if (!p) {
		fprintf(stderr, "gpu_ops: out of memory (%zu bytes)\n", bytes);
		exit(1);
	}
	return cur.h[cur.nh++] = p;
}

static struct tf_tensor header(enum tf_dt dt, int ndim, const int64_t *shape)
{
	struct tf_tensor t = {.dt = dt, .ndim = ndim};
	for (int i = 0; i < TF_TENSOR_MAXDIM; i++)
		t.shape[i] = i < ndim ? shape[i] : 1;
	return t;
}

/* A tensor on one backend with host's bytes (NULL: poisoned). */
static struct tf_tensor *one(struct tf_be *be, enum tf_dt dt, const void *host, int ndim,
			     const int64_t *shape)
{
	if (cur.ns == HELD)
		die("too many tensors", TF_ERR_INTERNAL);
	struct tf_tensor *t = &cur.s[cur.ns].t;
	*t = header(dt, ndim, shape);
	tf_status st = be->ops->alloc(be, t);
	if (st)
		die("alloc", st);
	cur.s[cur.ns++].be = be;
	size_t n = tf_tensor_bytes(t);
	if (!host)
		host = memset(hnew(n), 0xFF, n);
	if ((st = be->ops->upload(be, t, host)))
		die("upload", st);
	return t;
}

/* The same tensor on both backends with host's bytes (NULL: poisoned). */
static struct pair *pin(enum tf_dt dt, const void *host, int ndim, const int64_t *shape)
{
	if (cur.np == HELD)
		die("too many tensors", TF_ERR_INTERNAL);
	struct pair *p = &cur.p[cur.np++];
	p->c = header(dt, ndim, shape);
	p->g = p->c;
	tf_status st;
	if ((st = cpu->ops->alloc(cpu, &p->c)) || (st = gpu->ops->alloc(gpu, &p->g)))
		die("alloc", st);
	size_t n = tf_tensor_bytes(&p->c);
	if (!host)
		host = memset(hnew(n), 0xFF, n);
	if ((st = cpu->ops->upload(cpu, &p->c, host)) || (st = gpu->ops->upload(gpu, &p->g, host)))
		die("upload", st);
	return p;
}

#define pout(dt, ...) pin(dt, NULL, __VA_ARGS__)

/* t's bytes on the host (a case buffer). */
static void *fetch(struct tf_be *be, const struct tf_tensor *t)
{
	void *h = hnew(tf_tensor_bytes(t));
	tf_status st = be->ops->download(be, t, h);
	if (st)
		note(be == gpu, st);
	return h;
}

/* ---- random inputs ---- */

/* Uniform in [-1, 1), never 0. */
static float urand(void)
{
	float v = 2 * tf_rng_f32(&rng) - 1;
	return v != 0 ? v : 0x1p-10f;
}

static float nrand(void)
{
	return tf_rng_normal(&rng);
}

/* n values of dt (f32, bf16 or f16), uniform in [-scale, scale). */
static void *rnd(enum tf_dt dt, int64_t n, float scale)
{
	void *h = hnew((size_t)n * tf_dt_size(dt));
	for (int64_t i = 0; i < n; i++) {
		float v = urand() * scale;
		if (dt == TF_DT_F32)
			((float *)h)[i] = v;
		else if (dt == TF_DT_BF16)
			((uint16_t *)h)[i] = tf_f32_to_bf16(v);
		else
			((uint16_t *)h)[i] = tf_f32_to_f16(v);
	}
	return h;
}

/* Random bytes. */
static uint8_t *rnd_bytes(size_t n)
{
	uint8_t *h = hnew(n);
	for (size_t i = 0; i < n; i += 8) {
		uint64_t v = tf_rng_u64(&rng);
		memcpy(h + i, &v, n - i < 8 ? n - i : 8);
	}
	return h;
}

static int32_t *ivec(int64_t n)
{
	return hnew((size_t)n * sizeof(int32_t));
}

/* n distinct values of [0, range) in random order into out (n <= range):
 * a partial Fisher-Yates over a scratch permutation kept between calls. */
static void pick(int32_t *out, int64_t n, int64_t range)
{
	static int32_t *all;
	static int64_t cap;
	if (range > cap) {
		free(all);
		cap = range;
		if (!(all = malloc((size_t)cap * sizeof *all))) {
			fprintf(stderr, "gpu_ops: out of memory\n");
			exit(1);
		}
	}
	for (int64_t i = 0; i < range; i++)
		all[i] = (int32_t)i;
	for (int64_t i = 0; i < n; i++) {
		int64_t j = i + (int64_t)tf_rng_below(&rng, (uint64_t)(range - i));
		int32_t t = all[i];
		all[i] = all[j];
		all[j] = t;
		out[i] = all[i];
	}
}

static int cmp_i32(const void *a, const void *b)
{
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	return (x > y) - (x < y);
}

/* n distinct values of [0, range), ascending, into out. */
static void pick_sorted(int32_t *out, int64_t n, int64_t range)
{
	pick(out, n, range);
	qsort(out, (size_t)n, sizeof *out, cmp_i32);
}

/* ---- comparisons ---- */

static double get(enum tf_dt dt, const void *p, int64_t i)
{
	switch (dt) {
	case TF_DT_F32:
		return ((const float *)p)[i];
	case TF_DT_BF16:
		return tf_bf16_to_f32(((const uint16_t *)p)[i]);
	case TF_DT_F16:
		return tf_f16_to_f32(((const uint16_t *)p)[i]);
	case TF_DT_I32:
		return ((const int32_t *)p)[i];
	case TF_DT_U8:
		return ((const uint8_t *)p)[i];
	}
	return 0;
}

static void put(enum tf_dt dt, void *p, int64_t i, double v)
{
	if (dt == TF_DT_F32)
		((float *)p)[i] = (float)v;
	else if (dt == TF_DT_BF16)
		((uint16_t *)p)[i] = tf_f32_to_bf16((float)v);
	else if (dt == TF_DT_F16)
		((uint16_t *)p)[i] = tf_f32_to_f16((float)v);
}

/* The spacing of dt's values at |v| (bf16: 8 significant bits, f16: 11). */
static double ulp_of(enum tf_dt dt, double v)
{
	int bits = dt == TF_DT_BF16 ? 8 : 11, emin = dt == TF_DT_BF16 ? -125 : -13;
	int e;
	frexp(fabs(v), &e);
	return ldexp(1.0, (e < emin ? emin : e) - bits);
}

/* --break: the element of the largest reference value becomes -2v-1 (an
 * integer or byte flips its low bit). */
static void perturb(enum tf_dt dt, const void *ref, void *got, int64_t n)
{
	int64_t at = n / 2;
	if (dt == TF_DT_I32) {
		((int32_t *)got)[at] ^= 1;
		return;
	}
	if (dt == TF_DT_U8) {
		((uint8_t *)got)[at] ^= 1;
		return;
	}
	double big = -1;
	for (int64_t i = 0; i < n; i++)
		if (isfinite(get(dt, ref, i)) && fabs(get(dt, ref, i)) > big)
			big = fabs(get(dt, ref, at = i));
	put(dt, got, at, -2 * get(dt, got, at) - 1);
}

static void cmp_exact(enum tf_dt dt, const void *ref, const void *got, int64_t n)
{
	size_t es = tf_dt_size(dt);
	int64_t bad = 0, first = -1;
	for (int64_t i = 0; i < n; i++)
		if (memcmp((const char *)ref + i * es, (const char *)got + i * es, es)) {
			bad++;
			first = first < 0 ? i : first;
		}
	if (bad) {
		cur.fail = true;
		say("%lld of %lld differ (first [%lld]: %g, want %g) (tol exact); ", (long long)bad,
		    (long long)n, (long long)first, get(dt, got, first), get(dt, ref, first));
	} else {
		say("0 of %lld differ (tol exact); ", (long long)n);
	}
}

static void cmp_near(const struct tol *t, enum tf_dt dt, const void *ref, const void *got,
		     int64_t n, int64_t cols)
{
	double worst_rel = 0, worst_ulp = 0;
	int64_t bad = 0, first = -1;
	for (int64_t r0 = 0; r0 < n; r0 += cols) {
		double big = 0;
		for (int64_t i = r0; i < r0 + cols; i++)
			if (isfinite(get(dt, ref, i)) && fabs(get(dt, ref, i)) > big)
				big = fabs(get(dt, ref, i));
		for (int64_t i = r0; i < r0 + cols; i++) {
			double a = get(dt, got, i), b = get(dt, ref, i), d = fabs(a - b);
			bool ok;
			if (!isfinite(a) || !isfinite(b)) {
				ok = a == b; /* NaN never passes */
				d = ok ? 0 : INFINITY;
			} else if (dt == TF_DT_F32) {
				ok = d <= t->rel * big;
			} else {
				double u = ulp_of(dt, fmax(fabs(a), fabs(b)));
				ok = d <= t->ulps * u || d <= t->floor * big;
				worst_ulp = fmax(worst_ulp, d / u);
			}
			double rel = d == 0 ? 0 : big > 0 ? d / big : INFINITY;
			worst_rel = fmax(worst_rel, rel);
			if (!ok && bad++ == 0)
				first = i;
		}
	}
	if (dt == TF_DT_F32)
		say("worst %.2e of row max (tol %.0e)", worst_rel, t->rel);
	else
		say("worst %.3g ulp, %.2e of row max (tol %g ulp or %.0e)", worst_ulp, worst_rel,
		    t->ulps, t->floor);
	if (bad) {
		cur.fail = true;
		say(": %lld of %lld out (first [%lld]: %.9g, want %.9g)", (long long)bad, (long long)n,
		    (long long)first, get(dt, got, first), get(dt, ref, first));
	}
	say("; ");
}

static void cmp_exl3(const struct tol *t, enum tf_dt dt, const void *ref, const void *got, int64_t n)
{
	double num = 0, den = 0, maxe = 0;
	int64_t nan = 0;
	for (int64_t i = 0; i < n; i++) {
		double a = get(dt, got, i), b = get(dt, ref, i);
		if (!isfinite(a) || !isfinite(b)) {
			nan++;
			continue;
		}
		num += (a - b) * (a - b);
		den += b * b;
		maxe = fmax(maxe, fabs(a - b));
	}
	double rel = sqrt(num / (den > 0 ? den : 1)), rms = sqrt(den / (double)(n ? n : 1));
	double mx = maxe / (rms > 0 ? rms : 1), tr = dt == TF_DT_F32 ? t->rel : 2 * t->rel;
	say("rel %.2e (tol %.0e), max/rms %.2e (tol %.0e)", rel, tr, mx, t->floor);
	if (nan || rel > tr || mx > t->floor) {
		cur.fail = true;
		say(", %lld NaN or unwritten", (long long)nan);
	}
	say("; ");
}

/* Compare output `out` of the current op: n values of dt in rows of cols,
 * ref from the CPU, got from CUDA. */
static void compare(const char *out, enum tf_dt dt, const void *ref, void *got, int64_t n,
		    int64_t cols)
{
	const struct tol *t = tol_of(cur.op, out);
	if (break_op && !strcmp(break_op, cur.op) && !cur.broken && n > 0) {
		perturb(dt, ref, got, n);
		cur.broken = true;
	}
	say("%s: ", out);
	if (t->how == EXACT)
		cmp_exact(dt, ref, got, n);
	else if (t->how == NEAR)
		cmp_near(t, dt, ref, got, n, cols > 0 ? cols : n);
	else
		cmp_exl3(t, dt, ref, got, n);
}

/* Compare a whole output pair. */
static void check(const char *out, const struct pair *p)
{
	if (cur.err)
		return;
	void *ref = fetch(cpu, &p->c), *got = fetch(gpu, &p->g);
	compare(out, p->c.dt, ref, got, tf_tensor_numel(&p->c), tf_tensor_cols(&p->c));
}

/* Compare the CPU's output ref (rows of the subset) with rows[i] of CUDA's
 * g, fetched row by row through views. */
static void check_rows(const char *out, const struct tf_tensor *ref, const struct tf_tensor *g,
		       const int32_t *rows, int64_t n)
{
	if (cur.err)
		return;
	void *want = fetch(cpu, ref);
	size_t per = tf_tensor_bytes(g) / (size_t)g->shape[0];
	char *got = hnew(per * (size_t)n);
	for (int64_t i = 0; i < n; i++) {
		struct tf_tensor v = tf_tensor_rows_of(g, rows[i], 1);
		tf_status st = gpu->ops->download(gpu, &v, got + per * (size_t)i);
		if (st && !note(1, st))
			return;
	}
	compare(out, g->dt, want, got, tf_tensor_numel(ref), tf_tensor_cols(ref));
}

#endif
