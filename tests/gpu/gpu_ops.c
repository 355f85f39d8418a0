/* gpu_ops.c: every op of the CUDA backend (tf_cuda_be_new) against the CPU
 * backend (tf_cpu_be_new, the reference) on the same random inputs.
 *
 * Every slot of struct tf_ops (compute/ops.h) is exercised: the memory ops
 * (alloc zeroes, upload/download round trips, views), convert, linear, the
 * two EXL3 ops, embed, rmsnorm, rope, attention, compressor, index_score,
 * index_topk, candidate_blocks, moe_route, swiglu, moe_combine, hc_mix,
 * hc_collapse, hc_post, engram_gate, fill_random, rows_copy, cache_write, cache_read,
 * page_rows, attn_keys, moe_group, stream_mean and sample; at the end, a few
 * shapes both backends must refuse with TF_ERR_ARG. Shapes: tiny ones (96
 * features, 32 rotated, 2 heads) and the release's (model/config.c's
 * "release" preset) at decode (1, 4, 16 and 64 rows; 1K and 32K context
 * where the op reads context) and prefill (4096 rows). Attention and
 * index_score at prefill run every row on the device and a random subset of
 * rows on the CPU (the inputs sliced to those rows), so that the reference
 * finishes in seconds.
 *
 * Inputs are fresh random values (never zero-filled) from the seed
 * TF_TEST_SEED, or the clock when unset; the seed is printed. They are
 * uploaded alike to both backends. Outputs are poisoned before each run
 * (0xFF bytes: NaN in f32 and bf16, -1 in int32) on both backends, so an
 * element the device leaves unwritten fails; where the contract leaves rows
 * untouched (rows_copy and cache_write skip moves) the output starts from the
 * same random content on both. Each output is compared by the rule of the
 * table tols[] below, which says why each tolerance is what it is; NaN
 * never passes; an op that returns TF_ERR_UNSUPPORTED (or whose slot is
 * empty) fails.
 *
 * Output: one line per case (op, shape, then for each output its worst
 * error and its tolerance, PASS or FAIL), then a summary line. Exit 0 when
 * every case passed, 1 otherwise, 77 when there is no GPU (tf_cuda_be_new
 * says TF_ERR_UNAVAILABLE).
 *
 * Usage: gpu_ops [--quick] [--only OP[,OP...]] [--break OP]
 *   --quick     prefill of 256 rows and a long context of 4K keys (for
 *               compute-sanitizer, or a slow reference).
 *   --only OPS  run only the cases of these ops (TF_GPU_OPS_ONLY).
 *   --break OP  (or TF_GPU_OPS_BREAK=OP) perturb one element of OP's CUDA
 *               output after each download (the element of the largest
 *               reference value becomes -2v-1; in integer and byte outputs
 *               one bit flips), so that every case of OP must FAIL and the
 *               program exit 1: the proof that the comparison can fail.
 * TF_GPU_OPS_REF=cpu compares the CPU backend with itself, which must pass
 * every case exactly: a check of this program on a machine without a GPU. */
#include "gpu_ops.h"

/* ---- tolerances: one rule per output (enum how in gpu_ops.h) ---- */

static const struct tol tols[] = {
	{"alloc", "zeroed", EXACT, 0, 0, 0, "alloc's contract: a new tensor reads as zeros"},
	{"upload", "bytes", EXACT, 0, 0, 0, "bytes copied there and back, whole and through views"},
	{"convert", "y", EXACT, 0, 0, 0,
	 "one round-to-nearest-even (or an exact widening) of the same value"},
	{"linear", "y", NEAR, 3e-5, 1, 1e-6,
	 "fp32 sums of K products in another order (tiles, trees, cuBLAS's split K): ~sqrt(K) "
	 "2^-24 of the row's largest value typically (4e-6 at K 5120), a few times that at the "
	 "tail of 10^6 outputs (1.02e-5 seen on the H200, router gate at 4096 rows); bf16 y is "
	 "that rounded once"},
	{"linear_experts", "y", NEAR, 3e-5, 1, 1e-6,
	 "each group's rows through its expert's linear: linear's sums in another order"},
	{"exl3_matmul", "y", EXL3, 4e-3, 0, 3e-2,
	 "the device rounds the rotated activations and pairwise products to fp16 (exl3-format.md "
	 "5), the CPU keeps fp32: gpu_exl3's bounds"},
	{"exl3_matmul_experts", "y", EXL3, 4e-3, 0, 3e-2, "as exl3_matmul, group by group"},
	{"embed", "out", EXACT, 0, 0, 0, "row copies and zero rows"},
	{"rmsnorm", "y", NEAR, 1e-5, 1, 0,
	 "bit-exact by design (both sides sum in cpu_impl.h's wide order with IEEE steps), but "
	 "the device flushes fp32 subnormals; x s w does not cancel: bf16 within one ulp"},
	{"rope", "y", NEAR, 1e-5, 1, 1e-6,
	 "cos/sin of the fp64 angle agree in fp32; a c - b s may be fused (FMA) on the device: "
	 "fp32 ulps of the larger product, which is more than a bf16 ulp where they cancel"},
	{"attention", "out", NEAR, 1e-5, 0, 0,
	 "dots, softmax sums and the weighted sum in fp32 in another order, fast-math exp "
	 "(~2 ulp): ~1e-6 of the head's largest |o|"},
	{"compressor", "lat", NEAR, 1e-5, 1, 1e-6,
	 "fast-math exp and division in the two-way softmax, the sum of squares in another "
	 "order; e0 u0 + e1 u1 may cancel"},
	{"index_score", "scores", NEAR, 1e-5, 0, 0,
	 "dots and the head sum in fp32 in another order: ~1e-6 of the row's largest score; "
	 "-inf exactly where invisible or masked"},
	{"index_topk", "sel", EXACT, 0, 0, 0,
	 "the same scores go in: a selection under a total order (value, then index)"},
	{"index_topk", "n_sel", EXACT, 0, 0, 0, "a count"},
	{"candidate_blocks", "blocks", EXACT, 0, 0, 0,
	 "the same scores go in: block maxima and a total order (value, then block)"},
	{"moe_route", "ids", EXACT, 0, 0, 0,
	 "scores drawn at least 1e-4 apart (relative, absolute below 1), far past the fast-math "
	 "error of sqrt(softplus): the pick is well posed"},
	{"moe_route", "weights", NEAR, 1e-5, 0, 0, "sqrt(softplus) with fast-math exp and log"},
	{"swiglu", "a", NEAR, 1e-5, 1, 0,
	 "fast-math exp in the sigmoid (~2 ulp); a product: bf16 within one ulp"},
	{"moe_combine", "branch", NEAR, 1e-5, 1, 1e-6,
	 "the same sum in route order, fused multiply-adds on the device: fp32 ulps of the "
	 "terms, more than a bf16 ulp where they cancel"},
	{"hc_mix", "pre", NEAR, 1e-5, 0, 0,
	 "a 4D-long fp32 dot per mix value, fast-math sigmoid: ~1e-6 relative"},
	{"hc_mix", "post", NEAR, 1e-5, 0, 0, "as pre"},
	{"hc_mix", "comb", NEAR, 1e-5, 0, 0,
	 "as pre, then a softmax and Sinkhorn passes, which contract errors"},
	{"hc_mix", "alone", EXACT, 0, 0, 0,
	 "one order of the sums for every row count and kernel (mhc.cu): rows run in a call of "
	 "their own are the bits they had among others"},
	{"hc_collapse", "c", NEAR, 0, 1, 1e-6, "fused multiply-adds of S streams, then one bf16 rounding"},
	{"hc_post", "out", NEAR, 0, 1, 1e-6, "as hc_collapse, S + 1 terms"},
	{"engram_gate", "out", NEAR, 0, 1, 1e-6,
	 "the same sums on both sides (cpu_impl.h's wide order), the sigmoid's expf correctly "
	 "rounded on the device and in all but rare last bits by glibc; h + gate val may cancel"},
	{"rows_copy", "y", EXACT, 0, 0, 0, "row moves; skipped rows keep their bytes"},
	{"cache_write", "cache", EXACT, 0, 0, 0, "kvrow.c's bytes on every backend (ops.h)"},
	{"cache_read", "out", EXACT, 0, 0, 0,
	 "codes times powers of two are exact in fp32 and in bf16; skipped rows are zeros"},
	{"page_rows", "out", EXACT, 0, 0, 0, "integer arithmetic"},
	{"fill_random", "t", EXACT, 0, 0, 0, "integer hashing (ops.h tf_random_word)"},
	{"attn_keys", "key_off", EXACT, 0, 0, 0, "integer key lists"},
	{"attn_keys", "key_idx", EXACT, 0, 0, 0, "integer key lists (the used prefix)"},
	{"moe_group", "offsets", EXACT, 0, 0, 0, "a stable counting sort"},
	{"moe_group", "pair", EXACT, 0, 0, 0, "a stable counting sort"},
	{"moe_group", "src", EXACT, 0, 0, 0, "a stable counting sort"},
	{"stream_mean", "out", EXACT, 0, 0, 0,
	 "the same fp32 adds in stream order, then an exact division by 4"},
	{"sample", "tokens", EXACT, 0, 0, 0,
	 "keyed sampling is a function of the logits, the seed and the position"},
	{"*", "refused", EXACT, 0, 0, 0, "both backends refuse the same shapes (TF_ERR_ARG)"},
};

static const struct tol *tol_of(const char *op, const char *out)
{
	for (size_t i = 0; i < sizeof tols / sizeof *tols; i++)
		if ((!strcmp(tols[i].op, op) || !strcmp(tols[i].op, "*")) && !strcmp(tols[i].out, out))
			return &tols[i];
	fprintf(stderr, "gpu_ops: no tolerance for %s.%s\n", op, out);
	exit(70);
}

/* ---- memory ---- */

static void case_alloc(enum tf_dt dt, int64_t rows, int64_t cols)
{
	if (!begin("alloc", "%s [%lld, %lld] after a dirty release", tf_dt_name(dt), (long long)rows,
		   (long long)cols))
		return;
	struct tf_tensor t = header(dt, DIMS(rows, cols)), none = {0}, dirty = t;
	/* memory released dirty first, which an arena may hand out again */
	if (note(1, gpu->ops->alloc(gpu, &dirty))) {
		size_t n = tf_tensor_bytes(&dirty);
		note(1, gpu->ops->upload(gpu, &dirty, memset(hnew(n), 0xA5, n)));
		gpu->ops->release(gpu, &dirty);
	}
	if (!cur.err && note(1, gpu->ops->alloc(gpu, &t))) {
		cur.s[cur.ns].be = gpu; /* released at the end of the case */
		cur.s[cur.ns++].t = t;
		size_t n = tf_tensor_bytes(&t);
		compare("zeroed", TF_DT_U8, hnew(n), fetch(gpu, &t), (int64_t)n, 0);
	}
	gpu->ops->release(gpu, &none); /* NULL data: a no-op */
	end();
}

