/* cuda_sample.c: the CUDA sampling op (ops.h `sample`), the one op that
 * waits for the device. A row whose rule needs only its best logits
 * (greedy: 1 + margin, top_k: top_k + margin, nucleus: TF_SAMPLE_NUCLEUS,
 * as tf_sample_candidates counts them) has them found on the device
 * (kernels/sample.cu: the C best under rule 1, with the row's max and sum
 * of exp for nucleus rows) and downloaded, C values and ids a row; the draw
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

/* One batch of candidate rows: host and device copies of one block,
 * inputs (temps f64 [rd], rows int32 [rd]) then outputs (stats f64
 * [rd, 2], values f32 [rd, C], ids int32 [rd, C]). */
struct cand_batch {
	int32_t rd, C;
	size_t in_bytes, bytes;
	unsigned char *host;
	double *temps, *stats;
	int32_t *rows, *ids;
	float *values;
};

static tf_status batch_init(struct cand_batch *cb, const struct tf_sample_params *params,
			    const size_t *count, int64_t R)
{
	memset(cb, 0, sizeof *cb);
	for (int64_t r = 0; r < R; r++)
		if (count[r]) {
			cb->rd++;
			cb->C = (int32_t)count[r] > cb->C ? (int32_t)count[r] : cb->C;
		}
	if (!cb->rd)
		return TF_OK;
	size_t rd = (size_t)cb->rd, C = (size_t)cb->C;
	cb->in_bytes = (rd * 12 + 15) / 16 * 16;
	cb->bytes = cb->in_bytes + rd * 16 + rd * C * 8;
	cb->host = tf_alloc_aligned(64, cb->bytes);
	if (!cb->host)
		return tf_err(TF_ERR_NOMEM, "sample: out of memory");
	cb->temps = (double *)cb->host;
	cb->rows = (int32_t *)(cb->temps + rd);
	cb->stats = (double *)(cb->host + cb->in_bytes);
	cb->values = (float *)(cb->stats + 2 * rd);
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
	tf_status st = cuda_scratch(be, cb->bytes, &dev);
	if (st)
		return st;
	size_t rd = (size_t)cb->rd, C = (size_t)cb->C;
	/* logits [R, V] f32 -> stats [rd, 2] f64, values [rd, C] f32, ids [rd, C] int32 */
	tf_cu_ptr pl = cuda_ptr(logits), prows = dev + rd * 8, ptemps = dev;
	tf_cu_ptr pstats = dev + cb->in_bytes, pvalues = pstats + rd * 16;
	tf_cu_ptr pids = pvalues + rd * C * 4;
	int64_t V = tf_tensor_cols(logits);
	int32_t c = cb->C;
	void *p[] = {&pl, &V, &c, &prows, &ptemps, &pvalues, &pids, &pstats};
	if (!(st = TF_CU(tf_cu->MemcpyHtoDAsync(dev, cb->host, cb->in_bytes, s))) &&
	    !(st = cuda_launch(be, &fn_select, (unsigned)cb->rd, 1, 1024, 0, p)) &&
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
			struct tf_sample_stats st = {cb->stats[2 * j], cb->stats[2 * j + 1]};
			decided = tf_sample_nucleus(s, v, id, C, count[r], &st, 1, pos, p, &tok);
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
	if ((st = tf_sampler_new((size_t)V, &s)) || (st = batch_init(&cb, params, count, R)))
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
