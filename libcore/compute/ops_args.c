/* ops_args.c: the argument checks both backends make (ops_args.h). */
#include "compute/ops_args.h"

#include <math.h>

#include "model/exl3.h"

tf_status tf_args_convert(const struct tf_tensor *x, const struct tf_tensor *y, int64_t *n)
{
	tf_status st;
	*n = x ? tf_tensor_numel(x) : 0;
	if ((st = tf_op_check("convert", "x", x, TF_DTS_FLOAT, -1)))
		return st;
	return tf_op_check("convert", "y", y, TF_DTS_FLOAT, *n);
}

tf_status tf_args_linear(const struct tf_tensor *x, const struct tf_tensor *w,
			 const struct tf_tensor *y, int64_t *R, int64_t *K, int64_t *N)
{
	tf_status st;
	*K = x ? tf_tensor_cols(x) : 0;
	*R = x ? tf_tensor_rows(x) : 0;
	*N = w ? tf_tensor_rows(w) : 0;
	if ((st = tf_op_check("linear", "x", x, TF_DTS_FLOAT, -1)) ||
	    (st = tf_op_check("linear", "w", w, TF_DTS_FLOAT, -1)) ||
	    (st = tf_op_check("linear", "y", y, TF_DTS_F32 | TF_DTS_BF16, *R * *N)))
		return st;
	if (tf_tensor_cols(w) != *K)
		return tf_err(TF_ERR_ARG, "linear: x has %lld columns, w %lld", (long long)*K,
			      (long long)tf_tensor_cols(w));
	return TF_OK;
}

tf_status tf_args_experts(const char *op, const struct tf_tensor *expert_ids,
			  const struct tf_tensor *offsets, const struct tf_tensor *x,
			  const struct tf_tensor *y, int64_t *R, int64_t *N, int64_t *G)
{
	tf_status st;
	*R = x ? tf_tensor_rows(x) : 0;
	*N = y ? tf_tensor_cols(y) : 0;
	*G = expert_ids ? tf_tensor_numel(expert_ids) : 0;
	if ((st = tf_op_check(op, "x", x, TF_DTS_FLOAT, -1)) ||
	    (st = tf_op_check(op, "y", y, TF_DTS_F32 | TF_DTS_BF16, *R * *N)) ||
	    (st = tf_op_check(op, "expert_ids", expert_ids, TF_DTS_I32, -1)))
		return st;
	return tf_op_check(op, "offsets", offsets, TF_DTS_I32, *G + 1);
}

tf_status tf_args_exl3_layer(const char *op, const struct tf_exl3_layer *L, int64_t K, int64_t N)
{
	tf_status st;
	if (!L || !L->trellis || !L->suh || !L->svh)
		return tf_err(TF_ERR_ARG, "%s: the layer has no weights", op);
	if ((st = tf_exl3_geom_check(&L->g)))
		return st;
	if ((int64_t)L->g.k != K || (int64_t)L->g.n != N)
		return tf_err(TF_ERR_ARG, "%s: layer is %ux%u, x and y want %lldx%lld", op, L->g.k,
			      L->g.n, (long long)K, (long long)N);
	return TF_OK;
}

tf_status tf_args_exl3_matmul(const struct tf_exl3_layer *L, const struct tf_tensor *x,
			      const struct tf_tensor *y, int64_t *R, int64_t *K, int64_t *N)
{
	tf_status st;
	*R = x ? tf_tensor_rows(x) : 0;
	*K = x ? tf_tensor_cols(x) : 0;
	*N = y ? tf_tensor_cols(y) : 0;
	if ((st = tf_op_check("exl3_matmul", "x", x, TF_DTS_FLOAT, -1)) ||
	    (st = tf_op_check("exl3_matmul", "y", y, TF_DTS_F32 | TF_DTS_BF16, *R * *N)))
		return st;
	return tf_args_exl3_layer("exl3_matmul", L, *K, *N);
}

tf_status tf_args_sample(const struct tf_tensor *logits, int64_t *R, int64_t *V)
{
	tf_status st;
	*V = logits ? tf_tensor_cols(logits) : 0;
	*R = logits ? tf_tensor_rows(logits) : 0;
	if ((st = tf_op_check("sample", "logits", logits, TF_DTS_F32, -1)))
		return st;
	if (*V < 1 || *V > INT32_MAX)
		return tf_err(TF_ERR_ARG, "sample: a row of %lld logits", (long long)*V);
	return TF_OK;
}

