/* exl3_gemv.c: planning and launching the fused EXL3 GEMV kernels. */
#include "cuda/exl3_gemv.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/module.h"
#include "cuda/rec.h"

/* The kernel's argument block, field for field (kernels/exl3_gemv.cu). */
struct gemv_args {
	tf_cu_ptr trellis, suh, svh, x, y, acc, count;
	int32_t k, n, rows;
	int32_t chunks_per_slice;
	int32_t y_bf16;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
/* Kernel handles by width, codebook and slot: slots 0..4 the body for rows
 * ≤ 1, 2, 4, 8, 16; 5 the lean one-row body (v7); 6, 7, 8 MUL1 on the int8
 * tensor cores (v10) for rows ≤ 1, 2, 4. */
#define SLOT_V7 5
#define SLOT_V10 6
static tf_cu_func funcs[9][3][9];
static unsigned funcs_generation; /* of the module the handles came from */
/* cluster_fits's answers by kernel, cluster size and shared memory
 * (emptied with the handles when the module is loaded again). */
static struct {
	tf_cu_func f;
	unsigned cy, shmem;
	int n;
} memo[64];

/* The most dynamic shared memory tf_cu_exl3_spread asks for: with the
 * kernel's static part and the 1 KiB reserved a block, one block an SM. A
 * kernel with more than 227 KiB − this of its own is not spread. */
#define SPREAD_SHMEM_MAX (188 * 1024)

/* The alternatives to the tuned path (tf_cu_exl3_variant): bits of
 * variant, -1 until set or read from $TF_CUDA_EXL3_VARIANT. */
enum {
	V_NO_V10 = 1,      /* MUL1 layers of up to 4 rows take the fp16 bodies */
	V_NO_V7 = 2,       /* one row takes the _r1 body, not the lean v7 */
	V_NO_CLUSTER = 4,  /* split-K slices always meet in the workspace */
	V_NO_SPREAD = 8,   /* v10 grids are not spread over the SMs */
	V_PDL_ALL = 16,    /* every launch is a programmatic dependent launch */
	V_PDL_NONE = 32,   /* none is (the tuned path: the v10 launches only) */
	V_WAVES1 = 64,     /* experts launches aim at one wave of blocks (tuned: two) */
	V_WAVES4 = 128,    /* ... at four */
};
static const struct {
	const char *name;
	int bit;
} variant_words[] = {
	{"no-v10", V_NO_V10}, {"no-v7", V_NO_V7}, {"no-cluster", V_NO_CLUSTER},
	{"no-spread", V_NO_SPREAD}, {"pdl-all", V_PDL_ALL}, {"pdl-none", V_PDL_NONE},
	{"experts-waves1", V_WAVES1}, {"experts-waves4", V_WAVES4},
};
static int variant = -1;
static bool nonportable[9][3][9]; /* the kernel may take clusters of 16 */
static unsigned invariant_cmax_of[9][3]; /* invariant_cmax's answers (0: not yet) */
static int static_smem10[9][3]; /* the v10 kernels' static shared memory */

static tf_status variant_parse(const char *spec, const char *what, int *out)
{
	int bits = 0;
	char word[32];
	for (const char *p = spec ? spec : ""; *p;) {
		size_t n = strcspn(p, ",");
		if (n == 0 || n >= sizeof word) {
			return tf_err(TF_ERR_ARG, "%s: '%s' is not a comma list of no-v10, no-v7, "
				      "no-cluster, no-spread, pdl-all, pdl-none, experts-waves1, "
				      "experts-waves4 or tuned", what, spec);
		}
		memcpy(word, p, n);
		word[n] = 0;
		size_t i = 0, nw = sizeof variant_words / sizeof variant_words[0];
		while (i < nw && strcmp(word, variant_words[i].name))
			i++;
		if (i < nw)
			bits |= variant_words[i].bit;
		else if (strcmp(word, "tuned"))
			return tf_err(TF_ERR_ARG, "%s: unknown word '%s' (no-v10, no-v7, no-cluster, "
				      "no-spread, pdl-all, pdl-none, experts-waves1, experts-waves4 "
				      "or tuned)", what, word);
		p += n + (p[n] == ',');
	}
	if ((bits & V_PDL_ALL) && (bits & V_PDL_NONE))
		return tf_err(TF_ERR_ARG, "%s: pdl-all and pdl-none together", what);
	if ((bits & V_WAVES1) && (bits & V_WAVES4))
		return tf_err(TF_ERR_ARG, "%s: experts-waves1 and experts-waves4 together", what);
	*out = bits;
	return TF_OK;
}

tf_status tf_cu_exl3_variant(const char *spec)
{
	int bits = 0;
	tf_status st = variant_parse(spec ? spec : getenv("TF_CUDA_EXL3_VARIANT"),
				     spec ? "exl3 variant" : "TF_CUDA_EXL3_VARIANT", &bits);
	if (!st)
		variant = bits;
	return st;
}

/* The variant's bits, read from the environment on first use. */
static tf_status variant_get(int *bits)
{
	tf_status st = variant < 0 ? tf_cu_exl3_variant(NULL) : TF_OK;
	*bits = variant;
	return st;
}

unsigned tf_cu_exl3_cluster_size(unsigned blocks, unsigned slices, int sms, unsigned cmax)
{
	unsigned nsm = sms > 0 ? (unsigned)sms : 132;
	if (slices < 2 || slices > cmax || (blocks + nsm - 1) / nsm < 3)
		return 0;
	return slices;
}

static _Thread_local unsigned last_cluster; /* of this thread's last GEMV or experts launch */

unsigned tf_cu_exl3_last_cluster(void)
{
	return last_cluster;
}

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
	size_t count_bytes = tf_cu_exl3_ws_counters(n_max) * sizeof(uint32_t);
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
	unsigned kb = g->k / 128, nb = g->n / 128, nsm = (unsigned)(sms > 0 ? sms : 132);
	unsigned target = nsm * (unsigned)(blocks_per_sm > 0 ? blocks_per_sm : 4);
	unsigned want = (target + nb - 1) / nb; /* slices wanted */
	/* With a column block for every SM already, K is not split: the
	 * split's end costs about what the extra blocks bring (1280x32768 on
	 * the H200 at 2 bits: 256 blocks of 10 chunks 11.8 µs, 512 of 5
	 * 13.6, 12.1 as clusters of 2; at 4 bits 12.2, 13.7, 12.1; at four
	 * rows 5–10% faster than clusters; kernels/NOTES.md). */
	if (want < 1 || nb >= nsm)
		want = 1;
	if (want > kb)
		want = kb;
	p->grid_x = nb;
	p->rows_tmpl = 0; /* more than 16 rows: no GEMV kernel */
	p->chunks_per_slice = (kb + want - 1) / want;
	p->slices = (kb + p->chunks_per_slice - 1) / p->chunks_per_slice;
	/* No block past the target (a second wave of a few blocks costs a
	 * whole block's time): longer slices until the grid fits. */
	while (p->slices > 1 && nb * p->slices > target) {
		p->chunks_per_slice++;
		p->slices = (kb + p->chunks_per_slice - 1) / p->chunks_per_slice;
	}
	rows_slot(rows ? rows : 1, &p->rows_tmpl);
}

