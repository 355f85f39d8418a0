/* tp.c: the forward's collectives between tensor-parallel ranks (tp.h). */
#include "compute/tp.h"

#include <stdlib.h>
#include <string.h>

#include "fabric/comm.h"

tf_status tf_tp_sum_f32(struct tf_comm *c, float *x, size_t n)
{
	return tf_comm_all_reduce(c, x, x, n, TF_DTYPE_F32, TF_REDOP_SUM, NULL);
}

tf_status tf_tp_gather(struct tf_comm *c, const void *send, size_t bytes, void *out)
{
	return tf_comm_all_gather(c, send, out, bytes, TF_DTYPE_U8, NULL);
}

tf_status tf_tp_gather_cols(struct tf_comm *c, const void *part, size_t rows,
			    const size_t *width, void *out)
{
	int world = c->world;
	size_t most = 0, total = 0;
	uint32_t lens[TF_BOOT_MAX_WORLD];
	if (world > TF_BOOT_MAX_WORLD)
		return tf_err(TF_ERR_ARG, "tp: world %d", world);
	for (int r = 0; r < world; r++) {
		if (rows * width[r] > UINT32_MAX)
			return tf_err(TF_ERR_ARG, "tp: a gather of %zu rows of %zu bytes", rows, width[r]);
		lens[r] = (uint32_t)(rows * width[r]);
		most = width[r] > most ? width[r] : most;
		total += width[r];
	}
	size_t stride = rows * most;
	unsigned char *all = malloc(stride * (size_t)world + 1);
	if (!all)
		return tf_err(TF_ERR_NOMEM, "tp: gather of %zu bytes", stride * (size_t)world);
	tf_status st = tf_comm_all_gather_v(c, part, all, stride, lens, NULL);
	if (!st) {
		/* [world][rows, width[r]] -> [rows][rank 0's columns, rank 1's, ...] */
		size_t col = 0;
		for (int r = 0; r < world; r++) {
			const unsigned char *src = all + (size_t)r * stride;
			for (size_t i = 0; i < rows; i++)
				memcpy((unsigned char *)out + i * total + col, src + i * width[r], width[r]);
			col += width[r];
		}
	}
	free(all);
	return st;
}