tf_status tf_args_embed(const struct tf_tensor *table, const struct tf_tensor *ids,
			const struct tf_tensor *out, int64_t *R, int64_t *C, int64_t *D, int64_t *V)
{
	tf_status st;
	*R = ids ? tf_tensor_numel(ids) : 0;
	*D = table ? tf_tensor_cols(table) : 0;
	*V = table ? tf_tensor_rows(table) : 0;
	if ((st = tf_op_check("embed", "table", table, TF_DTS_BF16, -1)) ||
	    (st = tf_op_check("embed", "ids", ids, TF_DTS_I32, -1)) ||
	    (st = tf_op_check("embed", "out", out, TF_DTS_BF16, -1)))
		return st;
	*C = *D ? tf_tensor_numel(out) / (*R ? *R : 1) / *D : 0;
	if (!*D || tf_tensor_cols(out) != *D || *R * *C * *D != tf_tensor_numel(out))
		return tf_err(TF_ERR_ARG, "embed: out is not [R, C, %lld]", (long long)*D);
	return TF_OK;
}

tf_status tf_args_rmsnorm(const struct tf_tensor *x, const struct tf_tensor *w,
			  const struct tf_tensor *y, int64_t *R, int64_t *n)
{
	tf_status st;
	*n = x ? tf_tensor_cols(x) : 0;
	*R = x ? tf_tensor_rows(x) : 0;
	if ((st = tf_op_check("rmsnorm", "x", x, TF_DTS_FLOAT, -1)) ||
	    (st = tf_op_check("rmsnorm", "w", w, TF_DTS_FLOAT, *n)))
		return st;
	return tf_op_check("rmsnorm", "y", y, TF_DTS_F32 | TF_DTS_BF16, *R * *n);
}

tf_status tf_args_rope(const struct tf_tensor *x, const struct tf_tensor *pos,
		       const struct tf_rope_freqs *rf, const struct tf_tensor *y, int64_t *R,
		       int64_t *H, int64_t *n)
{
	tf_status st;
	*R = pos ? tf_tensor_numel(pos) : 0;
	*n = x ? tf_tensor_cols(x) : 0;
	*H = 0;
	if ((st = tf_op_check("rope", "x", x, TF_DTS_F32 | TF_DTS_BF16, -1)) ||
	    (st = tf_op_check("rope", "pos", pos, TF_DTS_I32, -1)) ||
	    (st = tf_op_check("rope", "y", y, TF_DTS_F32 | TF_DTS_BF16, tf_tensor_numel(x))))
		return st;
	if (!rf || rf->dim <= 0 || rf->dim % 2 || rf->dim > 128 || rf->dim > *n)
		return tf_err(TF_ERR_ARG, "rope: rotated dims %d do not fit %lld", rf ? rf->dim : 0,
			      (long long)*n);
	if (*R == 0 || tf_tensor_numel(x) % (*R * *n))
		return tf_err(TF_ERR_ARG, "rope: x is not [%lld, H, %lld]", (long long)*R,
			      (long long)*n);
	*H = tf_tensor_numel(x) / (*R * *n);
	return TF_OK;
}

tf_status tf_args_attention(const struct tf_tensor *q, const struct tf_tensor *keys,
			    const struct tf_tensor *key_off, const struct tf_tensor *key_idx,
			    const struct tf_tensor *sink, const struct tf_tensor *out, int64_t *R,
			    int64_t *H, int64_t *D)
{
	tf_status st;
	*R = key_off ? tf_tensor_numel(key_off) - 1 : 0;
	*D = q ? tf_tensor_cols(q) : 0;
	if ((st = tf_op_check("attention", "q", q, TF_DTS_F32 | TF_DTS_BF16, -1)) ||
	    (st = tf_op_check("attention", "keys", keys, TF_DTS_F32 | TF_DTS_BF16, -1)) ||
	    (st = tf_op_check("attention", "key_off", key_off, TF_DTS_I32, -1)) ||
	    (st = tf_op_check("attention", "key_idx", key_idx, TF_DTS_I32, -1)) ||
	    (st = tf_op_check("attention", "out", out, TF_DTS_F32, tf_tensor_numel(q))))
		return st;
	if (*R < 1 || *D < 1 || tf_tensor_numel(q) % (*R * *D) || tf_tensor_cols(keys) != *D)
		return tf_err(TF_ERR_ARG, "attention: q is not [%lld, H, %lld] or keys not [NK, %lld]",
			      (long long)*R, (long long)*D, (long long)*D);
	*H = tf_tensor_numel(q) / (*R * *D);
	return tf_op_check("attention", "sink", sink, TF_DTS_F32, *H);
}