/* Load the module and take the handle cache's lock, emptying the cache
 * when the module was loaded again since (its handles are stale). */
static tf_status lock_handles(void)
{
	tf_status st = tf_cu_module_load();
	if (st)
		return st;
	pthread_mutex_lock(&mu);
	if (funcs_generation != tf_cu_module_generation()) {
		memset(funcs, 0, sizeof(funcs));
		memset(memo, 0, sizeof(memo));
		memset(invariant_cmax_of, 0, sizeof(invariant_cmax_of));
		funcs_generation = tf_cu_module_generation();
	}
	return TF_OK;
}

static tf_status get_func(const struct tf_exl3_geom *g, int slot, unsigned tmpl, tf_cu_func *f)
{
	tf_status st = lock_handles();
	if (st)
		return st;
	tf_cu_func *c = &funcs[g->bits][g->cb][slot];
	if (!*c) {
		char name[64];
		if (slot == SLOT_V10)
			snprintf(name, sizeof(name), "tf_exl3_gemv10_b%u_cb%d", g->bits, (int)g->cb);
		else if (slot > SLOT_V10)
			snprintf(name, sizeof(name), "tf_exl3_gemv10_b%u_cb%d_r%d", g->bits, (int)g->cb,
			         slot == SLOT_V10 + 1 ? 2 : 4);
		else if (slot == SLOT_V7)
			snprintf(name, sizeof(name), "tf_exl3_gemv7_b%u_cb%d", g->bits, (int)g->cb);
		else
			snprintf(name, sizeof(name), "tf_exl3_gemv_b%u_cb%d_r%u", g->bits, (int)g->cb, tmpl);
		st = tf_cu_kernel(name, c);
		/* Clusters past the portable 8 blocks: where the driver allows. */
		if (!st)
			nonportable[g->bits][g->cb][slot] =
				tf_cu->FuncSetAttribute(*c, TF_CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1) == 0;
		if (!st && slot >= SLOT_V10) { /* tf_cu_exl3_spread asks for dynamic shared memory */
			int sm = 0;
			if (tf_cu->FuncGetAttribute(&sm, TF_CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, *c) == 0 && sm > 0 &&
			    sm < 227 * 1024 - SPREAD_SHMEM_MAX) {
				static_smem10[g->bits][slot - SLOT_V10] = sm;
				st = TF_CU(tf_cu->FuncSetAttribute(
					*c, TF_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, SPREAD_SHMEM_MAX));
			}
			if (st)
				*c = NULL;
		}
	}
	*f = *c;
	pthread_mutex_unlock(&mu);
	return st;
}

