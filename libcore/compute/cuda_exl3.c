/* cuda_exl3.c: the CUDA backend's EXL3 ops (exl3_matmul,
 * exl3_matmul_experts) over the EXL3 launchers (cuda/exl3_gemv.h,
 * cuda/exl3_gemm.h), with the argument checks of cpu_exl3.c that need no
 * device data.
 *
 * Weights: the layers' trellis, suh, svh and bias pointers are device
 * addresses (the backend's memory, as tensors are: a model on this
 * backend uploads its weights once). A projection's experts lying as one
 * image, as tf_exl3_experts_layout places them (the prepared images'
 * stacks: trellises back to back from experts[0]'s, suh [E][K] and svh
 * [E][N] contiguous, and biases [E][N] when any expert has one), are read
 * in place; layers that lie apart (the output groups' wo_a, loaded one by
 * one) keep their trellises where they are and get copies of suh, svh and
 * biases side by side. That view and the width table the experts launch
 * reads are built on first use, keyed by the array's address (again when
 * its layers change), until tf_be_free.
 *
 * exl3_matmul: up to GEMV_ROWS rows through the fused GEMV, 16 rows a
 * launch (which reads the trellis once a launch: at 64 rows four launches
 * measured faster than the GEMM's decode of the whole weight, BENCHMARKS.md
 * "the batch-invariant path"), more through the GEMM (decode to fp16,
 * cuBLAS; GEMM_ROWS rows a launch) or, without cuBLAS or on the
 * batch-invariant path (tf_cuda_be_set_invariant: the GEMV's invariant
 * path, tf_cu_exl3_gemv), the GEMV 16 rows at a time. x is converted to
 * bf16 first unless it is bf16 (the kernels read bf16); y is f32 or bf16.
 * A bias is added after, in fp32 as cpu_exl3.c's tf_exl3_matmul does (y =
 * a svh + bias, then one rounding: with a bf16 y the product goes through
 * an f32 scratch).
 *
 * exl3_matmul_experts: one experts launch (tf_cu_exl3_experts) over tasks
 * built on the device from expert_ids and offsets (kernels/dense.cu
 * tf_dense_experts_tasks): the host knows G, not the group sizes, so the
 * tasks are sized for the worst case and the spare ones hold no rows (the
 * kernel still decodes their expert 0 for nothing; it has no early exit).
 * Tasks of 1 row, or of 4 where that at least halves the worst-case
 * count; always of 4 on the batch-invariant path (tf_cu_exl3_experts).
 * Rows are grouped already, so x row p gives y row p. What the CPU
 * refuses by reading the index arrays cannot be checked here: a group of
 * an expert outside [0, n_experts) is skipped (its y rows keep what they
 * held) and offsets are clamped to [0, R). Every expert of the array must
 * share K, N and codebook (any widths), and all or none have a bias:
 * TF_ERR_ARG otherwise. */
#include <stdlib.h>
#include <string.h>

#include "compute/cuda_be.h"
#include "compute/ops_args.h"
#include "cuda/exl3_gemm.h"
#include "model/exl3.h"

/* One layer as the launchers take it. */
struct cuda_exl3_dev {
	struct tf_cu_exl3_layer L;
	tf_cu_ptr bias;            /* f16 [N], or 0 */
};

/* A projection's experts: the launch's view of their image, and the width
 * table (one arena block). */
struct cuda_exl3_experts_dev {
	struct tf_exl3_layer *host; /* copy of the array it was built from */
	int count;
	struct tf_cu_exl3_experts E;
	tf_cu_ptr bias;             /* f16 [count][N], or 0 */
	tf_cu_ptr mem;              /* the table */
};

/* The most split-K columns of the experts workspace (64 MiB of sums). */
#define EXPERTS_WS_MAX ((uint32_t)1 << 20)
#define TASKS_MAX_LAUNCH 65535
/* Rows of one GEMM (prefill) launch; the most rows the GEMV takes. */
#define GEMM_ROWS 2048
#define GEMV_ROWS 64
#define GRID_Y_MAX 65535

static struct cuda_fn fn_bias_rows = {.name = "tf_dense_bias_rows"};
static struct cuda_fn fn_bias_experts = {.name = "tf_dense_bias_experts"};
static struct cuda_fn fn_tasks = {.name = "tf_dense_experts_tasks"};

/* ---- the layers' device views ---- */

static tf_cu_ptr dptr(const void *p)
{
	return (tf_cu_ptr)(uintptr_t)p;
}

