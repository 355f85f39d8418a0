/* cuda_sample.c: the CUDA sampling op (ops.h `sample`), the one op that
 * waits for the device. A row whose rule needs only its best logits
 * (greedy: 1 + margin, top_k: top_k + margin, nucleus: TF_SAMPLE_NUCLEUS,
 * as tf_sample_candidates counts them) has them found on the device
 * (kernels/sample.cu: the C best under rule 1, with each 8192-logit
 * chunk's max and sum of exp for nucleus rows, which tf_sample_nucleus
 * combines) and downloaded, C values and ids a row; the draw
 * is then sample.c's own (tf_sample_top, tf_sample_nucleus), which gives
 * what tf_sample_row gives over the whole row. Rows without a cut, rows
 * whose cut keeps half the row or more, and nucleus rows the candidates do
 * not decide download the whole row and draw with tf_sample_row, as
 * cpu_sample does. So every token is the CPU backend's. */
#include "compute/cuda_impl.h"
#include "compute/ops_args.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/status.h"
#include "compute/sample.h"

static struct cuda_fn fn_select = {.name = "tf_sample_select"};

/* Candidates row r of V logits takes from the device, 0 for the whole row. */
static size_t row_candidates(const struct tf_sample_params *p, int64_t V)
{
	size_t c = tf_sample_candidates(p, (size_t)V, TF_SAMPLE_NUCLEUS);
	return c < (size_t)V && 2 * c <= (size_t)V ? c : 0;
}

/* Chunks of a row of V logits on the device (kernels/sample.cu's 8192). */
#define SAMPLE_CHUNK 8192
static int32_t row_chunks(int64_t V)
{
	return (int32_t)((V + SAMPLE_CHUNK - 1) / SAMPLE_CHUNK);
}

/* One batch of candidate rows: host and device copies of one block,
 * inputs (temps f64 [rd], rows int32 [rd], count u32 [rd], zeros) then
 * outputs (stats [rd, S] of (max, sum) f64 pairs, values f32 [rd, C], ids
 * int32 [rd, C]); the device block goes on with the kernel's lists (bits
 * u32 [rd, S * min(C, 8192)], ids int32 [the same]), never downloaded. */
struct cand_batch {
	int32_t rd, C, S;
	size_t in_bytes, bytes, dev_bytes;
	unsigned char *host;
	double *temps;
	struct tf_sample_stats *stats;
	int32_t *rows, *ids;
	float *values;
};

static tf_status batch_init(struct cand_batch *cb, const struct tf_sample_params *params,
			    const size_t *count, int64_t R, int64_t V)
{
	memset(cb, 0, sizeof *cb);
	for (int64_t r = 0; r < R; r++)
		if (count[r]) {
			cb->rd++;
			cb->C = (int32_t)count[r] > cb->C ? (int32_t)count[r] : cb->C;
		}
	if (!cb->rd)
		return TF_OK;
	cb->S = row_chunks(V);
	size_t rd = (size_t)cb->rd, C = (size_t)cb->C, S = (size_t)cb->S;
	size_t cc0 = C < SAMPLE_CHUNK ? C : SAMPLE_CHUNK;
	cb->in_bytes = (rd * 16 + 15) / 16 * 16;
	cb->bytes = cb->in_bytes + rd * S * 16 + rd * C * 8;
	cb->dev_bytes = (cb->bytes + 15) / 16 * 16 + rd * S * cc0 * 8;
	cb->host = tf_alloc_aligned(64, cb->bytes);
	if (!cb->host)
		return tf_err(TF_ERR_NOMEM, "sample: out of memory");
	memset(cb->host, 0, cb->in_bytes);
	cb->temps = (double *)cb->host;
	cb->rows = (int32_t *)(cb->temps + rd);
	cb->stats = (struct tf_sample_stats *)(cb->host + cb->in_bytes);
	cb->values = (float *)(cb->stats + rd * S);
	cb->ids = (int32_t *)(cb->values + rd * C);
	int32_t j = 0;
	for (int64_t r = 0; r < R; r++) {
		if (!count[r])
			continue;
		const struct tf_sample_params *p = &params[r];
		double t = p->temperature > 1e-6 ? p->temperature : 1e-6; /* tf_sample_stats's */
		cb->rows[j] = (int32_t)r;
		cb->temps[j++] = tf_sample_is_nucleus(p) ? t : 0;
	}
	return TF_OK;
}