unsigned tf_cu_exl3_spread(unsigned blocks, int sms, int fit, int static_smem)
{
	unsigned nsm = sms > 0 ? (unsigned)sms : 132, per_sm = (blocks + nsm - 1) / nsm;
	if (per_sm >= (unsigned)fit || static_smem <= 0)
		return 0;
	long shmem = 228L * 1024 / per_sm - 64 - 1024 - static_smem;
	return shmem <= 0 ? 0 : shmem > SPREAD_SHMEM_MAX ? SPREAD_SHMEM_MAX : (unsigned)shmem;
}

/* Whether a launch is a programmatic dependent launch: the v10 ones on the
 * tuned path (faster on every shape measured, the others slower at 2
 * bits), all or none as the variant says. */
static bool pdl_of(int bits, bool v10)
{
	return (bits & V_PDL_ALL) || (v10 && !(bits & V_PDL_NONE));
}

/* Launch f on grid gx × gy × gz, as a programmatic dependent launch when
 * pdl and the driver has cuLaunchKernelEx, and as clusters of cy blocks
 * along y when cy > 1 (the caller checked cluster_fits). */
static tf_status launch(tf_cu_func f, unsigned gx, unsigned gy, unsigned gz, unsigned threads,
                        unsigned shmem, unsigned cy, tf_cu_stream s, void **params, bool pdl)
{
	if ((pdl || cy > 1) && tf_cu->LaunchKernelEx) {
		struct tf_cu_launch_attr attr[2] = {{0}};
		unsigned n = 0;
		if (pdl) {
			attr[n].id = TF_CU_LAUNCH_ATTR_PROGRAMMATIC_STREAM_SERIALIZATION;
			attr[n++].value.i = 1;
		}
		if (cy > 1) {
			attr[n].id = TF_CU_LAUNCH_ATTR_CLUSTER_DIMENSION;
			attr[n].value.cluster.x = 1;
			attr[n].value.cluster.y = cy;
			attr[n++].value.cluster.z = 1;
		}
		struct tf_cu_launch_config c = {
			.gx = gx, .gy = gy, .gz = gz, .bx = threads, .by = 1, .bz = 1,
			.shmem = shmem, .s = s, .attrs = attr, .nattrs = n,
		};
		if (tf_cu_rec_kernel(s, f, gx, gy, gz, threads, 1, 1, shmem, params, attr,
		                     n * sizeof attr[0]))
			return TF_OK; /* recorded (rec.h) */
		return TF_CU(tf_cu->LaunchKernelEx(&c, f, params, NULL));
	}
	if (tf_cu_rec_kernel(s, f, gx, gy, gz, threads, 1, 1, shmem, params, NULL, 0))
		return TF_OK;
	return TF_CU(tf_cu->LaunchKernel(f, gx, gy, gz, threads, 1, 1, shmem, s, params, NULL));
}

