/* cpu_rows.c: the CPU backend's row moves (ops.h): rows_copy, the cache's
 * quantised writes and dequantised reads (the codecs of kvrow.c), and page
 * table lookups. These are the forward's only ways to move data between
 * tensors, so that a device backend can do the same moves itself. */
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "compute/cpu_impl.h"

tf_status cpu_fill_random(struct tf_be *be, struct tf_tensor *t, uint64_t seed)
{
	(void)be;
	if (!t || (!t->data && tf_tensor_bytes(t)))
		return tf_err(TF_ERR_ARG, "fill_random: no tensor");
	unsigned char *b = t->data;
	size_t n = tf_tensor_bytes(t);
	for (size_t i = 0; i < n; i += 8) {
		uint64_t w = tf_random_word(seed, i / 8);
		for (size_t j = 0; j < 8 && i + j < n; j++)
			b[i + j] = (unsigned char)(w >> (8 * j));
	}
	return TF_OK;
}

/* The move count of rows_copy (ops.h). */
static int64_t moves(const struct tf_tensor *x, const struct tf_tensor *xi,
		     const struct tf_tensor *yi)
{
	return xi ? tf_tensor_numel(xi) : yi ? tf_tensor_numel(yi) : tf_tensor_rows(x);
}

tf_status cpu_rows_copy(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *xi,
			struct tf_tensor *y, const struct tf_tensor *yi)
{
	tf_status st;
	unsigned any = TF_DTS_FLOAT | TF_DTS_I32 | TF_DTS_U8;
	if ((st = tf_op_check("rows_copy", "x", x, any, -1)) ||
	    (st = tf_op_check("rows_copy", "y", y, 1u << x->dt, -1)) ||
	    (xi && (st = tf_op_check("rows_copy", "xi", xi, TF_DTS_I32, -1))) ||
	    (yi && (st = tf_op_check("rows_copy", "yi", yi, TF_DTS_I32, -1))))
		return st;
	int64_t C = tf_tensor_cols(x), nx = tf_tensor_rows(x), ny = tf_tensor_rows(y);
	if (tf_tensor_cols(y) != C)
		return tf_err(TF_ERR_ARG, "rows_copy: rows of %lld and %lld values", (long long)C,
			      (long long)tf_tensor_cols(y));
	int64_t n = moves(x, xi, yi);
	if (xi && yi && tf_tensor_numel(yi) < n)
		return tf_err(TF_ERR_ARG, "rows_copy: %lld moves, %lld destinations", (long long)n,
			      (long long)tf_tensor_numel(yi));
	size_t row = (size_t)C * tf_dt_size(x->dt);
	const int32_t *a = xi ? cpu_i32(xi) : NULL, *b = yi ? cpu_i32(yi) : NULL;
	for (int64_t m = 0; m < n; m++) {
		int64_t s = a ? a[m] : m, d = b ? b[m] : m;
		if (s < 0 || s >= nx || d < 0 || d >= ny)
			continue;
		memmove((char *)y->data + (size_t)d * row, (const char *)x->data + (size_t)s * row, row);
	}
	return TF_OK;
}

/* The checks shared by cache_write and cache_read: rows [n, f->dim] of a
 * float type, idx [n], cache u8 rows of the format's bytes. */
static tf_status cache_check(const char *op, const struct tf_rowfmt *f,
			     const struct tf_tensor *rows, const struct tf_tensor *idx,
			     const struct tf_tensor *cache)
{
	tf_status st;
	if (!f || f->dim < 1 || f->rope < 0 || f->rope > f->dim)
		return tf_err(TF_ERR_ARG, "%s: a row format of %d values", op, f ? f->dim : 0);
	int64_t n = tf_tensor_numel(idx ? idx : rows);
	if ((st = tf_op_check(op, "idx", idx, TF_DTS_I32, -1)) ||
	    (st = tf_op_check(op, "rows", rows, TF_DTS_F32 | TF_DTS_BF16, n * f->dim)) ||
	    (st = tf_op_check(op, "cache", cache, TF_DTS_U8, -1)))
		return st;
	if ((size_t)tf_tensor_cols(cache) != tf_rowfmt_bytes(f))
		return tf_err(TF_ERR_ARG, "%s: cache rows of %lld bytes, the format has %zu", op,
			      (long long)tf_tensor_cols(cache), tf_rowfmt_bytes(f));
	return TF_OK;
}

tf_status cpu_cache_write(struct tf_be *be, const struct tf_rowfmt *f, const struct tf_tensor *x,
			  const struct tf_tensor *idx, struct tf_tensor *cache)
{
	tf_status st = cache_check("cache_write", f, x, idx, cache);
	if (st)
		return st;
	int64_t n = tf_tensor_numel(idx), rows = tf_tensor_rows(cache);
	size_t bytes = tf_rowfmt_bytes(f);
	const int32_t *ix = cpu_i32(idx);
	float *row = tf_alloc_array((size_t)f->dim, sizeof *row);
	if (!row)
		return tf_err(TF_ERR_NOMEM, "cache_write: out of memory");
	for (int64_t m = 0; m < n; m++) {
		if (ix[m] < 0 || ix[m] >= rows)
			continue;
		cpu_load(x, m * f->dim, f->dim, row);
		tf_rowfmt_encode(f, row, (uint8_t *)cache->data + (size_t)ix[m] * bytes);
	}
	free(row);
	return TF_OK;
}

tf_status cpu_cache_read(struct tf_be *be, const struct tf_rowfmt *f,
			 const struct tf_tensor *cache, const struct tf_tensor *idx,
			 struct tf_tensor *out)
{
	tf_status st = cache_check("cache_read", f, out, idx, cache);
	if (st)
		return st;
	int64_t n = tf_tensor_numel(idx), rows = tf_tensor_rows(cache);
	size_t bytes = tf_rowfmt_bytes(f);
	const int32_t *ix = cpu_i32(idx);
	float *row = tf_alloc_array((size_t)f->dim, sizeof *row);
	if (!row)
		return tf_err(TF_ERR_NOMEM, "cache_read: out of memory");
	for (int64_t m = 0; m < n; m++) {
		if (ix[m] < 0 || ix[m] >= rows)
			memset(row, 0, (size_t)f->dim * sizeof *row);
		else
			tf_rowfmt_decode(f, (const uint8_t *)cache->data + (size_t)ix[m] * bytes, row);
		cpu_store(out, m * f->dim, f->dim, row);
	}
	free(row);
	return TF_OK;
}

tf_status cpu_page_rows(struct tf_be *be, const struct tf_tensor *pt, int rpp,
			const struct tf_tensor *logical, struct tf_tensor *out)
{
	tf_status st;
	int64_t n = tf_tensor_numel(logical), P = tf_tensor_numel(pt);
	if (rpp < 1)
		return tf_err(TF_ERR_ARG, "page_rows: %d rows a page", rpp);
	if ((st = tf_op_check("page_rows", "pt", pt, TF_DTS_I32, -1)) ||
	    (st = tf_op_check("page_rows", "logical", logical, TF_DTS_I32, -1)) ||
	    (st = tf_op_check("page_rows", "out", out, TF_DTS_I32, n)))
		return st;
	const int32_t *p = cpu_i32(pt), *l = cpu_i32(logical);
	int32_t *o = out->data;
	for (int64_t m = 0; m < n; m++)
		o[m] = l[m] < 0 || l[m] / rpp >= P ? -1 : p[l[m] / rpp] * rpp + l[m] % rpp;
	return TF_OK;
}