/* Upload the batch's inputs, find the candidates, download them and wait. */
static tf_status batch_run(struct tf_be *be, struct cand_batch *cb,
			   const struct tf_tensor *logits)
{
	tf_cu_ptr dev;
	tf_cu_stream s = cuda_stream(be);
	if (cb->S > 65535)
		return tf_err(TF_ERR_UNSUPPORTED, "sample: rows of %lld logits",
			      (long long)tf_tensor_cols(logits));
	tf_status st = cuda_scratch(be, cb->dev_bytes, &dev);
	if (st)
		return st;
	size_t rd = (size_t)cb->rd, C = (size_t)cb->C, S = (size_t)cb->S;
	size_t cc0 = C < SAMPLE_CHUNK ? C : SAMPLE_CHUNK;
	/* logits [R, V] f32 -> stats [rd, S, 2] f64, values [rd, C] f32, ids
	 * [rd, C] int32, by way of lists bits u32 [rd, S * cc0], ids int32 [same] */
	tf_cu_ptr pl = cuda_ptr(logits), ptemps = dev, prows = dev + rd * 8;
	tf_cu_ptr pcount = prows + rd * 4;
	tf_cu_ptr pstats = dev + cb->in_bytes, pvalues = pstats + rd * S * 16;
	tf_cu_ptr pids = pvalues + rd * C * 4;
	tf_cu_ptr plbits = dev + (cb->bytes + 15) / 16 * 16, plids = plbits + rd * S * cc0 * 4;
	int64_t V = tf_tensor_cols(logits);
	int32_t c = cb->C;
	void *p[] = {&pl, &V, &c, &prows, &ptemps, &pcount, &pvalues, &pids, &pstats,
		     &plbits, &plids};
	if (!(st = TF_CU(tf_cu->MemcpyHtoDAsync(dev, cb->host, cb->in_bytes, s))) &&
	    !(st = cuda_launch(be, &fn_select, (unsigned)cb->rd, (unsigned)cb->S, 1024, 0, p)) &&
	    !(st = TF_CU(tf_cu->MemcpyDtoHAsync(cb->host + cb->in_bytes, pstats,
						 cb->bytes - cb->in_bytes, s))))
		st = TF_CU(tf_cu->StreamSynchronize(s));
	cuda_scratch_release(be, dev);
	return st;
}

/* Draw the batch's rows from their candidates; a row they do not decide
 * gets count 0 (the whole row). */
static void batch_draw(const struct cand_batch *cb, struct tf_sampler *s,
		       const struct tf_sample_params *params, const int64_t *positions,
		       size_t *count, int32_t *tokens)
{
	size_t C = (size_t)cb->C;
	for (int32_t j = 0; j < cb->rd; j++) {
		int32_t r = cb->rows[j], tok = -1;
		const struct tf_sample_params *p = &params[r];
		const float *v = cb->values + (size_t)j * C;
		const int32_t *id = cb->ids + (size_t)j * C;
		uint64_t pos = (uint64_t)positions[r];
		int decided;
		if (tf_sample_is_nucleus(p)) {
			const struct tf_sample_stats *st = cb->stats + (size_t)j * (size_t)cb->S;
			decided = tf_sample_nucleus(s, v, id, C, count[r], st, cb->S, pos, p, &tok);
		} else {
			decided = tf_sample_top(s, v, id, C, pos, p, &tok);
		}
		if (decided)
			tokens[r] = tok;
		else
			count[r] = 0;
	}
}

/* Rows of count 0: downloaded whole and drawn as cpu_sample draws them. */
static tf_status whole_rows(struct tf_be *be, const struct tf_tensor *logits,
			    const struct tf_sample_params *params, const int64_t *positions,
			    const size_t *count, struct tf_sampler *s, int32_t *tokens)
{
	int64_t V = tf_tensor_cols(logits), R = tf_tensor_rows(logits);
	tf_cu_stream cs = cuda_stream(be);
	float *row = NULL;
	tf_status st = TF_OK;
	for (int64_t r = 0; r < R && !st; r++) {
		if (count[r])
			continue;
		if (!row && !(row = tf_alloc_array((size_t)V, sizeof *row)))
			return tf_err(TF_ERR_NOMEM, "sample: out of memory for a row of %lld",
				      (long long)V);
		/* logits row r: [V] f32 */
		tf_cu_ptr src = cuda_ptr(logits) + (tf_cu_ptr)(r * V) * sizeof *row;
		if (!(st = TF_CU(tf_cu->MemcpyDtoHAsync(row, src, (size_t)V * sizeof *row, cs))) &&
		    !(st = TF_CU(tf_cu->StreamSynchronize(cs))))
			tokens[r] = tf_sample_row(s, row, (size_t)V, (uint64_t)positions[r], &params[r]);
	}
	free(row);
	return st;
}

tf_status cuda_sample(struct tf_be *be, const struct tf_tensor *logits,
		      const struct tf_sample_params *params, const int64_t *positions,
		      int32_t *tokens)
{
	tf_status st;
	int64_t R, V;
	if ((st = tf_args_sample(logits, &R, &V)))
		return st;
	if (cuda_recording(be)) /* its tokens wait for the device */
		return tf_err(TF_ERR_UNSUPPORTED, "sample: inside a graphed call");
	if (R == 0)
		return TF_OK;
	struct tf_sampler *s = NULL;
	struct cand_batch cb = {0};
	size_t *count = tf_alloc_array((size_t)R, sizeof *count);
	if (!count)
		return tf_err(TF_ERR_NOMEM, "sample: out of memory");
	for (int64_t r = 0; r < R; r++)
		count[r] = row_candidates(&params[r], V);
	if ((st = tf_sampler_new((size_t)V, &s)) || (st = batch_init(&cb, params, count, R, V)))
		goto out;
	if (cb.rd) {
		if ((st = batch_run(be, &cb, logits)))
			goto out;
		batch_draw(&cb, s, params, positions, count, tokens);
	}
	st = whole_rows(be, logits, params, positions, count, s, tokens);
out:
	free(cb.host);
	free(count);
	tf_sampler_free(s);
	return st;
}