/* Whether `need` clusters of cy blocks of f (256 threads, shmem bytes) can
 * be resident at once: with need = gx · gz, every cluster of the grid gx ×
 * cy × gz, so that no cluster waits for another to end;
 * cuOccupancyMaxActiveClusters, remembered per kernel, cluster size and
 * shared memory. */
static bool cluster_fits(tf_cu_func f, unsigned cy, unsigned long need, unsigned shmem)
{
	if (!tf_cu->OccupancyMaxActiveClusters || !tf_cu->LaunchKernelEx)
		return false;
	unsigned h = (unsigned)(((uintptr_t)f >> 4) * 31u + cy * 7u + shmem / 1024u) % 64u;
	pthread_mutex_lock(&mu);
	int n = memo[h].f == f && memo[h].cy == cy && memo[h].shmem == shmem ? memo[h].n : -1;
	pthread_mutex_unlock(&mu);
	if (n < 0) {
		struct tf_cu_launch_attr attr = {.id = TF_CU_LAUNCH_ATTR_CLUSTER_DIMENSION};
		attr.value.cluster.x = 1;
		attr.value.cluster.y = cy;
		attr.value.cluster.z = 1;
		struct tf_cu_launch_config c = {
			.gx = 1, .gy = cy, .gz = 1, .bx = 256, .by = 1, .bz = 1,
			.shmem = shmem, .attrs = &attr, .nattrs = 1,
		};
		if (tf_cu->OccupancyMaxActiveClusters(&n, f, &c) != 0)
			n = 0;
		pthread_mutex_lock(&mu);
		memo[h].f = f;
		memo[h].cy = cy;
		memo[h].shmem = shmem;
		memo[h].n = n;
		pthread_mutex_unlock(&mu);
	}
	return n > 0 && (unsigned long)n >= need;
}

/* The batch-invariant plan's slices: at most cmax (16 where every MMA body
 * of the layer's width and codebook takes non-portable clusters, else 8),
 * so that they always meet in one cluster, in rank order. */
static tf_status invariant_cmax(const struct tf_exl3_geom *g, unsigned *cmax)
{
	static const unsigned t[4] = {2, 4, 8, 16};
	tf_status st = lock_handles();
	if (st)
		return st;
	*cmax = invariant_cmax_of[g->bits][g->cb];
	pthread_mutex_unlock(&mu);
	if (*cmax)
		return TF_OK;
	bool all = true;
	for (int i = 0; i < 4; i++) {
		tf_cu_func f;
		if ((st = get_func(g, i + 1, t[i], &f)))
			return st;
		pthread_mutex_lock(&mu);
		all = all && nonportable[g->bits][g->cb][i + 1];
		pthread_mutex_unlock(&mu);
	}
	*cmax = all ? TF_CU_EXL3_CLUSTER_MAX : TF_CU_EXL3_CLUSTER_PORTABLE;
	pthread_mutex_lock(&mu);
	invariant_cmax_of[g->bits][g->cb] = *cmax;
	pthread_mutex_unlock(&mu);
	return TF_OK;
}

/* *slices of *cps chunks each over kb chunks, fewer and longer where they
 * are more than cmax. */
static void slices_cap(unsigned kb, unsigned cmax, unsigned *cps, unsigned *slices)
{
	if (*slices <= cmax)
		return;
	*cps = (kb + cmax - 1) / cmax;
	*slices = (kb + *cps - 1) / *cps;
}

/* The batch-invariant path's cluster: all `slices` of a column block in
 * one (0 for one slice), which must fit the device. */
static tf_status invariant_cluster(tf_cu_func f, unsigned slices, const char *what, uint32_t k,
				   uint32_t n, unsigned *cy)
{
	*cy = slices > 1 ? slices : 0;
	if (*cy && !cluster_fits(f, *cy, 1, 0))
		return tf_err(TF_ERR_UNSUPPORTED, "exl3 %s %ux%u: clusters of %u blocks do not fit "
			      "this device (the batch-invariant path needs them)", what, k, n, *cy);
	return TF_OK;
}