static void layer_get(const struct tf_exl3_layer *L, struct cuda_exl3_dev *d)
{
	d->L = (struct tf_cu_exl3_layer){L->g, dptr(L->trellis), dptr(L->suh), dptr(L->svh)};
	d->bias = dptr(L->bias);
}

/* Whether ex[0..count) lie as one image from ex[0]'s addresses
 * (tf_exl3_experts_layout's offsets off). */
static bool experts_in_place(const struct tf_exl3_layer *ex, int count, const uint64_t *off,
			     uint64_t k, uint64_t n)
{
	int has_bias = ex[0].bias != NULL;
	for (int e = 0; e < count; e++)
		if (dptr(ex[e].trellis) != dptr(ex[0].trellis) + off[e] ||
		    dptr(ex[e].suh) != dptr(ex[0].suh) + 2 * k * (uint64_t)e ||
		    dptr(ex[e].svh) != dptr(ex[0].svh) + 2 * n * (uint64_t)e ||
		    (has_bias ? dptr(ex[e].bias) != dptr(ex[0].bias) + 2 * n * (uint64_t)e
			      : ex[e].bias != NULL))
			return false;
	return true;
}

/* Copies of the experts' f16 vectors (suh, svh or biases: n values each)
 * into dst [count][n], on the stream. */
static tf_status experts_gather(struct cuda_be *c, const struct tf_exl3_layer *ex, int count,
				int which, uint64_t n, tf_cu_ptr dst)
{
	for (int e = 0; e < count; e++) {
		const void *v = which == 0 ? ex[e].suh : which == 1 ? ex[e].svh : ex[e].bias;
		tf_cu_ptr to = dst + 2 * n * (uint64_t)e;
		tf_status st;
		if (!tf_cu_rec_copy(c->stream, 'd', to, dptr(v), 2 * n) &&
		    (st = TF_CU(tf_cu->MemcpyDtoDAsync(to, dptr(v), 2 * n, c->stream))))
			return st;
	}
	return TF_OK;
}

/* The experts' launch view and its width table: in place when they lie as
 * one image (a model's stacks); else, as layers loaded one by one lie
 * (the output groups' wo_a), the trellises where they are (offsets from
 * the lowest) and copies of suh, svh and biases [E][K], [E][N] after the
 * table in its block. */
static tf_status experts_put(struct cuda_be *c, const struct tf_exl3_layer *ex, int count,
			     struct cuda_exl3_experts_dev *d)
{
	struct tf_exl3_geom *g = malloc(sizeof *g * (size_t)count);
	uint64_t *off = malloc(sizeof *off * (size_t)count);
	unsigned char *table = malloc((size_t)TF_CU_EXL3_EXPERT_BYTES * (size_t)count);
	uint64_t total = 0;
	int ragged, has_bias = ex[0].bias != NULL;
	tf_status st = TF_OK;
	if (!g || !off || !table) {
		st = tf_err(TF_ERR_NOMEM, "out of memory");
		goto out;
	}
	for (int e = 0; e < count; e++) {
		if (!ex[e].trellis || !ex[e].suh || !ex[e].svh || (ex[e].bias != NULL) != has_bias) {
			st = tf_err(TF_ERR_ARG, "expert %d has %s", e,
				    ex[e].trellis && ex[e].suh && ex[e].svh ? "a bias where expert 0 "
				    "has none, or none where it has one" : "no weights");
			goto out;
		}
		g[e] = ex[e].g;
		if (g[e].cb != g[0].cb) {
			st = tf_err(TF_ERR_ARG, "expert %d has another codebook than expert 0", e);
			goto out;
		}
	}
	if ((st = tf_exl3_experts_layout(g, (uint32_t)count, off, &total, &ragged))) {
		st = tf_err(TF_ERR_ARG, "%s", tf_errmsg(st));
		goto out;
	}
	const uint64_t k = g[0].k, n = g[0].n;
	const bool in_place = experts_in_place(ex, count, off, k, n);
	tf_cu_ptr base = dptr(ex[0].trellis);
	if (!in_place) {
		for (int e = 1; e < count; e++)
			base = dptr(ex[e].trellis) < base ? dptr(ex[e].trellis) : base;
		for (int e = 0; e < count; e++)
			off[e] = dptr(ex[e].trellis) - base;
	}
	tf_cu_exl3_experts_table(g, off, (uint32_t)count, table);
	const size_t tsz = ((size_t)TF_CU_EXL3_EXPERT_BYTES * count + 255) & ~(size_t)255;
	const size_t vk = 2 * k * (size_t)count, vn = 2 * n * (size_t)count;
	if ((st = cuda_mem_alloc(c, tsz + (in_place ? 0 : vk + vn + (has_bias ? vn : 0)), &d->mem)))
		goto out;
	d->E = (struct tf_cu_exl3_experts){(uint32_t)k, (uint32_t)n, (uint32_t)count, g[0].cb,
					   base, d->mem, dptr(ex[0].suh), dptr(ex[0].svh)};
	d->bias = dptr(ex[0].bias);
	d->count = count;
	if (!in_place) {
		d->E.suh = d->mem + tsz;
		d->E.svh = d->E.suh + vk;
		d->bias = has_bias ? d->E.svh + vn : 0;
		if ((st = experts_gather(c, ex, count, 0, k, d->E.suh)) ||
		    (st = experts_gather(c, ex, count, 1, n, d->E.svh)) ||
		    (has_bias && (st = experts_gather(c, ex, count, 2, n, d->bias))))
			goto fail;
	}
	if (!(st = cuda_put(c, d->E.table, table, (size_t)TF_CU_EXL3_EXPERT_BYTES * count)))
		goto out;
fail:
	cuda_mem_free(c, d->mem);
out:
	free(g);
	free(off);
	free(table);
	return st;
}

