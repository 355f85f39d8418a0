/* ops.h: the op backend table the DeepSeek-V4.1 forward is written over.
 *
 * The forward (compute/forward*.c) never touches numbers or memory itself:
 * it calls the ops below through a struct tf_be, whose table is filled by
 * a backend. The CPU backend (cpu*.c, tf_cpu_be_new) is the reference:
 * fp32 maths with the bf16 roundings of the forward spec (shared/reference/
 * dsv41-forward-spec.md, cited as "spec §n" below), threads over rows or
 * columns. The CUDA backend (cuda*.c over the kernels/ files, tf_cuda_be_new)
 * fills the same table on the GPU and is checked op by op against the CPU
 * one (tests/gpu/gpu_ops.c, with each op's tolerance).
 *
 * What runs over it: the whole forward of a rank, on either backend
 * (compute/model.h: tf-serve --engine cpu|cuda, tf-bench decode --backend
 * cpu|cuda), as one rank or as tensor-parallel ranks (threads of one
 * process: compute/group.h; processes: compute/ranks.h), whose
 * collectives (compute/tp.h) reach a device backend's tensors through
 * pinned host memory (host comms) or on its stream (NCCL, the mailbox).
 *
 * Tensors are described by struct tf_tensor: a data pointer the backend owns
 * (host memory for the CPU backend, a device address for CUDA: ops->device
 * says which), a dtype and up to four dimensions, row-major and contiguous.
 * Shapes in the comments read "[R, H, D] bf16": R rows (tokens), H heads, D
 * features. Index arrays (positions, key lists, selections, row lists) are
 * int32 tensors of the backend too, so that a device backend never reads
 * host pointers inside an op. Host data enters by upload and leaves by
 * download; every other move is an op (rows_copy, cache_write, ...).
 *
 * Every op returns TF_OK, TF_ERR_ARG (with a detail) for shapes or dtypes it
 * cannot take, or TF_ERR_UNSUPPORTED for a slot the backend leaves empty.
 * Checks that need the values of index tensors (offsets, key indices) are
 * made by the CPU backend only: a device backend cannot read them without
 * waiting, and skips what is out of range instead. Ops may be called from
 * one thread at a time per backend; each op may use the backend's worker
 * threads inside. On a device backend ops only queue work, in order, on
 * the backend's stream: download, sync and sample's tokens wait for it. */
#ifndef TF_COMPUTE_OPS_H
#define TF_COMPUTE_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "compute/kvrow.h"

/* Element types. Values grow only at the end. */
enum tf_dt {
	TF_DT_F32 = 0,
	TF_DT_BF16 = 1,
	TF_DT_F16 = 2,
	TF_DT_I32 = 3,
	TF_DT_U8 = 4,
};

#define TF_TENSOR_MAXDIM 4

struct tf_tensor {
	void *data;                       /* owned by the backend that allocated it */
	enum tf_dt dt;
	int ndim;                         /* 1..4 */
	int64_t shape[TF_TENSOR_MAXDIM];  /* unused dimensions are 1 */
};

/* Bytes of one element of dt. */
size_t tf_dt_size(enum tf_dt dt);
/* "f32", "bf16", ... */
const char *tf_dt_name(enum tf_dt dt);
/* Elements in t (the product of its shape). */
int64_t tf_tensor_numel(const struct tf_tensor *t);
size_t tf_tensor_bytes(const struct tf_tensor *t);
/* A tensor header over data (no allocation): dims are given as ndim int64s. */
struct tf_tensor tf_tensor_make(void *data, enum tf_dt dt, int ndim, ...);
/* The rows x cols view of t: rows = product of all dims but the last. */
int64_t tf_tensor_rows(const struct tf_tensor *t);
int64_t tf_tensor_cols(const struct tf_tensor *t);

/* RoPE frequencies for the rotated tail of a vector: dim/2 pair
 * frequencies f_i, built once per layer kind (spec §0). dim <= 128. */
struct tf_rope_freqs {
	int dim;          /* rotated dims (64 in the release) */
	double f[64];     /* f_i, i < dim/2, radians per position */
};

