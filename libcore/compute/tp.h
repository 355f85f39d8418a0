/* tp.h: the collectives the forward makes between tensor-parallel ranks,
 * over a fabric comm (fabric/comm.h) holding host memory (the host backend:
 * in-process ranks on threads, or processes over the bootstrap).
 *
 * Each helper is one collective call that every rank makes with the same
 * arguments (the comm refuses a desynchronised call on every rank). Sums
 * run in rank order (comm.h), so every rank gets the same bits. */
#ifndef TF_COMPUTE_TP_H
#define TF_COMPUTE_TP_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

struct tf_comm;

/* x[n] f32 = the rank-order fp32 sum of every rank's x[n], in place. */
tf_status tf_tp_sum_f32(struct tf_comm *c, float *x, size_t n);

/* Concatenate column blocks: rank r holds part [rows, width[r]] (bytes per
 * row, equal on every rank's list); out [rows, sum of width] gets rank 0's
 * columns first. Exact (a copy). width[r] may be 0. */
tf_status tf_tp_gather_cols(struct tf_comm *c, const void *part, size_t rows,
			    const size_t *width, void *out);

/* out[world][bytes] = every rank's send[bytes], rank 0 first. Exact. */
tf_status tf_tp_gather(struct tf_comm *c, const void *send, size_t bytes, void *out);

#endif
