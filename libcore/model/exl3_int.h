/* exl3_int.h: private to libcore/model/exl3*.c: the AVX2 kernels the
 * portable code dispatches to. Not part of the module's interface. */
#ifndef TF_MODEL_EXL3_INT_H
#define TF_MODEL_EXL3_INT_H

#include <stddef.h>
#include <stdint.h>

#include "model/exl3.h"

/* True when this CPU has AVX2, FMA and F16C (checked once). */
int exl3_avx2_ok(void);

/* Decode a tile into w[t] in stream order (t = 0..255; weight t belongs at
 * tf_exl3_tile_pos(t)). Needs exl3_avx2_ok(). w 32-byte aligned. */
void exl3_avx2_tile_stream(const uint16_t *tile, uint32_t bits, enum tf_exl3_cb cb, float *w);

/* The small-row GEMM body for 128-column blocks [begin, end): see
 * exl3_avx2.c. up: [rows][K/16][4][8] f32, the permuted input; acc:
 * rows·640 floats of scratch or more (32-byte aligned); y: [rows][N]. */
void exl3_avx2_blocks(const struct tf_exl3_layer *L, const float *up, size_t rows, float *acc,
		      float *y, size_t begin, size_t end);

/* The many-row GEMM body (rows > EXL3_AVX2_MAX_ROWS): each tile decoded
 * once to row-major floats, then applied to four rows at a time. u: [rows][K]
 * f32 (the transformed input); acc: rows·128 floats of scratch. */
void exl3_avx2_blocks_rows(const struct tf_exl3_layer *L, const float *u, size_t rows, float *acc,
			   float *y, size_t begin, size_t end);

/* tf_exl3_tile_decode_f32 in portable C (table lookups). */
void exl3_tile_f32_table(const uint16_t *tile, uint32_t bits, enum tf_exl3_cb cb, float out[256]);

/* Rows up to this many take exl3_avx2_blocks. */
#define EXL3_AVX2_MAX_ROWS 16

#endif
