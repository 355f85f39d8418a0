/* exl3_had.c: the normalised 128-point Hadamard transform EXL3 applies on
 * both sides of Ŵ.
 *
 * Facts (exl3-format.md §5): Ĥ = H/√128 with H the Sylvester matrix in
 * natural order, H[i][j] = (−1)^popcount(i & j) (exllamav3/util/hadamard.py
 * builds 128 by Sylvester doubling from "+"; the device code in
 * exllamav3_ext/quant/hadamard_inner.cuh does butterflies). Ĥ is symmetric,
 * so x·Ĥ = Ĥ·x, and orthonormal. Applied blockwise to each run of 128.
 *
 * The in-place butterfly below (7 stages of a ± b) computes x·H exactly in
 * that natural order; the 1/√128 is applied once at the end. fp32. */
#include "model/exl3.h"

#define R_SCALE 0.088388347648318f /* 1/√128 (r_scale in the device code) */

void tf_exl3_had128(float *restrict x)
{
	for (unsigned h = 1; h < 128; h <<= 1)
		for (unsigned i = 0; i < 128; i += 2 * h)
			for (unsigned j = i; j < i + h; j++) {
				float a = x[j], b = x[j + h];
				x[j] = a + b;
				x[j + h] = a - b;
			}
	for (unsigned i = 0; i < 128; i++)
		x[i] *= R_SCALE;
}

void tf_exl3_had_blocks(float *x, size_t len)
{
	for (size_t i = 0; i + 128 <= len; i += 128)
		tf_exl3_had128(x + i);
}
