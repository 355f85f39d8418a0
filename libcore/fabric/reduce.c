/* reduce.c: the reference reduction every backend must match bit for bit. */
#include <string.h>

#include "base/f16.h"
#include "fabric/comm.h"

size_t tf_comm_dtype_size(enum tf_dtype dt)
{
	switch (dt) {
	case TF_DTYPE_U8: return 1;
	case TF_DTYPE_F16: case TF_DTYPE_BF16: return 2;
	case TF_DTYPE_I32: case TF_DTYPE_F32: return 4;
	default: return 0;
	}
}

const char *tf_redop_name(enum tf_redop op)
{
	return op == TF_REDOP_SUM ? "sum" : op == TF_REDOP_MAX ? "max" : op == TF_REDOP_MIN ? "min" : "?";
}

static float fop(float a, float b, enum tf_redop op)
{
	switch (op) {
	case TF_REDOP_SUM: return a + b;
	case TF_REDOP_MAX: return b > a ? b : a;
	case TF_REDOP_MIN: return b < a ? b : a;
	}
	return a;
}

tf_status tf_comm_reduce(void *dst, const void *const *srcs, int n, size_t count,
			 enum tf_dtype dt, enum tf_redop op)
{
	if (n < 1 || (op != TF_REDOP_SUM && op != TF_REDOP_MAX && op != TF_REDOP_MIN))
		return tf_err(TF_ERR_ARG, "reduce: bad rank count or operation");
	switch (dt) {
	case TF_DTYPE_F32:
		for (size_t i = 0; i < count; i++) {
			float a = ((const float *)srcs[0])[i];
			for (int r = 1; r < n; r++)
				a = fop(a, ((const float *)srcs[r])[i], op);
			((float *)dst)[i] = a;
		}
		return TF_OK;
	case TF_DTYPE_BF16:
	case TF_DTYPE_F16: {
		bool bf = dt == TF_DTYPE_BF16;
		for (size_t i = 0; i < count; i++) {
			uint16_t h = ((const uint16_t *)srcs[0])[i];
			for (int r = 1; r < n; r++) {
				uint16_t x = ((const uint16_t *)srcs[r])[i];
				float a = bf ? tf_bf16_to_f32(h) : tf_f16_to_f32(h);
				float b = bf ? tf_bf16_to_f32(x) : tf_f16_to_f32(x);
				float c = fop(a, b, op);
				/* max/min return an operand: keep its bits. */
				if (op == TF_REDOP_SUM)
					h = bf ? tf_f32_to_bf16(c) : tf_f32_to_f16(c);
				else if (c != a)
					h = x;
			}
			((uint16_t *)dst)[i] = h;
		}
		return TF_OK;
	}
	case TF_DTYPE_I32:
		for (size_t i = 0; i < count; i++) {
			uint32_t a = ((const uint32_t *)srcs[0])[i];
			for (int r = 1; r < n; r++) {
				uint32_t b = ((const uint32_t *)srcs[r])[i];
				if (op == TF_REDOP_SUM)
					a += b; /* wraps like the device */
				else if (op == TF_REDOP_MAX ? (int32_t)b > (int32_t)a : (int32_t)b < (int32_t)a)
					a = b;
			}
			((uint32_t *)dst)[i] = a;
		}
		return TF_OK;
	default:
		return tf_err(TF_ERR_UNSUPPORTED, "reduce: dtype %d not supported", (int)dt);
	}
}
