/* tp.h: the collectives the forward makes between tensor-parallel ranks,
 * over a fabric comm (fabric/comm.h). The buffers are the forward's
 * backend tensors' memory, handed over whole: host memory for the host
 * comms (in-process ranks on threads, or processes over the bootstrap),
 * device addresses for NCCL and the mailbox (tf_fwd_new_tp refuses a comm
 * whose kind of memory is not its backend's). The calls pass the comm's
 * default stream (NULL); rearranging gathered rows is the forward's
 * (rows_copy), so nothing here reads the buffers.
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

/* out[world][bytes] = every rank's send[bytes], rank 0 first. Exact. */
tf_status tf_tp_gather(struct tf_comm *c, const void *send, size_t bytes, void *out);

#endif