/* Bytes up and down, whole, then through a view of rows [r0, r0 + m). */
static void case_updown(enum tf_dt dt, int64_t rows, int64_t cols)
{
	int64_t r0 = rows / 3, m = rows / 2 ? rows / 2 : 1;
	if (!begin("upload", "%s [%lld, %lld], then rows %lld..%lld", tf_dt_name(dt),
		   (long long)rows, (long long)cols, (long long)r0, (long long)(r0 + m - 1)))
		return;
	struct tf_tensor *t = one(gpu, dt, NULL, DIMS(rows, cols));
	size_t n = tf_tensor_bytes(t), per = n / (size_t)rows;
	uint8_t *a = rnd_bytes(n);
	if (note(1, gpu->ops->upload(gpu, t, a)))
		compare("bytes", TF_DT_U8, a, fetch(gpu, t), (int64_t)n, 0);
	struct tf_tensor v = tf_tensor_rows_of(t, r0, m);
	uint8_t *b = rnd_bytes(per * (size_t)m);
	memcpy(a + per * (size_t)r0, b, per * (size_t)m);
	if (!cur.err && note(1, gpu->ops->upload(gpu, &v, b))) {
		compare("bytes", TF_DT_U8, a, fetch(gpu, t), (int64_t)n, 0);
		compare("bytes", TF_DT_U8, b, fetch(gpu, &v), (int64_t)(per * (size_t)m), 0);
	}
	end();
}

static void cases_memory(void)
{
	case_alloc(TF_DT_U8, 1, 1);
	case_alloc(TF_DT_F32, 3, 5);
	case_alloc(TF_DT_BF16, 4096, 5120);
	case_updown(TF_DT_U8, 1, 7);
	case_updown(TF_DT_I32, 3, 1);
	case_updown(TF_DT_BF16, 1031, 517);
	case_updown(TF_DT_F32, 4096, 6400);
}

/* ---- convert, linear, embed, rmsnorm, rope ---- */

static void case_convert(enum tf_dt xd, enum tf_dt yd, int64_t R, int64_t n)
{
	if (!begin("convert", "%s -> %s [%lld, %lld]", tf_dt_name(xd), tf_dt_name(yd), (long long)R,
		   (long long)n))
		return;
	float *x = rnd(TF_DT_F32, R * n, 4);
	/* edges: signed zeros, infinities, ties to even, overflow, subnormals */
	static const float edge[] = {0.0f, -0.0f, INFINITY, -INFINITY, 1 + 0x1p-8f, 1 + 0x3p-8f,
				     65504, 65520, 1e-8f, -3e38f, 1e-40f, 0x1.0101p0f, 1 + 0x1p-11f};
	for (size_t i = 0; i < sizeof edge / sizeof *edge && (int64_t)i < R * n; i++)
		x[i] = edge[i];
	void *xh = x;
	if (xd != TF_DT_F32) {
		xh = hnew((size_t)(R * n) * 2);
		for (int64_t i = 0; i < R * n; i++)
			put(xd, xh, i, x[i]);
	}
	struct pair *X = pin(xd, xh, DIMS(R, n)), *Y = pout(yd, DIMS(R, n));
	BOTH(convert, T(X), T(Y));
	check("y", Y);
	end();
}

static void case_linear(const char *what, int64_t R, int64_t K, int64_t N, enum tf_dt xd,
			enum tf_dt wd, enum tf_dt yd)
{
	if (!begin("linear", "%s x %s [%lld, %lld] w %s [%lld, %lld] y %s", what, tf_dt_name(xd),
		   (long long)R, (long long)K, tf_dt_name(wd), (long long)N, (long long)K,
		   tf_dt_name(yd)))
		return;
	struct pair *x = pin(xd, rnd(xd, R * K, 1), DIMS(R, K));
	struct pair *w = pin(wd, rnd(wd, N * K, 1), DIMS(N, K));
	struct pair *y = pout(yd, DIMS(R, N));
	BOTH(linear, T(x), T(w), T(y));
	check("y", y);
	end();
}

/* The ragged experts ops' groups: G groups of R rows in all through
 * random experts of E (expert_ids [G], offsets [G + 1]), the second one
 * empty when there are three or more. */
static void groups(int64_t R, int G, int E, struct pair **ids_out, struct pair **off_out)
{
	int32_t *ids = ivec(G), *off = ivec(G + 1);
	pick(ids, G, E);
	for (int g = 1; g < G; g++)
		off[g] = (int32_t)tf_rng_below(&rng, (uint64_t)R + 1);
	off[G] = (int32_t)R;
	qsort(off + 1, (size_t)(G - 1), sizeof *off, cmp_i32);
	if (G > 2)
		off[2] = off[1];
	*ids_out = pin(TF_DT_I32, ids, DIMS(G));
	*off_out = pin(TF_DT_I32, off, DIMS(G + 1));
}

/* Dense experts (the test packs' routed experts): G groups of R rows,
 * one empty, through E experts' [N, K] weights. */
static void case_linear_experts(int64_t R, int64_t K, int64_t N, int E, int G, enum tf_dt wd,
				enum tf_dt yd)
{
	if (!begin("linear_experts", "%d experts %s [%lld, %lld] rows %lld in %d groups y %s", E,
		   tf_dt_name(wd), (long long)N, (long long)K, (long long)R, G, tf_dt_name(yd)))
		return;
	struct tf_tensor wc[16], wg[16];
	for (int e = 0; e < E; e++) {
		struct pair *w = pin(wd, rnd(wd, N * K, 1), DIMS(N, K));
		wc[e] = w->c;
		wg[e] = w->g;
	}
	struct pair *pi, *po;
	groups(R, G, E, &pi, &po);
	struct pair *x = pin(TF_DT_BF16, rnd(TF_DT_BF16, R * K, 1), DIMS(R, K));
	struct pair *y = pout(yd, DIMS(R, N));
	BOTH(linear_experts, side ? wg : wc, E, T(pi), T(po), T(x), T(y));
	check("y", y);
	end();
}

static void case_embed(int64_t R, int64_t C, int64_t V, int64_t D, int64_t lo)
{
	if (!begin("embed", "ids [%lld] table [%lld, %lld] from %lld out [%lld, %lld, %lld]",
		   (long long)R, (long long)V, (long long)D, (long long)lo, (long long)R,
		   (long long)C, (long long)D))
		return;
	int32_t *ids = ivec(R);
	for (int64_t r = 0; r < R; r++) /* inside the slice, and some outside either end */
		ids[r] = (int32_t)(lo - 3 + (int64_t)tf_rng_below(&rng, (uint64_t)V + 6));
	ids[0] = (int32_t)lo;
	if (R > 2)
		ids[R - 1] = -1;
	struct pair *tab = pin(TF_DT_BF16, rnd(TF_DT_BF16, V * D, 1), DIMS(V, D));
	struct pair *id = pin(TF_DT_I32, ids, DIMS(R)), *out = pout(TF_DT_BF16, DIMS(R, C, D));
	BOTH(embed, T(tab), lo, T(id), T(out));
	check("out", out);
	end();
}

static void case_rmsnorm(int64_t R, int64_t n, enum tf_dt xd, enum tf_dt wd, enum tf_dt yd,
			 float eps)
{
	if (!begin("rmsnorm", "x %s [%lld, %lld] w %s y %s eps %g", tf_dt_name(xd), (long long)R,
		   (long long)n, tf_dt_name(wd), tf_dt_name(yd), eps))
		return;
	struct pair *x = pin(xd, rnd(xd, R * n, 3), DIMS(R, n));
	struct pair *w = pin(wd, rnd(wd, n, 2), DIMS(n)), *y = pout(yd, DIMS(R, n));
	BOTH(rmsnorm, T(x), T(w), eps, T(y));
	check("y", y);
	end();
}

/* Positions: small ones, and some up to max_positions (angles of 1e6 rad). */
static int32_t *positions(int64_t R, int64_t max)
{
	int32_t *p = ivec(R);
	for (int64_t r = 0; r < R; r++)
		p[r] = (int32_t)(r % 3 == 0 ? tf_rng_below(&rng, 256) : tf_rng_below(&rng, (uint64_t)max));
	return p;
}

static void case_rope(int64_t R, int64_t H, int64_t n, int dim, int yarn, int inverse,
		      enum tf_dt xd, enum tf_dt yd, int alias)
{
	if (!begin("rope", "x %s [%lld, %lld, %lld] rotating %d %s%s y %s%s", tf_dt_name(xd),
		   (long long)R, (long long)H, (long long)n, dim, yarn ? "yarn" : "plain",
		   inverse ? " inverse" : "", tf_dt_name(yd), alias ? " (in place)" : ""))
		return;
	struct tf_rope_freqs rf;
	if (yarn)
		tf_rope_freqs_yarn(&rf, dim, rc.compress_rope_theta, rc.rope_factor,
				   (double)rc.rope_original_max, rc.rope_beta_fast, rc.rope_beta_slow);
	else
		tf_rope_freqs_plain(&rf, dim, rc.rope_theta);
	struct pair *x = pin(xd, rnd(xd, R * H * n, 2), DIMS(R, H, n));
	struct pair *pos = pin(TF_DT_I32, positions(R, (int64_t)rc.max_positions), DIMS(R));
	struct pair *y = alias ? x : pout(yd, DIMS(R, H, n));
	BOTH(rope, T(x), T(pos), &rf, inverse, T(y));
	check("y", y);
	end();
}

