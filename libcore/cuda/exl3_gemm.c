/* exl3_gemm.c: the EXL3 prefill path: decode, Hadamards and the GEMM. */
#include "cuda/exl3_gemm.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cuda/module.h"
#include "cuda/rec.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static tf_cu_func decode_funcs[9][3], had_in, had_out;
static unsigned funcs_generation;

/* The kernel called name, looked up once per module load into *slot. */
static tf_status cached(tf_cu_func *slot, const char *name, tf_cu_func *f)
{
	tf_status st = tf_cu_module_load();
	if (st)
		return st;
	pthread_mutex_lock(&mu);
	if (funcs_generation != tf_cu_module_generation()) {
		memset(decode_funcs, 0, sizeof(decode_funcs));
		had_in = had_out = NULL;
		funcs_generation = tf_cu_module_generation();
	}
	if (!*slot)
		st = tf_cu_kernel(name, slot);
	*f = *slot;
	pthread_mutex_unlock(&mu);
	return st;
}

static size_t align512(size_t v)
{
	return (v + 511) & ~(size_t)511;
}

size_t tf_cu_exl3_gemm_scratch(const struct tf_exl3_geom *g, uint32_t rows)
{
	return align512((size_t)2 * g->k * g->n) + align512((size_t)2 * rows * g->k) +
	       align512((size_t)4 * rows * g->n);
}

tf_status tf_cu_exl3_decode(const struct tf_cu_exl3_layer *L, tf_cu_ptr wt, tf_cu_stream s)
{
	tf_status st = tf_exl3_geom_check(&L->g);
	if (st)
		return tf_err(TF_ERR_ARG, "exl3 decode: %s", tf_errmsg(st));
	char name[48];
	snprintf(name, sizeof(name), "tf_exl3_decode_b%u_cb%d", L->g.bits, (int)L->g.cb);
	tf_cu_func f;
	if ((st = cached(&decode_funcs[L->g.bits][L->g.cb], name, &f)))
		return st;
	int32_t k = (int32_t)L->g.k, n = (int32_t)L->g.n;
	void *p[] = {(void *)&L->trellis, &wt, &k, &n};
	if (tf_cu_rec_kernel(s, f, L->g.n / 128, L->g.k / 16, 1, 256, 1, 1, 0, p, NULL, 0))
		return TF_OK; /* recorded (rec.h) */
	return TF_CU(tf_cu->LaunchKernel(f, L->g.n / 128, L->g.k / 16, 1, 256, 1, 1, 0, s, p, NULL));
}

tf_status tf_cu_exl3_gemm(const struct tf_cu_exl3_layer *L, tf_cu_ptr x, uint32_t rows, tf_cu_ptr y,
                          bool y_bf16, struct tf_cu_blas *blas, tf_cu_ptr scratch,
                          size_t scratch_bytes, tf_cu_stream s)
{
	tf_status st = tf_exl3_geom_check(&L->g);
	if (st)
		return tf_err(TF_ERR_ARG, "exl3 gemm: %s", tf_errmsg(st));
	if (rows < 1)
		return tf_err(TF_ERR_ARG, "exl3 gemm: no rows");
	size_t need = tf_cu_exl3_gemm_scratch(&L->g, rows);
	if (scratch_bytes < need)
		return tf_err(TF_ERR_ARG, "exl3 gemm: %zu bytes of scratch, %ux%u at %u rows needs %zu",
		              scratch_bytes, L->g.k, L->g.n, rows, need);
	const size_t k = L->g.k, n = L->g.n;
	tf_cu_ptr wt = scratch, u = wt + align512(2 * k * n), a = u + align512((size_t)2 * rows * k);
	if (!y_bf16)
		a = y; /* the Hadamard of y runs in place */
	tf_cu_func fi, fo;
	if ((st = cached(&had_in, "tf_exl3_had_in", &fi)) || (st = cached(&had_out, "tf_exl3_had_out", &fo)))
		return st;
	if ((st = tf_cu_exl3_decode(L, wt, s)))
		goto out;
	int32_t r32 = (int32_t)rows, k32 = (int32_t)k, n32 = (int32_t)n, yb = y_bf16;
	unsigned warps_in = (unsigned)(rows * (k / 128)), warps_out = (unsigned)(rows * (n / 128));
	void *pi[] = {&x, (void *)&L->suh, &u, &r32, &k32};
	if ((st = tf_cu_launch(fi, (warps_in + 7) / 8, 256, 0, s, pi)))
		goto out;
	if ((st = tf_cu_blas_linear_f16(blas, u, wt, a, (int)rows, (int)k, (int)n, s)))
		goto out;
	void *po[] = {&a, (void *)&L->svh, &y, &r32, &n32, &yb};
	st = tf_cu_launch(fo, (warps_out + 7) / 8, 256, 0, s, po);
out:
	if (st)
		return tf_err_wrap(st, "exl3 gemm %ux%u b%u %s rows %u: ", L->g.k, L->g.n, L->g.bits,
		                   tf_exl3_cb_name(L->g.cb), rows);
	return TF_OK;
}