tf_status tf_cu_exl3_gemv(const struct tf_cu_exl3_layer *L, tf_cu_ptr x, uint32_t rows, tf_cu_ptr y,
                          bool y_bf16, const struct tf_cu_exl3_ws *ws, int sms, int blocks_per_sm,
                          bool invariant, tf_cu_stream s)
{
	tf_status st = tf_exl3_geom_check(&L->g);
	if (st)
		return tf_err(TF_ERR_ARG, "exl3 gemv: %s", tf_errmsg(st));
	if (rows < 1 || rows > TF_CU_EXL3_ROWS_MAX)
		return tf_err(TF_ERR_ARG, "exl3 gemv: %u rows (1..%d; more rows take the GEMM path)",
		              rows, TF_CU_EXL3_ROWS_MAX);
	int bits;
	if ((st = variant_get(&bits)))
		return st;
	struct tf_cu_exl3_plan p;
	tf_cu_exl3_plan(&L->g, rows, sms, blocks_per_sm, &p);
	unsigned tmpl, inv_cmax = 0;
	int slot = rows_slot(rows, &tmpl);
	const unsigned b = L->g.bits;
	const bool v10 = !invariant && rows <= 4 && L->g.cb == TF_EXL3_CB_MUL1 && !(bits & V_NO_V10);
	if (invariant) {
		/* One body for every row count: the MMA's columns are rows,
		 * each summed alone in the same order. */
		if (tmpl < 2) {
			tmpl = 2;
			slot = 1;
		}
		if ((st = invariant_cmax(&L->g, &inv_cmax)))
			return st;
		slices_cap(L->g.k / 128, inv_cmax, &p.chunks_per_slice, &p.slices);
	} else if (v10) {
		slot = SLOT_V10 + (rows == 1 ? 0 : rows == 2 ? 1 : 2);
		/* The v10 kernels of widths other than 1, 2 and 4 hold three
		 * words a tile and fit three blocks an SM, not four. */
		if (b != 1 && b != 2 && b != 4 && (blocks_per_sm <= 0 || blocks_per_sm > 3))
			tf_cu_exl3_plan(&L->g, rows, sms, 3, &p);
	} else if (rows == 1 && !(bits & V_NO_V7)) {
		slot = SLOT_V7;
	}
	if (!invariant && p.slices > 1 && (!ws || ws->n_max < L->g.n))
		return tf_err(TF_ERR_ARG, "exl3 gemv: the workspace holds %u columns, the layer has %u",
		              ws ? ws->n_max : 0, L->g.n);
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
	const bool spread = v10 && !(bits & V_NO_SPREAD);
	unsigned shmem = spread ? tf_cu_exl3_spread(p.grid_x * p.slices, sms, b == 1 || b == 2 || b == 4 ? 4 : 3,
	                                            static_smem10[b][slot - SLOT_V10])
	                        : 0;
	unsigned cy = 0;
	if (invariant) { /* always one cluster a column block: the sum in rank order */
		if ((st = invariant_cluster(f, p.slices, "gemv", L->g.k, L->g.n, &cy)))
			return st;
	} else {
		/* The slices of a column block as one cluster
		 * (tf_cu_exl3_cluster_size), where all the clusters fit at once
		 * (spread as planned, else packed as the scheduler likes). */
		const unsigned cmax = nonportable[b][L->g.cb][slot] ? TF_CU_EXL3_CLUSTER_MAX : TF_CU_EXL3_CLUSTER_PORTABLE;
		const unsigned want = tf_cu_exl3_cluster_size(p.grid_x * p.slices, p.slices, sms, cmax);
		if (want && !(bits & V_NO_CLUSTER)) {
			if (cluster_fits(f, p.slices, p.grid_x, shmem))
				cy = want;
			else if (shmem && cluster_fits(f, p.slices, p.grid_x, 0)) {
				cy = want;
				shmem = 0;
			}
		}
	}
	last_cluster = cy;
	st = launch(f, p.grid_x, p.slices, 1, 256, shmem, cy, s, params, pdl_of(bits, v10));
	if (st)
		return tf_err_wrap(st, "exl3 gemv %ux%u b%u %s rows %u (grid %ux%u): ", L->g.k, L->g.n,
		                   L->g.bits, tf_exl3_cb_name(L->g.cb), rows, p.grid_x, p.slices);
	return TF_OK;
}

/* ---- experts ---- */