/* The experts image of ex[0..count), made on first use (again when the
 * array's layers changed). */
static tf_status experts_get(struct cuda_be *c, const struct tf_exl3_layer *ex, int count,
			     const struct cuda_exl3_experts_dev **out)
{
	const size_t hb = sizeof *ex * (size_t)count;
	uintptr_t v;
	struct cuda_exl3_experts_dev *d;
	if (tf_hmap_get(&c->experts, (uint64_t)(uintptr_t)ex, &v)) {
		d = (struct cuda_exl3_experts_dev *)v;
		if (d->count == count && !memcmp(d->host, ex, hb)) {
			*out = d;
			return TF_OK;
		}
		if (c->g.mode != CUDA_EAGER)
			goto recording;
		cuda_mem_free(c, d->mem);
		free(d->host);
		d->host = NULL;
	} else if (c->g.mode != CUDA_EAGER) {
		goto recording;
	} else if (!(d = calloc(1, sizeof *d))) {
		return tf_err(TF_ERR_NOMEM, "exl3_matmul_experts: out of memory");
	}
	tf_status st = (d->host = malloc(hb)) ? experts_put(c, ex, count, d)
					      : tf_err(TF_ERR_NOMEM, "out of memory");
	if (!st) {
		memcpy(d->host, ex, hb);
		st = tf_hmap_put(&c->experts, (uint64_t)(uintptr_t)ex, (uintptr_t)d);
	}
	if (st) {
		tf_hmap_del(&c->experts, (uint64_t)(uintptr_t)ex, NULL);
		free(d->host);
		free(d);
		return tf_err_wrap(st, "exl3_matmul_experts: %d experts: ", count);
	}
	*out = d;
	return TF_OK;
recording: /* the image is lasting state: made by the eager run that follows */
	return tf_err(TF_ERR_UNSUPPORTED, "exl3_matmul_experts: the experts' image is made inside "
		      "a graphed call");
}

void cuda_exl3_release(struct cuda_be *c)
{
	size_t i = 0;
	const struct tf_hmap_slot *s;
	while (tf_hmap_next(&c->experts, &i, &s)) {
		struct cuda_exl3_experts_dev *d = (struct cuda_exl3_experts_dev *)s->val;
		cuda_mem_free(c, d->mem);
		free(d->host);
		free(d);
	}
	tf_hmap_release(&c->experts);
}

/* ---- shared steps ---- */

/* x as bf16 on the device: x itself, or a converted copy in *tmp (else
 * 0), which the caller releases. */
static tf_status x_bf16(struct tf_be *be, const struct tf_tensor *x, tf_cu_ptr *xb, tf_cu_ptr *tmp)
{
	*tmp = 0;
	*xb = cuda_ptr(x);
	if (x->dt == TF_DT_BF16)
		return TF_OK;
	int64_t n = tf_tensor_numel(x);
	tf_status st = cuda_scratch(be, (size_t)n * 2, tmp);
	if (st)
		return st;
	*xb = *tmp;
	return cuda_convert_to(be, cuda_ptr(x), x->dt, *tmp, TF_DT_BF16, n);
}

