/* cuda_attn.c: the CUDA attention ops (dsv41-forward-spec.md §6-§8): sparse
 * MQA with sinks, the compressor's pooling and norm, indexer scores, top-k
 * selection, candidate blocks and the key lists. Kernels: kernels/attn.cu
 * (its opening comment has the maths, accuracy and launch limits); CPU
 * twins: cpu_attn.c; both make ops_args.h's argument checks.
 *
 * What the CPU checks in the index arrays' values (key_off in order,
 * key_idx within the keys, the key lists fitting key_idx) lives in device
 * memory here and is not read: attention clamps key_off to key_idx and
 * skips keys outside the table, and attn_keys refuses a key_idx without
 * room for the most keys the rows could have (n k plus the windows). */
#include <math.h>

#include "compute/cuda_impl.h"
#include "compute/ops_args.h"

static struct cuda_fn fn_mqa[2][3] = {
	{{.name = "tf_attn_mqa_f32_e4"}, {.name = "tf_attn_mqa_f32_e8"},
	 {.name = "tf_attn_mqa_f32_e16"}},
	{{.name = "tf_attn_mqa_bf16_e4"}, {.name = "tf_attn_mqa_bf16_e8"},
	 {.name = "tf_attn_mqa_bf16_e16"}},
};
/* the same at 4 heads a block (128 threads), D > 256 */
static struct cuda_fn fn_mqa4[2] = {{.name = "tf_attn_mqa4_f32_e16"},
				    {.name = "tf_attn_mqa4_bf16_e16"}};
static struct cuda_fn fn_mqa_merge = {.name = "tf_attn_mqa_merge"};
static struct cuda_fn fn_compressor = {.name = "tf_attn_compressor"};
static struct cuda_fn fn_score[2][2] = {
	{{.name = "tf_attn_score_f32_t4"}, {.name = "tf_attn_score_f32_t8"}},
	{{.name = "tf_attn_score_bf16_t4"}, {.name = "tf_attn_score_bf16_t8"}},
};
static struct cuda_fn fn_topk = {.name = "tf_attn_topk"};
static struct cuda_fn fn_blockmax = {.name = "tf_attn_blockmax"};
static struct cuda_fn fn_blocks = {.name = "tf_attn_blocks"};
static struct cuda_fn fn_keys_off = {.name = "tf_attn_keys_off"};
static struct cuda_fn fn_keys_fill = {.name = "tf_attn_keys_fill"};

#define MQA_MAX_D 512     /* 16 elements a lane */
#define MQA_HEADS 8       /* heads a block */
#define MQA_SPLIT_KEYS 32 /* a split's keys of the row's room: one tile */
#define MQA_MAX_SPLITS 32
#define SEL_THREADS 1024
#define CMP_MAX_W 12288   /* 48 KiB of shared memory */

/* ---- attention ---- */

/* Splits of each row's key list: one per 32 keys of a row's room (room /
 * R: the forward gives every row of a layer the same room, and key_off's
 * values stay on the device). The count depends on the layer, never on
 * how many rows share the call, so a row's sums run in the same order
 * alone or batched: a row's result does not depend on its batch. Calls
 * whose split partials would pass MQA_SPLIT_BYTES (about 200 rows of the
 * release's 640 keys: prefill pieces) take one split, which their rows
 * fill the SMs with (prefill of 4K tokens 1418 tokens/s on the H200,
 * against 1140 as launches of fewer rows, BENCHMARKS.md), or on the
 * batch-invariant path run as launches of fewer rows with the splits of
 * their room. */
#define MQA_SPLIT_BYTES ((int64_t)512 << 20)

static int mqa_splits(int64_t room, int64_t R)
{
	int64_t s = (room / R + MQA_SPLIT_KEYS - 1) / MQA_SPLIT_KEYS;
	return s < 1 ? 1 : s > MQA_MAX_SPLITS ? MQA_MAX_SPLITS : (int)s;
}