struct experts_args {
	tf_cu_ptr trellis, table, suh, svh, tasks, xrow, x, y, acc, count;
	int32_t k, n;
	int32_t chunks_per_slice;
	int32_t y_bf16;
};

static tf_cu_func experts_funcs[3][4]; /* slots 2, 3: v10, MUL1 at rows ≤ 1, ≤ 4 */
static bool experts_nonportable[3][4];  /* the kernel may take clusters of 16 */
static unsigned experts_generation;

void tf_cu_exl3_experts_table(const struct tf_exl3_geom *g, const uint64_t *offsets, uint32_t count,
                              void *table)
{
	unsigned char *t = table;
	for (uint32_t e = 0; e < count; e++) {
		int32_t bits[2] = {(int32_t)g[e].bits, 0};
		memcpy(t + (size_t)e * TF_CU_EXL3_EXPERT_BYTES, &offsets[e], 8);
		memcpy(t + (size_t)e * TF_CU_EXL3_EXPERT_BYTES + 8, bits, 8);
	}
}

uint32_t tf_cu_exl3_route(const int32_t *sel, uint32_t rows, uint32_t topk, uint32_t nexperts,
                          uint32_t rows_max, struct tf_cu_exl3_task *tasks, int32_t *xrow,
                          int32_t *pair_of, uint32_t *npairs)
{
	uint32_t p = 0, nt = 0;
	/* Expert by expert, rows in order: O(nexperts·rows·topk), nothing
	 * for a decode batch; a prefill of thousands of rows would want a
	 * counting pass (O(pairs + nexperts)) instead. */
	for (uint32_t i = 0; i < rows * topk; i++)
		pair_of[i] = -1;
	for (uint32_t e = 0; e < nexperts; e++) {
		uint32_t first = p;
		for (uint32_t i = 0; i < rows * topk; i++) {
			if (sel[i] != (int32_t)e)
				continue;
			if (p - first == rows_max) {
				tasks[nt++] = (struct tf_cu_exl3_task){(int32_t)e, (int32_t)first, (int32_t)(p - first), 0};
				first = p;
			}
			xrow[p] = (int32_t)(i / topk);
			pair_of[i] = (int32_t)p;
			p++;
		}
		if (p > first)
			tasks[nt++] = (struct tf_cu_exl3_task){(int32_t)e, (int32_t)first, (int32_t)(p - first), 0};
	}
	*npairs = p;
	return nt;
}

unsigned tf_cu_exl3_experts_waves(void)
{
	int bits;
	if (variant_get(&bits))
		return 2;
	return bits & V_WAVES4 ? 4 : bits & V_WAVES1 ? 1 : 2;
}

