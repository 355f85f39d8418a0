/* exl3_gemm.h: the EXL3 matmul for many rows on the GPU (prefill, rows >
 * 16): the trellis decoded to an fp16 Ŵᵀ on the device, then one cuBLAS
 * GEMM between the two Hadamard steps (kernels/exl3_gemm.cu). The same
 * product as tf_cu_exl3_gemv and the CPU twin tf_exl3_matmul. */
#ifndef TF_CUDA_EXL3_GEMM_H
#define TF_CUDA_EXL3_GEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "cuda/blas.h"
#include "cuda/driver.h"
#include "cuda/exl3_gemv.h"

/* Bytes of scratch tf_cu_exl3_gemm needs for rows rows of layer shape g:
 * Ŵᵀ fp16 [N][K], u fp16 [rows][K], a f32 [rows][N] (512-byte aligned). */
size_t tf_cu_exl3_gemm_scratch(const struct tf_exl3_geom *g, uint32_t rows);

/* Enqueue Ŵᵀ (fp16 [N][K], bit-exact with tf_exl3_decode transposed) of
 * the layer into wt on stream s. */
tf_status tf_cu_exl3_decode(const struct tf_cu_exl3_layer *L, tf_cu_ptr wt, tf_cu_stream s);

/* Enqueue y = x · W on stream s for any number of rows: x bf16
 * [rows][K], y f32 or (y_bf16) bf16 [rows][N]. scratch: at least
 * tf_cu_exl3_gemm_scratch bytes of device memory. blas runs on s.
 * TF_ERR_ARG for a bad geometry or too little scratch. */
tf_status tf_cu_exl3_gemm(const struct tf_cu_exl3_layer *L, tf_cu_ptr x, uint32_t rows, tf_cu_ptr y,
                          bool y_bf16, struct tf_cu_blas *blas, tf_cu_ptr scratch,
                          size_t scratch_bytes, tf_cu_stream s);

#endif