tf_status cuda_attention(struct tf_be *be, const struct tf_tensor *q, const struct tf_tensor *keys,
			 const struct tf_tensor *key_off, const struct tf_tensor *key_idx,
			 const struct tf_tensor *sink, struct tf_tensor *out)
{
	tf_status st;
	int64_t R, H, D;
	if ((st = tf_args_attention(q, keys, key_off, key_idx, sink, out, &R, &H, &D)))
		return st;
	int64_t NK = tf_tensor_rows(keys), room = tf_tensor_numel(key_idx);
	if (D > MQA_MAX_D)
		return tf_err(TF_ERR_ARG, "attention: head width %lld past the kernel's %d",
			      (long long)D, MQA_MAX_D);
	if (!R)
		return TF_OK;
	int64_t groups = (H + MQA_HEADS - 1) / MQA_HEADS;
	int S = mqa_splits(room, R);
	if (S > 1 && !tf_cuda_be_invariant(be) &&
	    R * H * S * (D + 2) * (int64_t)sizeof(float) > MQA_SPLIT_BYTES)
		S = 1;
	/* rows a launch: all, or as many as MQA_SPLIT_BYTES of partials hold */
	const int64_t row_part = H * S * (D + 2) * (int64_t)sizeof(float);
	int64_t step = S > 1 ? MQA_SPLIT_BYTES / row_part : R;
	step = step < 1 ? 1 : step > R ? R : step;
	tf_cu_ptr part = 0;
	if (S > 1 && (st = cuda_scratch(be, (size_t)(step * row_part), &part)))
		return st;
	struct cuda_fn *fn = &fn_mqa[keys->dt == TF_DT_BF16][D <= 128 ? 0 : D <= 256 ? 1 : 2];
	/* Few blocks of 8 heads (one an SM, 221 registers) leave most SMs
	 * idle: 4 heads a block (3 an SM) then, twice the blocks. A head's
	 * sums run in the same order either way (kernels/attn.cu), so the
	 * choice, which depends on R, changes no bits. */
	unsigned hg = 8;
	if (D > 256 && R * groups * S < 4 * (int64_t)cuda_sms(be)) {
		fn = &fn_mqa4[keys->dt == TF_DT_BF16];
		hg = 4;
	}
	const int64_t bgroups = (H + hg - 1) / hg;
	/* q, keys [NK, D], key_off [R + 1], key_idx [room], sink [H] -> out [R, H, D] f32 */
	tf_cu_ptr kp = cuda_ptr(keys), ip = cuda_ptr(key_idx), sp = cuda_ptr(sink);
	int32_t q_dt = (int32_t)q->dt, h32 = (int32_t)H, d32 = (int32_t)D, s32 = S;
	float scale = 1.0f / sqrtf((float)D);
	for (int64_t r0 = 0; r0 < R && !st; r0 += step) {
		const int64_t m = R - r0 < step ? R - r0 : step;
		tf_cu_ptr qp = cuda_ptr(q) + (uint64_t)(r0 * H * D) * tf_dt_size(q->dt);
		tf_cu_ptr op = cuda_ptr(key_off) + (uint64_t)r0 * sizeof(int32_t);
		tf_cu_ptr outp = cuda_ptr(out) + (uint64_t)(r0 * H * D) * sizeof(float);
		void *p[] = {&qp, &q_dt, &kp, &NK, &op, &ip, &room, &sp, &outp, &part, &h32, &d32,
			     &s32, &scale};
		st = cuda_launch(be, fn, (unsigned)(m * bgroups), (unsigned)S, 32 * hg, 0, p);
		if (!st && S > 1) {
			void *pm[] = {&part, &sp, &outp, &h32, &d32, &s32};
			st = cuda_launch(be, &fn_mqa_merge, (unsigned)(m * H), 1, 128, 0, pm);
		}
	}
	if (part)
		cuda_scratch_release(be, part);
	return st;
}

/* ---- compressor ---- */