tf_status tf_args_compressor(const struct tf_tensor *u, const struct tf_tensor *g,
			     const struct tf_tensor *w, const struct tf_tensor *lat, int64_t *E,
			     int64_t *r, int64_t *W)
{
	tf_status st;
	*W = lat ? tf_tensor_cols(lat) : 0;
	*E = lat ? tf_tensor_rows(lat) : 0;
	if ((st = tf_op_check("compressor", "u", u, TF_DTS_F32, -1)) ||
	    (st = tf_op_check("compressor", "lat", lat, TF_DTS_F32 | TF_DTS_BF16, -1)) ||
	    (st = tf_op_check("compressor", "w", w, TF_DTS_FLOAT, *W)))
		return st;
	*r = *E > 0 && *W > 0 ? tf_tensor_numel(u) / (*E * *W) : 0;
	if ((*r != 1 && *r != 2) || tf_tensor_numel(u) != *E * *r * *W)
		return tf_err(TF_ERR_ARG, "compressor: u is not [%lld, 1|2, %lld]", (long long)*E,
			      (long long)*W);
	return *r == 2 ? tf_op_check("compressor", "g", g, TF_DTS_F32, *E * *r * *W) : TF_OK;
}

tf_status tf_args_index_score(const struct tf_tensor *iq, const struct tf_tensor *iw,
			      const struct tf_tensor *keys, const struct tf_tensor *n_vis,
			      const struct tf_tensor *blocks, int bs, const struct tf_tensor *scores,
			      int64_t *R, int64_t *Hi, int64_t *Di, int64_t *N, int64_t *nblk)
{
	tf_status st;
	*R = n_vis ? tf_tensor_numel(n_vis) : 0;
	*Hi = iw ? tf_tensor_cols(iw) : 0;
	*Di = keys ? tf_tensor_cols(keys) : 0;
	*N = keys ? tf_tensor_rows(keys) : 0;
	*nblk = 0;
	if ((st = tf_op_check("index_score", "n_vis", n_vis, TF_DTS_I32, -1)) ||
	    (st = tf_op_check("index_score", "iq", iq, TF_DTS_F32 | TF_DTS_BF16, *R * *Hi * *Di)) ||
	    (st = tf_op_check("index_score", "iw", iw, TF_DTS_F32, *R * *Hi)) ||
	    (st = tf_op_check("index_score", "keys", keys, TF_DTS_F32 | TF_DTS_BF16, -1)) ||
	    (st = tf_op_check("index_score", "scores", scores, TF_DTS_F32, *R * *N)))
		return st;
	if (!blocks)
		return TF_OK;
	if (bs <= 0)
		return tf_err(TF_ERR_ARG, "index_score: block size %d", bs);
	*nblk = tf_tensor_cols(blocks);
	if ((st = tf_op_check("index_score", "blocks", blocks, TF_DTS_U8, *R * *nblk)))
		return st;
	if (*nblk < (*N + bs - 1) / bs)
		return tf_err(TF_ERR_ARG, "index_score: %lld block columns for %lld keys of %d",
			      (long long)*nblk, (long long)*N, bs);
	return TF_OK;
}

