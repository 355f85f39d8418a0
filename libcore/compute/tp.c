/* tp.c: the forward's collectives between tensor-parallel ranks (tp.h). */
#include "compute/tp.h"

#include <string.h>

#include "cuda/rec.h"
#include "fabric/comm.h"

tf_status tf_tp_init(struct tf_tp *t, struct tf_be *be, struct tf_comm *comm)
{
	memset(t, 0, sizeof *t);
	t->comm = comm, t->be = be;
	if (!be->ops->device) {
		if (comm->device)
			return tf_err(TF_ERR_UNSUPPORTED, "tensor parallelism: the %s comm holds device "
				      "memory, the %s backend host memory", comm->name, be->ops->name);
		t->path = TF_TP_HOST;
		return TF_OK;
	}
	if (!comm->device) {
		t->path = TF_TP_STAGED;
		return TF_OK;
	}
	tf_status st = tf_cuda_be_stream(be, &t->stream);
	if (st)
		return tf_err_wrap(st, "tensor parallelism over %s: ", comm->name);
	t->path = TF_TP_DEVICE;
	return TF_OK;
}

void tf_tp_release(struct tf_tp *t)
{
	if (t->host && t->be)
		t->be->ops->host_free(t->be, t->host);
	t->host = NULL, t->host_cap = 0;
}

/* The staged path's buffer, at least n bytes (grown by half again past the
 * want, so that a growing prompt does not reallocate each call). */
static tf_status room(struct tf_tp *t, size_t n)
{
	if (n <= t->host_cap)
		return TF_OK;
	size_t cap = n + n / 2;
	tf_tp_release(t);
	tf_status st = t->be->ops->host_alloc(t->be, cap, &t->host);
	if (st)
		return tf_err_wrap(st, "tensor parallelism: a host buffer of %zu bytes: ", cap);
	t->host_cap = cap;
	return TF_OK;
}

/* A device comm's collective on the backend's stream, recorded (not
 * queued) by a graphed call's dry pass. */
static tf_status on_stream(struct tf_tp *t, int kind, const struct tf_tensor *in,
			   const struct tf_tensor *out, size_t n)
{
	tf_cu_stream s = t->stream;
	uint64_t id[5] = {(uint64_t)kind, (uint64_t)(uintptr_t)in->data, (uint64_t)(uintptr_t)out->data,
			  n, (uint64_t)t->comm->world};
	if (tf_cu_rec_foreign(s, id, sizeof id))
		return TF_OK;
	tf_status st = kind == 'S'
			       ? tf_comm_all_reduce(t->comm, in->data, out->data, n, TF_DTYPE_F32, TF_REDOP_SUM, s)
			       : tf_comm_all_gather(t->comm, in->data, out->data, n, TF_DTYPE_U8, s);
	tf_cu_rec_foreign_end(s);
	return st;
}

tf_status tf_tp_sum_f32(struct tf_tp *t, struct tf_tensor *x)
{
	if (x->dt != TF_DT_F32)
		return tf_err(TF_ERR_ARG, "tensor parallelism: a sum of %s", tf_dt_name(x->dt));
	size_t n = (size_t)tf_tensor_numel(x), bytes = n * sizeof(float);
	t->calls++;
	switch (t->path) {
	case TF_TP_HOST:
		return tf_comm_all_reduce(t->comm, x->data, x->data, n, TF_DTYPE_F32, TF_REDOP_SUM, NULL);
	case TF_TP_DEVICE:
		return on_stream(t, 'S', x, x, n);
	case TF_TP_STAGED:
		break;
	}
	/* x [n] f32: to the host (after the work that made it), summed there,
	 * back onto the stream */
	tf_status st = room(t, bytes);
	if (!st)
		st = t->be->ops->download(t->be, x, t->host);
	if (!st)
		st = tf_comm_all_reduce(t->comm, t->host, t->host, n, TF_DTYPE_F32, TF_REDOP_SUM, NULL);
	if (!st)
		st = t->be->ops->upload(t->be, x, t->host);
	t->staged_bytes += 2 * bytes;
	return st;
}

tf_status tf_tp_gather(struct tf_tp *t, const struct tf_tensor *part, struct tf_tensor *all)
{
	size_t b = tf_tensor_bytes(part), W = (size_t)t->comm->world;
	if (tf_tensor_bytes(all) != W * b)
		return tf_err(TF_ERR_ARG, "tensor parallelism: a gather of %zu bytes a rank into %zu",
			      b, tf_tensor_bytes(all));
	t->calls++;
	switch (t->path) {
	case TF_TP_HOST:
		return tf_comm_all_gather(t->comm, part->data, all->data, b, TF_DTYPE_U8, NULL);
	case TF_TP_DEVICE:
		return on_stream(t, 'G', part, all, b);
	case TF_TP_STAGED:
		break;
	}
	/* this rank's part lands in its slot of the buffer; the gather runs
	 * in place (comm.h: send may be recv + rank * count) */
	unsigned char *h;
	tf_status st = room(t, W * b);
	h = t->host;
	if (!st)
		st = t->be->ops->download(t->be, part, h + (size_t)t->comm->rank * b);
	if (!st)
		st = tf_comm_all_gather(t->comm, h + (size_t)t->comm->rank * b, h, b, TF_DTYPE_U8, NULL);
	if (!st)
		st = t->be->ops->upload(t->be, all, h);
	t->staged_bytes += b + W * b;
	return st;
}

tf_status tf_tp_vote(void *ctx, bool mine, bool *all)
{
	struct tf_tp *t = ctx;
	return tf_comm_vote(t->comm, mine, all);
}