tf_status cuda_compressor(struct tf_be *be, const struct tf_tensor *u, const struct tf_tensor *g,
			  const struct tf_tensor *w, float eps, struct tf_tensor *lat)
{
	tf_status st;
	int64_t E, r, W;
	if ((st = tf_args_compressor(u, g, w, lat, &E, &r, &W)))
		return st;
	if (W > CMP_MAX_W)
		return tf_err(TF_ERR_ARG, "compressor: width %lld past the kernel's %d",
			      (long long)W, CMP_MAX_W);
	/* u, g [E, r, W] f32, w [W] -> lat [E, W] f32/bf16 */
	tf_cu_ptr up = cuda_ptr(u), gp = r == 2 ? cuda_ptr(g) : 0, wp = cuda_ptr(w);
	tf_cu_ptr lp = cuda_ptr(lat);
	int32_t w_dt = (int32_t)w->dt, l_dt = (int32_t)lat->dt, w32 = (int32_t)W, r32 = (int32_t)r;
	void *p[] = {&up, &gp, &wp, &w_dt, &lp, &l_dt, &w32, &r32, &eps};
	return cuda_launch(be, &fn_compressor, (unsigned)E, 1, 256,
			   (unsigned)(W * (int64_t)sizeof(float)), p);
}

/* ---- indexer ---- */

tf_status cuda_index_score(struct tf_be *be, const struct tf_tensor *iq,
			   const struct tf_tensor *iw, const struct tf_tensor *keys,
			   const struct tf_tensor *n_vis, const struct tf_tensor *blocks, int bs,
			   struct tf_tensor *scores)
{
	tf_status st;
	int64_t R, Hi, Di, N, nblk;
	if ((st = tf_args_index_score(iq, iw, keys, n_vis, blocks, bs, scores, &R, &Hi, &Di, &N,
				      &nblk)))
		return st;
	if (N == 0 || R == 0)
		return TF_OK;
	/* 8T heads a pass and 1024/T keys a block: T = 4 fits 32 heads. */
	int t8 = Hi > 32;
	int64_t tj = t8 ? 128 : 256, tiles = (N + tj - 1) / tj;
	if (tiles * R > 0x7fffffff)
		return tf_err(TF_ERR_ARG, "index_score: %lld rows of %lld keys past the grid",
			      (long long)R, (long long)N);
	/* iq [R, Hi, Di], iw [R, Hi], keys [N, Di], n_vis [R], blocks [R, nblk] -> scores [R, N] */
	tf_cu_ptr qp = cuda_ptr(iq), wp = cuda_ptr(iw), kp = cuda_ptr(keys);
	tf_cu_ptr np = cuda_ptr(n_vis), bp = blocks ? cuda_ptr(blocks) : 0, sp = cuda_ptr(scores);
	int32_t q_dt = (int32_t)iq->dt, bs32 = blocks ? bs : 1, hi = (int32_t)Hi, di = (int32_t)Di;
	float hs = 1.0f / sqrtf((float)Hi), ds = 1.0f / sqrtf((float)Di);
	void *p[] = {&qp, &q_dt, &wp, &kp, &np, &bp, &nblk, &bs32, &sp, &N, &hi, &di, &hs, &ds};
	return cuda_launch(be, &fn_score[keys->dt == TF_DT_BF16][t8], (unsigned)(tiles * R), 1, 256,
			   0, p);
}

tf_status cuda_index_topk(struct tf_be *be, const struct tf_tensor *scores,
			  const struct tf_tensor *n_vis, int k, struct tf_tensor *sel,
			  struct tf_tensor *n_sel)
{
	tf_status st;
	int64_t R, N;
	if ((st = tf_args_index_topk(scores, n_vis, k, sel, n_sel, &R, &N)))
		return st;
	if (R == 0)
		return TF_OK;
	/* scores [R, N] f32, n_vis [R] -> sel [R, k], n_sel [R] int32 */
	tf_cu_ptr sp = cuda_ptr(scores), np = cuda_ptr(n_vis), op = cuda_ptr(sel);
	tf_cu_ptr cp = cuda_ptr(n_sel);
	int32_t k32 = k;
	void *p[] = {&sp, &np, &N, &k32, &op, &cp};
	return cuda_launch(be, &fn_topk, (unsigned)R, 1, SEL_THREADS, 0, p);
}

