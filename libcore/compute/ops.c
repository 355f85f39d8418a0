/* ops.c: what every backend shares: tensor headers and views, dtype
 * names, argument checks, RoPE frequency tables (ops.h). Nothing here
 * reads a tensor's memory. */
#include "compute/ops.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>

#include "base/status.h"

size_t tf_dt_size(enum tf_dt dt)
{
	switch (dt) {
	case TF_DT_F32:
	case TF_DT_I32:
		return 4;
	case TF_DT_BF16:
	case TF_DT_F16:
		return 2;
	case TF_DT_U8:
		return 1;
	}
	return 0;
}

const char *tf_dt_name(enum tf_dt dt)
{
	static const char *const names[] = {"f32", "bf16", "f16", "i32", "u8"};
	return (unsigned)dt < sizeof names / sizeof *names ? names[dt] : "?";
}

int64_t tf_tensor_numel(const struct tf_tensor *t)
{
	int64_t n = 1;
	for (int i = 0; i < t->ndim; i++)
		n *= t->shape[i];
	return n;
}

size_t tf_tensor_bytes(const struct tf_tensor *t)
{
	return (size_t)tf_tensor_numel(t) * tf_dt_size(t->dt);
}

int64_t tf_tensor_cols(const struct tf_tensor *t)
{
	return t->ndim > 0 ? t->shape[t->ndim - 1] : 1;
}

int64_t tf_tensor_rows(const struct tf_tensor *t)
{
	int64_t c = tf_tensor_cols(t);
	return c ? tf_tensor_numel(t) / c : 0;
}

static struct tf_tensor tensor_va(void *data, enum tf_dt dt, int ndim, va_list ap)
{
	struct tf_tensor t = {.data = data, .dt = dt, .ndim = ndim};
	for (int i = 0; i < TF_TENSOR_MAXDIM; i++)
		t.shape[i] = 1;
	for (int i = 0; i < ndim && i < TF_TENSOR_MAXDIM; i++)
		t.shape[i] = va_arg(ap, int64_t);
	return t;
}

struct tf_tensor tf_tensor_make(void *data, enum tf_dt dt, int ndim, ...)
{
	va_list ap;
	va_start(ap, ndim);
	struct tf_tensor t = tensor_va(data, dt, ndim, ap);
	va_end(ap);
	return t;
}

tf_status tf_be_tensor(struct tf_be *be, struct tf_tensor *t, enum tf_dt dt, int ndim, ...)
{
	if (ndim < 1 || ndim > TF_TENSOR_MAXDIM)
		return tf_err(TF_ERR_ARG, "tensor: %d dimensions (1..4)", ndim);
	va_list ap;
	va_start(ap, ndim);
	*t = tensor_va(NULL, dt, ndim, ap);
	va_end(ap);
	return be->ops->alloc(be, t);
}

void tf_be_free(struct tf_be *be)
{
	if (be)
		be->ops->free(be);
}

void tf_rope_freqs_plain(struct tf_rope_freqs *rf, int dim, double theta)
{
	rf->dim = dim;
	for (int i = 0; i < dim / 2; i++)
		rf->f[i] = pow(theta, -2.0 * i / dim);
}

void tf_rope_freqs_yarn(struct tf_rope_freqs *rf, int dim, double theta, double factor,
			double orig_max, double beta_fast, double beta_slow)
{
	double c_fast = dim * log(orig_max / (2 * M_PI * beta_fast)) / (2 * log(theta));
	double c_slow = dim * log(orig_max / (2 * M_PI * beta_slow)) / (2 * log(theta));
	double lo = fmax(floor(c_fast), 0), hi = fmin(ceil(c_slow), dim - 1);
	if (hi <= lo)
		hi = lo + 1; /* a zero-width ramp would divide by zero */
	rf->dim = dim;
	for (int i = 0; i < dim / 2; i++) {
		double b = pow(theta, -2.0 * i / dim);
		double ramp = fmin(fmax((i - lo) / (hi - lo), 0), 1);
		rf->f[i] = b * (1 - ramp) + b / factor * ramp;
	}
}

tf_status tf_op_check(const char *op, const char *what, const struct tf_tensor *t, unsigned dts,
		    int64_t n)
{
	if (!t || !t->data)
		return tf_err(TF_ERR_ARG, "%s: %s: no tensor", op, what);
	if (!(dts & (1u << t->dt)))
		return tf_err(TF_ERR_ARG, "%s: %s: dtype %s not taken", op, what, tf_dt_name(t->dt));
	if (n >= 0 && tf_tensor_numel(t) != n)
		return tf_err(TF_ERR_ARG, "%s: %s: %lld elements, want %lld", op, what,
			      (long long)tf_tensor_numel(t), (long long)n);
	return TF_OK;
}

struct tf_tensor tf_tensor_rows_of(const struct tf_tensor *t, int64_t r0, int64_t n)
{
	struct tf_tensor v = *t;
	int64_t per = t->shape[0] ? tf_tensor_numel(t) / t->shape[0] : 0;
	v.data = (char *)t->data + (size_t)(r0 * per) * tf_dt_size(t->dt);
	v.shape[0] = n;
	return v;
}

struct tf_tensor tf_tensor_view(const struct tf_tensor *t, int ndim, ...)
{
	va_list ap;
	va_start(ap, ndim);
	struct tf_tensor v = tensor_va(t->data, t->dt, ndim, ap);
	va_end(ap);
	return v;
}