/* f_i = theta^(-2i/dim): ratio-0 layers (theta 1e4). */
void tf_rope_freqs_plain(struct tf_rope_freqs *rf, int dim, double theta);
/* YaRN without mscale (compressed layers: theta 1.6e5, factor 16, original
 * 65536, beta_fast 32, beta_slow 1): b_i = theta^(-2i/dim), lo = floor(c(beta_fast)),
 * hi = ceil(c(beta_slow)) with c(r) = dim*ln(orig/(2*pi*r))/(2*ln theta), clamped
 * to [0, dim-1]; ramp = clip((i-lo)/(hi-lo), 0, 1); f_i = b_i*(1-ramp) + b_i/factor*ramp. */
void tf_rope_freqs_yarn(struct tf_rope_freqs *rf, int dim, double theta, double factor,
			double orig_max, double beta_fast, double beta_slow);

/* Word i of fill_random's bits for seed: splitmix64's output for the state
 * seed + (i + 1) * 0x9e3779b97f4a7c15. */
static inline uint64_t tf_random_word(uint64_t seed, uint64_t i)
{
	uint64_t z = seed + (i + 1) * 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Sampling settings of one row (sample.h has the rules). */
struct tf_sample_params;
/* One EXL3 projection (trellis, suh, svh, geometry): model/exl3.h. */
struct tf_exl3_layer;

struct tf_be;

/* One call's work for ops->graph. run queues it: ops only (no download,
 * sync or sample), the same op calls for the same host inputs each time it
 * runs (host state it reads must not change between runs). undo releases
 * what run allocated, after any run that succeeded or not. key names the
 * call's shape (rows, sequences, modes): calls of one key may still differ,
 * the backend tells them apart. */
struct tf_be_work {
	const char *key;
	tf_status (*run)(void *arg);
	void (*undo)(void *arg);
	void *arg;
};

struct tf_ops {
	const char *name; /* "cpu", "cuda" */
	int device;       /* 1: tensors hold device addresses (never dereference
			   * them on the host); 0: host memory */

	/* Memory. alloc fills t->data for t's dt and shape (zeroed); release
	 * frees it (NULL data is a no-op). upload/download copy t's bytes. */
	tf_status (*alloc)(struct tf_be *be, struct tf_tensor *t);
	void (*release)(struct tf_be *be, struct tf_tensor *t);
	tf_status (*upload)(struct tf_be *be, struct tf_tensor *t, const void *src);
	tf_status (*download)(struct tf_be *be, const struct tf_tensor *t, void *dst);
	/* Host memory the backend copies to and from at its fastest (pinned
	 * on CUDA: downloads into it and uploads from it skip the staging,
	 * the host side of a device comm's absence: compute/tp.h), n bytes;
	 * host_free releases it (NULL: a no-op), after waiting for what
	 * reads it. An upload from it returns before the copy has run: the
	 * caller leaves those bytes alone until its next download or sync. */
	tf_status (*host_alloc)(struct tf_be *be, size_t n, void **p);
	void (*host_free)(struct tf_be *be, void *p);
	/* Wait for queued work (a no-op on the CPU). */
	tf_status (*sync)(struct tf_be *be);

	/* y = convert(x): same shape; f32 -> bf16/f16 rounds to nearest even. */
	tf_status (*convert)(struct tf_be *be, const struct tf_tensor *x, struct tf_tensor *y);

	/* t's bytes = random bits of seed: byte j is byte j % 8 (little-endian)
	 * of tf_random_word(seed, j / 8), the same on every backend (synthetic
	 * weights generated where they live). Any dtype and size. */
	tf_status (*fill_random)(struct tf_be *be, struct tf_tensor *t, uint64_t seed);

	/* y[R,N] = x[R,K] . W[N,K]^T with fp32 accumulation. x: f32/bf16/f16;
	 * W: f32/bf16/f16 (dense weights: the router gate, weights_proj, test
	 * packs); y: f32 (kept) or bf16 (rounded once). The head is this op
	 * (or exl3_matmul) with an f32 y: logits are never rounded (spec §12). */
	tf_status (*linear)(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *w,
			    struct tf_tensor *y);

	/* The EXL3 matmul, y[R,N] = x[R,K] . W (exl3-format.md: fp16 Hadamard-
	 * rotated activations): x bf16 (f32/f16 taken), y f32 or bf16. The
	 * layer's trellis, suh, svh and bias point into the backend's memory,
	 * as tensors do (device addresses on CUDA). The CPU backend keeps the
	 * rotated activations in fp32 (cpu_exl3.c). */
	tf_status (*exl3_matmul)(struct tf_be *be, const struct tf_exl3_layer *w,
				 const struct tf_tensor *x, struct tf_tensor *y);
	/* Ragged experts: experts[0..n_experts) are one projection's experts
	 * (widths may differ); rows of x are grouped by expert, group g = rows
	 * offsets[g]..offsets[g+1]-1 through expert expert_ids[g] (int32 [G] and
	 * [G+1]); y rows in the same order. A device backend takes the experts
	 * as one image (tf_exl3_experts_layout's trellises back to back, suh
	 * [E][K] and svh [E][N] contiguous), as a model's stacks lie. */
	tf_status (*exl3_matmul_experts)(struct tf_be *be, const struct tf_exl3_layer *experts,
					 int n_experts, const struct tf_tensor *expert_ids,
					 const struct tf_tensor *offsets, const struct tf_tensor *x,
					 struct tf_tensor *y);

	/* The same for dense experts (test packs): w[0..n_experts) are the
	 * experts' [N, K] weights (as linear takes them). */
	tf_status (*linear_experts)(struct tf_be *be, const struct tf_tensor *w, int n_experts,
				    const struct tf_tensor *expert_ids,
				    const struct tf_tensor *offsets, const struct tf_tensor *x,
				    struct tf_tensor *y);

	/* Embedding rows of a vocab slice (spec §2): ids int32 [R]; table
	 * [V_local, D] bf16 holding ids vocab_lo..vocab_lo+V_local-1; out
	 * [R, C, D] bf16 gets the row copied to each of its C copies (the four
	 * streams), zeros for ids outside the slice (TP ranks sum them). */
	tf_status (*embed)(struct tf_be *be, const struct tf_tensor *table, int64_t vocab_lo,
			   const struct tf_tensor *ids, struct tf_tensor *out);

	/* y = bf(x * (mean(x^2) + eps)^-1/2 * w) per row (spec §0): x [R, n]
	 * f32/bf16, w [n] f32/bf16, y [R, n] bf16 (or f32: no rounding). */
	tf_status (*rmsnorm)(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *w,
			     float eps, struct tf_tensor *y);

	/* RoPE of the last rf->dim dims of each n-wide vector, GPT-J interleaved
	 * pairs, angle pos*f_i in fp64, cos/sin in fp32, the rotation in fp32
	 * (spec §0); inverse rotates by -angle. x [R, H, n] (or [R, n]) f32/bf16,
	 * pos int32 [R], y like x in f32 or bf16 (rounded once; may alias x when
	 * the dtypes agree). */
	tf_status (*rope)(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *pos,
			  const struct tf_rope_freqs *rf, int inverse, struct tf_tensor *y);

	/* Sparse MQA with sinks (spec §8). q [R, H, D] bf16/f32; keys [NK, D]
	 * bf16/f32 (cache rows after dequantisation; V = K); row r attends to
	 * keys key_idx[key_off[r] .. key_off[r+1]-1] in that order (int32 [R+1]
	 * and [>= key_off[R]]: room past the last key is unused); sink [H] f32.
	 * out [R, H, D] f32:
	 *   z_k = q.k/sqrt(D), M = max(z, sink), w_k = exp(z_k-M)/(sum exp(z-M) + exp(sink-M)),
	 *   o = sum_k w_k k (fp32). A row with no keys gets zeros. */
	tf_status (*attention)(struct tf_be *be, const struct tf_tensor *q,
			       const struct tf_tensor *keys, const struct tf_tensor *key_off,
			       const struct tf_tensor *key_idx, const struct tf_tensor *sink,
			       struct tf_tensor *out);

	/* Compressor pooling and norm (spec §6) for E completed groups: u and g
	 * [E, r, W] f32 (the projections of the group's r positions, oldest
	 * first; g NULL when r = 1). r = 2: per d, softmax(g0,g1) weights u0,u1;
	 * r = 1: pooled = u. lat [E, W] bf16 = RMS(pooled; w, eps). */
	tf_status (*compressor)(struct tf_be *be, const struct tf_tensor *u,
				const struct tf_tensor *g, const struct tf_tensor *w, float eps,
				struct tf_tensor *lat);

	/* Indexer scores (spec §7): iq [R, Hi, Di] bf16/f32, iw [R, Hi] f32,
	 * keys [N, Di] f32/bf16 (dequantised index keys), n_vis int32 [R]
	 * (visible rows j < n_vis[r]); blocks u8 [R, nb] with nb >= ceil(N/bs)
	 * or NULL (a reindex layer: rows of unmarked blocks score -inf; block b
	 * of row r is blocks[r * nb + b]), bs the block size.
	 * scores [R, N] f32: s_j = sum_h (iw_h/sqrt(Hi)) max(0, iq_h.k_j/sqrt(Di)),
	 * -inf where invisible or masked. */
	tf_status (*index_score)(struct tf_be *be, const struct tf_tensor *iq,
				 const struct tf_tensor *iw, const struct tf_tensor *keys,
				 const struct tf_tensor *n_vis, const struct tf_tensor *blocks, int bs,
				 struct tf_tensor *scores);
	/* Selection (spec §7): sel int32 [R, k], n_sel int32 [R]. n_vis <= k:
	 * all j < n_vis; else the k largest finite scores, ties to the smaller j;
	 * listed ascending. */
	tf_status (*index_topk)(struct tf_be *be, const struct tf_tensor *scores,
				const struct tf_tensor *n_vis, int k, struct tf_tensor *sel,
				struct tf_tensor *n_sel);
	/* Candidate blocks of the candidate source (spec §7, layer 20): block b
	 * = rows bs*b .. bs*b+bs-1, B_b = max visible score, the newest visible
	 * block +inf; mark the topb best blocks with a visible row, ties to the
	 * smaller b. blocks u8 [R, nb], nb >= ceil(N/bs): 1 kept, 0 not (and 0
	 * in the columns past ceil(N/bs)). */
	tf_status (*candidate_blocks)(struct tf_be *be, const struct tf_tensor *scores,
				      const struct tf_tensor *n_vis, int bs, int topb,
				      struct tf_tensor *blocks);

	/* MoE routing (spec §10): lg [R, E] f32 router logits, bias [E] f32.
	 * sc = sqrt(softplus(lg)); pick the top k of sc + bias (ties to the
	 * smaller id) in that order; weight = scale * sc / sum of picked sc.
	 * ids int32 [R, k], weights f32 [R, k]. */
	tf_status (*moe_route)(struct tf_be *be, const struct tf_tensor *lg,
			       const struct tf_tensor *bias, int k, float scale,
			       struct tf_tensor *ids, struct tf_tensor *weights);
	/* Clamped SwiGLU: a = silu(min(gate, limit)) * clip(up, -limit, limit),
	 * silu(t) = t*sigmoid(t), fp32; gate, up [R, n] f32; a [R, n] bf16/f32. */
	tf_status (*swiglu)(struct tf_be *be, const struct tf_tensor *gate,
			    const struct tf_tensor *up, float limit, struct tf_tensor *a);
	/* branch = bf(sum_k w_k * y_k + shared): y [R, k, D] f32 in route order,
	 * w [R, k] f32, shared [R, D] f32 or NULL; branch [R, D] bf16. The sum
	 * runs in route order, then adds shared (spec §10). */
	tf_status (*moe_combine)(struct tf_be *be, const struct tf_tensor *y,
				 const struct tf_tensor *w, const struct tf_tensor *shared,
				 struct tf_tensor *branch);

	/* mHC mix (spec §3 steps 1-3): X [R, S, D] bf16 streams, fn [2S+S*S,
	 * S*D] f32, base [2S+S*S] f32, scale [3] f32. pre [R, S], post [R, S],
	 * comb [R, S, S] f32 (comb[i][j]: source i to target j), after iters
	 * Sinkhorn passes (the last on columns). eps is rms_norm_eps. */
	tf_status (*hc_mix)(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *fn,
			    const struct tf_tensor *base, const struct tf_tensor *scale, float eps,
			    float hc_eps, int iters, float post_alpha, struct tf_tensor *pre,
			    struct tf_tensor *post, struct tf_tensor *comb);
	/* Collapse (spec §3 step 4, §12): c [R, D] bf16 = bf(sum_s pre[s] X_s). */
	tf_status (*hc_collapse)(struct tf_be *be, const struct tf_tensor *x,
				 const struct tf_tensor *pre, struct tf_tensor *c);
	/* Post (spec §3 step 5): X'_j = bf(post_j b + sum_i comb[i][j] X_i);
	 * b [R, D] bf16; out [R, S, D] bf16, may alias x. */
	tf_status (*hc_post)(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *b,
			     const struct tf_tensor *post, const struct tf_tensor *comb,
			     struct tf_tensor *out);

	/* Engram gate (spec §11): X [R, S, D] bf16, kv [R, (S+1)*D] bf16 (keys
	 * of each stream, then the value), qk [S, D] f32, blocked u8 [R] or NULL
	 * (gate 0). dot = sum_d h qk key / sqrt(D) * rms(h)^-1 * rms(key)^-1,
	 * gate = sigmoid(sgn(dot) sqrt(max(|dot|, clamp))) with sgn(0) = +1,
	 * out_s = bf(h + gate val); out may alias x. */
	tf_status (*engram_gate)(struct tf_be *be, const struct tf_tensor *x,
				 const struct tf_tensor *kv, const struct tf_tensor *qk,
				 const struct tf_tensor *blocked, float eps, float clamp,
				 struct tf_tensor *out);

	/* ---- moving rows (the forward's only way to move data) ---- */

	/* Row moves: x [Nx, C] and y [Ny, C] seen as rows of their last
	 * dimension (tf_tensor_rows/cols), the same dtype and C. n moves, n =
	 * numel(xi) when xi is given, else numel(yi), else rows(x): move m
	 * copies x row (xi ? xi[m] : m) to y row (yi ? yi[m] : m). A move whose
	 * index is < 0 or past its tensor's rows is skipped (the y row keeps
	 * what it held). xi, yi int32 (any shape) or NULL; yi lists a y row at
	 * most once. x and y may be the same tensor when no row is both read
	 * and written. */
	tf_status (*rows_copy)(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *xi,
			       struct tf_tensor *y, const struct tf_tensor *yi);

	/* Cache rows (kvrow.h): cache u8 [rows, tf_rowfmt_bytes(f)] holds
	 * stored rows. cache_write quantises x [n, f->dim] (f32 or bf16) row m
	 * into cache row idx[m] (int32 [n]); cache_read dequantises cache row
	 * idx[m] into out [n, f->dim] (f32 or bf16, rounded once). An index
	 * < 0 or past the cache's rows is skipped on write and reads as a row
	 * of zeros. The bytes are kvrow.c's, on every backend. */
	tf_status (*cache_write)(struct tf_be *be, const struct tf_rowfmt *f, const struct tf_tensor *x,
				 const struct tf_tensor *idx, struct tf_tensor *cache);
	tf_status (*cache_read)(struct tf_be *be, const struct tf_rowfmt *f,
				const struct tf_tensor *cache, const struct tf_tensor *idx,
				struct tf_tensor *out);

	/* Physical rows of logical cache rows through a page table: pt int32
	 * [P] (physical pages of one sequence), rpp rows a page; logical and
	 * out int32 [n]: out[m] = pt[l / rpp] * rpp + l % rpp for l =
	 * logical[m], or -1 when l < 0 or l / rpp >= P. */
	tf_status (*page_rows)(struct tf_be *be, const struct tf_tensor *pt, int rpp,
			       const struct tf_tensor *logical, struct tf_tensor *out);

	/* Key lists of one sequence's n rows at positions p0 .. p0 + n - 1
	 * (spec §8), for attention over a key table of pool rows then window
	 * rows. Row i attends to its selected pool rows, then to its window
	 * rows max(0, p - window + 1) .. p (p = p0 + i) in position order.
	 * Selected rows: none when sel is NULL; else t < n_sel[i] of sel
	 * [n, k] (int32; n_sel int32 [n]), the key being table row pbase +
	 * sel[i][t] when direct (the table holds every pool row, in order) or
	 * pbase + i * k + t (each row's selections have rows of their own).
	 * Window position pp is table row wbase + pp - max(0, p0 - window + 1).
	 * key_off int32 [n + 1]: row i's keys are key_idx [key_off[i],
	 * key_off[i + 1]), the first at 0, or with append at the value
	 * key_off[0] already holds (the end of the list an earlier call wrote
	 * over the rows before these, through a view of the same key_off), so
	 * that several sequences' lists lie back to back in one key_idx over
	 * one table (pbase, wbase) and one attention call serves them all.
	 * key_idx int32 with room for every key (n * k + the window keys at
	 * most; with append, past key_off[0]): keys past its end are not
	 * written (the CPU refuses them). */
	tf_status (*attn_keys)(struct tf_be *be, const struct tf_tensor *sel,
			       const struct tf_tensor *n_sel, int direct, int64_t p0, int window,
			       int64_t pbase, int64_t wbase, int append,
			       struct tf_tensor *key_off, struct tf_tensor *key_idx);

	/* Grouping of routed rows by expert (spec §10): ids int32 [R, k]. The
	 * pairs t = r * k + j with 0 <= ids[t] < E, sorted by expert and
	 * stable in t: offsets int32 [E + 1] (expert e's pairs are p =
	 * offsets[e] .. offsets[e + 1] - 1), pair int32 [R * k] (pair p's t)
	 * and src int32 [R * k] (pair p's row, t / k); entries past the last
	 * pair are -1. */
	tf_status (*moe_group)(struct tf_be *be, const struct tf_tensor *ids, int E,
			       struct tf_tensor *offsets, struct tf_tensor *pair,
			       struct tf_tensor *src);

	/* Stream mean (spec §13 taps): x [R, S, D] bf16, out [R, D] bf16 =
	 * bf((x_0 + x_1 + ... + x_{S-1}) / S), the sum in fp32 in stream order. */
	tf_status (*stream_mean)(struct tf_be *be, const struct tf_tensor *x, struct tf_tensor *out);

	/* Keyed sampling of R rows of logits [R, V] f32 (sample.h): params[r],
	 * positions int64 [R] (host arrays), tokens out (host, int32 [R]). */
	tf_status (*sample)(struct tf_be *be, const struct tf_tensor *logits,
			    const struct tf_sample_params *params, const int64_t *positions,
			    int32_t *tokens);

	/* Queue w's work once: as a replayed CUDA graph when the backend has
	 * one for exactly this work, else captured into one, else eagerly
	 * (cuda_graph.c has the rules; $TF_CUDA_GRAPHS=0 is always eager). w
	 * may run more than once (w->undo in between); on return the
	 * allocations of one run are live, whatever the status, and the
	 * caller downloads its results, then calls w->undo. The results are
	 * those of one eager run, bit for bit. NULL (the CPU): the caller
	 * calls w->run itself. */
	tf_status (*graph)(struct tf_be *be, const struct tf_be_work *w);

	/* Release the backend (its own state, not tensors still held). */
	void (*free)(struct tf_be *be);
};

struct tf_be {
	const struct tf_ops *ops;
	void *impl; /* the backend's state */
};

/* The CPU backend over a pool of `threads` workers (0: one per CPU; the
 * pool is owned by the backend). Free with tf_be_free. */
tf_status tf_cpu_be_new(int threads, struct tf_be **out);
/* The CUDA backend on device ordinal `device`: its primary context, one
 * stream (every op is queued on it; only download, sync and sample's
 * tokens wait for the device), memory from a device arena, cuBLAS where it
 * is installed. TF_ERR_UNAVAILABLE, saying why, without a driver, a
 * device or kernels in this build (CUDA=0). Free with tf_be_free; the
 * thread that uses it must be the one that made it, or call
 * tf_cuda_be_use first. */
tf_status tf_cuda_be_new(int device, struct tf_be **out);
/* The device memory a CUDA backend's device has free and in all, in bytes
 * (TF_ERR_UNSUPPORTED on the CPU backend). */
tf_status tf_cuda_be_memory(struct tf_be *be, uint64_t *free_bytes, uint64_t *total_bytes);
/* Make be's context current on the calling thread (a no-op for the CPU). */
tf_status tf_cuda_be_use(struct tf_be *be);
/* The CUDA stream every op of be is queued on (a tf_cu_stream: cuda/driver.h),
 * for a collective that must be ordered with them (compute/tp.h).
 * TF_ERR_UNSUPPORTED for a backend that is not CUDA. */
tf_status tf_cuda_be_stream(struct tf_be *be, void **stream);
/* Tensor-parallel ranks whose graphed calls hold collectives on the
 * stream: every graphed call is voted over the ranks with agree (AND of
 * mine over every rank, called by each rank at the same points: see
 * cuda_graph.c), so that every rank replays, captures, evicts and drops
 * graphs together. NULL agree: one rank (the default). Set it while no
 * graphed call runs. TF_ERR_UNSUPPORTED for a backend that is not CUDA. */
tf_status tf_cuda_be_set_agree(struct tf_be *be, tf_status (*agree)(void *ctx, bool mine, bool *all),
			       void *ctx);

/* What a CUDA backend queued on its stream since it was made: every item
 * of work once per call that ran it, eagerly or inside a graph (a replayed
 * graph's items are those its dry pass recorded), and what became of the
 * calls given to ops->graph. Kernels per decode step = the difference of
 * kernels over a number of steps, divided by it. */
struct tf_be_counters {
	uint64_t kernels;        /* kernel launches */
	uint64_t blas;           /* cuBLAS calls (their own kernels not counted) */
	uint64_t copies;         /* memcpy nodes or calls, either way */
	uint64_t memsets;
	uint64_t graph_launches; /* graphs launched: graph_hits + graph_captures */
	uint64_t graph_hits;     /* graphed calls replayed from the cache */
	uint64_t graph_captures; /* graphed calls captured, stored and launched */
	uint64_t graph_eager;    /* graphed calls that ran eagerly instead (off,
				  * refused by the dry pass, declined, no room,
				  * skipped after misses, voted down by a peer,
				  * or never graphable: the decode steps of a
				  * forward whose collectives go through host
				  * memory, compute/tp.h) */
	uint64_t graph_declined; /* captures that did not match their dry pass */
	uint64_t graph_cached;   /* graphs held now */
};
/* be's counters. TF_ERR_UNSUPPORTED for a backend that is not CUDA. */
tf_status tf_cuda_be_counters(struct tf_be *be, struct tf_be_counters *out);
/* Turn graphed calls on or off for be (on: unless $TF_CUDA_GRAPHS is "0"
 * or the driver cannot fingerprint kernels; off drops every graph).
 * Ranks in step (tf_cuda_be_set_agree) call it on every rank alike, between
 * the same calls. TF_ERR_UNSUPPORTED for a backend that is not CUDA. */
tf_status tf_cuda_be_set_graphs(struct tf_be *be, int on);
/* The batch-invariant path on or off for be (off when made): on, a row's
 * results do not depend on the rows that share its calls nor on their
 * count, and repeat to the bit, so a sequence decoded alone or among
 * others, drafted or not, gets the same logits. The ops whose order
 * depends on the rows take one order instead: the EXL3 matmuls the fp16
 * MMA body for every row count, with split-K sums always meeting in a
 * thread-block cluster in rank order (cuda/exl3_gemv.h), and no cuBLAS or
 * tile GEMM; dense linears the warp kernel 16 rows at a time; attention
 * keeps its splits of a row's keys in calls too big for their partials
 * (launches of fewer rows), where the default path takes one split. The
 * norms, routing, combine and sampling are batch-invariant either way. It
 * costs speed (tf-bench decode --batch-invariant; BENCHMARKS.md).
 * Graphs stay valid: their keys carry the kernels' fingerprint.
 * TF_ERR_UNSUPPORTED for a backend that is not CUDA. */
tf_status tf_cuda_be_set_invariant(struct tf_be *be, int on);
bool tf_cuda_be_invariant(struct tf_be *be);
/* Release a backend (NULL is a no-op). */
void tf_be_free(struct tf_be *be);

/* Allocate a tensor of dt and shape on be (zeroed). */
tf_status tf_be_tensor(struct tf_be *be, struct tf_tensor *t, enum tf_dt dt, int ndim, ...);

/* dtype masks for tf_op_check */
#define TF_DTS_F32 (1u << TF_DT_F32)
#define TF_DTS_BF16 (1u << TF_DT_BF16)
#define TF_DTS_F16 (1u << TF_DT_F16)
#define TF_DTS_I32 (1u << TF_DT_I32)
#define TF_DTS_U8 (1u << TF_DT_U8)
#define TF_DTS_FLOAT (TF_DTS_F32 | TF_DTS_BF16 | TF_DTS_F16)
/* For backends: TF_ERR_ARG naming op and what unless t is non-NULL with
 * data, its dtype in the mask dts and numel == n (n < 0: any). */
tf_status tf_op_check(const char *op, const char *what, const struct tf_tensor *t, unsigned dts,
		      int64_t n);

/* A view of rows [r0, r0 + n) of t's first dimension: the address moves,
 * nothing is read (valid for host and device tensors alike). */
struct tf_tensor tf_tensor_rows_of(const struct tf_tensor *t, int64_t r0, int64_t n);
/* t with another shape of the same element count (a view). */
struct tf_tensor tf_tensor_view(const struct tf_tensor *t, int ndim, ...);

#endif