tf_status tf_cu_exl3_experts(const struct tf_cu_exl3_experts *E, tf_cu_ptr tasks, uint32_t ntasks,
                             uint32_t rows_max, tf_cu_ptr xrow, tf_cu_ptr x, tf_cu_ptr y,
                             bool y_bf16, const struct tf_cu_exl3_ws *ws, int sms,
                             int blocks_per_sm, bool invariant, tf_cu_stream s)
{
	struct tf_exl3_geom g = {E->k, E->n, 4, E->cb};
	tf_status st = tf_exl3_geom_check(&g);
	if (st)
		return tf_err(TF_ERR_ARG, "exl3 experts: %s", tf_errmsg(st));
	int slot = rows_max == 1 ? 0 : rows_max == 4 ? 1 : -1;
	if (slot < 0)
		return tf_err(TF_ERR_ARG, "exl3 experts: rows_max %u (1 or 4)", rows_max);
	if (invariant && rows_max != 4)
		return tf_err(TF_ERR_ARG, "exl3 experts: the batch-invariant path takes tasks of 4 rows");
	int bits;
	if ((st = variant_get(&bits)))
		return st;
	if (!invariant && E->cb == TF_EXL3_CB_MUL1 && !(bits & V_NO_V10))
		slot += 2;
	if (ntasks == 0)
		return TF_OK;
	if (ntasks > 65535)
		return tf_err(TF_ERR_ARG, "exl3 experts: %u tasks (at most 65535 a launch)", ntasks);
	unsigned kb = E->k / 128, nb = E->n / 128;
	unsigned bps = (unsigned)(blocks_per_sm > 0 ? blocks_per_sm : 4);
	if (slot >= 2 && bps > 3)
		bps = 3; /* the v10 experts kernels fit three blocks an SM */
	unsigned target = (unsigned)(sms > 0 ? sms : 132) * bps;
	if (!invariant)
		target *= tf_cu_exl3_experts_waves();
	/* The batch-invariant plan: slices as for TF_CU_EXL3_INVARIANT_TASKS
	 * tasks, whatever the count, meeting in a cluster. */
	unsigned base = nb * (invariant ? TF_CU_EXL3_INVARIANT_TASKS : ntasks);
	unsigned want = (target + base - 1) / base;
	if (want > kb)
		want = kb;
	if (!invariant && want > 1 &&
	    (!ws || (size_t)ntasks * rows_max * E->n > (size_t)16 * ws->n_max ||
	     (size_t)ntasks * nb > tf_cu_exl3_ws_counters(ws->n_max)))
		want = 1;
	unsigned cps = (kb + want - 1) / want, slices = (kb + cps - 1) / cps;
	while (slices > 1 && base * slices > target) { /* no second wave of a few blocks */
		cps++;
		slices = (kb + cps - 1) / cps;
	}
	if ((st = tf_cu_module_load()))
		return st;
	tf_cu_func f;
	pthread_mutex_lock(&mu);
	if (experts_generation != tf_cu_module_generation()) {
		memset(experts_funcs, 0, sizeof(experts_funcs));
		memset(memo, 0, sizeof(memo));
		experts_generation = tf_cu_module_generation();
	}
	tf_cu_func *c = &experts_funcs[E->cb][slot];
	if (!*c) {
		char name[64];
		if (slot >= 2)
			snprintf(name, sizeof(name), "tf_exl3_experts10_cb2_r%u", rows_max);
		else
			snprintf(name, sizeof(name), "tf_exl3_experts_cb%d_r%u", (int)E->cb, rows_max);
		st = tf_cu_kernel(name, c);
		if (!st)
			experts_nonportable[E->cb][slot] =
				tf_cu->FuncSetAttribute(*c, TF_CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1) == 0;
	}
	f = *c;
	const unsigned cmax = experts_nonportable[E->cb][slot] ? TF_CU_EXL3_CLUSTER_MAX : TF_CU_EXL3_CLUSTER_PORTABLE;
	pthread_mutex_unlock(&mu);
	if (st)
		return st;
	if (invariant)
		slices_cap(kb, cmax, &cps, &slices);
	struct experts_args a = {
		.trellis = E->trellis, .table = E->table, .suh = E->suh, .svh = E->svh, .tasks = tasks,
		.xrow = xrow, .x = x, .y = y, .acc = ws ? ws->acc : 0, .count = ws ? ws->count : 0,
		.k = (int32_t)E->k, .n = (int32_t)E->n, .chunks_per_slice = (int32_t)cps, .y_bf16 = y_bf16,
	};
	void *params[] = {&a};
	/* Not a dependent launch but in the variant pdl-all: an experts block
	 * must wait before it reads its task, so nothing overlaps but the
	 * launch, and the waiting blocks hold their SM slots (6 experts
	 * 2304x5120 at 4 bits: 26.9 µs as a dependent launch, 21.2 not).
	 * A task's slices meet in a cluster as in tf_cu_exl3_gemv. */
	unsigned cy = 0;
	if (invariant) {
		if ((st = invariant_cluster(f, slices, "experts", E->k, E->n, &cy)))
			return st;
	} else {
		const unsigned want_cy = tf_cu_exl3_cluster_size(nb * slices * ntasks, slices, sms, cmax);
		if (want_cy && !(bits & V_NO_CLUSTER) &&
		    cluster_fits(f, slices, (unsigned long)nb * ntasks, 0))
			cy = want_cy;
	}
	last_cluster = cy;
	st = launch(f, nb, slices, ntasks, 256, 0, cy, s, params, (bits & V_PDL_ALL) != 0);
	if (st)
		return tf_err_wrap(st, "exl3 experts %ux%u %s: %u tasks (grid %ux%ux%u): ", E->k, E->n,
		                   tf_exl3_cb_name(E->cb), ntasks, nb, slices, ntasks);
	return TF_OK;
}
