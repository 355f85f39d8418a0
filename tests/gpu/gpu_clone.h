/* gpu_clone.h: the test model's weights (tests/unit/forward_model.h)
 * copied onto a backend, for the GPU tests that run a whole forward there
 * (gpu_forward, gpu_graphs). The EXL3 handles are shared, not copied
 * (their trellises are host memory: the tests' models are dense). */
#ifndef TF_TESTS_GPU_CLONE_H
#define TF_TESTS_GPU_CLONE_H

#include <stdlib.h>

#include "compute/forward.h"
#include "compute/ops.h"
#include "gpu_util.h"

/* dst: src's values on be (an empty src stays empty). */
static inline void clone(struct tf_be *be, const struct tf_tensor *src, struct tf_tensor *dst)
{
	*dst = *src;
	if (!src->data)
		return;
	dst->data = NULL;
	GPU_OK(be->ops->alloc(be, dst));
	GPU_OK(be->ops->upload(be, dst, src->data));
}

static inline void clone_lin(struct tf_be *be, const struct tf_lin *src, struct tf_lin *dst)
{
	dst->q = src->q;
	clone(be, &src->w, &dst->w);
}

static inline void clone_layer(struct tf_be *be, const struct tf_config *c, uint32_t L,
			const struct tf_fwd_layer *s, struct tf_fwd_layer *d)
{
	int64_t E = tf_config_experts_of(c, L);
	clone(be, &s->attn_norm, &d->attn_norm);
	clone(be, &s->ffn_norm, &d->ffn_norm);
	clone(be, &s->q_norm, &d->q_norm);
	clone(be, &s->kv_norm, &d->kv_norm);
	for (int i = 0; i < 2; i++) {
		clone(be, &s->hc_fn[i], &d->hc_fn[i]);
		clone(be, &s->hc_base[i], &d->hc_base[i]);
		clone(be, &s->hc_scale[i], &d->hc_scale[i]);
	}
	clone(be, &s->sink, &d->sink);
	clone_lin(be, &s->wq_a, &d->wq_a);
	clone_lin(be, &s->wkv, &d->wkv);
	clone_lin(be, &s->wq_b, &d->wq_b);
	for (int g = 0; g < TF_FWD_MAX_GROUPS; g++)
		clone_lin(be, &s->wo_a[g], &d->wo_a[g]);
	clone_lin(be, &s->wo_b, &d->wo_b);
	clone_lin(be, &s->comp_wkv, &d->comp_wkv);
	clone_lin(be, &s->comp_wgate, &d->comp_wgate);
	clone_lin(be, &s->ix_wk, &d->ix_wk);
	clone(be, &s->comp_norm, &d->comp_norm);
	clone(be, &s->ix_k_norm, &d->ix_k_norm);
	clone_lin(be, &s->ix_wq_b, &d->ix_wq_b);
	clone(be, &s->ix_wp, &d->ix_wp);
	clone(be, &s->gate, &d->gate);
	clone(be, &s->gate_bias, &d->gate_bias);
	d->w1 = calloc((size_t)E, sizeof *d->w1);
	d->w2 = calloc((size_t)E, sizeof *d->w2);
	d->w3 = calloc((size_t)E, sizeof *d->w3);
	for (int64_t e = 0; e < E; e++) {
		clone_lin(be, &s->w1[e], &d->w1[e]);
		clone_lin(be, &s->w2[e], &d->w2[e]);
		clone_lin(be, &s->w3[e], &d->w3[e]);
	}
	clone_lin(be, &s->sh_w1, &d->sh_w1);
	clone_lin(be, &s->sh_w2, &d->sh_w2);
	clone_lin(be, &s->sh_w3, &d->sh_w3);
	clone_lin(be, &s->engram_wkv, &d->engram_wkv);
	clone(be, &s->engram_qk, &d->engram_qk);
}

/* The backbone's weights of c from src into dst on be: the embedding, the
 * final norm, the head and every layer, layers [c->layers] the caller's
 * (dst->layers is set to it; the DSpark blocks are not copied). */
static inline void clone_weights(struct tf_be *be, const struct tf_config *c,
				 const struct tf_fwd_weights *src, const struct tf_fwd_layer *layers,
				 struct tf_fwd_layer *out, struct tf_fwd_weights *dst)
{
	*dst = (struct tf_fwd_weights){.layers = out};
	clone(be, &src->embed, &dst->embed);
	clone(be, &src->norm, &dst->norm);
	clone_lin(be, &src->head, &dst->head);
	for (uint32_t L = 0; L < c->layers; L++)
		clone_layer(be, c, L, &layers[L], &out[L]);
}

#endif