static void cases_dense(void)
{
	static const int64_t dec[] = {1, 4, 16, 64};
	const int64_t D = rc.hidden;
	case_convert(TF_DT_F32, TF_DT_BF16, 3, 96);
	case_convert(TF_DT_F32, TF_DT_F16, 3, 96);
	case_convert(TF_DT_BF16, TF_DT_F32, 3, 96);
	case_convert(TF_DT_F16, TF_DT_BF16, 3, 96);
	case_convert(TF_DT_F32, TF_DT_BF16, 1, D);
	case_convert(TF_DT_F32, TF_DT_BF16, prefill, D);
	case_convert(TF_DT_BF16, TF_DT_F32, prefill, D);

	case_linear("tiny", 3, 96, 40, TF_DT_F32, TF_DT_F32, TF_DT_F32);
	case_linear("tiny", 3, 96, 40, TF_DT_BF16, TF_DT_BF16, TF_DT_BF16);
	case_linear("tiny", 5, 96, 33, TF_DT_F16, TF_DT_F16, TF_DT_F32);
	for (int i = 0; i < 4; i++)
		case_linear("router gate", dec[i], D, rc.experts, TF_DT_BF16, TF_DT_BF16, TF_DT_F32);
	case_linear("router gate", prefill, D, rc.experts, TF_DT_BF16, TF_DT_BF16, TF_DT_F32);
	case_linear("weights_proj", 4, D, rc.index_heads, TF_DT_BF16, TF_DT_BF16, TF_DT_F32);
	case_linear("markov head", 4, rc.dspark_markov_rank, rc.vocab, TF_DT_F32, TF_DT_BF16,
		    TF_DT_F32);
	case_linear("bf16 out", 16, D, 1024, TF_DT_BF16, TF_DT_BF16, TF_DT_BF16);
	/* x bf16 through tf's own kernels (cuBLAS takes bf16 x bf16 only):
	 * f16 weights as the test packs' router gate and weights_proj, at the
	 * warp kernel's rows and the tile kernel's, f32 and bf16 y */
	case_linear("tiny gate f16 w", 3, 256, 8, TF_DT_BF16, TF_DT_F16, TF_DT_F32);
	case_linear("tiny gate f16 w", 40, 256, 8, TF_DT_BF16, TF_DT_F16, TF_DT_F32);
	case_linear("f16 w bf16 out", 3, 256, 128, TF_DT_BF16, TF_DT_F16, TF_DT_BF16);
	case_linear("f16 w bf16 out", 300, 256, 128, TF_DT_BF16, TF_DT_F16, TF_DT_BF16);
	case_linear("f32 w bf16 x", 40, 256, 130, TF_DT_BF16, TF_DT_F32, TF_DT_F32);
	case_linear_experts(12, 256, 512, 8, 5, TF_DT_BF16, TF_DT_F32);
	case_linear_experts(300, 512, 256, 8, 8, TF_DT_BF16, TF_DT_BF16);

	case_embed(5, 1, 40, 96, 0);
	case_embed(7, 4, 40, 96, 17);
	for (int i = 0; i < 4; i++)
		case_embed(dec[i], rc.hc_mult, 8192, D, 3 * 8192);
	case_embed(prefill, rc.hc_mult, 8192, D, 0);

	case_rmsnorm(3, 96, TF_DT_F32, TF_DT_F32, TF_DT_F32, 1e-6f);
	case_rmsnorm(3, 96, TF_DT_BF16, TF_DT_BF16, TF_DT_BF16, 1e-6f);
	for (int i = 0; i < 4; i++)
		case_rmsnorm(dec[i], D, TF_DT_BF16, TF_DT_F32, TF_DT_BF16, rc.eps);
	case_rmsnorm(prefill, D, TF_DT_BF16, TF_DT_F32, TF_DT_BF16, rc.eps);
	case_rmsnorm(16, rc.q_lora, TF_DT_F32, TF_DT_F32, TF_DT_BF16, rc.eps);
	case_rmsnorm(prefill, rc.head_dim, TF_DT_F32, TF_DT_F32, TF_DT_BF16, rc.eps);
	case_rmsnorm(64, rc.index_dim, TF_DT_F32, TF_DT_BF16, TF_DT_F32, rc.eps);
	/* past the kernel's rows held in registers (6144): the two-pass path */
	case_rmsnorm(3, 7001, TF_DT_F32, TF_DT_BF16, TF_DT_BF16, rc.eps);
	case_rmsnorm(2, 3 * D, TF_DT_BF16, TF_DT_F32, TF_DT_F32, rc.eps);

	case_rope(3, 2, 96, 32, 0, 0, TF_DT_F32, TF_DT_F32, 0);
	case_rope(3, 2, 96, 32, 1, 1, TF_DT_BF16, TF_DT_BF16, 0);
	case_rope(5, 1, 96, 32, 1, 0, TF_DT_F32, TF_DT_BF16, 0);
	for (int i = 0; i < 4; i++) /* q of a compressed layer */
		case_rope(dec[i], rc.heads, rc.head_dim, (int)rc.rope_dim, 1, 0, TF_DT_BF16,
			  TF_DT_BF16, 0);
	case_rope(1024, rc.heads, rc.head_dim, (int)rc.rope_dim, 0, 0, TF_DT_BF16, TF_DT_BF16, 0);
	case_rope(16, rc.heads, rc.head_dim, (int)rc.rope_dim, 1, 1, TF_DT_F32, TF_DT_BF16, 0);
	case_rope(16, rc.heads, rc.head_dim, (int)rc.rope_dim, 1, 0, TF_DT_BF16, TF_DT_BF16, 1);
	case_rope(prefill, 1, rc.head_dim, (int)rc.rope_dim, 1, 0, TF_DT_BF16, TF_DT_BF16, 0);
	case_rope(prefill, rc.index_heads, rc.index_dim, (int)rc.rope_dim, 1, 0, TF_DT_BF16,
		  TF_DT_BF16, 0);
}

/* ---- EXL3 ---- */

/* count random EXL3 layers of K x N and widths bits[e] in one trellis
 * buffer (the model's stacked or ragged layout, tf_exl3_experts_layout)
 * with suh [count, K] and svh [count, N]: Lc[e] over host memory, Lg[e]
 * over the same bytes on the device (device addresses, as the CUDA
 * backend's layers hold them). */
static void layers_make(uint32_t k, uint32_t n, const uint32_t *bits, int count,
			enum tf_exl3_cb cb, struct tf_exl3_layer *Lc, struct tf_exl3_layer *Lg)
{
	struct tf_exl3_geom g[16] = {{0}};
	uint64_t off[16], total;
	int ragged;
	for (int e = 0; e < count; e++)
		g[e] = (struct tf_exl3_geom){k, n, bits[e], cb};
	tf_status st = tf_exl3_experts_layout(g, (uint32_t)count, off, &total, &ragged);
	if (st)
		die("experts layout", st);
	uint8_t *tr = hnew(total);
	uint16_t *suh = hnew(2 * (size_t)count * k), *svh = hnew(2 * (size_t)count * n);
	for (int e = 0; e < count; e++)
		tf_exl3_synth(&g[e], &rng, (uint16_t *)(tr + off[e]), suh + (size_t)e * k,
			      svh + (size_t)e * n);
	struct tf_tensor *dt = one(gpu, TF_DT_U8, tr, DIMS((int64_t)total));
	struct tf_tensor *du = one(gpu, TF_DT_U8, suh, DIMS(2 * (int64_t)count * k));
	struct tf_tensor *dv = one(gpu, TF_DT_U8, svh, DIMS(2 * (int64_t)count * n));
	for (int e = 0; e < count; e++) {
		Lc[e] = (struct tf_exl3_layer){g[e], (const uint16_t *)(tr + off[e]),
					       suh + (size_t)e * k, svh + (size_t)e * n, NULL};
		Lg[e] = (struct tf_exl3_layer){g[e], (const uint16_t *)((char *)dt->data + off[e]),
					       (const uint16_t *)du->data + (size_t)e * k,
					       (const uint16_t *)dv->data + (size_t)e * n, NULL};
	}
}

static void case_exl3(uint32_t k, uint32_t n, uint32_t bits, enum tf_exl3_cb cb, int64_t R,
		      enum tf_dt xd, enum tf_dt yd)
{
	if (!begin("exl3_matmul", "%ux%u %u bits %s rows %lld x %s y %s", k, n, bits,
		   tf_exl3_cb_name(cb), (long long)R, tf_dt_name(xd), tf_dt_name(yd)))
		return;
	struct tf_exl3_layer Lc, Lg;
	layers_make(k, n, &bits, 1, cb, &Lc, &Lg);
	struct pair *x = pin(xd, rnd(xd, R * k, 1.7f), DIMS(R, k)), *y = pout(yd, DIMS(R, n));
	BOTH(exl3_matmul, side ? &Lg : &Lc, T(x), T(y));
	check("y", y);
	end();
}

/* R routed rows in G groups through G distinct experts of count (one group
 * empty when G > 2); apart: each expert made on its own, last first (as
 * the output groups' wo_a lie: not one image). */
static void case_experts(uint32_t k, uint32_t n, const uint32_t *bits, int count,
			 enum tf_exl3_cb cb, int64_t R, int G, enum tf_dt yd, bool apart)
{
	if (!begin("exl3_matmul_experts", "%ux%u %d experts%s %s rows %lld in %d groups y %s", k, n,
		   count, apart ? " apart" : "", tf_exl3_cb_name(cb), (long long)R, G,
		   tf_dt_name(yd)))
		return;
	struct tf_exl3_layer Lc[16], Lg[16];
	if (apart)
		for (int e = count - 1; e >= 0; e--)
			layers_make(k, n, &bits[e], 1, cb, &Lc[e], &Lg[e]);
	else
		layers_make(k, n, bits, count, cb, Lc, Lg);
	struct pair *pi, *po;
	groups(R, G, count, &pi, &po);
	struct pair *x = pin(TF_DT_BF16, rnd(TF_DT_BF16, R * k, 1.7f), DIMS(R, k));
	struct pair *y = pout(yd, DIMS(R, n));
	BOTH(exl3_matmul_experts, side ? Lg : Lc, count, T(pi), T(po), T(x), T(y));
	check("y", y);
	end();
}

static void cases_exl3(void)
{
	static const int64_t dec[] = {1, 4, 16, 64};
	const uint32_t D = rc.hidden, W = rc.expert_width;
	/* the release's projections (model facts §3) at q28's common widths */
	const struct {
		uint32_t k, n, bits;
	} shapes[] = {
		{D, rc.q_lora, 5},                       /* wq_a */
		{D, rc.head_dim, 5},                     /* wkv */
		{rc.q_lora, rc.heads * rc.head_dim, 4},  /* wq_b */
		{rc.heads * rc.head_dim / rc.o_groups, rc.o_lora, 4}, /* wo_a */
		{rc.o_groups * rc.o_lora, D, 4},         /* wo_b */
		{D, W, 2},                               /* expert w1, w3 */
		{W, D, 3},                               /* expert w2 */
	};
	for (uint32_t b = 1; b <= 8; b++)
		case_exl3(256, 128, b, (enum tf_exl3_cb)(b % 3), 1 + b % 5, TF_DT_BF16, TF_DT_F32);
	for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
		for (int i = 0; i < 4; i++)
			if (shapes[s].n < 32768 || dec[i] <= 4)
				case_exl3(shapes[s].k, shapes[s].n, shapes[s].bits, TF_EXL3_CB_MUL1, dec[i],
					  TF_DT_BF16, TF_DT_F32);
	case_exl3(D, W, 4, TF_EXL3_CB_3INST, 4, TF_DT_BF16, TF_DT_F32);
	case_exl3(D, W, 3, TF_EXL3_CB_MCG, 16, TF_DT_F32, TF_DT_BF16);
	case_exl3(W, D, 2, TF_EXL3_CB_MUL1, 64, TF_DT_BF16, TF_DT_BF16);

	static const uint32_t tiny_bits[8] = {2, 3, 4, 2, 5, 8, 1, 6};
	static const uint32_t q28_bits[8] = {2, 3, 2, 4, 5, 2, 2, 3}; /* K2 4..10 of layers 19-39 */
	for (int cb = 0; cb < 3; cb++)
		case_experts(512, 256, tiny_bits, 8, (enum tf_exl3_cb)cb, 5 + cb, 4, TF_DT_F32, cb == 1);
	for (int i = 0; i < 4; i++) /* top-6 of 1, 4, 16 and 64 rows */
		case_experts(D, W, q28_bits, 8, TF_EXL3_CB_MUL1, dec[i] * rc.topk,
			     dec[i] == 1 ? (int)rc.topk : 8, TF_DT_F32, false);
	case_experts(W, D, q28_bits, 8, TF_EXL3_CB_MUL1, rc.topk, (int)rc.topk, TF_DT_F32, false);
	case_experts(W, D, q28_bits, 8, TF_EXL3_CB_MUL1, 16 * rc.topk, 8, TF_DT_BF16, false);
	/* the output groups (wo_a of 8 groups, each layer apart) at 1 and 16 rows */
	static const uint32_t wo_a_bits[8] = {4, 4, 4, 4, 5, 4, 3, 4};
	const uint32_t ok = rc.heads * rc.head_dim / rc.o_groups, G8 = rc.o_groups;
	for (int i = 0; i < 4; i += 2)
		case_experts(ok, rc.o_lora, wo_a_bits, (int)G8, TF_EXL3_CB_MUL1, dec[i] * G8, (int)G8,
			     TF_DT_BF16, true);
}

