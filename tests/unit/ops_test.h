/* ops_test.h: helpers shared by the op tests (check_ops_*.c): a CPU
 * backend, tensors over test-owned memory, bf16 rounding, and a worst-
 * difference report. */
#ifndef TF_TESTS_OPS_TEST_H
#define TF_TESTS_OPS_TEST_H

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/f16.h"
#include "base/rng.h"
#include "compute/ops.h"

static inline struct tf_be *test_be(void)
{
	struct tf_be *be;
	ck_assert_int_eq(tf_cpu_be_new(2, &be), TF_OK);
	return be;
}

#define T1(p, dt, a) tf_tensor_make((p), (dt), 1, (int64_t)(a))
#define T2(p, dt, a, b) tf_tensor_make((p), (dt), 2, (int64_t)(a), (int64_t)(b))
#define T3(p, dt, a, b, c) tf_tensor_make((p), (dt), 3, (int64_t)(a), (int64_t)(b), (int64_t)(c))

static inline float *test_randn(struct tf_rng *r, size_t n, float scale)
{
	float *v = malloc(n * sizeof *v);
	for (size_t i = 0; i < n; i++)
		v[i] = tf_rng_normal(r) * scale;
	return v;
}

static inline uint16_t *test_bf16(const float *v, size_t n)
{
	uint16_t *b = malloc(n * sizeof *b);
	for (size_t i = 0; i < n; i++)
		b[i] = tf_f32_to_bf16(v[i]);
	return b;
}

/* The worst |got - want| / (|want| + floor) over n values; prints it. */
static inline double test_worst(const char *what, const float *got, const double *want, size_t n,
				double floor)
{
	double worst = 0;
	for (size_t i = 0; i < n; i++) {
		double d = fabs(got[i] - want[i]) / (fabs(want[i]) + floor);
		if (d > worst || d != d)
			worst = d != d ? INFINITY : d;
	}
	fprintf(stderr, "%s: worst relative difference %.3g over %zu values\n", what, worst, n);
	return worst;
}

#endif
