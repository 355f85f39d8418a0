/* gpu_util.h: helpers shared by the GPU tests (tests/gpu/gpu_*.c): opening
 * the device (exit 77, "skipped", when there is none), checks that print
 * what failed, and host twins of the test kernels. */
#ifndef TF_TESTS_GPU_UTIL_H
#define TF_TESTS_GPU_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "base/status.h"
#include "cuda/driver.h"

static int gpu_failures;

#define GPU_CHECK(cond, ...) \
	do { \
		if (!(cond)) { \
			gpu_failures++; \
			fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__); \
			fputc('\n', stderr); \
		} \
	} while (0)

/* Stop the test on a failed call: the rest depends on it. */
#define GPU_OK(expr) \
	do { \
		tf_status st_ = (expr); \
		if (st_) { \
			fprintf(stderr, "FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #expr, tf_errmsg(st_)); \
			exit(1); \
		} \
	} while (0)

/* The first index of v's largest value (greedy decoding's pick). */
static inline int gpu_argmax(const float *v, int64_t n)
{
	int64_t b = 0;
	for (int64_t i = 1; i < n; i++)
		if (v[i] > v[b])
			b = i;
	return (int)b;
}

static inline void gpu_open(struct tf_cu_device *dev)
{
	tf_status st = tf_cu_device_open(0, dev);
	if (st == TF_ERR_UNAVAILABLE) {
		fprintf(stderr, "skip: %s\n", tf_errmsg(st));
		exit(77);
	}
	GPU_OK(st);
	printf("device: %s, sm_%d%d, %d SMs, %zu MiB, L2 %d KiB, VMM %s, RDMA+VMM %s, driver %d\n",
	       dev->name, dev->cc_major, dev->cc_minor, dev->sms, dev->total_mem >> 20,
	       dev->l2_bytes >> 10, dev->vmm ? "yes" : "no", dev->rdma_vmm ? "yes" : "no",
	       tf_cu_driver_get()->version);
}

static inline int gpu_result(const char *name)
{
	printf("%s: %s (%d failures)\n", name, gpu_failures ? "FAIL" : "PASS", gpu_failures);
	return gpu_failures ? 1 : 0;
}

/* Host twin of tf_fill_u32 (kernels/copy_bench.cu). */
static inline uint32_t fill_u32_host(uint64_t i, uint32_t seed)
{
	uint32_t x = (uint32_t)i * 0x9E3779B1u ^ seed;
	x ^= x >> 16;
	x *= 0x85EBCA6Bu;
	x ^= x >> 13;
	return x;
}

static inline double gpu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#endif