/* ---- attention and the indexer ---- */

/* Sparse MQA: row r attends to nk[r] distinct rows of NK keys in random
 * order (keys of them: the window and the selection); with R > 2, row 1
 * has no keys (zeros out) and row 2 one. sub > 0: the CPU runs sub random
 * rows. */
static void case_attention(const char *what, int64_t R, int64_t H, int64_t D, int64_t NK,
			   int64_t keys, enum tf_dt qd, enum tf_dt kd, int64_t sub)
{
	if (!begin("attention", "%s q %s [%lld, %lld, %lld] keys %s [%lld] %lld a row%s", what,
		   tf_dt_name(qd), (long long)R, (long long)H, (long long)D, tf_dt_name(kd),
		   (long long)NK, (long long)keys, sub ? " (CPU: a subset)" : ""))
		return;
	int32_t *off = ivec(R + 1), *nk = ivec(R);
	for (int64_t r = 0; r < R; r++) {
		nk[r] = (int32_t)(keys < NK ? keys : NK);
		if (R > 2 && r == 1)
			nk[r] = 0;
		if (R > 2 && r == 2)
			nk[r] = 1;
		off[r + 1] = off[r] + nk[r];
	}
	int32_t *idx = ivec(off[R]);
	for (int64_t r = 0; r < R; r++)
		pick(idx + off[r], nk[r], NK);
	void *q = rnd(qd, R * H * D, 3);
	const size_t qs = tf_dt_size(qd);
	void *kh = rnd(kd, NK * D, 2);
	float *sink = rnd(TF_DT_F32, H, 2);
	if (!sub) {
		struct pair *pq = pin(qd, q, DIMS(R, H, D)), *pk = pin(kd, kh, DIMS(NK, D));
		struct pair *po = pin(TF_DT_I32, off, DIMS(R + 1)), *pi = pin(TF_DT_I32, idx, DIMS(off[R]));
		struct pair *ps = pin(TF_DT_F32, sink, DIMS(H)), *out = pout(TF_DT_F32, DIMS(R, H, D));
		BOTH(attention, T(pq), T(pk), T(po), T(pi), T(ps), T(out));
		check("out", out);
		end();
		return;
	}
	/* the CPU's rows: q rows and key lists of the subset */
	int32_t *rows = ivec(sub), *soff = ivec(sub + 1);
	pick_sorted(rows, sub, R);
	char *sq = hnew((size_t)(sub * H * D) * qs);
	for (int64_t i = 0; i < sub; i++)
		soff[i + 1] = soff[i] + nk[rows[i]];
	int32_t *sidx = ivec(soff[sub] ? soff[sub] : 1);
	for (int64_t i = 0; i < sub; i++) {
		memcpy(sq + (size_t)(i * H * D) * qs, (char *)q + (size_t)(rows[i] * H * D) * qs,
		       (size_t)(H * D) * qs);
		memcpy(sidx + soff[i], idx + off[rows[i]], (size_t)nk[rows[i]] * sizeof *sidx);
	}
	struct tf_tensor *gout = one(gpu, TF_DT_F32, NULL, DIMS(R, H, D));
	struct tf_tensor *cout = one(cpu, TF_DT_F32, NULL, DIMS(sub, H, D));
	note(0, CALL(cpu, attention, one(cpu, qd, sq, DIMS(sub, H, D)),
		     one(cpu, kd, kh, DIMS(NK, D)), one(cpu, TF_DT_I32, soff, DIMS(sub + 1)),
		     one(cpu, TF_DT_I32, sidx, DIMS(soff[sub])), one(cpu, TF_DT_F32, sink, DIMS(H)),
		     cout));
	note(1, CALL(gpu, attention, one(gpu, qd, q, DIMS(R, H, D)),
		     one(gpu, kd, kh, DIMS(NK, D)), one(gpu, TF_DT_I32, off, DIMS(R + 1)),
		     one(gpu, TF_DT_I32, idx, DIMS(off[R])), one(gpu, TF_DT_F32, sink, DIMS(H)), gout));
	if (!cur.err)
		check_rows("out", cout, gout, rows, sub);
	end();
}

static void case_compressor(int64_t E, int64_t r, int64_t W, enum tf_dt wd, enum tf_dt ld)
{
	if (!begin("compressor", "u [%lld, %lld, %lld] w %s lat %s", (long long)E, (long long)r,
		   (long long)W, tf_dt_name(wd), tf_dt_name(ld)))
		return;
	struct pair *u = pin(TF_DT_F32, rnd(TF_DT_F32, E * r * W, 2), DIMS(E, r, W));
	struct pair *g = r == 2 ? pin(TF_DT_F32, rnd(TF_DT_F32, E * r * W, 3), DIMS(E, r, W)) : NULL;
	struct pair *w = pin(wd, rnd(wd, W, 1.5f), DIMS(W)), *lat = pout(ld, DIMS(E, W));
	BOTH(compressor, T(u), g ? T(g) : NULL, T(w), rc.eps, T(lat));
	check("lat", lat);
	end();
}

/* Indexer scores of R rows over N keys: causal (row r sees N - R + r + 1)
 * or random visible counts (with R >= 4: one row sees none, one all);
 * bs > 0: a reindex layer's random block marks. sub > 0: the CPU runs sub
 * random rows. */
static void case_index_score(int64_t R, int64_t Hi, int64_t Di, int64_t N, int bs,
			     enum tf_dt kd, int causal, int64_t sub)
{
	if (!begin("index_score", "iq [%lld, %lld, %lld] keys %s [%lld]%s%s%s", (long long)R,
		   (long long)Hi, (long long)Di, tf_dt_name(kd), (long long)N,
		   causal ? " causal" : "", bs ? " blocks" : "", sub ? " (CPU: a subset)" : ""))
		return;
	int64_t nb = bs ? (N + bs - 1) / bs : 0;
	int32_t *nv = ivec(R);
	for (int64_t r = 0; r < R; r++)
		nv[r] = (int32_t)(causal ? N - R + r + 1 : N / 2 + (int64_t)tf_rng_below(&rng, (uint64_t)(N - N / 2 + 1)));
	if (!causal && R >= 4)
		nv[1] = 0, nv[2] = (int32_t)N;
	uint8_t *blk = NULL;
	if (bs) {
		blk = hnew((size_t)(R * nb));
		for (int64_t i = 0; i < R * nb; i++)
			blk[i] = tf_rng_below(&rng, 10) < 7;
	}
	uint16_t *iq = rnd(TF_DT_BF16, R * Hi * Di, 1);
	float *iw = rnd(TF_DT_F32, R * Hi, 1);
	void *kh = rnd(kd, N * Di, 1);
	if (!sub) {
		struct pair *q = pin(TF_DT_BF16, iq, DIMS(R, Hi, Di)), *w = pin(TF_DT_F32, iw, DIMS(R, Hi));
		struct pair *k = pin(kd, kh, DIMS(N, Di)), *v = pin(TF_DT_I32, nv, DIMS(R));
		struct pair *b = bs ? pin(TF_DT_U8, blk, DIMS(R, nb)) : NULL;
		struct pair *s = pout(TF_DT_F32, DIMS(R, N));
		BOTH(index_score, T(q), T(w), T(k), T(v), b ? T(b) : NULL, bs, T(s));
		check("scores", s);
		end();
		return;
	}
	int32_t *rows = ivec(sub), *snv = ivec(sub);
	pick_sorted(rows, sub, R);
	uint16_t *sq = hnew((size_t)(sub * Hi * Di) * 2);
	float *sw = hnew((size_t)(sub * Hi) * 4);
	uint8_t *sb = bs ? hnew((size_t)(sub * nb)) : NULL;
	for (int64_t i = 0; i < sub; i++) {
		int64_t r = rows[i];
		snv[i] = nv[r];
		memcpy(sq + i * Hi * Di, iq + r * Hi * Di, (size_t)(Hi * Di) * 2);
		memcpy(sw + i * Hi, iw + r * Hi, (size_t)Hi * 4);
		if (bs)
			memcpy(sb + i * nb, blk + r * nb, (size_t)nb);
	}
	struct tf_tensor *gs = one(gpu, TF_DT_F32, NULL, DIMS(R, N));
	struct tf_tensor *cs = one(cpu, TF_DT_F32, NULL, DIMS(sub, N));
	note(0, CALL(cpu, index_score, one(cpu, TF_DT_BF16, sq, DIMS(sub, Hi, Di)),
		     one(cpu, TF_DT_F32, sw, DIMS(sub, Hi)), one(cpu, kd, kh, DIMS(N, Di)),
		     one(cpu, TF_DT_I32, snv, DIMS(sub)), bs ? one(cpu, TF_DT_U8, sb, DIMS(sub, nb)) : NULL,
		     bs, cs));
	note(1, CALL(gpu, index_score, one(gpu, TF_DT_BF16, iq, DIMS(R, Hi, Di)),
		     one(gpu, TF_DT_F32, iw, DIMS(R, Hi)), one(gpu, kd, kh, DIMS(N, Di)),
		     one(gpu, TF_DT_I32, nv, DIMS(R)), bs ? one(gpu, TF_DT_U8, blk, DIMS(R, nb)) : NULL,
		     bs, gs));
	if (!cur.err)
		check_rows("scores", cs, gs, rows, sub);
	end();
}

/* Scores with exact ties (values on a grid of 1/4), signed zeros and -inf
 * (one row in five keeps only 10 finite values, fewer than k), and visible
 * counts around k: N, k, below k, past k. */
static float *sel_scores(int64_t R, int64_t N, int k, int32_t *nv)
{
	float *s = hnew((size_t)(R * N) * 4);
	for (int64_t r = 0; r < R; r++) {
		int sparse = r % 5 == 4;
		for (int64_t j = 0; j < N; j++) {
			float v = floorf(urand() * 16) / 4;
			uint64_t u = tf_rng_below(&rng, 100);
			if (sparse)
				s[r * N + j] = tf_rng_below(&rng, (uint64_t)N) < 10 ? v : -INFINITY;
			else
				s[r * N + j] = u < 10 ? -INFINITY : u < 13 ? -0.0f : u < 16 ? 0.0f : v;
		}
		int64_t m = r % 4 == 0 ? N : r % 4 == 1 ? k : r % 4 == 2 ? (int64_t)tf_rng_below(&rng, (uint64_t)k)
			    : k + (int64_t)tf_rng_below(&rng, (uint64_t)(N - k + 1));
		nv[r] = (int32_t)(m < N ? m : N);
	}
	return s;
}

