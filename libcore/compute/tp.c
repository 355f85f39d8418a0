/* tp.c: the forward's collectives between tensor-parallel ranks (tp.h). */
#include "compute/tp.h"

#include "fabric/comm.h"

tf_status tf_tp_sum_f32(struct tf_comm *c, float *x, size_t n)
{
	return tf_comm_all_reduce(c, x, x, n, TF_DTYPE_F32, TF_REDOP_SUM, NULL);
}

tf_status tf_tp_gather(struct tf_comm *c, const void *send, size_t bytes, void *out)
{
	return tf_comm_all_gather(c, send, out, bytes, TF_DTYPE_U8, NULL);
}
