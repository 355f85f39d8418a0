/* tp.h: the collectives the forward makes between tensor-parallel ranks,
 * over a fabric comm (fabric/comm.h), on the forward's backend tensors.
 * Three paths, chosen by the backend's memory and the comm's:
 *
 * - host: a CPU backend and a host comm (in-process ranks on threads, or
 *   processes over the bootstrap, or RoCE): the tensors' memory is handed
 *   to the comm whole.
 * - staged: a CUDA backend and a host comm (what runs ranks of the CUDA
 *   model on one GPU, or on GPUs with no device comm between them): each
 *   collective downloads its operand (which waits for the backend's
 *   stream) into one pinned host buffer (ops->host_alloc, grown to the
 *   largest call and kept: no allocation per call once warm), runs the
 *   host collective in it, and uploads the result, queued on the stream.
 *   A collective so made waits for the host, so it cannot be part of a
 *   CUDA graph: the forward runs these ranks' decode steps eagerly
 *   (forward.c; counted in the backend's graph_eager).
 * - device: a CUDA backend and a device comm (NCCL, the mailbox): the
 *   collective is queued on the backend's stream (tf_cuda_be_stream), so
 *   it is ordered with the ops around it and a graphed call captures it;
 *   in a graphed call's dry pass it is recorded as a foreign item
 *   (cuda/rec.h), not queued. The ranks' graph caches vote over the comm
 *   (tf_tp_vote as tf_cuda_be_set_agree's hook: cuda_graph.c).
 * A device comm on a CPU backend is refused (TF_ERR_UNSUPPORTED).
 *
 * Each helper is one collective call that every rank makes with the same
 * arguments (the host comms refuse a desynchronised call on every rank).
 * Sums run in rank order (comm.h; NCCL past two ranks excepted), so every
 * rank gets the same bits, and the host and staged paths the same bits
 * as each other. Rearranging gathered rows is the forward's (rows_copy),
 * so nothing here reads the tensors' values. One thread drives a tf_tp,
 * as it drives its backend. */
#ifndef TF_COMPUTE_TP_H
#define TF_COMPUTE_TP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "compute/ops.h"

struct tf_comm;

enum tf_tp_path { TF_TP_HOST = 0, TF_TP_STAGED = 1, TF_TP_DEVICE = 2 };

struct tf_tp {
	struct tf_comm *comm;  /* borrowed */
	struct tf_be *be;      /* borrowed */
	enum tf_tp_path path;
	void *stream;          /* device: the backend's stream */
	void *host;            /* staged: the pinned buffer (be->ops->host_alloc) */
	size_t host_cap;
	uint64_t calls;        /* collectives made */
	uint64_t staged_bytes; /* staged: bytes through the host buffer, both ways */
};

/* Set t up for be and comm (both borrowed; they outlive t). TF_ERR_UNSUPPORTED
 * for a device comm on a host-memory backend, or a device comm on a
 * backend that gives no stream. */
tf_status tf_tp_init(struct tf_tp *t, struct tf_be *be, struct tf_comm *comm);
/* Free the host buffer (safe twice, and on a zeroed t). */
void tf_tp_release(struct tf_tp *t);

/* x f32 = the rank-order fp32 sum of every rank's x, in place. */
tf_status tf_tp_sum_f32(struct tf_tp *t, struct tf_tensor *x);
/* all = every rank's part, rank 0 first: all holds world times part's
 * bytes (any dtype or shape; bytes are what move). Exact. */
tf_status tf_tp_gather(struct tf_tp *t, const struct tf_tensor *part, struct tf_tensor *all);
/* *all = the AND of mine over every rank (host-side; tf_comm_vote). ctx is
 * a struct tf_tp: the shape of tf_cuda_be_set_agree's hook. */
tf_status tf_tp_vote(void *ctx, bool mine, bool *all);

#endif