static void case_topk(int64_t R, int64_t N, int k)
{
	if (!begin("index_topk", "scores [%lld, %lld] k %d", (long long)R, (long long)N, k))
		return;
	int32_t *nv = ivec(R);
	float *s = sel_scores(R, N, k, nv);
	struct pair *ps = pin(TF_DT_F32, s, DIMS(R, N)), *pv = pin(TF_DT_I32, nv, DIMS(R));
	struct pair *sel = pout(TF_DT_I32, DIMS(R, k)), *ns = pout(TF_DT_I32, DIMS(R));
	BOTH(index_topk, T(ps), T(pv), k, T(sel), T(ns));
	check("sel", sel);
	check("n_sel", ns);
	end();
}

static void case_blocks(int64_t R, int64_t N, int bs, int topb)
{
	if (!begin("candidate_blocks", "scores [%lld, %lld] blocks of %d top %d", (long long)R,
		   (long long)N, bs, topb))
		return;
	int32_t *nv = ivec(R);
	float *s = sel_scores(R, N, topb * bs, nv);
	int64_t nb = (N + bs - 1) / bs;
	struct pair *ps = pin(TF_DT_F32, s, DIMS(R, N)), *pv = pin(TF_DT_I32, nv, DIMS(R));
	struct pair *b = pout(TF_DT_U8, DIMS(R, nb));
	BOTH(candidate_blocks, T(ps), T(pv), bs, topb, T(b));
	check("blocks", b);
	end();
}

/* Key lists of n rows at p0..: kind 0 without selections, 1 direct
 * (ascending pool rows of [0, pool)), 2 rows of their own; n_sel anywhere
 * in [0, k], slots past it hold junk the op must not read. */
static void case_attn_keys(int64_t n, int k, int kind, int64_t p0, int window, int64_t pool)
{
	static const char *kinds[] = {"window only", "direct", "own rows"};
	if (!begin("attn_keys", "%s rows %lld at %lld k %d window %d pool %lld", kinds[kind],
		   (long long)n, (long long)p0, k, window, (long long)pool))
		return;
	struct pair *sel = NULL, *ns = NULL;
	int64_t kk = kind ? k : 0;
	if (kind) {
		int32_t *s = ivec(n * k), *c = ivec(n);
		for (int64_t i = 0; i < n; i++) {
			c[i] = (int32_t)(i % 3 == 0 ? k : (int64_t)tf_rng_below(&rng, (uint64_t)k + 1));
			c[i] = c[i] < pool ? c[i] : (int32_t)pool;
			pick_sorted(s + i * k, c[i], pool);
			for (int t = c[i]; t < k; t++)
				s[i * k + t] = (int32_t)tf_rng_u64(&rng);
		}
		sel = pin(TF_DT_I32, s, DIMS(n, k));
		ns = pin(TF_DT_I32, c, DIMS(n));
	}
	/* another sequence's table rows and keys before these (the table
	 * bases; appending after kbase keys, every other case) */
	int64_t pbase = (int64_t)tf_rng_below(&rng, 1000), kbase = (int64_t)tf_rng_below(&rng, 40);
	int append = (int)(tf_rng_u64(&rng) & 1);
	kbase = append ? kbase : 0;
	int64_t wbase = pbase + (kind == 2 ? n * k : pool);
	int32_t *o0 = ivec(n + 1);
	for (int64_t i = 0; i <= n; i++)
		o0[i] = i ? (int32_t)tf_rng_u64(&rng) : (int32_t)kbase;
	struct pair *off = pin(TF_DT_I32, o0, DIMS(n + 1));
	struct pair *idx = pout(TF_DT_I32, DIMS(kbase + n * kk + n * window));
	BOTH(attn_keys, sel ? T(sel) : NULL, ns ? T(ns) : NULL, kind == 1, p0, window, pbase, wbase,
	     append, T(off), T(idx));
	check("key_off", off);
	if (!cur.err) { /* the used part of key_idx, from kbase */
		int32_t used = ((int32_t *)fetch(cpu, &off->c))[n];
		int32_t *ref = fetch(cpu, &idx->c), *got = fetch(gpu, &idx->g);
		compare("key_idx", TF_DT_I32, ref + kbase, got + kbase, used - kbase, 0);
	}
	end();
}

static void cases_attn(void)
{
	static const int64_t dec[] = {1, 4, 16, 64};
	const int64_t H = rc.heads, HD = rc.head_dim, Hi = rc.index_heads, Di = rc.index_dim;
	const int64_t keys = rc.window + rc.index_topk;
	const enum tf_dt bf = TF_DT_BF16, f32 = TF_DT_F32;
	case_attention("tiny", 3, 2, 96, 40, 40, bf, bf, 0);
	case_attention("tiny", 5, 2, 96, 40, 7, bf, f32, 0);
	for (int c = 0; c < 2; c++) /* ctx 1K (pool 512) and 32K (pool 16K), + the window */
		for (int i = 0; i < 4; i++)
			case_attention(c ? "ctx 32K" : "ctx 1K", dec[i], H, HD,
				       (c ? long_ctx / 2 : 512) + rc.window + dec[i], keys, bf, bf, 0);
	case_attention("f32 keys", 4, H, HD, 1024, keys, bf, f32, 0);
	/* the launcher's 4-head blocks (few rows, D > 256): f32 q and keys,
	 * rows of 0 and 1 keys, a last group of 2 heads, a long room */
	case_attention("4-head blocks", 1, H, HD, 1024, keys, f32, f32, 0);
	case_attention("4-head blocks", 3, H, HD, 1024, keys, bf, bf, 0);
	case_attention("4-head blocks", 2, 6, HD, 1024, keys, bf, f32, 0);
	case_attention("4-head blocks", 1, H, HD, 4096, 2000, bf, bf, 0);
	case_attention("prefill", prefill, H, HD, prefill / 2 + prefill, keys, bf, bf, 24);

	case_compressor(1, 1, 96, TF_DT_F32, TF_DT_F32);
	case_compressor(3, 2, 96, TF_DT_BF16, TF_DT_BF16);
	for (int i = 0; i < 4; i++)
		case_compressor(dec[i] / 2 ? dec[i] / 2 : 1, 2, HD, TF_DT_F32, TF_DT_BF16);
	case_compressor(prefill / 2, 2, HD, TF_DT_F32, TF_DT_BF16);
	case_compressor(prefill, 1, HD, TF_DT_F32, TF_DT_BF16);

	case_index_score(3, 2, 32, 37, 0, TF_DT_F32, 0, 0);
	case_index_score(4, 2, 32, 37, 2, TF_DT_BF16, 0, 0);
	for (int c = 0; c < 2; c++)
		for (int i = 0; i < 4; i++)
			case_index_score(dec[i], Hi, Di, c ? long_ctx : 1024, 0, TF_DT_BF16, 0, 0);
	case_index_score(16, Hi, Di, long_ctx, (int)rc.candidate_block_size, TF_DT_BF16, 0, 0);
	case_index_score(4, Hi, Di, 1024, 0, TF_DT_F32, 0, 0);
	case_index_score(prefill, Hi, Di, prefill, 0, TF_DT_BF16, 1, 96);

	case_topk(6, 10, 3);
	case_topk(11, 40, 7);
	for (int c = 0; c < 2; c++)
		for (int i = 0; i < 4; i++)
			case_topk(dec[i] + 4, c ? long_ctx : 1024, (int)rc.index_topk);
	case_topk(prefill, prefill, (int)rc.index_topk);

	case_blocks(6, 11, 2, 2);
	case_blocks(9, 100, 3, 5);
	for (int c = 0; c < 2; c++)
		for (int i = 0; i < 4; i++)
			case_blocks(dec[i] + 4, c ? long_ctx : 1024, (int)rc.candidate_block_size,
				    (int)rc.candidate_blocks);
	case_blocks(256, prefill, (int)rc.candidate_block_size, (int)rc.candidate_blocks);

	case_attn_keys(3, 0, 0, 0, 4, 0);
	case_attn_keys(5, 3, 1, 2, 4, 6);
	case_attn_keys(5, 3, 2, 9, 4, 6);
	for (int i = 0; i < 4; i++) {
		case_attn_keys(dec[i], 0, 0, 1000, (int)rc.window, 0);
		case_attn_keys(dec[i], (int)rc.index_topk, 1, long_ctx - dec[i], (int)rc.window, long_ctx / 2);
		case_attn_keys(dec[i], (int)rc.index_topk, 2, 900, (int)rc.window, 450);
	}
	case_attn_keys(prefill, (int)rc.index_topk, 1, 0, (int)rc.window, prefill / 2);
}

/* ---- MoE ---- */

static float softplus(float x)
{
	return x > 20.0f ? x : log1pf(expf(x));
}

/* Router logits whose scores sqrt(softplus(lg)) + bias (computed as the CPU
 * does) are at least 1e-4 apart in each row (relative, and absolute below
 * 1: a score near 0 is a sum that cancels): the logit of one of each close
 * pair is drawn again until none is left. */
static float *route_logits(int64_t R, int64_t E, const float *bias)
{
	float *lg = hnew((size_t)(R * E) * 4), *v = hnew((size_t)E * 4);
	int32_t *order = ivec(E);
	for (int64_t r = 0; r < R; r++) {
		float *l = lg + r * E;
		for (int64_t e = 0; e < E; e++)
			l[e] = 2 * nrand();
		for (bool close = true; close;) {
			for (int64_t e = 0; e < E; e++) {
				v[e] = sqrtf(softplus(l[e])) + bias[e];
				order[e] = (int32_t)e;
			}
			/* insertion sort by score: E is a few hundred */
			for (int64_t i = 1; i < E; i++)
				for (int64_t j = i; j > 0 && v[order[j - 1]] > v[order[j]]; j--) {
					int32_t t = order[j];
					order[j] = order[j - 1];
					order[j - 1] = t;
				}
			close = false;
			for (int64_t i = 1; i < E; i++) {
				float a = v[order[i - 1]], b = v[order[i]];
				if (b - a <= 1e-4f * fmaxf(1, fmaxf(fabsf(a), fabsf(b)))) {
					l[order[i]] = 2 * nrand();
					close = true;
				}
			}
		}
	}
	return lg;
}

static void case_route(int64_t R, int64_t E, int k)
{
	if (!begin("moe_route", "lg [%lld, %lld] top %d", (long long)R, (long long)E, k))
		return;
	float *bias = rnd(TF_DT_F32, E, 0.3f);
	struct pair *lg = pin(TF_DT_F32, route_logits(R, E, bias), DIMS(R, E));
	struct pair *b = pin(TF_DT_F32, bias, DIMS(E));
	struct pair *ids = pout(TF_DT_I32, DIMS(R, k)), *w = pout(TF_DT_F32, DIMS(R, k));
	BOTH(moe_route, T(lg), T(b), k, rc.routed_scale, T(ids), T(w));
	check("ids", ids);
	check("weights", w);
	end();
}

static void case_swiglu(int64_t P, int64_t n, enum tf_dt ad)
{
	if (!begin("swiglu", "gate, up [%lld, %lld] a %s", (long long)P, (long long)n, tf_dt_name(ad)))
		return;
	/* past the limit on both sides now and then */
	struct pair *g = pin(TF_DT_F32, rnd(TF_DT_F32, P * n, 12), DIMS(P, n));
	struct pair *u = pin(TF_DT_F32, rnd(TF_DT_F32, P * n, 12), DIMS(P, n));
	struct pair *a = pout(ad, DIMS(P, n));
	BOTH(swiglu, T(g), T(u), rc.swiglu_limit, T(a));
	check("a", a);
	end();
}

