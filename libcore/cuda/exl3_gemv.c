/* exl3_gemv.c: planning and launching the fused EXL3 GEMV kernels. */
#include "cuda/exl3_gemv.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cuda/module.h"

/* The kernel's argument block, field for field (kernels/exl3_gemv.cu). */
struct gemv_args {
	tf_cu_ptr trellis, suh, svh, x, y, acc, count;
	int32_t k, n, rows;
	int32_t chunks_per_slice;
	int32_t y_bf16;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static tf_cu_func funcs[9][3][5];
static unsigned funcs_generation; /* of the module the handles came from */

static int rows_slot(uint32_t rows, unsigned *tmpl)
{
	static const unsigned t[5] = {1, 2, 4, 8, 16};
	for (int i = 0; i < 5; i++)
		if (rows <= t[i]) {
			*tmpl = t[i];
			return i;
		}
	return -1;
}

tf_status tf_cu_exl3_ws_init(struct tf_cu_exl3_ws *ws, uint32_t n_max)
{
	memset(ws, 0, sizeof(*ws));
	tf_status st = tf_cu_init();
	if (st)
		return st;
	size_t acc_bytes = (size_t)TF_CU_EXL3_ROWS_MAX * n_max * sizeof(float);
	size_t count_bytes = ((size_t)n_max / 128 + 1) * sizeof(uint32_t);
	if ((st = TF_CU(tf_cu->MemAlloc(&ws->acc, acc_bytes))))
		return st;
	if ((st = TF_CU(tf_cu->MemAlloc(&ws->count, count_bytes))))
		goto out;
	if ((st = TF_CU(tf_cu->MemsetD8(ws->acc, 0, acc_bytes))) ||
	    (st = TF_CU(tf_cu->MemsetD8(ws->count, 0, count_bytes))))
		goto out;
	ws->n_max = n_max;
out:
	if (st)
		tf_cu_exl3_ws_release(ws);
	return st;
}

void tf_cu_exl3_ws_release(struct tf_cu_exl3_ws *ws)
{
	if (ws->acc)
		tf_cu->MemFree(ws->acc);
	if (ws->count)
		tf_cu->MemFree(ws->count);
	memset(ws, 0, sizeof(*ws));
}

void tf_cu_exl3_plan(const struct tf_exl3_geom *g, uint32_t rows, int sms, int blocks_per_sm,
                     struct tf_cu_exl3_plan *p)
{
	unsigned kb = g->k / 128, nb = g->n / 128;
	unsigned target = (unsigned)(sms > 0 ? sms : 132) * (unsigned)(blocks_per_sm > 0 ? blocks_per_sm : 4);
	unsigned want = (target + nb - 1) / nb; /* slices wanted */
	if (want < 1)
		want = 1;
	if (want > kb)
		want = kb;
	p->grid_x = nb;
	p->rows_tmpl = 0; /* more than 16 rows: no GEMV kernel */
	p->chunks_per_slice = (kb + want - 1) / want;
	p->slices = (kb + p->chunks_per_slice - 1) / p->chunks_per_slice;
	rows_slot(rows ? rows : 1, &p->rows_tmpl);
}

static tf_status get_func(const struct tf_exl3_geom *g, int slot, unsigned tmpl, tf_cu_func *f)
{
	tf_status st = tf_cu_module_load();
	if (st)
		return st;
	pthread_mutex_lock(&mu);
	if (funcs_generation != tf_cu_module_generation()) {
		memset(funcs, 0, sizeof(funcs));
		funcs_generation = tf_cu_module_generation();
	}
	tf_cu_func *c = &funcs[g->bits][g->cb][slot];
	if (!*c) {
		char name[64];
		snprintf(name, sizeof(name), "tf_exl3_gemv_b%u_cb%d_r%u", g->bits, (int)g->cb, tmpl);
		st = tf_cu_kernel(name, c);
	}
	*f = *c;
	pthread_mutex_unlock(&mu);
	return st;
}

tf_status tf_cu_exl3_gemv(const struct tf_cu_exl3_layer *L, tf_cu_ptr x, uint32_t rows, tf_cu_ptr y,
                          bool y_bf16, const struct tf_cu_exl3_ws *ws, int sms, int blocks_per_sm,
                          tf_cu_stream s)
{
	tf_status st = tf_exl3_geom_check(&L->g);
	if (st)
		return tf_err(TF_ERR_ARG, "exl3 gemv: %s", tf_errmsg(st));
	if (rows < 1 || rows > TF_CU_EXL3_ROWS_MAX)
		return tf_err(TF_ERR_ARG, "exl3 gemv: %u rows (1..%d; more rows take the GEMM path)",
		              rows, TF_CU_EXL3_ROWS_MAX);
	struct tf_cu_exl3_plan p;
	tf_cu_exl3_plan(&L->g, rows, sms, blocks_per_sm, &p);
	if (p.slices > 1 && (!ws || ws->n_max < L->g.n))
		return tf_err(TF_ERR_ARG, "exl3 gemv: the workspace holds %u columns, the layer has %u",
		              ws ? ws->n_max : 0, L->g.n);
	unsigned tmpl;
	int slot = rows_slot(rows, &tmpl);
	tf_cu_func f;
	if ((st = get_func(&L->g, slot, tmpl, &f)))
		return st;
	struct gemv_args a = {
		.trellis = L->trellis, .suh = L->suh, .svh = L->svh, .x = x, .y = y,
		.acc = ws ? ws->acc : 0, .count = ws ? ws->count : 0,
		.k = (int32_t)L->g.k, .n = (int32_t)L->g.n, .rows = (int32_t)rows,
		.chunks_per_slice = (int32_t)p.chunks_per_slice, .y_bf16 = y_bf16,
	};
	void *params[] = {&a};
	st = TF_CU(tf_cu->LaunchKernel(f, p.grid_x, p.slices, 1, 256, 1, 1, 0, s, params, NULL));
	if (st)
		return tf_err_wrap(st, "exl3 gemv %ux%u b%u %s rows %u (grid %ux%u): ", L->g.k, L->g.n,
		                   L->g.bits, tf_exl3_cb_name(L->g.cb), rows, p.grid_x, p.slices);
	return TF_OK;
}
