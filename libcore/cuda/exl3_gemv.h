/* exl3_gemv.h: the launcher of kernels/exl3_gemv.cu, the fused EXL3 matmul
 * for 1..16 rows on the GPU (the CPU twin is tf_exl3_matmul).
 *
 * y[rows][N] = x[rows][K] · W, W = diag(suh)·Ĥ·Ŵ·Ĥ·diag(svh) decoded from
 * the trellis inside the kernel (exl3-format.md §5). x is bf16, y f32 or
 * bf16; trellis, suh and svh stay in the device layout of the pack (I16
 * [K/16][N/16][16·bits], F16 [K], F16 [N]). One launch per call: K is split
 * into slices whose partial sums meet in a workspace that the kernel leaves
 * zeroed again. */
#ifndef TF_CUDA_EXL3_GEMV_H
#define TF_CUDA_EXL3_GEMV_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "cuda/driver.h"
#include "model/exl3.h"

#define TF_CU_EXL3_ROWS_MAX 16

/* A layer on the device. Pointers are borrowed device addresses, 16-byte
 * aligned. */
struct tf_cu_exl3_layer {
	struct tf_exl3_geom g;
	tf_cu_ptr trellis; /* u16 [K/16][N/16][16·bits] */
	tf_cu_ptr suh;     /* f16 [K] */
	tf_cu_ptr svh;     /* f16 [N] */
};

/* Scratch of the split-K sums: f32 [16][n_max] and a counter per 128
 * columns, zeroed. One per stream: launches sharing one must be ordered. */
struct tf_cu_exl3_ws {
	tf_cu_ptr acc;
	tf_cu_ptr count;
	uint32_t n_max;
};

/* Allocate and zero a workspace for layers up to n_max columns. */
tf_status tf_cu_exl3_ws_init(struct tf_cu_exl3_ws *ws, uint32_t n_max);
void tf_cu_exl3_ws_release(struct tf_cu_exl3_ws *ws);

/* How a launch is cut: grid (n/128) × slices, chunks_per_slice 128-blocks
 * of K each, aiming at blocks_per_sm blocks on each of sms processors
 * (0: 4). */
struct tf_cu_exl3_plan {
	unsigned grid_x, slices, chunks_per_slice, rows_tmpl;
};
void tf_cu_exl3_plan(const struct tf_exl3_geom *g, uint32_t rows, int sms, int blocks_per_sm,
                     struct tf_cu_exl3_plan *p);

/* Enqueue y = x · W on stream s. x: bf16 [rows][K]; y: [rows][N], f32 or
 * (y_bf16) bf16; rows 1..16. TF_ERR_ARG for a bad geometry, rows, or a
 * workspace too small; driver errors from the launch. */
tf_status tf_cu_exl3_gemv(const struct tf_cu_exl3_layer *L, tf_cu_ptr x, uint32_t rows, tf_cu_ptr y,
                          bool y_bf16, const struct tf_cu_exl3_ws *ws, int sms, int blocks_per_sm,
                          tf_cu_stream s);

#endif