tf_status tf_args_index_topk(const struct tf_tensor *scores, const struct tf_tensor *n_vis, int k,
			     const struct tf_tensor *sel, const struct tf_tensor *n_sel, int64_t *R,
			     int64_t *N)
{
	tf_status st;
	*R = n_vis ? tf_tensor_numel(n_vis) : 0;
	*N = scores ? tf_tensor_cols(scores) : 0;
	if ((st = tf_op_check("index_topk", "n_vis", n_vis, TF_DTS_I32, -1)) ||
	    (st = tf_op_check("index_topk", "scores", scores, TF_DTS_F32, *R * *N)) ||
	    (st = tf_op_check("index_topk", "sel", sel, TF_DTS_I32, *R * (int64_t)k)) ||
	    (st = tf_op_check("index_topk", "n_sel", n_sel, TF_DTS_I32, *R)))
		return st;
	return k <= 0 ? tf_err(TF_ERR_ARG, "index_topk: k = %d", k) : TF_OK;
}

tf_status tf_args_candidate_blocks(const struct tf_tensor *scores, const struct tf_tensor *n_vis,
				   int bs, int topb, const struct tf_tensor *blocks, int64_t *R,
				   int64_t *N, int64_t *nblk, int64_t *need)
{
	tf_status st;
	*R = n_vis ? tf_tensor_numel(n_vis) : 0;
	*N = scores ? tf_tensor_cols(scores) : 0;
	if (bs <= 0 || topb <= 0)
		return tf_err(TF_ERR_ARG, "candidate_blocks: block %d, top %d", bs, topb);
	*nblk = blocks ? tf_tensor_cols(blocks) : 0;
	*need = (*N + bs - 1) / bs;
	if ((st = tf_op_check("candidate_blocks", "n_vis", n_vis, TF_DTS_I32, -1)) ||
	    (st = tf_op_check("candidate_blocks", "scores", scores, TF_DTS_F32, *R * *N)) ||
	    (st = tf_op_check("candidate_blocks", "blocks", blocks, TF_DTS_U8, *R * *nblk)))
		return st;
	if (*nblk < *need)
		return tf_err(TF_ERR_ARG, "candidate_blocks: %lld block columns for %lld scores of %d",
			      (long long)*nblk, (long long)*N, bs);
	return TF_OK;
}

tf_status tf_args_attn_keys(const struct tf_tensor *sel, const struct tf_tensor *n_sel, int64_t p0,
			    int window, int64_t pbase, int64_t wbase,
			    const struct tf_tensor *key_off, const struct tf_tensor *key_idx, int64_t *n,
			    int64_t *k)
{
	tf_status st;
	*n = key_off ? tf_tensor_numel(key_off) - 1 : 0;
	*k = sel ? tf_tensor_cols(sel) : 0;
	if ((st = tf_op_check("attn_keys", "key_off", key_off, TF_DTS_I32, -1)) ||
	    (st = tf_op_check("attn_keys", "key_idx", key_idx, TF_DTS_I32, -1)) ||
	    (sel && ((st = tf_op_check("attn_keys", "sel", sel, TF_DTS_I32, *n * *k)) ||
		     (st = tf_op_check("attn_keys", "n_sel", n_sel, TF_DTS_I32, *n)))))
		return st;
	if (*n < 1 || window < 1 || p0 < 0)
		return tf_err(TF_ERR_ARG, "attn_keys: %lld rows at %lld, window %d", (long long)*n,
			      (long long)p0, window);
	if (pbase < 0 || wbase < 0 || pbase > INT32_MAX || wbase > INT32_MAX)
		return tf_err(TF_ERR_ARG, "attn_keys: table bases %lld, %lld", (long long)pbase,
			      (long long)wbase);
	return TF_OK;
}

tf_status tf_args_moe_route(const struct tf_tensor *lg, const struct tf_tensor *bias, int k,
			    const struct tf_tensor *ids, const struct tf_tensor *weights, int64_t *R,
			    int64_t *E)
{
	tf_status st;
	*E = lg ? tf_tensor_cols(lg) : 0;
	*R = lg ? tf_tensor_rows(lg) : 0;
	if ((st = tf_op_check("moe_route", "lg", lg, TF_DTS_F32, -1)) ||
	    (st = tf_op_check("moe_route", "bias", bias, TF_DTS_F32, *E)) ||
	    (st = tf_op_check("moe_route", "ids", ids, TF_DTS_I32, *R * k)) ||
	    (st = tf_op_check("moe_route", "weights", weights, TF_DTS_F32, *R * k)))
		return st;
	if (k < 1 || k > *E)
		return tf_err(TF_ERR_ARG, "moe_route: top %d of %lld experts", k, (long long)*E);
	return TF_OK;
}

