/* exl3_gemv.h: the launcher of kernels/exl3_gemv.cu, the fused EXL3 matmul
 * for 1..16 rows on the GPU (the CPU twin is tf_exl3_matmul).
 *
 * y[rows][N] = x[rows][K] · W, W = diag(suh)·Ĥ·Ŵ·Ĥ·diag(svh) decoded from
 * the trellis inside the kernel (exl3-format.md §5). x is bf16, y f32 or
 * bf16; trellis, suh and svh stay in the device layout of the pack (I16
 * [K/16][N/16][16·bits], F16 [K], F16 [N]). One launch per call: K is split
 * into slices whose partial sums meet in a workspace that the kernel leaves
 * zeroed again. */
#ifndef TF_CUDA_EXL3_GEMV_H
#define TF_CUDA_EXL3_GEMV_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "cuda/driver.h"
#include "model/exl3.h"

#define TF_CU_EXL3_ROWS_MAX 16

/* A layer on the device. Pointers are borrowed device addresses, 16-byte
 * aligned. */
struct tf_cu_exl3_layer {
	struct tf_exl3_geom g;
	tf_cu_ptr trellis; /* u16 [K/16][N/16][16·bits] */
	tf_cu_ptr suh;     /* f16 [K] */
	tf_cu_ptr svh;     /* f16 [N] */
};

/* Scratch of the split-K sums: f32 [16][n_max] and 16 counters per 128
 * columns (+1), zeroed. One per stream: launches sharing one must be
 * ordered. */
struct tf_cu_exl3_ws {
	tf_cu_ptr acc;
	tf_cu_ptr count;
	uint32_t n_max;
};
/* Counters in a workspace for n_max columns. */
static inline size_t tf_cu_exl3_ws_counters(uint32_t n_max) { return (size_t)16 * (n_max / 128) + 1; }

/* Allocate and zero a workspace for layers up to n_max columns. */
tf_status tf_cu_exl3_ws_init(struct tf_cu_exl3_ws *ws, uint32_t n_max);
void tf_cu_exl3_ws_release(struct tf_cu_exl3_ws *ws);

/* How a launch is cut: grid (n/128) × slices, chunks_per_slice 128-blocks
 * of K each, aiming at blocks_per_sm blocks on each of sms processors
 * (0: 4). */
struct tf_cu_exl3_plan {
	unsigned grid_x, slices, chunks_per_slice, rows_tmpl;
};
void tf_cu_exl3_plan(const struct tf_exl3_geom *g, uint32_t rows, int sms, int blocks_per_sm,
                     struct tf_cu_exl3_plan *p);

/* The most slices a cluster launch spans (kernels/exl3_gemv.cuh
 * GEMV_CLUSTER_MAX), and the portable most (without the kernel's
 * non-portable cluster size allowed). */
#define TF_CU_EXL3_CLUSTER_MAX 16
#define TF_CU_EXL3_CLUSTER_PORTABLE 8
/* The cluster size a launch of blocks blocks, each column block's K in
 * slices slices, wants on sms processors: slices when there are 2..cmax
 * of them and at least three blocks an SM, else 0 (the workspace). On
 * the H200 clusters gained where the grid held three or four blocks an
 * SM (1.09–1.13x) and lost at one or two (0.5–0.8x; kernels/NOTES.md),
 * and plans were not changed to make clusters fit (capping lost too). */
unsigned tf_cu_exl3_cluster_size(unsigned blocks, unsigned slices, int sms, unsigned cmax);

/* The tuned path is what every launch takes; the alternatives it was
 * measured against remain for benchmarks and tests, chosen by one
 * selector: spec is a comma list of
 *   no-v10      MUL1 layers of up to 4 rows take the fp16 bodies;
 *   no-v7       one row takes the _r1 body, not the lean v7;
 *   no-cluster  split-K slices always meet in the workspace;
 *   no-spread   the v10 grids are not spread over the SMs;
 *   pdl-all     every launch is a programmatic dependent launch;
 *   pdl-none    none is (tuned: the v10 launches only);
 * "" or "tuned" for none of them, NULL to read $TF_CUDA_EXL3_VARIANT
 * (which the first launch reads otherwise). TF_ERR_ARG naming a word it
 * does not know (a launch then fails with it). Not thread safe against
 * launches in flight. kernels/NOTES.md has what each measured. */
tf_status tf_cu_exl3_variant(const char *spec);

/* The cluster size (blocks along K) of this thread's last
 * tf_cu_exl3_gemv or tf_cu_exl3_experts launch, 0 when it was not a
 * cluster launch. */
unsigned tf_cu_exl3_last_cluster(void);

/* A grid smaller than the SMs can hold is placed unevenly: the block
 * scheduler fills some SMs to their limit (fit blocks) and leaves others
 * idle. The dynamic shared memory a block asks for so that only
 * ceil(blocks / sms) of them share an SM (228 KiB an SM on Hopper, 1 KiB
 * of it reserved a block; static_smem: the kernel's own), at most
 * 188 KiB; 0 when the grid fills every SM to fit anyway. The v10 launches
 * use it (but in the variant no-spread). */
unsigned tf_cu_exl3_spread(unsigned blocks, int sms, int fit, int static_smem);

