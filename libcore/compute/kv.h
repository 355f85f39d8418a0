/* kv.h: the KV cache of DeepSeek-V4.1 sequences (dsv41-forward-spec.md
 * §14-§15, dsv41-model-facts.md §7).
 *
 * Per sequence (a slot of the cache):
 *  - a window ring per layer: ring rows (256), slot p mod ring, each row the
 *    layer's roped latent for position p in the fp8_ds_mla format (584 B for
 *    512 dims: 448 e4m3 values in 7 groups of 64 with a UE8M0 exponent each,
 *    64 RoPE dims in bf16, 7 scale bytes and a pad), or plain bf16 when the
 *    config asks (comparisons with an unquantised reference);
 *  - a page table over the shared paged pool: a page covers 256 positions
 *    and holds, for each KV source (ratio r), its 256/r compressed pool rows
 *    (fp8_ds_mla, or FP4) and index keys (e4m3 with one fp32 power-of-two
 *    scale, 132 B, or bf16);
 *  - for each ratio-2 source, the fp32 [u|g] rows of group starts (the
 *    compressor's carry, spec §6), a ring of 128 groups.
 * Rows are quantised when written and dequantised when read.
 *
 * Sequences fork (full pages shared by reference count, the partial last
 * page copied, rings and carries copied) and roll back to a position (pages
 * past it released). A write into a shared page copies it first. Rollback
 * reaches back at most ring - window positions (128): the ring has
 * overwritten what lies further back, and the call says so (TF_ERR_RANGE).
 *
 * Not thread-safe: one caller at a time (the engine's round thread). */
#ifndef TF_COMPUTE_KV_H
#define TF_COMPUTE_KV_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "compute/kvrow.h"

#define TF_KV_PAGE 256      /* positions per page */
#define TF_KV_RING 256      /* window ring rows per layer */
#define TF_KV_CARRY 128     /* carry groups kept per ratio-2 source */
#define TF_KV_MAX_SRC 8


struct tf_kv_config {
	int layers;        /* window rings, one per layer (MTP blocks included) */
	int dim;           /* latent width (512) */
	int rope;          /* its bf16 RoPE tail (64) */
	int index_dim;     /* index key width (128) */
	int window;        /* attention window (128), at most TF_KV_RING */
	int sources;       /* KV sources (4) */
	int ratio[TF_KV_MAX_SRC];     /* each source's compression ratio, 1 or 2 */
	enum tf_kv_row_fmt window_fmt;/* TF_KV_FP8 (default) or TF_KV_BF16 (unquantised) */
	enum tf_kv_row_fmt pool_fmt;  /* TF_KV_FP8 (default), TF_KV_FP4 or TF_KV_BF16 */
	enum tf_kv_row_fmt index_fmt; /* TF_KV_FP8 (132 B) or TF_KV_BF16 */
	int64_t pages;     /* pool capacity */
	int slots;         /* sequences at once */
	int64_t max_positions; /* per sequence */
};

struct tf_kv;

/* A cache for cfg (validated: TF_ERR_CONFIG naming the bad field). The
 * caller frees with tf_kv_free. */
tf_status tf_kv_new(const struct tf_kv_config *cfg, struct tf_kv **out);
void tf_kv_free(struct tf_kv *kv);
const struct tf_kv_config *tf_kv_config(const struct tf_kv *kv);



/* Open an empty sequence in a free slot (*seq its id); TF_ERR_UNAVAILABLE
 * when every slot is taken. Close releases its pages and slot. */
tf_status tf_kv_open(struct tf_kv *kv, int *seq);
void tf_kv_close(struct tf_kv *kv, int seq);
/* A new sequence equal to src: full pages shared, the partial one copied. */
tf_status tf_kv_fork(struct tf_kv *kv, int src, int *dst);
/* Make room for positions < n (allocating pages); TF_ERR_UNAVAILABLE when
 * the pool is out of pages, TF_ERR_RANGE past max_positions. */
tf_status tf_kv_reserve(struct tf_kv *kv, int seq, int64_t n);
/* Positions written and kept (the next position to run). */
int64_t tf_kv_len(const struct tf_kv *kv, int seq);
/* Record that positions < n are written (n within the reserved room). */
tf_status tf_kv_commit(struct tf_kv *kv, int seq, int64_t n);
/* Keep positions < pos only: pages past it are released. TF_ERR_RANGE when
 * the ring no longer holds the window that pos needs (len - pos > ring -
 * window); nothing changes then. */
tf_status tf_kv_rollback(struct tf_kv *kv, int seq, int64_t pos);
/* Free pages in the pool. */
int64_t tf_kv_free_pages(const struct tf_kv *kv);

/* The window row of `layer` at position pos: dim fp32 values in, quantised;
 * out dequantised. seq must be open and layer < layers (not checked: the
 * forward's inner loop). Reading a position the ring no longer holds (older
 * than len - ring) or never wrote gives what the slot holds: callers read
 * only p - window + 1 .. p. */
void tf_kv_window_put(struct tf_kv *kv, int seq, int layer, int64_t pos, const float *row);
void tf_kv_window_get(const struct tf_kv *kv, int seq, int layer, int64_t pos, float *row);
/* Pool row w of source src (positions w*r .. w*r+r-1), and its index key.
 * Puts need the page reserved (TF_ERR_RANGE otherwise) and copy a shared
 * page first (TF_ERR_UNAVAILABLE when no page is free for that). */
tf_status tf_kv_pool_put(struct tf_kv *kv, int seq, int src, int64_t w, const float *row);
tf_status tf_kv_pool_get(const struct tf_kv *kv, int seq, int src, int64_t w, float *row);
tf_status tf_kv_ik_put(struct tf_kv *kv, int seq, int src, int64_t w, const float *key);
tf_status tf_kv_ik_get(const struct tf_kv *kv, int seq, int src, int64_t w, float *key);
/* The fp32 [u|g] carry (2*dim values) of the ratio-2 group starting at even
 * position pos of source src (seq open, src < sources: not checked);
 * borrowed, valid until the sequence closes. */
float *tf_kv_carry(struct tf_kv *kv, int seq, int src, int64_t pos);

#endif