tf_status tf_args_moe_group(const struct tf_tensor *ids, int E, const struct tf_tensor *offsets,
			    const struct tf_tensor *pair, const struct tf_tensor *src, int64_t *T,
			    int64_t *k)
{
	tf_status st;
	*T = ids ? tf_tensor_numel(ids) : 0;
	*k = ids ? tf_tensor_cols(ids) : 0;
	if (E < 1)
		return tf_err(TF_ERR_ARG, "moe_group: %d experts", E);
	if ((st = tf_op_check("moe_group", "ids", ids, TF_DTS_I32, -1)) ||
	    (st = tf_op_check("moe_group", "offsets", offsets, TF_DTS_I32, (int64_t)E + 1)) ||
	    (st = tf_op_check("moe_group", "pair", pair, TF_DTS_I32, *T)))
		return st;
	return tf_op_check("moe_group", "src", src, TF_DTS_I32, *T);
}

tf_status tf_args_swiglu(const struct tf_tensor *gate, const struct tf_tensor *up,
			 const struct tf_tensor *a, int64_t *n)
{
	tf_status st;
	*n = gate ? tf_tensor_numel(gate) : 0;
	if ((st = tf_op_check("swiglu", "gate", gate, TF_DTS_F32, -1)) ||
	    (st = tf_op_check("swiglu", "up", up, TF_DTS_F32, *n)))
		return st;
	return tf_op_check("swiglu", "a", a, TF_DTS_F32 | TF_DTS_BF16, *n);
}

tf_status tf_args_moe_combine(const struct tf_tensor *y, const struct tf_tensor *w,
			      const struct tf_tensor *shared, const struct tf_tensor *branch,
			      int64_t *R, int64_t *k, int64_t *D)
{
	tf_status st;
	*D = branch ? tf_tensor_cols(branch) : 0;
	*R = branch ? tf_tensor_rows(branch) : 0;
	*k = *R && w ? tf_tensor_numel(w) / *R : 0;
	if ((st = tf_op_check("moe_combine", "branch", branch, TF_DTS_F32 | TF_DTS_BF16, -1)) ||
	    (st = tf_op_check("moe_combine", "w", w, TF_DTS_F32, *R * *k)) ||
	    (st = tf_op_check("moe_combine", "y", y, TF_DTS_F32, *R * *k * *D)))
		return st;
	return shared ? tf_op_check("moe_combine", "shared", shared, TF_DTS_F32, *R * *D) : TF_OK;
}

tf_status tf_args_hc_mix(const struct tf_tensor *x, const struct tf_tensor *fn,
			 const struct tf_tensor *base, const struct tf_tensor *scale, int iters,
			 const struct tf_tensor *pre, const struct tf_tensor *post,
			 const struct tf_tensor *comb, int64_t *R, int64_t *S, int64_t *n, int64_t *M)
{
	tf_status st;
	*M = base ? tf_tensor_numel(base) : 0;
	*S = (int64_t)lround((sqrt(1.0 + (double)*M) - 1)); /* M = 2S + S^2 */
	*n = fn ? tf_tensor_cols(fn) : 0;
	*R = *n && x ? tf_tensor_numel(x) / *n : 0;
	if ((st = tf_op_check("hc_mix", "x", x, TF_DTS_BF16 | TF_DTS_F32, *R * *n)) ||
	    (st = tf_op_check("hc_mix", "base", base, TF_DTS_F32, 2 * *S + *S * *S)) ||
	    (st = tf_op_check("hc_mix", "fn", fn, TF_DTS_F32, *M * *n)) ||
	    (st = tf_op_check("hc_mix", "scale", scale, TF_DTS_F32, 3)) ||
	    (st = tf_op_check("hc_mix", "pre", pre, TF_DTS_F32, *R * *S)) ||
	    (st = tf_op_check("hc_mix", "post", post, TF_DTS_F32, *R * *S)) ||
	    (st = tf_op_check("hc_mix", "comb", comb, TF_DTS_F32, *R * *S * *S)))
		return st;
	if (*S < 1 || *n % *S || iters < 1)
		return tf_err(TF_ERR_ARG, "hc_mix: %lld streams over %lld values, %d iterations",
			      (long long)*S, (long long)*n, iters);
	return TF_OK;
}

