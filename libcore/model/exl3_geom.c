/* exl3_geom.c: EXL3 layer shapes and codebook names.
 *
 * Facts: exl3-format.md §1 (trellis I16 [K/16, N/16, 16·b], b = shape[2]/16,
 * from exllamav3 modules/quant/exl3.py `self.K`) and §6 (K % 128 == 0 and
 * N % 128 == 0, asserted by exl3_lib/quantize.py blockwise_preapply_had_*;
 * b in 1..8, the kernel instances of exllamav3_ext/quant/pack.cu).
 *
 * Not supported: the half-integer widths (K = KA + 0.5, alternating KA- and
 * KA+1-bit steps, mul1 only) that exllamav3 added after the version the
 * specification describes (frac_k in exl3_lib/quantize.py at 07b8a2e0).
 * Their trellis has 16·K words per tile, not a multiple of 16, so
 * tf_exl3_geom_from_shape refuses them rather than misreading them. */
#include "model/exl3.h"

size_t tf_exl3_trellis_bytes(const struct tf_exl3_geom *g)
{
	return (size_t)(g->k / 16) * (g->n / 16) * tf_exl3_tile_bytes(g->bits);
}

tf_status tf_exl3_geom_check(const struct tf_exl3_geom *g)
{
	if (!g->k || g->k % 128 || !g->n || g->n % 128)
		return tf_err(TF_ERR_FORMAT, "EXL3 shape %ux%u: both sides must be positive multiples of 128",
			      g->k, g->n);
	if (g->bits < 1 || g->bits > 8)
		return tf_err(TF_ERR_FORMAT, "EXL3 bits %u: must be 1..8", g->bits);
	if (g->cb != TF_EXL3_CB_3INST && g->cb != TF_EXL3_CB_MCG && g->cb != TF_EXL3_CB_MUL1)
		return tf_err(TF_ERR_FORMAT, "EXL3 codebook %d: unknown", (int)g->cb);
	return TF_OK;
}

tf_status tf_exl3_geom_from_shape(const uint64_t shape[3], int has_mcg, int has_mul1,
				  struct tf_exl3_geom *g)
{
	if (has_mcg && has_mul1)
		return tf_err(TF_ERR_FORMAT, "EXL3 group has both mcg and mul1 markers");
	if (shape[2] % 16 || shape[0] > UINT32_MAX / 16 || shape[1] > UINT32_MAX / 16)
		return tf_err(TF_ERR_FORMAT, "EXL3 trellis shape [%llu, %llu, %llu]: bad",
			      (unsigned long long)shape[0], (unsigned long long)shape[1],
			      (unsigned long long)shape[2]);
	g->k = (uint32_t)shape[0] * 16;
	g->n = (uint32_t)shape[1] * 16;
	g->bits = (uint32_t)(shape[2] / 16 <= 8 ? shape[2] / 16 : 0);
	g->cb = has_mcg ? TF_EXL3_CB_MCG : has_mul1 ? TF_EXL3_CB_MUL1 : TF_EXL3_CB_3INST;
	return tf_exl3_geom_check(g);
}

const char *tf_exl3_cb_name(enum tf_exl3_cb cb)
{
	switch (cb) {
	case TF_EXL3_CB_3INST: return "3inst";
	case TF_EXL3_CB_MCG: return "mcg";
	case TF_EXL3_CB_MUL1: return "mul1";
	}
	return "?";
}

tf_status tf_exl3_experts_layout(const struct tf_exl3_geom *g, uint32_t count, uint64_t *offsets,
				 uint64_t *total, int *ragged)
{
	uint64_t at = 0;
	*ragged = 0;
	for (uint32_t e = 0; e < count; e++) {
		tf_status st = tf_exl3_geom_check(&g[e]);
		if (st)
			return tf_err_wrap(st, "expert %u: ", e);
		if (g[e].k != g[0].k || g[e].n != g[0].n)
			return tf_err(TF_ERR_FORMAT, "expert %u: shape %ux%u differs from expert 0 (%ux%u)",
				      e, g[e].k, g[e].n, g[0].k, g[0].n);
		if (g[e].cb != g[0].cb)
			return tf_err(TF_ERR_FORMAT, "expert %u: codebook %s differs from expert 0 (%s)", e,
				      tf_exl3_cb_name(g[e].cb), tf_exl3_cb_name(g[0].cb));
		if (g[e].bits != g[0].bits)
			*ragged = 1;
		at = (at + 15) & ~(uint64_t)15;
		offsets[e] = at;
		at += tf_exl3_trellis_bytes(&g[e]);
	}
	*total = at;
	return TF_OK;
}