/* Where the kernels write y: y itself, or (a bias to add before a bf16
 * rounding) an f32 scratch [R, N] in *tmp. */
static tf_status y_target(struct tf_be *be, const struct tf_tensor *y, bool bias, int64_t R,
			  int64_t N, tf_cu_ptr *yt, bool *yt_bf16, tf_cu_ptr *tmp)
{
	*tmp = 0;
	*yt = cuda_ptr(y);
	*yt_bf16 = y->dt == TF_DT_BF16;
	if (!bias || !*yt_bf16)
		return TF_OK;
	tf_status st = cuda_scratch(be, (size_t)(R * N) * 4, tmp);
	*yt = *tmp;
	*yt_bf16 = false;
	return st;
}

/* ---- exl3_matmul ---- */

/* yt rows [0, R) = x rows . L (x bf16 [R, K] at xb). */
static tf_status matmul_rows(struct tf_be *be, const struct tf_cu_exl3_layer *L, tf_cu_ptr xb,
			     int64_t R, tf_cu_ptr yt, bool yt_bf16)
{
	struct cuda_be *c = cuda_of(be);
	tf_status st;
	const size_t xrow = 2 * (size_t)L->g.k, yrow = (yt_bf16 ? 2 : 4) * (size_t)L->g.n;
	if (R > GEMV_ROWS && c->blas && !c->invariant) {
		/* GEMM_ROWS at a time: the scratch's u and f32 sums stay
		 * bounded (the head's Ŵᵀ alone is 1.3 GB); each slice decodes Ŵᵀ
		 * again, a few percent of its GEMM. */
		uint32_t most = (uint32_t)(R < GEMM_ROWS ? R : GEMM_ROWS);
		size_t need = tf_cu_exl3_gemm_scratch(&L->g, most);
		tf_cu_ptr s;
		if ((st = cuda_scratch(be, need, &s)))
			return st;
		for (int64_t r0 = 0; r0 < R && !st; r0 += most) {
			uint32_t m = (uint32_t)(R - r0 < most ? R - r0 : most);
			st = tf_cu_exl3_gemm(L, xb + (uint64_t)r0 * xrow, m, yt + (uint64_t)r0 * yrow,
					     yt_bf16, c->blas, s, need, c->stream);
		}
		cuda_scratch_release(be, s);
		return st;
	}
	const struct tf_cu_exl3_ws *ws;
	if ((st = cuda_exl3_ws(c, L->g.n, &ws)))
		return st;
	for (int64_t r0 = 0; r0 < R && !st; r0 += TF_CU_EXL3_ROWS_MAX) {
		uint32_t m = (uint32_t)(R - r0 < TF_CU_EXL3_ROWS_MAX ? R - r0 : TF_CU_EXL3_ROWS_MAX);
		st = tf_cu_exl3_gemv(L, xb + (uint64_t)r0 * xrow, m, yt + (uint64_t)r0 * yrow, yt_bf16,
				     ws, c->dev.sms, 0, c->invariant, c->stream);
	}
	return st;
}

/* y = yt + bias (f16 [N]) row by row, y f32 (may be yt) or bf16. */
static tf_status bias_rows(struct tf_be *be, tf_cu_ptr yt, const struct tf_tensor *y,
			   tf_cu_ptr bias, int64_t R, int64_t N)
{
	int32_t yb = y->dt == TF_DT_BF16, n32 = (int32_t)N;
	for (int64_t r0 = 0; r0 < R; r0 += GRID_Y_MAX) {
		int64_t m = R - r0 < GRID_Y_MAX ? R - r0 : GRID_Y_MAX;
		tf_cu_ptr src = yt + (uint64_t)(r0 * N) * 4;
		tf_cu_ptr dst = cuda_ptr(y) + (uint64_t)(r0 * N) * tf_dt_size(y->dt);
		void *p[] = {&src, &dst, &yb, &bias, &n32};
		tf_status st = cuda_launch(be, &fn_bias_rows, (unsigned)((N + 255) / 256), (unsigned)m,
					   256, 0, p);
		if (st)
			return st;
	}
	return TF_OK;
}