static void case_combine(int64_t R, int64_t k, int64_t D, int shared, enum tf_dt bd)
{
	if (!begin("moe_combine", "y [%lld, %lld, %lld]%s branch %s", (long long)R, (long long)k,
		   (long long)D, shared ? " + shared" : "", tf_dt_name(bd)))
		return;
	struct pair *y = pin(TF_DT_F32, rnd(TF_DT_F32, R * k * D, 2), DIMS(R, k, D));
	float *wh = rnd(TF_DT_F32, R * k, 1);
	for (int64_t i = 0; i < R * k; i++)
		wh[i] = fabsf(wh[i]) * 0.5f;
	struct pair *w = pin(TF_DT_F32, wh, DIMS(R, k));
	struct pair *s = shared ? pin(TF_DT_F32, rnd(TF_DT_F32, R * D, 1), DIMS(R, D)) : NULL;
	struct pair *b = pout(bd, DIMS(R, D));
	BOTH(moe_combine, T(y), T(w), s ? T(s) : NULL, T(b));
	check("branch", b);
	end();
}

/* ids [R, k]: k distinct experts a row, some dropped (-1 or >= E). */
static void case_group(int64_t R, int k, int E)
{
	if (!begin("moe_group", "ids [%lld, %d] of %d experts", (long long)R, k, E))
		return;
	int32_t *ids = ivec(R * k);
	for (int64_t r = 0; r < R; r++) {
		pick(ids + r * k, k, E);
		if (r % 3 == 1)
			ids[r * k + (int64_t)tf_rng_below(&rng, (uint64_t)k)] = r % 2 ? -1 : E + 2;
	}
	struct pair *pi = pin(TF_DT_I32, ids, DIMS(R, k)), *off = pout(TF_DT_I32, DIMS(E + 1));
	struct pair *pair = pout(TF_DT_I32, DIMS(R * k)), *src = pout(TF_DT_I32, DIMS(R * k));
	BOTH(moe_group, T(pi), E, T(off), T(pair), T(src));
	check("offsets", off);
	check("pair", pair);
	check("src", src);
	end();
}

static void cases_moe(void)
{
	static const int64_t dec[] = {1, 4, 16, 64};
	const int64_t E = rc.experts, k = rc.topk, W = rc.expert_width, D = rc.hidden;
	case_route(5, 8, 2);
	for (int i = 0; i < 4; i++)
		case_route(dec[i], E, (int)k);
	case_route(prefill, E, (int)k);

	case_swiglu(3, 96, TF_DT_F32);
	for (int i = 0; i < 4; i++) /* routed and shared rows */
		case_swiglu(dec[i] * (k + 1), W, TF_DT_BF16);
	case_swiglu(prefill * (k + 1), W, TF_DT_BF16);
	case_swiglu(16, W, TF_DT_F32);

	case_combine(3, 2, 96, 0, TF_DT_F32);
	for (int i = 0; i < 4; i++)
		case_combine(dec[i], k, D, 1, TF_DT_BF16);
	case_combine(prefill, k, D, 1, TF_DT_BF16);
	case_combine(16, k, D, 0, TF_DT_F32);

	case_group(5, 2, 8);
	for (int i = 0; i < 4; i++)
		case_group(dec[i], (int)k, (int)E);
	case_group(prefill, (int)k, (int)E);
}

/* ---- mHC, Engram, stream mean ---- */

static void case_mix(int64_t R, int64_t S, int64_t D, int iters)
{
	if (!begin("hc_mix", "x [%lld, %lld, %lld] %d Sinkhorn passes", (long long)R, (long long)S,
		   (long long)D, iters))
		return;
	int64_t M = 2 * S + S * S, n = S * D;
	struct pair *x = pin(TF_DT_BF16, rnd(TF_DT_BF16, R * n, 1.7f), DIMS(R, S, D));
	struct pair *fn = pin(TF_DT_F32, rnd(TF_DT_F32, M * n, 1.7f / sqrtf((float)n)), DIMS(M, n));
	struct pair *base = pin(TF_DT_F32, rnd(TF_DT_F32, M, 1), DIMS(M));
	float sc[3] = {0.5f + 0.5f * fabsf(urand()), 0.5f + 0.5f * fabsf(urand()), 1 + fabsf(urand())};
	struct pair *scale = pin(TF_DT_F32, sc, DIMS(3));
	struct pair *pre = pout(TF_DT_F32, DIMS(R, S)), *post = pout(TF_DT_F32, DIMS(R, S));
	struct pair *comb = pout(TF_DT_F32, DIMS(R, S, S));
	BOTH(hc_mix, T(x), T(fn), T(base), T(scale), rc.eps, rc.hc_eps, iters, rc.hc_post_alpha,
	     T(pre), T(post), T(comb));
	check("pre", pre);
	check("post", post);
	check("comb", comb);
	end();
}

/* hc_mix on the device alone: rows [a, a + m) of one call of R rows, run
 * again as a call of their own m rows (another kernel, another grid), must
 * be the same bits (batch invariance). */
static void case_mix_alone(int64_t R, int64_t S, int64_t D, int iters)
{
	if (!begin("hc_mix", "x [%lld, %lld, %lld]: rows alone as in one call", (long long)R,
		   (long long)S, (long long)D))
		return;
	int64_t M = 2 * S + S * S, n = S * D;
	struct tf_tensor *x = one(gpu, TF_DT_BF16, rnd(TF_DT_BF16, R * n, 1.7f), DIMS(R, S, D));
	struct tf_tensor *fn = one(gpu, TF_DT_F32, rnd(TF_DT_F32, M * n, 1.7f / sqrtf((float)n)),
				   DIMS(M, n));
	struct tf_tensor *base = one(gpu, TF_DT_F32, rnd(TF_DT_F32, M, 1), DIMS(M));
	float sc[3] = {0.5f + 0.5f * fabsf(urand()), 0.5f + 0.5f * fabsf(urand()), 1 + fabsf(urand())};
	struct tf_tensor *scale = one(gpu, TF_DT_F32, sc, DIMS(3));
	struct tf_tensor *out[3] = {one(gpu, TF_DT_F32, NULL, DIMS(R, S)),
				    one(gpu, TF_DT_F32, NULL, DIMS(R, S)),
				    one(gpu, TF_DT_F32, NULL, DIMS(R, S, S))};
	const int64_t per[3] = {S, S, S * S};
	if (!note(1, CALL(gpu, hc_mix, x, fn, base, scale, rc.eps, rc.hc_eps, iters,
			  rc.hc_post_alpha, out[0], out[1], out[2])))
		goto done;
	const float *all[3] = {fetch(gpu, out[0]), fetch(gpu, out[1]), fetch(gpu, out[2])};
	static const int64_t ms[] = {1, 3, 16, 64, 300};
	for (size_t i = 0; i < sizeof ms / sizeof *ms && !cur.err; i++) {
		int64_t m = ms[i], a = (R - m) / 2 | 1; /* an odd first row */
		if (a + m > R)
			continue;
		struct tf_tensor xs = tf_tensor_rows_of(x, a, m), *o[3];
		for (int k = 0; k < 3; k++)
			o[k] = one(gpu, TF_DT_F32, NULL, DIMS(m, per[k]));
		if (!note(1, CALL(gpu, hc_mix, &xs, fn, base, scale, rc.eps, rc.hc_eps, iters,
				  rc.hc_post_alpha, o[0], o[1], o[2])))
			break;
		for (int k = 0; k < 3; k++)
			compare("alone", TF_DT_F32, all[k] + a * per[k], fetch(gpu, o[k]), m * per[k], 0);
	}
done:
	end();
}

/* Positive weights of [0, hi). */
static float *weights(int64_t n, float hi)
{
	float *w = rnd(TF_DT_F32, n, hi);
	for (int64_t i = 0; i < n; i++)
		w[i] = fabsf(w[i]);
	return w;
}

static void case_collapse(int64_t R, int64_t S, int64_t D)
{
	if (!begin("hc_collapse", "x [%lld, %lld, %lld]", (long long)R, (long long)S, (long long)D))
		return;
	struct pair *x = pin(TF_DT_BF16, rnd(TF_DT_BF16, R * S * D, 2), DIMS(R, S, D));
	struct pair *pre = pin(TF_DT_F32, weights(R * S, 1), DIMS(R, S));
	struct pair *c = pout(TF_DT_BF16, DIMS(R, D));
	BOTH(hc_collapse, T(x), T(pre), T(c));
	check("c", c);
	end();
}

static void case_post(int64_t R, int64_t S, int64_t D, int alias)
{
	if (!begin("hc_post", "x [%lld, %lld, %lld]%s", (long long)R, (long long)S, (long long)D,
		   alias ? " (in place)" : ""))
		return;
	struct pair *x = pin(TF_DT_BF16, rnd(TF_DT_BF16, R * S * D, 2), DIMS(R, S, D));
	struct pair *b = pin(TF_DT_BF16, rnd(TF_DT_BF16, R * D, 2), DIMS(R, D));
	struct pair *post = pin(TF_DT_F32, weights(R * S, 2), DIMS(R, S));
	struct pair *comb = pin(TF_DT_F32, weights(R * S * S, 1), DIMS(R, S, S));
	struct pair *out = alias ? x : pout(TF_DT_BF16, DIMS(R, S, D));
	BOTH(hc_post, T(x), T(b), T(post), T(comb), T(out));
	check("out", out);
	end();
}

static void case_engram(int64_t R, int64_t S, int64_t D, int blocked, int alias)
{
	if (!begin("engram_gate", "x [%lld, %lld, %lld]%s%s", (long long)R, (long long)S,
		   (long long)D, blocked ? " blocked rows" : "", alias ? " (in place)" : ""))
		return;
	struct pair *x = pin(TF_DT_BF16, rnd(TF_DT_BF16, R * S * D, 2), DIMS(R, S, D));
	struct pair *kv = pin(TF_DT_BF16, rnd(TF_DT_BF16, R * (S + 1) * D, 2), DIMS(R, (S + 1) * D));
	struct pair *qk = pin(TF_DT_F32, rnd(TF_DT_F32, S * D, 1), DIMS(S, D));
	struct pair *bl = NULL;
	if (blocked) {
		uint8_t *h = hnew((size_t)R);
		for (int64_t r = 0; r < R; r++)
			h[r] = r % 3 == 1;
		bl = pin(TF_DT_U8, h, DIMS(R));
	}
	struct pair *out = alias ? x : pout(TF_DT_BF16, DIMS(R, S, D));
	BOTH(engram_gate, T(x), T(kv), T(qk), bl ? T(bl) : NULL, rc.eps, rc.engram_gate_clamp,
	     T(out));
	check("out", out);
	end();
}

