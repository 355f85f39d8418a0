/* cuda_rows.c: the CUDA row moves (ops.h): rows_copy, cache_write,
 * cache_read and page_rows. Arguments are checked here as the CPU twins
 * check them; the kernels (kernels/rows.cu) only queue on the backend's
 * stream. The cache bytes and the floats read back are kvrow.c's exactly. */
#include "compute/cuda_impl.h"

#include "base/status.h"

#define ROWS_MAX_GRID 65536u

static struct cuda_fn fn_copy = {.name = "tf_rows_copy"};
static struct cuda_fn fn_write = {.name = "tf_rows_cache_write"};
static struct cuda_fn fn_read = {.name = "tf_rows_cache_read"};
static struct cuda_fn fn_page = {.name = "tf_rows_page"};

/* Blocks of `block` threads for `threads` threads, at most ROWS_MAX_GRID
 * (the kernels stride over the rest). */
static unsigned grid_for(int64_t threads, unsigned block)
{
	int64_t g = (threads + block - 1) / block;
	return g > ROWS_MAX_GRID ? ROWS_MAX_GRID : (unsigned)g;
}

static struct cuda_fn fn_random = {.name = "tf_rows_random"};

tf_status cuda_fill_random(struct tf_be *be, struct tf_tensor *t, uint64_t seed)
{
	if (!t || (!t->data && tf_tensor_bytes(t)))
		return tf_err(TF_ERR_ARG, "fill_random: no tensor");
	uint64_t n = tf_tensor_bytes(t);
	if (!n)
		return TF_OK;
	tf_cu_ptr p = cuda_ptr(t);
	void *a[] = {&p, &n, &seed};
	return cuda_launch(be, &fn_random, grid_for((int64_t)((n + 7) / 8), 256), 1, 256, 0, a);
}

/* The widest copy unit (16, 8, 4, 2 or 1 bytes) dividing the row and both
 * base addresses. */
static int32_t copy_unit(int64_t row_bytes, tf_cu_ptr x, tf_cu_ptr y)
{
	uint64_t bits = (uint64_t)row_bytes | x | y;
	int32_t unit = 16;
	while (unit > 1 && (bits & (uint64_t)(unit - 1)))
		unit /= 2;
	return unit;
}

tf_status cuda_rows_copy(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *xi,
			 struct tf_tensor *y, const struct tf_tensor *yi)
{
	tf_status st;
	const unsigned any = TF_DTS_FLOAT | TF_DTS_I32 | TF_DTS_U8;
	if ((st = tf_op_check("rows_copy", "x", x, any, -1)) ||
	    (st = tf_op_check("rows_copy", "y", y, 1u << x->dt, -1)) ||
	    (xi && (st = tf_op_check("rows_copy", "xi", xi, TF_DTS_I32, -1))) ||
	    (yi && (st = tf_op_check("rows_copy", "yi", yi, TF_DTS_I32,
				     xi ? tf_tensor_numel(xi) : -1))))
		return st;
	int64_t C = tf_tensor_cols(x);
	if (tf_tensor_cols(y) != C)
		return tf_err(TF_ERR_ARG, "rows_copy: x has %lld columns, y %lld", (long long)C,
			      (long long)tf_tensor_cols(y));
	int64_t n = xi ? tf_tensor_numel(xi) : yi ? tf_tensor_numel(yi) : tf_tensor_rows(x);
	int64_t row_bytes = C * (int64_t)tf_dt_size(x->dt);
	if (n == 0 || row_bytes == 0)
		return TF_OK;
	tf_cu_ptr px = cuda_ptr(x), py = cuda_ptr(y);
	tf_cu_ptr pxi = xi ? cuda_ptr(xi) : 0, pyi = yi ? cuda_ptr(yi) : 0;
	int64_t x_rows = tf_tensor_rows(x), y_rows = tf_tensor_rows(y);
	int32_t unit = copy_unit(row_bytes, px, py), tpr = 1;
	while (tpr < 1024 && tpr * unit < row_bytes)
		tpr *= 2; /* threads a row: one unit each, up to four blocks */
	void *p[] = {&px, &x_rows, &pxi, &py, &y_rows, &pyi, &n, &row_bytes, &unit, &tpr};
	return cuda_launch(be, &fn_copy, grid_for(n * tpr, 256), 1, 256, 0, p);
}

/* Warp tasks a row of kind takes in cache_write (rows.cu's write_tasks):
 * fp8 one a group of 64 and one for the tail, FP4 one a 32 bytes of codes
 * and one for the tail, the others one. */
static int64_t write_tasks(int32_t kind, int32_t dim, int32_t rope)
{
	if (kind == 0)
		return (dim - rope + 63) / 64 + 1;
	if (kind == 1)
		return ((dim - rope + 1) / 2 + 31) / 32 + 1;
	return 1;
}

/* The kernel's format kind (rows.cu) of f, or -1 when f is not one. */
static int32_t row_kind(const struct tf_rowfmt *f)
{
	if (f->index_key)
		return f->fmt == TF_KV_BF16 ? 2 : 3; /* kvrow.c: any other is e4m3 */
	switch (f->fmt) {
	case TF_KV_FP8:
		return 0;
	case TF_KV_FP4:
		return 1;
	case TF_KV_BF16:
		return 2;
	}
	return -1;
}

