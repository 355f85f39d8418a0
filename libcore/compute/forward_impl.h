/* forward_impl.h: what the forward's files share (forward.c: set-up,
 * scratch, the call and its blocks; forward_attn.c: §5-§9;
 * forward_moe.c: §10 and Engram §11): the forward's state and the helpers
 * that move host arrays in and rows between tensors through the backend's
 * ops. Internal to libcore/compute; the interface is forward.h. */
#ifndef TF_COMPUTE_FORWARD_IMPL_H
#define TF_COMPUTE_FORWARD_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "compute/forward.h"
#include "compute/kv.h"
#include "compute/tp.h"
#include "model/exl3.h"

#define MAX_TMP 96

struct segment {
	int seq, row0, n;
	int64_t pos0;
};

/* A layer's routed experts as the experts ops take them: contiguous EXL3
 * layers (copies of the weights' handles), or dense tensors. */
/* A layer's grouped projections as the experts ops take them: the routed
 * experts' w1, w2, w3 ([E] each) and the output groups' wo_a ([G/w]). */
enum { FWD_EX_W1, FWD_EX_W2, FWD_EX_W3, FWD_EX_WO_A, FWD_EX_N };
struct experts {
	struct tf_exl3_layer *q[FWD_EX_N]; /* EXL3 handles, or NULL (dense) */
	struct tf_tensor *w[FWD_EX_N];     /* dense: the tensors */
};

struct tf_fwd {
	struct tf_be *be;
	const struct tf_config *c;
	const struct tf_fwd_weights *w;
	struct tf_kv *kv;
	tf_engram_rows_fn engram;
	void *engram_ctx;
	struct tf_rope_freqs plain, yarn;
	struct tf_comm *comm;   /* NULL at world 1 */
	struct tf_tp tp;        /* world > 1: the collectives' path (tp.h) */
	int rank, world;
	int64_t Hl, Gl, Il, Vl; /* the rank's heads, output groups, expert width, vocabulary */
	struct experts *ex;     /* [all layers] */
	struct tf_tensor eids;  /* int32 [most experts or groups]: 0, 1, 2, ... (the groups' experts) */
	struct tf_phases *ph;
	int ph_embed, ph_head, ph_out, ph_layer[TF_CONFIG_MAX_LAYERS][3]; /* engram, attn, moe */
	/* per call */
	struct tf_tensor tmp[MAX_TMP];
	int ntmp;
	struct segment *segs;
	int nsegs;
	int R;
	uint16_t *taps;         /* [R, n_dspark_targets, D] host, or NULL */
	struct tf_tensor *tapt; /* the taps on the backend */
	int draft;              /* a DSpark draft pass (tf_fwd_draft) */
	uint16_t *hidden;       /* draft: h [R, D] out, or NULL */
	/* tf_fwd_run_sample: the rows' tokens drawn on the backend instead of
	 * the logits downloaded (tokens NULL: download) */
	const struct tf_sample_params *sp;
	const int64_t *sp_pos;
	int32_t *tokens;
	/* tf_fwd_run_rows (some): the logits of rows out[0..n_out) alone; else
	 * every row's */
	bool some;
	const int *out;
	int n_out;
	const int32_t *ids;
	const int64_t *pos;
	const int *seq;
	struct tf_tensor *pos32;/* int32 [R]: the rows' positions */
	struct tf_tensor *sel, *n_sel; /* int32 [R, index_topk], [R]: the latest index source's */
	struct tf_tensor *cand; /* u8 [R, cand_nblk]: the candidate source's blocks */
	/* cand_nblk is fwd_bucket'ed: a bound, not a count */
	int64_t cand_nblk;
	int have_cand;
};

/* Scratch tensors of the call (zeroed), released from a mark with
 * fwd_release; fwd_host holds a host array (int32 [n], or n u8). */
tf_status fwd_tmp(struct tf_fwd *f, struct tf_tensor **out, enum tf_dt dt, int ndim, int64_t a,
		  int64_t b, int64_t c);
void fwd_release(struct tf_fwd *f, int mark);
tf_status fwd_host(struct tf_fwd *f, struct tf_tensor **out, enum tf_dt dt, const void *src,
		   int64_t n);
tf_status fwd_nomem(void);
/* n int32s of host memory (at least one), for index lists; the caller frees. */
int32_t *fwd_i32s(int64_t n);
/* y rows (yi) = x rows (xi) with host index lists (NULL: in order). */
tf_status fwd_move(struct tf_fwd *f, const struct tf_tensor *x, const int32_t *xi,
		   struct tf_tensor *y, const int32_t *yi, int64_t n);
/* Cache rows at host-listed rows idx[n]: x's rows quantised in, or read
 * back into out. */
tf_status fwd_cache_put(struct tf_fwd *f, const struct tf_rowfmt *fmt, const struct tf_tensor *x,
			const int32_t *idx, int64_t n, struct tf_tensor *cache);
tf_status fwd_cache_get(struct tf_fwd *f, const struct tf_rowfmt *fmt, const struct tf_tensor *cache,
			const int32_t *idx, int64_t n, struct tf_tensor *out);
tf_status fwd_lin(struct tf_fwd *f, const struct tf_lin *l, const struct tf_tensor *x,
		  struct tf_tensor *y);
tf_status fwd_lin_sum(struct tf_fwd *f, const struct tf_lin *l, const struct tf_tensor *x,
		      struct tf_tensor *y);
/* The index of KV source layer in c->kv_sources, or -1. */
int fwd_src_index(const struct tf_config *c, uint32_t layer);
const struct tf_rope_freqs *fwd_freqs(const struct tf_fwd *f, uint32_t layer);

/* t with another shape of its numel (a view). */
static inline struct tf_tensor fwd_view2(const struct tf_tensor *t, int64_t a, int64_t b)
{
	return tf_tensor_view(t, 2, a, b);
}

static inline struct tf_tensor fwd_view3(const struct tf_tensor *t, int64_t a, int64_t b, int64_t c)
{
	return tf_tensor_view(t, 3, a, b, c);
}

/* §5-§9 for block L: x [R, D] bf16 in, branch [R, D] bf16 out
 * (forward_attn.c); §10 likewise (forward_moe.c); §11 on the streams X
 * [R, S, D] in place (forward_moe.c). */
tf_status fwd_attention(struct tf_fwd *f, uint32_t L, const struct tf_tensor *x,
			struct tf_tensor *branch);
tf_status fwd_moe(struct tf_fwd *f, uint32_t L, const struct tf_tensor *x, struct tf_tensor *branch);
tf_status fwd_engram(struct tf_fwd *f, uint32_t L, struct tf_tensor *X);

/* Rows a call's tables and scores hold for n visible rows: n rounded up
 * to a multiple of FWD_BUCKET (0 stays 0). The rows past n are masked
 * (n_vis) or skipped (index -1), so results do not change; the shapes,
 * and with them a decode step's kernel arguments, change only every
 * FWD_BUCKET rows instead of every step, so steps repeat (ops->graph). */
#define FWD_BUCKET 256
static inline int64_t fwd_bucket(int64_t n)
{
	return n <= 0 ? 0 : (n + FWD_BUCKET - 1) / FWD_BUCKET * FWD_BUCKET;
}

#endif