static void case_mean(int64_t R, int64_t S, int64_t D)
{
	if (!begin("stream_mean", "x [%lld, %lld, %lld]", (long long)R, (long long)S, (long long)D))
		return;
	struct pair *x = pin(TF_DT_BF16, rnd(TF_DT_BF16, R * S * D, 3), DIMS(R, S, D));
	struct pair *out = pout(TF_DT_BF16, DIMS(R, D));
	BOTH(stream_mean, T(x), T(out));
	check("out", out);
	end();
}

static void cases_mhc(void)
{
	static const int64_t dec[] = {1, 4, 16, 64};
	const int64_t S = rc.hc_mult, D = rc.hidden;
	const int iters = (int)rc.hc_sinkhorn_iters;
	case_mix(3, S, 96, 3);
	case_mix(5, 3, 95, 3); /* odd n = 285: the unpaired loads, M = 15 */
	for (int i = 0; i < 4; i++)
		case_mix(dec[i], S, D, iters);
	/* each kernel's partial row group (cuda_mhc.c: r4o1 to 16 rows, r4o5
	 * to 64, r8o5 past) */
	case_mix(3, S, D, iters);
	case_mix(17, S, D, iters);
	case_mix(300, S, D, iters);
	case_mix(prefill, S, D, iters);
	case_mix_alone(prefill, S, D, iters);
	case_collapse(3, S, 96);
	for (int i = 0; i < 4; i++)
		case_collapse(dec[i], S, D);
	case_collapse(prefill, S, D);
	case_post(3, S, 96, 0);
	for (int i = 0; i < 4; i++)
		case_post(dec[i], S, D, 0);
	case_post(16, S, D, 1);
	case_post(prefill, S, D, 0);
	case_engram(3, S, 96, 1, 0);
	for (int i = 0; i < 4; i++)
		case_engram(dec[i], S, D, i == 2, 0);
	case_engram(16, S, D, 1, 1);
	case_engram(prefill, S, D, 0, 0);
	case_engram(5, S, 6500, 1, 1); /* past the values held in registers (6144) */
	case_mean(3, S, 96);
	for (int i = 0; i < 4; i++)
		case_mean(dec[i], S, D);
	case_mean(prefill, S, D);
}

/* ---- moving rows ---- */

/* An index of [0, n) or, one time in twenty, one to skip (-1 or past n). */
static int32_t index_or_skip(int64_t n)
{
	uint64_t u = tf_rng_below(&rng, 40);
	return u == 0 ? -1 : u == 1 ? (int32_t)(n + (int64_t)tf_rng_below(&rng, 4)) : (int32_t)tf_rng_below(&rng, (uint64_t)n);
}

/* rows_copy of n moves between x [Nx, C] and y [Ny, C] (y starts random,
 * the same on both): xi a gather with repeats and skips, yi a scatter to
 * distinct rows with skips, neither (n = Nx, moves past Ny skipped); same:
 * x and y are one tensor, xi and yi disjoint. */
static void case_rows_copy(const char *what, enum tf_dt dt, int64_t Nx, int64_t Ny, int64_t C,
			   int64_t n, int xi, int yi, int same)
{
	if (!begin("rows_copy", "%s %s x [%lld, %lld] y [%lld, %lld] moves %lld%s%s%s", what,
		   tf_dt_name(dt), (long long)Nx, (long long)C, (long long)Ny, (long long)C,
		   (long long)n, xi ? " xi" : "", yi ? " yi" : "", same ? " (one tensor)" : ""))
		return;
	size_t es = tf_dt_size(dt);
	struct pair *x = pin(dt, rnd_bytes((size_t)(Nx * C) * es), DIMS(Nx, C));
	struct pair *y = same ? x : pin(dt, rnd_bytes((size_t)(Ny * C) * es), DIMS(Ny, C));
	int32_t *xh = xi ? ivec(n) : NULL, *yh = yi ? ivec(same ? 2 * n : n) : NULL;
	if (same) {
		pick(yh, 2 * n, Nx); /* the first n read, the last n written */
		memcpy(xh, yh + n, (size_t)n * sizeof *xh);
	} else {
		for (int64_t m = 0; xh && m < n; m++)
			xh[m] = index_or_skip(Nx);
		if (yh)
			pick(yh, n, Ny);
	}
	for (int64_t m = 0; yh && m < n; m += 17)
		yh[m] = m % 2 ? -1 : (int32_t)(Ny + m);
	struct pair *pxi = xh ? pin(TF_DT_I32, xh, DIMS(n)) : NULL;
	struct pair *pyi = yh ? pin(TF_DT_I32, yh, DIMS(n)) : NULL;
	BOTH(rows_copy, T(x), pxi ? T(pxi) : NULL, T(y), pyi ? T(pyi) : NULL);
	check("y", y);
	end();
}

static const char *fmt_name(const struct tf_rowfmt *f)
{
	static char b[64];
	static const char *names[] = {"fp8", "fp4", "bf16"};
	snprintf(b, sizeof b, "%s%s %d rope %d (%zu B)", names[f->fmt], f->index_key ? " index key" : "",
		 f->dim, f->rope, tf_rowfmt_bytes(f));
	return b;
}

/* Rows to quantise: random scales, tiny rows (amax under the 1e-4 floor),
 * large ones, and rows whose amax is the largest code times a power of two
 * (the scale's exponent exact). */
static float *cache_rows(const struct tf_rowfmt *f, int64_t n)
{
	float *x = rnd(TF_DT_F32, n * f->dim, 1);
	float top = f->fmt == TF_KV_FP4 && !f->index_key ? 6.0f : 448.0f;
	for (int64_t i = 0; i < n; i++) {
		float *v = x + i * f->dim;
		float s = i % 4 == 0 ? 3 : i % 4 == 1 ? 1e-6f : i % 4 == 2 ? 1e3f : 0.5f * top * 0x1p-3f;
		for (int d = 0; d < f->dim; d++)
			v[d] = tf_round_bf16(v[d] * s);
		if (i % 4 == 3)
			v[i % (f->dim - f->rope > 0 ? f->dim - f->rope : 1)] = top * 0x1p-3f;
	}
	return x;
}

static void case_cache_write(const struct tf_rowfmt *f, enum tf_dt xd, int64_t n, int64_t rows)
{
	if (!begin("cache_write", "%s x %s [%lld] into %lld rows", fmt_name(f), tf_dt_name(xd),
		   (long long)n, (long long)rows))
		return;
	size_t rb = tf_rowfmt_bytes(f);
	float *xf = cache_rows(f, n);
	void *xh = xf;
	if (xd == TF_DT_BF16) {
		xh = hnew((size_t)(n * f->dim) * 2);
		for (int64_t i = 0; i < n * f->dim; i++)
			put(xd, xh, i, xf[i]);
	}
	int32_t *idx = ivec(n);
	pick(idx, n, rows);
	for (int64_t m = 0; m < n; m += 13)
		idx[m] = m % 2 ? -1 : (int32_t)(rows + m);
	struct pair *x = pin(xd, xh, DIMS(n, f->dim)), *pi = pin(TF_DT_I32, idx, DIMS(n));
	struct pair *cache = pin(TF_DT_U8, rnd_bytes((size_t)rows * rb), DIMS(rows, (int64_t)rb));
	BOTH(cache_write, f, T(x), T(pi), T(cache));
	check("cache", cache);
	end();
}

static void case_cache_read(const struct tf_rowfmt *f, enum tf_dt od, int64_t n, int64_t rows)
{
	if (!begin("cache_read", "%s [%lld] of %lld rows out %s", fmt_name(f), (long long)n,
		   (long long)rows, tf_dt_name(od)))
		return;
	size_t rb = tf_rowfmt_bytes(f);
	float *xf = cache_rows(f, rows);
	uint8_t *c = hnew((size_t)rows * rb);
	for (int64_t r = 0; r < rows; r++)
		tf_rowfmt_encode(f, xf + r * f->dim, c + (size_t)r * rb);
	int32_t *idx = ivec(n);
	for (int64_t m = 0; m < n; m++)
		idx[m] = index_or_skip(rows);
	struct pair *cache = pin(TF_DT_U8, c, DIMS(rows, (int64_t)rb));
	struct pair *pi = pin(TF_DT_I32, idx, DIMS(n)), *out = pout(od, DIMS(n, f->dim));
	BOTH(cache_read, f, T(cache), T(pi), T(out));
	check("out", out);
	end();
}

static void case_page_rows(int64_t P, int rpp, int64_t n)
{
	if (!begin("page_rows", "pages %lld of %d rows, %lld rows", (long long)P, rpp, (long long)n))
		return;
	int32_t *pt = ivec(P), *l = ivec(n);
	pick(pt, P, 4 * P);
	for (int64_t m = 0; m < n; m++)
		l[m] = (int32_t)tf_rng_below(&rng, (uint64_t)((P + 3) * rpp + 3)) - 3;
	struct pair *ppt = pin(TF_DT_I32, pt, DIMS(P)), *pl = pin(TF_DT_I32, l, DIMS(n));
	struct pair *out = pout(TF_DT_I32, DIMS(n));
	BOTH(page_rows, T(ppt), rpp, T(pl), T(out));
	check("out", out);
	end();
}

/* fill_random over n bytes (the last word partial when n % 8). */
static void case_fill_random(int64_t n, uint64_t seed)
{
	if (!begin("fill_random", "%lld bytes, seed %llu", (long long)n, (unsigned long long)seed))
		return;
	struct pair *t = pout(TF_DT_U8, DIMS(n));
	BOTH(fill_random, T(t), seed);
	check("t", t);
	end();
}

