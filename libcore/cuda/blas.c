/* blas.c: cuBLAS through dlopen: a handle and cublasGemmEx in bf16 and fp16. */
#include "cuda/blas.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "cuda/rec.h"

/* cuBLAS enum values (cublas_api.h, library_types.h of CUDA 13). */
enum {
	CUBLAS_OP_N = 0,
	CUBLAS_OP_T = 1,
	CUDA_R_32F = 0,
	CUDA_R_16F = 2,
	CUDA_R_16BF = 14,
	CUBLAS_COMPUTE_32F = 68,
	CUBLAS_GEMM_DEFAULT = -1,
};

struct tf_cu_blas {
	void *dl;
	void *handle;
	char path[256];
	int (*create)(void **h);
	int (*destroy)(void *h);
	int (*set_stream)(void *h, tf_cu_stream s);
	int (*gemm_ex)(void *h, int ta, int tb, int m, int n, int k, const void *alpha, const void *A,
	               int at, int lda, const void *B, int bt, int ldb, const void *beta, void *C,
	               int ct, int ldc, int compute, int algo);
	const char *(*status_name)(int st);
};

static tf_status blas_err(struct tf_cu_blas *b, int rc, const char *what)
{
	const char *name = b->status_name ? b->status_name(rc) : NULL;
	return tf_err(TF_ERR_INTERNAL, "%s: %s (%d)", what, name ? name : "CUBLAS_STATUS_?", rc);
}

tf_status tf_cu_blas_new(struct tf_cu_blas **out)
{
	*out = NULL;
	tf_status st = tf_cu_init();
	if (st)
		return st;
	struct tf_cu_blas *b = tf_calloc(1, sizeof(*b));
	if (!b)
		return tf_err(TF_ERR_NOMEM, "cublas: out of memory");
	const char *env = getenv("TF_CUDA_BLAS_LIBRARY");
	const char *names[] = {env && *env ? env : "libcublas.so.13", "libcublas.so.12",
	                       "/usr/local/cuda/lib64/libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so"};
	char why[256] = "";
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !b->dl; i++) {
		b->dl = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
		if (b->dl)
			snprintf(b->path, sizeof(b->path), "%s", names[i]);
		else if (!*why)
			snprintf(why, sizeof(why), "%s", dlerror());
	}
	if (!b->dl) {
		st = tf_err(TF_ERR_UNAVAILABLE, "cannot load cuBLAS: %s", why);
		goto out;
	}
	struct {
		const char *name;
		void *dst;
	} syms[] = {
		{"cublasCreate_v2", &b->create},
		{"cublasDestroy_v2", &b->destroy},
		{"cublasSetStream_v2", &b->set_stream},
		{"cublasGemmEx", &b->gemm_ex},
		{"cublasGetStatusName", &b->status_name},
	};
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		void *p = dlsym(b->dl, syms[i].name);
		if (!p) {
			st = tf_err(TF_ERR_UNAVAILABLE, "cuBLAS '%s' lacks %s", b->path, syms[i].name);
			goto out;
		}
		memcpy(syms[i].dst, &p, sizeof(p));
	}
	int rc = b->create(&b->handle);
	if (rc) {
		st = blas_err(b, rc, "cublasCreate");
		goto out;
	}
	*out = b;
out:
	if (st)
		tf_cu_blas_free(b);
	return st;
}

void tf_cu_blas_free(struct tf_cu_blas *b)
{
	if (!b)
		return;
	if (b->handle)
		b->destroy(b->handle);
	if (b->dl)
		dlclose(b->dl);
	free(b);
}

const char *tf_cu_blas_path(const struct tf_cu_blas *b)
{
	return b->path;
}

static tf_status linear(struct tf_cu_blas *b, tf_cu_ptr x, tf_cu_ptr w, tf_cu_ptr y, int rows, int k,
                        int n, int in_type, int y_type, tf_cu_stream s)
{
	/* what the call bakes into a graph (rec.h): the handle, shapes, types, addresses */
	const uint64_t args[9] = {(uint64_t)(uintptr_t)b->handle, x, w, y, (uint64_t)rows,
	                          (uint64_t)k, (uint64_t)n, (uint64_t)in_type, (uint64_t)y_type};
	if (tf_cu_rec_blas(s, args, sizeof args))
		return TF_OK; /* recorded */
	int rc = b->set_stream(b->handle, s);
	if (rc)
		return blas_err(b, rc, "cublasSetStream");
	const float alpha = 1.f, beta = 0.f;
	/* Column-major: C[n x rows] = op(A)[n x k] · B[k x rows], A = w as
	 * k x n (lda k) transposed, B = x as k x rows (ldb k), C = y (ldc n). */
	rc = b->gemm_ex(b->handle, CUBLAS_OP_T, CUBLAS_OP_N, n, rows, k, &alpha, (const void *)(uintptr_t)w,
	                in_type, k, (const void *)(uintptr_t)x, in_type, k, &beta, (void *)(uintptr_t)y,
	                y_type, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
	if (rc)
		return blas_err(b, rc, "cublasGemmEx");
	return TF_OK;
}

tf_status tf_cu_blas_linear_bf16(struct tf_cu_blas *b, tf_cu_ptr x, tf_cu_ptr w, tf_cu_ptr y,
                                 int rows, int k, int n, bool y_bf16, tf_cu_stream s)
{
	return linear(b, x, w, y, rows, k, n, CUDA_R_16BF, y_bf16 ? CUDA_R_16BF : CUDA_R_32F, s);
}

tf_status tf_cu_blas_linear_f16(struct tf_cu_blas *b, tf_cu_ptr x, tf_cu_ptr w, tf_cu_ptr y,
                                int rows, int k, int n, tf_cu_stream s)
{
	return linear(b, x, w, y, rows, k, n, CUDA_R_16F, CUDA_R_32F, s);
}