tf_status cuda_exl3_matmul(struct tf_be *be, const struct tf_exl3_layer *L,
			   const struct tf_tensor *x, struct tf_tensor *y)
{
	tf_status st;
	int64_t R, K, N;
	if ((st = tf_args_exl3_matmul(L, x, y, &R, &K, &N)))
		return st;
	if (!R)
		return TF_OK;
	if (R > INT32_MAX)
		return tf_err(TF_ERR_ARG, "exl3_matmul: %lld rows (at most 2^31 - 1)", (long long)R);
	struct cuda_exl3_dev d;
	tf_cu_ptr xb = 0, xtmp = 0, yt = 0, ytmp = 0;
	bool yt_bf16 = false;
	layer_get(L, &d);
	if (!(st = x_bf16(be, x, &xb, &xtmp)) &&
	    !(st = y_target(be, y, d.bias != 0, R, N, &yt, &yt_bf16, &ytmp)) &&
	    !(st = matmul_rows(be, &d.L, xb, R, yt, yt_bf16)) && d.bias)
		st = bias_rows(be, yt, y, d.bias, R, N);
	cuda_scratch_release(be, ytmp); /* in reverse: cuda_scratch's rule */
	cuda_scratch_release(be, xtmp);
	if (st)
		return tf_err_wrap(st, "exl3_matmul %lldx%lldx%lld: ", (long long)R, (long long)K,
				   (long long)N);
	return TF_OK;
}

/* ---- exl3_matmul_experts ---- */

/* Tasks of rows_max rows, and how many the worst case needs: every row
 * its own task (rows_max 1: R), or sum ceil(len_g / 4) <= (R + 3 G') / 4
 * over the G' <= min(G, R) groups with rows (rows_max 4), taken when that
 * is at most half of R or the path is batch-invariant. */
static uint32_t experts_plan(int64_t R, int64_t G, bool invariant, int64_t *ntasks)
{
	int64_t groups = G < R ? G : R, t4 = (R + 3 * groups) / 4;
	if (t4 > R)
		t4 = R;
	if (2 * t4 <= R || invariant) {
		*ntasks = t4;
		return 4;
	}
	*ntasks = R;
	return 1;
}

/* The tasks [ntasks] and xrow [R] of (ids, offsets) on the device. */
static tf_status experts_tasks(struct tf_be *be, const struct tf_tensor *ids,
			       const struct tf_tensor *offsets, int n_experts, int64_t R,
			       uint32_t rows_max, int64_t ntasks, tf_cu_ptr tasks, tf_cu_ptr xrow)
{
	tf_cu_ptr starts;
	int32_t G = (int32_t)tf_tensor_numel(ids);
	tf_status st = cuda_scratch(be, sizeof(int32_t) * ((size_t)G + 1), &starts);
	if (st)
		return st;
	tf_cu_ptr ip = cuda_ptr(ids), op = cuda_ptr(offsets);
	int32_t E = n_experts, r32 = (int32_t)R, rm = (int32_t)rows_max, nt = (int32_t)ntasks;
	void *p[] = {&ip, &op, &G, &E, &r32, &rm, &tasks, &nt, &xrow, &starts};
	st = cuda_launch(be, &fn_tasks, 1, 1, 1024, 0, p);
	cuda_scratch_release(be, starts);
	return st;
}

/* y rows += their group's expert's bias (bias [E][N] f16), from yt. */
static tf_status bias_experts(struct tf_be *be, tf_cu_ptr yt, const struct tf_tensor *y,
			      tf_cu_ptr bias, const struct tf_tensor *ids,
			      const struct tf_tensor *offsets, int n_experts, int64_t R, int64_t N)
{
	tf_cu_ptr dst = cuda_ptr(y), ip = cuda_ptr(ids), op = cuda_ptr(offsets);
	int32_t yb = y->dt == TF_DT_BF16, G = (int32_t)tf_tensor_numel(ids), E = n_experts;
	int32_t n32 = (int32_t)N;
	for (int64_t r0 = 0; r0 < R; r0 += GRID_Y_MAX) {
		int64_t m = R - r0 < GRID_Y_MAX ? R - r0 : GRID_Y_MAX;
		int32_t r32 = (int32_t)r0;
		void *p[] = {&yt, &dst, &yb, &bias, &ip, &op, &G, &E, &n32, &r32};
		tf_status st = cuda_launch(be, &fn_bias_experts, (unsigned)((N + 255) / 256),
					   (unsigned)m, 256, 0, p);
		if (st)
			return st;
	}
	return TF_OK;
}