static void cases_rows(void)
{
	static const int64_t dec[] = {1, 4, 16, 64};
	const int64_t D = rc.hidden, HD = rc.head_dim;
	const struct tf_rowfmt win = {TF_KV_FP8, (int)HD, (int)rc.rope_dim, 0};
	const struct tf_rowfmt fp4 = {TF_KV_FP4, (int)HD, (int)rc.rope_dim, 0};
	const struct tf_rowfmt bf = {TF_KV_BF16, (int)HD, (int)rc.rope_dim, 0};
	const struct tf_rowfmt ik = {TF_KV_FP8, (int)rc.index_dim, 0, 1};
	const struct tf_rowfmt ikb = {TF_KV_BF16, (int)rc.index_dim, 0, 1};
	const struct tf_rowfmt tiny8 = {TF_KV_FP8, 128, 32, 0}; /* a partial group of 32 */
	const struct tf_rowfmt tiny4 = {TF_KV_FP4, 96, 32, 0};
	/* past 512 values: cache_read's second chunk; 14 full fp8 groups and a
	 * partial one, 15 FP4 steps of 32 bytes */
	const struct tf_rowfmt wide8 = {TF_KV_FP8, 1000, 64, 0};
	const struct tf_rowfmt wide4 = {TF_KV_FP4, 1000, 64, 0};
	const int64_t rb = (int64_t)tf_rowfmt_bytes(&win);

	case_fill_random(1, 1);
	case_fill_random(8 * 1000 + 5, 7);
	case_fill_random((int64_t)3 << 20, 0x5eed);
	case_rows_copy("tiny", TF_DT_F32, 9, 7, 96, 12, 1, 0, 0);
	case_rows_copy("tiny", TF_DT_BF16, 9, 20, 96, 9, 0, 1, 0);
	case_rows_copy("tiny", TF_DT_I32, 9, 5, 3, 9, 0, 0, 0);
	case_rows_copy("tiny", TF_DT_U8, 30, 30, 33, 10, 1, 1, 1);
	case_rows_copy("one row", TF_DT_BF16, 1, 1, D, 1, 0, 0, 0); /* 640 threads of 16 bytes */
	case_rows_copy("one row", TF_DT_BF16, 3, 2, D + 3, 1, 1, 1, 0); /* 2-byte units */
	for (int i = 0; i < 4; i++) {
		case_rows_copy("expert rows", TF_DT_BF16, dec[i], dec[i] * rc.topk, D,
			       dec[i] * rc.topk, 1, 0, 0);
		case_rows_copy("cache rows", TF_DT_U8, 4096, 8192, rb, dec[i], 1, 1, 0);
	}
	case_rows_copy("expert rows", TF_DT_BF16, prefill, prefill * rc.topk, D, prefill * rc.topk, 1, 0, 0);
	case_rows_copy("scatter back", TF_DT_F32, prefill * rc.topk, prefill * rc.topk, D, prefill * rc.topk,
		       0, 1, 0);
	case_rows_copy("in place", TF_DT_U8, 20000, 20000, rb, prefill, 1, 1, 1);

	const struct tf_rowfmt *fmts[] = {&win, &fp4, &bf, &ik, &ikb, &tiny8, &tiny4, &wide8, &wide4};
	for (size_t f = 0; f < sizeof fmts / sizeof *fmts; f++) {
		case_cache_write(fmts[f], f % 2 ? TF_DT_BF16 : TF_DT_F32, 16, 300);
		case_cache_read(fmts[f], f % 2 ? TF_DT_F32 : TF_DT_BF16, 40, 300);
	}
	for (int i = 0; i < 4; i++) {
		case_cache_write(&win, TF_DT_BF16, dec[i], long_ctx);
		case_cache_write(&ik, TF_DT_F32, dec[i], long_ctx / 2);
		case_cache_read(&win, TF_DT_BF16, dec[i] * (rc.window + rc.index_topk), long_ctx);
	}
	case_cache_read(&ik, TF_DT_F32, 512, 512);
	case_cache_read(&ik, TF_DT_F32, long_ctx / 2, long_ctx / 2);
	case_cache_read(&ik, TF_DT_BF16, long_ctx, long_ctx);
	case_cache_write(&win, TF_DT_BF16, prefill, 2 * prefill);
	case_cache_write(&ik, TF_DT_F32, prefill / 2, prefill);

	case_page_rows(3, 4, 20);
	for (int i = 0; i < 4; i++)
		case_page_rows(512, 64, dec[i] * (rc.window + rc.index_topk));
	case_page_rows(4096, 16, long_ctx);
}

/* ---- sampling ---- */

/* Rows of every kind of rule; big > 0 gives the top_k rows top_k big, so
 * that the device's candidate lists take its other paths (kernels/sample.cu:
 * a merge over more than 8192, chunks taken whole). */
static void case_sample(int64_t R, int64_t V, int big)
{
	if (!begin("sample", "logits [%lld, %lld], greedy, temperature, top_k%s%.0d, top_p, min_p",
		   (long long)R, (long long)V, big ? " " : "", big))
		return;
	float *l = hnew((size_t)(R * V) * 4);
	for (int64_t i = 0; i < R * V; i++)
		l[i] = 3 * nrand();
	struct tf_sample_params *p = hnew((size_t)R * sizeof *p);
	int64_t *pos = hnew((size_t)R * sizeof *pos);
	static const struct tf_sample_params kinds[] = {
		{0, 0, 0, 1, 0},        /* greedy */
		{0, 0.8, 0, 1, 0},      /* temperature only */
		{0, 1.0, 40, 1, 0},     /* top_k */
		{0, 0.7, 0, 0.9, 0},    /* top_p (the nucleus path) */
		{0, 1.2, 0, 1, 0.05},   /* min_p */
		{0, 0.9, 50, 0.95, 0.02},
		{0, 1.5, 1, 1, 0},      /* top_k 1: greedy by another road */
		{0, 0, 0, 1, 0},        /* greedy over a tie: the lower id */
	};
	for (int64_t r = 0; r < R; r++) {
		p[r] = kinds[r % 8];
		if (big && r % 8 == 2)
			p[r].top_k = big;
		p[r].seed = tf_rng_u64(&rng) >> 1;
		pos[r] = (int64_t)tf_rng_below(&rng, 1 << 20);
		if (r % 8 == 7) {
			float *row = l + r * V, m = row[0];
			for (int64_t v = 1; v < V; v++)
				m = row[v] > m ? row[v] : m;
			row[V / 3] = row[V / 2] = m + 1;
		}
	}
	struct pair *lg = pin(TF_DT_F32, l, DIMS(R, V));
	int32_t *tok[2] = {ivec(R), ivec(R)};
	memset(tok[1], 0xFF, (size_t)R * 4);
	for (side = 0; side < 2; side++)
		note(side, CALL(BE, sample, T(lg), p, pos, tok[side]));
	if (!cur.err)
		compare("tokens", TF_DT_I32, tok[0], tok[1], R, 0);
	end();
}

/* ---- shapes both backends refuse ---- */

/* Shapes that both backends must refuse with TF_ERR_ARG before any work:
 * linear x [2, 96] with w [8, 128]; rmsnorm w [95] for rows of 96; rope
 * rotating 128 of 96; moe_route top 9 of 8 experts; index_topk k 0. Run
 * last: a device op that queued work on such shapes could break the
 * context for the cases after it. */
static void cases_refused(void)
{
	if (!begin("refused", "linear, rmsnorm, rope, moe_route, index_topk"))
		return;
	struct tf_rope_freqs rf;
	tf_rope_freqs_plain(&rf, 128, 1e4);
	struct pair *x = pin(TF_DT_F32, rnd(TF_DT_F32, 2 * 96, 1), DIMS(2, 96));
	struct pair *w = pin(TF_DT_F32, rnd(TF_DT_F32, 8 * 128, 1), DIMS(8, 128));
	struct pair *y = pout(TF_DT_F32, DIMS(2, 8)), *w95 = pout(TF_DT_F32, DIMS(95));
	struct pair *pos = pin(TF_DT_I32, positions(2, 100), DIMS(2));
	struct pair *y96 = pout(TF_DT_F32, DIMS(2, 96));
	struct pair *bias = pout(TF_DT_F32, DIMS(8)), *ids = pout(TF_DT_I32, DIMS(2, 9));
	struct pair *lg = pin(TF_DT_F32, rnd(TF_DT_F32, 16, 1), DIMS(2, 8));
	struct pair *nv = pin(TF_DT_I32, ivec(2), DIMS(2)), *n2 = pout(TF_DT_I32, DIMS(2));
	struct pair *wt = pout(TF_DT_F32, DIMS(2, 9));
	int32_t want[2][5], got[2][5];
	for (side = 0; side < 2; side++) {
		got[side][0] = CALL(BE, linear, T(x), T(w), T(y));
		got[side][1] = CALL(BE, rmsnorm, T(x), T(w95), 1e-6f, T(y96));
		got[side][2] = CALL(BE, rope, T(x), T(pos), &rf, 0, T(y96));
		got[side][3] = CALL(BE, moe_route, T(lg), T(bias), 9, 1.0f, T(ids), T(wt));
		got[side][4] = CALL(BE, index_topk, T(lg), T(nv), 0, T(ids), T(n2));
		for (int i = 0; i < 5; i++)
			want[side][i] = TF_ERR_ARG;
	}
	tf_err_clear();
	compare("refused", TF_DT_I32, want, got, 10, 0);
	end();
}

/* ---- main ---- */

static void usage(FILE *f, int code)
{
	fputs("usage: gpu_ops [--quick] [--only OP[,OP...]] [--break OP]\n", f);
	exit(code);
}

static bool known_op(const char *op)
{
	for (size_t i = 0; i < sizeof tols / sizeof *tols; i++)
		if (!strcmp(tols[i].op, op))
			return true;
	return false;
}

int main(int argc, char **argv)
{
	break_op = getenv("TF_GPU_OPS_BREAK");
	only = getenv("TF_GPU_OPS_ONLY");
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--break") && i + 1 < argc)
			break_op = argv[++i];
		else if (!strcmp(argv[i], "--only") && i + 1 < argc)
			only = argv[++i];
		else if (!strcmp(argv[i], "--quick"))
			prefill = 256, long_ctx = 4096;
		else if (!strcmp(argv[i], "--help"))
			usage(stdout, 0);
		else
			usage(stderr, 64);
	}
	if (break_op && (!*break_op || !known_op(break_op))) {
		fprintf(stderr, "gpu_ops: --break: no op '%s'\n", break_op);
		return 64;
	}
	const char *env = getenv("TF_TEST_SEED");
	uint64_t seed = env && *env ? strtoull(env, NULL, 0)
				    : (uint64_t)time(NULL) * 1000003u ^ (uint64_t)getpid();
	const char *ref = getenv("TF_GPU_OPS_REF");
	bool self = ref && !strcmp(ref, "cpu");
	tf_status st = self ? tf_cpu_be_new(0, &gpu) : tf_cuda_be_new(0, &gpu);
	if (st == TF_ERR_UNAVAILABLE) {
		fprintf(stderr, "skip: %s\n", tf_errmsg(st));
		return 77;
	}
	if (st)
		die("cuda backend", st);
	if ((st = tf_cpu_be_new(0, &cpu)))
		die("cpu backend", st);
	if ((st = tf_config_preset(&rc, "release")))
		die("release preset", st);
	tf_rng_seed(&rng, seed);
	printf("gpu_ops: %s against the CPU backend, seed %llu (TF_TEST_SEED=%llu repeats it)%s%s\n",
	       self ? "the CPU backend (TF_GPU_OPS_REF=cpu)" : "the CUDA backend",
	       (unsigned long long)seed, (unsigned long long)seed, break_op ? "; breaking " : "",
	       break_op ? break_op : "");
	printf("%-20s %-52s %s\n", "op", "shape", "per output: worst error (tolerance); verdict");
	cases_memory();
	cases_dense();
	cases_exl3();
	cases_attn();
	cases_moe();
	cases_mhc();
	cases_rows();
	if (wanted("sample")) {
		case_sample(8, 512, 0);
		case_sample(8, 20003, 0); /* 3 chunks, the last not a multiple of 8 */
		static const int64_t dec[] = {1, 4, 16, 64};
		for (int i = 0; i < 4; i++)
			case_sample(dec[i] < 8 ? 8 : dec[i], rc.vocab, 0);
		case_sample(8, rc.vocab, 600);   /* a list of 16 x 609 */
		case_sample(8, rc.vocab, 7000);  /* the last chunk whole */
		case_sample(8, rc.vocab, 10000); /* every chunk whole */
	}
	cases_refused();
	printf("gpu_ops: %d cases, %d failed (%d unsupported on cuda), seed %llu: %s\n", n_cases,
	       n_failed, n_unsupported, (unsigned long long)seed, n_failed ? "FAIL" : "PASS");
	tf_be_free(gpu);
	tf_be_free(cpu);
	return n_failed ? 1 : 0;
}