/* The shared checks of cache_write and cache_read: the format, the cache
 * [rows, tf_rowfmt_bytes(f)] u8, the values t [n, f->dim] f32 or bf16 and
 * idx int32 [n]. */
static tf_status cache_check(const char *op, const char *what, const struct tf_rowfmt *f,
			     const struct tf_tensor *t, const struct tf_tensor *idx,
			     const struct tf_tensor *cache, int64_t n)
{
	tf_status st;
	if (!f || row_kind(f) < 0 || f->dim < 1 || f->rope < 0 ||
	    (!f->index_key && f->rope > f->dim))
		return tf_err(TF_ERR_ARG, "%s: not a row format", op);
	if ((st = tf_op_check(op, "cache", cache, TF_DTS_U8, -1)) ||
	    (st = tf_op_check(op, "idx", idx, TF_DTS_I32, n)) ||
	    (st = tf_op_check(op, what, t, TF_DTS_F32 | TF_DTS_BF16, n * f->dim)))
		return st;
	if (tf_tensor_cols(t) != f->dim)
		return tf_err(TF_ERR_ARG, "%s: %s has %lld columns, the format %d", op, what,
			      (long long)tf_tensor_cols(t), f->dim);
	if (tf_tensor_cols(cache) != (int64_t)tf_rowfmt_bytes(f))
		return tf_err(TF_ERR_ARG, "%s: cache rows of %lld bytes, the format %zu", op,
			      (long long)tf_tensor_cols(cache), tf_rowfmt_bytes(f));
	return TF_OK;
}

tf_status cuda_cache_write(struct tf_be *be, const struct tf_rowfmt *f, const struct tf_tensor *x,
			   const struct tf_tensor *idx, struct tf_tensor *cache)
{
	int64_t n = x ? tf_tensor_rows(x) : 0;
	tf_status st = cache_check("cache_write", "x", f, x, idx, cache, n);
	if (st || n == 0)
		return st;
	/* x: [n, dim] f32/bf16 -> cache rows idx[m]: [rows, row_bytes] u8 */
	tf_cu_ptr px = cuda_ptr(x), pidx = cuda_ptr(idx), pc = cuda_ptr(cache);
	int32_t bf16 = x->dt == TF_DT_BF16, kind = row_kind(f), dim = f->dim, rope = f->rope;
	int64_t rows = tf_tensor_rows(cache), row_bytes = (int64_t)tf_rowfmt_bytes(f);
	void *p[] = {&px, &bf16, &pidx, &n, &pc, &rows, &row_bytes, &kind, &dim, &rope};
	return cuda_launch(be, &fn_write, grid_for(n * write_tasks(kind, dim, rope) * 32, 128), 1, 128,
			   0, p);
}

tf_status cuda_cache_read(struct tf_be *be, const struct tf_rowfmt *f,
			  const struct tf_tensor *cache, const struct tf_tensor *idx,
			  struct tf_tensor *out)
{
	int64_t n = idx ? tf_tensor_numel(idx) : 0;
	tf_status st = cache_check("cache_read", "out", f, out, idx, cache, n);
	if (st || n == 0)
		return st;
	/* cache rows idx[m] -> out: [n, dim] f32/bf16 (zeros for skipped rows) */
	tf_cu_ptr pc = cuda_ptr(cache), pidx = cuda_ptr(idx), po = cuda_ptr(out);
	int32_t bf16 = out->dt == TF_DT_BF16, kind = row_kind(f), dim = f->dim, rope = f->rope;
	int64_t rows = tf_tensor_rows(cache), row_bytes = (int64_t)tf_rowfmt_bytes(f);
	void *p[] = {&pc, &rows, &row_bytes, &pidx, &n, &kind, &dim, &rope, &po, &bf16};
	/* a block of 128 a row's 512 values (rows.cu), grid (rows, chunks) */
	unsigned gx = n > ROWS_MAX_GRID ? ROWS_MAX_GRID : (unsigned)n;
	unsigned gy = (unsigned)((dim + 511) / 512 > 65535 ? 65535 : (dim + 511) / 512);
	return cuda_launch(be, &fn_read, gx, gy, 128, 0, p);
}

tf_status cuda_page_rows(struct tf_be *be, const struct tf_tensor *pt, int rpp,
			 const struct tf_tensor *logical, struct tf_tensor *out)
{
	tf_status st;
	if ((st = tf_op_check("page_rows", "pt", pt, TF_DTS_I32, -1)) ||
	    (st = tf_op_check("page_rows", "logical", logical, TF_DTS_I32, -1)) ||
	    (st = tf_op_check("page_rows", "out", out, TF_DTS_I32, tf_tensor_numel(logical))))
		return st;
	if (rpp < 1)
		return tf_err(TF_ERR_ARG, "page_rows: %d rows a page", rpp);
	int64_t n = tf_tensor_numel(logical), P = tf_tensor_numel(pt);
	if (n == 0)
		return TF_OK;
	/* logical rows int32 [n] -> physical rows int32 [n] through pt int32 [P] */
	tf_cu_ptr ppt = cuda_ptr(pt), pl = cuda_ptr(logical), po = cuda_ptr(out);
	int32_t r = rpp;
	void *p[] = {&ppt, &P, &r, &pl, &n, &po};
	return cuda_launch(be, &fn_page, grid_for(n, 256), 1, 256, 0, p);
}