tf_status cuda_candidate_blocks(struct tf_be *be, const struct tf_tensor *scores,
				const struct tf_tensor *n_vis, int bs, int topb,
				struct tf_tensor *blocks)
{
	tf_status st;
	int64_t R, N, nblk, need;
	if ((st = tf_args_candidate_blocks(scores, n_vis, bs, topb, blocks, &R, &N, &nblk, &need)))
		return st;
	if (R == 0)
		return TF_OK;
	int64_t per = (need + 255) / 256;
	if (per * R > 0x7fffffff)
		return tf_err(TF_ERR_ARG, "candidate_blocks: %lld rows of %lld blocks past the grid",
			      (long long)R, (long long)need);
	/* m: u32 [R, need], the order key of each visible block's best score */
	tf_cu_ptr m = 0;
	if (need && (st = cuda_scratch(be, (size_t)(R * need) * sizeof(uint32_t), &m)))
		return st;
	tf_cu_ptr sp = cuda_ptr(scores), np = cuda_ptr(n_vis), bp = cuda_ptr(blocks);
	int32_t bs32 = bs, topb32 = topb;
	void *pm[] = {&sp, &np, &N, &bs32, &need, &m};
	st = need ? cuda_launch(be, &fn_blockmax, (unsigned)(per * R), 1, 256, 0, pm) : TF_OK;
	if (!st) {
		/* m [R, need], n_vis [R] -> blocks u8 [R, nblk] */
		void *pb[] = {&m, &np, &N, &bs32, &need, &topb32, &bp, &nblk};
		st = cuda_launch(be, &fn_blocks, (unsigned)R, 1, SEL_THREADS, 0, pb);
	}
	if (m)
		cuda_scratch_release(be, m);
	return st;
}

/* ---- key lists ---- */

tf_status cuda_attn_keys(struct tf_be *be, const struct tf_tensor *sel,
			 const struct tf_tensor *n_sel, int direct, int64_t p0, int window,
			 int64_t pbase, int64_t wbase, int append, struct tf_tensor *key_off,
			 struct tf_tensor *key_idx)
{
	tf_status st;
	int64_t n, k;
	if ((st = tf_args_attn_keys(sel, n_sel, p0, window, pbase, wbase, key_off, key_idx, &n, &k)))
		return st;
	/* n_sel (and an appended list's start) are on the device: room for the
	 * most keys, every row full, from 0; the kernel writes none past room. */
	int64_t room = tf_tensor_numel(key_idx), most = n * k;
	for (int64_t i = 0; i < n; i++)
		most += p0 + i + 1 < window ? p0 + i + 1 : window;
	if (most > room)
		return tf_err(TF_ERR_ARG, "attn_keys: %lld keys do not fit", (long long)room);
	/* sel [n, k], n_sel [n] (or none) -> key_off [n + 1], key_idx [room] int32 */
	tf_cu_ptr sp = sel ? cuda_ptr(sel) : 0, np = sel ? cuda_ptr(n_sel) : 0;
	tf_cu_ptr op = cuda_ptr(key_off), ip = cuda_ptr(key_idx);
	int32_t k32 = (int32_t)k, d32 = direct, w32 = window;
	int32_t a32 = append != 0;
	void *po[] = {&np, &k32, &n, &p0, &w32, &a32, &op};
	st = cuda_launch(be, &fn_keys_off, 1, 1, SEL_THREADS, 0, po);
	if (st)
		return st;
	void *pf[] = {&sp, &np, &k32, &d32, &p0, &w32, &pbase, &wbase, &op, &ip, &room};
	return cuda_launch(be, &fn_keys_fill, (unsigned)n, 1, 128, 0, pf);
}
