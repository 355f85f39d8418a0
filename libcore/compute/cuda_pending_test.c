/* cuda_pending_test.c: TEMPORARY stand-ins for the CUDA backend's entry
 * points (ops.h), so that tests/gpu/gpu_ops.c and tf-bench kernels --ops
 * link before the backend (cuda.c) is merged. Both say the backend is
 * unavailable. The lead removes this file at the merge. */
#include "compute/ops.h"

tf_status tf_cuda_be_new(int device, struct tf_be **out)
{
	*out = NULL;
	return tf_err(TF_ERR_UNAVAILABLE, "cuda backend: not in this build yet (device %d)",
		      device);
}

tf_status tf_cuda_be_use(struct tf_be *be)
{
	return tf_err(TF_ERR_UNAVAILABLE, "cuda backend: not in this build yet");
}
