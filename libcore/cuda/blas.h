/* blas.h: the few cuBLAS calls tf uses, loaded with dlopen like the driver:
 * a bf16 (or fp16) GEMM with fp32 accumulation, the dense yardstick that tf-bench
 * compares the EXL3 kernels with (and a dense path for unquantised
 * weights). libcublas is optional: without it these return
 * TF_ERR_UNAVAILABLE. Not thread safe: one handle per thread. */
#ifndef TF_CUDA_BLAS_H
#define TF_CUDA_BLAS_H

#include <stdbool.h>

#include "base/status.h"
#include "cuda/driver.h"

struct tf_cu_blas;

/* Open cuBLAS ($TF_CUDA_BLAS_LIBRARY, else libcublas.so.13, .so.12, and
 * /usr/local/cuda/lib64) and create a handle on the current context. */
tf_status tf_cu_blas_new(struct tf_cu_blas **out);
void tf_cu_blas_free(struct tf_cu_blas *b);
/* The library that was opened. */
const char *tf_cu_blas_path(const struct tf_cu_blas *b);

/* y[rows][n] = x[rows][k] · w[n][k]ᵀ on stream s: x and w bf16 row-major,
 * y f32 (or bf16 when y_bf16), fp32 accumulation. */
tf_status tf_cu_blas_linear_bf16(struct tf_cu_blas *b, tf_cu_ptr x, tf_cu_ptr w, tf_cu_ptr y,
                                 int rows, int k, int n, bool y_bf16, tf_cu_stream s);
/* The same with x and w fp16 and y f32 (the EXL3 prefill path: the decoded
 * weight is exact in fp16). */
tf_status tf_cu_blas_linear_f16(struct tf_cu_blas *b, tf_cu_ptr x, tf_cu_ptr w, tf_cu_ptr y,
                                int rows, int k, int n, tf_cu_stream s);

#endif