/* Enqueue y = x · W on stream s. x: bf16 [rows][K]; y: [rows][N], f32 or
 * (y_bf16) bf16; rows 1..16.
 *
 * The tuned path: up to 4 rows of a MUL1 layer take the v10 body (the hash
 * bytes straight into int8 tensor-core MMAs, whose 8 columns hold 4 rows'
 * u at the instructions of one; 1.2–1.4× v7 at one row on the H200,
 * 1.1–1.4× the fp16 MMA body at 2 and 4, NOTES.md v10), as programmatic
 * dependent launches (they read x and the workspace and write y only
 * after the launches before them are done) with their grid spread over
 * the SMs. Other one-row layers take the lean body (v7: fp16 sums over a
 * whole chunk, one fence before the split-K counter; 4–6% faster on the
 * H200), 2..16 rows the fp16 MMA body. A layer planned as 2..16 slices of
 * K with three or more blocks an SM (tf_cu_exl3_cluster_size) is launched
 * with each column block's slices as one thread-block cluster, where the
 * driver can place every cluster at once: the slices meet in shared
 * memory in rank order; else they meet in the workspace by fp32 atomics,
 * in no fixed order.
 *
 * invariant (the batch-invariant path): a row's y does not depend on the
 * rows beside it nor on their count, and repeats to the bit: every row
 * count takes the fp16 MMA body (each row a column of the MMAs, summed
 * alone in one order), the plan is the rows' one, and its slices (at most
 * 16, or 8 where the driver refuses non-portable clusters) always meet in
 * a cluster in rank order, never in the workspace (ws may be NULL).
 * TF_ERR_UNSUPPORTED where such a cluster cannot be placed.
 *
 * TF_ERR_ARG for a bad geometry, rows, or a workspace too small; driver
 * errors from the launch. */
tf_status tf_cu_exl3_gemv(const struct tf_cu_exl3_layer *L, tf_cu_ptr x, uint32_t rows, tf_cu_ptr y,
                          bool y_bf16, const struct tf_cu_exl3_ws *ws, int sms, int blocks_per_sm,
                          bool invariant, tf_cu_stream s);

/* ---- many experts in one launch (MoE) ---- */

/* A projection's experts on the device, back to back as
 * tf_exl3_experts_layout places them: one K × N shape and codebook, a bit
 * width per expert. table: the device copy of what
 * tf_cu_exl3_experts_table writes (16 bytes an expert). */
struct tf_cu_exl3_experts {
	uint32_t k, n, count;
	enum tf_exl3_cb cb;
	tf_cu_ptr trellis; /* every expert's trellis, at its offset */
	tf_cu_ptr table;   /* [count] {u64 offset, i32 bits, i32 0} */
	tf_cu_ptr suh;     /* f16 [count][K] */
	tf_cu_ptr svh;     /* f16 [count][N] */
};
#define TF_CU_EXL3_EXPERT_BYTES 16
/* Write the host image of the table (count · 16 bytes) from the
 * geometries and offsets of tf_exl3_experts_layout. */
void tf_cu_exl3_experts_table(const struct tf_exl3_geom *g, const uint64_t *offsets, uint32_t count,
                              void *table);

/* One task of a launch: an expert applied to count ≤ rows_max routed
 * rows, pairs first..first+count (x rows xrow[pair], output rows pair). */
struct tf_cu_exl3_task {
	int32_t expert, first, count, pad;
};

/* Group routing into tasks: sel[r·topk + j] is row r's j-th expert (< 0:
 * none). Pairs are sorted by expert (stable in r); each expert's pairs
 * are cut into tasks of at most rows_max (the launch takes 1 or 4).
 * Writes xrow[p] (x row of pair p), pair_of[r·topk + j] (the pair, or
 * −1), tasks; returns the number of tasks (at most rows·topk). *npairs
 * gets the pair count. */
uint32_t tf_cu_exl3_route(const int32_t *sel, uint32_t rows, uint32_t topk, uint32_t nexperts,
                          uint32_t rows_max, struct tf_cu_exl3_task *tasks, int32_t *xrow,
                          int32_t *pair_of, uint32_t *npairs);

/* Enqueue, in one launch, y[p] = x[xrow[p]] · W_e for every pair p of
 * every task (e the task's expert). tasks, xrow: device copies; rows_max
 * as given to tf_cu_exl3_route; x bf16 [*][K]; y [pairs][N] f32 or bf16.
 * Split-K uses ws when it is large enough (ntasks·rows_max·N floats),
 * else each block takes all of K; a task's 2..16 slices meet in a
 * thread-block cluster instead where all clusters fit at once (as in
 * tf_cu_exl3_gemv). MUL1 experts take the v10 bodies (tf_cu_exl3_variant).
 *
 * invariant: rows_max must be 4 (the fp16 MMA body: a pair's y does not
 * depend on the pairs sharing its task); K is sliced as for
 * TF_CU_EXL3_INVARIANT_TASKS tasks whatever ntasks is, the slices meeting
 * in a cluster in rank order, as tf_cu_exl3_gemv's invariant path. */
#define TF_CU_EXL3_INVARIANT_TASKS 8
/* The waves of blocks an experts launch off the batch-invariant path aims
 * at: 2 (measured 6-14% faster decode steps than 1 at 1 to 64 rows on the
 * H200, BENCHMARKS.md), or 1 and 4 under the variants experts-waves1 and
 * experts-waves4 (tf_cu_exl3_variant). The launch splits K into more
 * slices to fill them, where the workspace holds their sums. */
unsigned tf_cu_exl3_experts_waves(void);
tf_status tf_cu_exl3_experts(const struct tf_cu_exl3_experts *E, tf_cu_ptr tasks, uint32_t ntasks,
                             uint32_t rows_max, tf_cu_ptr xrow, tf_cu_ptr x, tf_cu_ptr y,
                             bool y_bf16, const struct tf_cu_exl3_ws *ws, int sms,
                             int blocks_per_sm, bool invariant, tf_cu_stream s);

#endif