/* The experts launches of ntasks tasks (at most TASKS_MAX_LAUNCH each). */
static tf_status experts_run(struct tf_be *be, const struct tf_cu_exl3_experts *E, tf_cu_ptr tasks,
			     int64_t ntasks, uint32_t rows_max, tf_cu_ptr xrow, tf_cu_ptr xb,
			     tf_cu_ptr yt, bool yt_bf16)
{
	struct cuda_be *c = cuda_of(be);
	/* Split-K wants ntasks * rows_max * N sums and ntasks * N/128
	 * counters; a grid of four blocks an SM (times the launch's waves,
	 * tf_cu_exl3_experts_waves) without it is never split (the invariant
	 * path needs none). */
	uint64_t want = ((uint64_t)ntasks * rows_max * E->n + 15) / 16;
	uint64_t fill = 4 * (uint64_t)c->dev.sms * (c->invariant ? 1 : tf_cu_exl3_experts_waves());
	if (want > EXPERTS_WS_MAX || (uint64_t)ntasks * (E->n / 128) >= fill)
		want = E->n;
	const struct tf_cu_exl3_ws *ws;
	tf_status st = cuda_exl3_ws(c, want > E->n ? (uint32_t)want : E->n, &ws);
	for (int64_t t0 = 0; !st && t0 < ntasks; t0 += TASKS_MAX_LAUNCH) {
		uint32_t m = (uint32_t)(ntasks - t0 < TASKS_MAX_LAUNCH ? ntasks - t0 : TASKS_MAX_LAUNCH);
		st = tf_cu_exl3_experts(E, tasks + (uint64_t)t0 * sizeof(struct tf_cu_exl3_task), m,
					rows_max, xrow, xb, yt, yt_bf16, ws, c->dev.sms, 0, c->invariant,
					c->stream);
	}
	return st;
}

tf_status cuda_exl3_matmul_experts(struct tf_be *be, const struct tf_exl3_layer *experts,
				   int n_experts, const struct tf_tensor *expert_ids,
				   const struct tf_tensor *offsets, const struct tf_tensor *x,
				   struct tf_tensor *y)
{
	tf_status st;
	int64_t R, N, G, K = x ? tf_tensor_cols(x) : 0;
	if ((st = tf_args_experts("exl3_matmul_experts", expert_ids, offsets, x, y, &R, &N, &G)))
		return st;
	if (!experts || n_experts < 1)
		return tf_err(TF_ERR_ARG, "exl3_matmul_experts: no experts");
	if (!R || !G)
		return TF_OK;
	if (R > INT32_MAX || G >= INT32_MAX)
		return tf_err(TF_ERR_ARG, "exl3_matmul_experts: %lld rows, %lld groups (at most 2^31 - 1)",
			      (long long)R, (long long)G);
	const struct cuda_exl3_experts_dev *d = NULL;
	if ((st = experts_get(cuda_of(be), experts, n_experts, &d)))
		return st;
	if ((int64_t)d->E.k != K || (int64_t)d->E.n != N)
		return tf_err(TF_ERR_ARG, "exl3_matmul_experts: experts are %ux%u, x and y want %lldx%lld",
			      d->E.k, d->E.n, (long long)K, (long long)N);
	int64_t ntasks;
	uint32_t rows_max = experts_plan(R, G, cuda_of(be)->invariant, &ntasks);
	tf_cu_ptr xb = 0, xtmp = 0, yt = 0, ytmp = 0, tasks = 0, xrow = 0;
	bool yt_bf16 = false;
	if (!(st = cuda_scratch(be, sizeof(struct tf_cu_exl3_task) * (size_t)ntasks, &tasks)) &&
	    !(st = cuda_scratch(be, sizeof(int32_t) * (size_t)R, &xrow)) &&
	    !(st = experts_tasks(be, expert_ids, offsets, n_experts, R, rows_max, ntasks, tasks, xrow)) &&
	    !(st = x_bf16(be, x, &xb, &xtmp)) &&
	    !(st = y_target(be, y, d->bias != 0, R, N, &yt, &yt_bf16, &ytmp)) &&
	    !(st = experts_run(be, &d->E, tasks, ntasks, rows_max, xrow, xb, yt, yt_bf16)) && d->bias)
		st = bias_experts(be, yt, y, d->bias, expert_ids, offsets, n_experts, R, N);
	cuda_scratch_release(be, ytmp); /* in reverse: cuda_scratch's rule */
	cuda_scratch_release(be, xtmp);
	cuda_scratch_release(be, xrow);
	cuda_scratch_release(be, tasks);
	if (st)
		return tf_err_wrap(st, "exl3_matmul_experts %lld rows, %lld groups: ", (long long)R,
				   (long long)G);
	return TF_OK;
}