tf_status tf_args_hc_collapse(const struct tf_tensor *x, const struct tf_tensor *pre,
			      const struct tf_tensor *c, int64_t *R, int64_t *S, int64_t *D)
{
	tf_status st;
	*D = c ? tf_tensor_cols(c) : 0;
	*R = c ? tf_tensor_rows(c) : 0;
	*S = *R && pre ? tf_tensor_numel(pre) / *R : 0;
	if ((st = tf_op_check("hc_collapse", "c", c, TF_DTS_BF16 | TF_DTS_F32, -1)) ||
	    (st = tf_op_check("hc_collapse", "pre", pre, TF_DTS_F32, *R * *S)))
		return st;
	return tf_op_check("hc_collapse", "x", x, TF_DTS_BF16 | TF_DTS_F32, *R * *S * *D);
}

tf_status tf_args_hc_post(const struct tf_tensor *x, const struct tf_tensor *b,
			  const struct tf_tensor *post, const struct tf_tensor *comb,
			  const struct tf_tensor *out, int64_t *R, int64_t *S, int64_t *D)
{
	tf_status st;
	*D = b ? tf_tensor_cols(b) : 0;
	*R = b ? tf_tensor_rows(b) : 0;
	*S = *R && post ? tf_tensor_numel(post) / *R : 0;
	if ((st = tf_op_check("hc_post", "b", b, TF_DTS_BF16 | TF_DTS_F32, -1)) ||
	    (st = tf_op_check("hc_post", "post", post, TF_DTS_F32, *R * *S)) ||
	    (st = tf_op_check("hc_post", "comb", comb, TF_DTS_F32, *R * *S * *S)) ||
	    (st = tf_op_check("hc_post", "x", x, TF_DTS_BF16 | TF_DTS_F32, *R * *S * *D)))
		return st;
	return tf_op_check("hc_post", "out", out, TF_DTS_BF16 | TF_DTS_F32, *R * *S * *D);
}

tf_status tf_args_engram_gate(const struct tf_tensor *x, const struct tf_tensor *kv,
			      const struct tf_tensor *qk, const struct tf_tensor *blocked,
			      const struct tf_tensor *out, int64_t *R, int64_t *S, int64_t *D)
{
	tf_status st;
	*D = qk ? tf_tensor_cols(qk) : 0;
	*S = qk ? tf_tensor_rows(qk) : 0;
	*R = *D > 0 && kv ? tf_tensor_numel(kv) / ((*S + 1) * *D) : 0;
	if ((st = tf_op_check("engram_gate", "qk", qk, TF_DTS_F32, -1)) ||
	    (st = tf_op_check("engram_gate", "kv", kv, TF_DTS_BF16 | TF_DTS_F32,
			      *R * (*S + 1) * *D)) ||
	    (st = tf_op_check("engram_gate", "x", x, TF_DTS_BF16 | TF_DTS_F32, *R * *S * *D)) ||
	    (st = tf_op_check("engram_gate", "out", out, TF_DTS_BF16 | TF_DTS_F32, *R * *S * *D)))
		return st;
	return blocked ? tf_op_check("engram_gate", "blocked", blocked, TF_DTS_U8, *R) : TF_OK;
}

tf_status tf_args_stream_mean(const struct tf_tensor *x, const struct tf_tensor *out, int64_t *R,
			      int64_t *S, int64_t *D)
{
	tf_status st;
	int three = x && x->ndim == 3;
	*R = three ? x->shape[0] : 0;
	*S = three ? x->shape[1] : 0;
	*D = three ? x->shape[2] : 0;
	if ((st = tf_op_check("stream_mean", "x", x, TF_DTS_BF16, -1)) ||
	    (st = tf_op_check("stream_mean", "out", out, TF_DTS_BF16, *R * *D)))
		return st;
	if (!three || *R < 1 || *S < 1)
		return tf_err(TF_ERR_ARG, "stream_mean: x is not [R, S, D]");
	return TF_OK;
}
