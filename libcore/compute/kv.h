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
 * Rows are quantised when written and dequantised when read, by the ops
 * of the backend the cache lives on; the host keeps only the bookkeeping
 * (which pages each sequence owns, reference counts, lengths).
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
#include "compute/ops.h"

#define TF_KV_PAGE 256      /* positions per page */
#define TF_KV_RING 256      /* window ring rows per layer, unless the config says */
#define TF_KV_CARRY 128     /* carry groups kept per ratio-2 source (ring / 2 when more) */
#define TF_KV_MAX_SRC 8


struct tf_kv_config {
	int layers;        /* window rings, one per layer (MTP blocks included) */
	int dim;           /* latent width (512) */
	int rope;          /* its bf16 RoPE tail (64) */
	int index_dim;     /* index key width (128) */
	int window;        /* attention window (128), at most the ring */
	int ring;          /* window ring rows per layer (0: TF_KV_RING): a call's
			    * pass holds at most ring - window rows of a sequence,
			    * and a rollback goes back at most as far */
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
struct tf_be;

/* The cache's memory: tensors of the backend it was made on (host memory
 * on the CPU, device memory on CUDA), written and read only by that
 * backend's ops (cache_write, cache_read, rows_copy, page_rows). Rows are
 * addressed by the row functions below. */
struct tf_kv_store {
	struct tf_tensor ring;                /* u8 [slots * layers * ring, win bytes] */
	struct tf_tensor pool[TF_KV_MAX_SRC]; /* u8 [pages * TF_KV_PAGE / r, pool bytes] */
	struct tf_tensor ik[TF_KV_MAX_SRC];   /* u8 [pages * TF_KV_PAGE / r, key bytes] */
	struct tf_tensor carry;               /* f32 [slots * sources * carry groups * 2, dim]:
					       * u then g of each ratio-2 group start */
	struct tf_tensor pt;                  /* i32 [slots, max pages]: the page tables */
	struct tf_rowfmt win, pool_row, ik_row;
};

/* A cache for cfg on backend be (validated: TF_ERR_CONFIG naming the bad
 * field; be borrowed, it outlives the cache). The caller frees with
 * tf_kv_free. */
tf_status tf_kv_new(struct tf_be *be, const struct tf_kv_config *cfg, struct tf_kv **out);
void tf_kv_free(struct tf_kv *kv);
const struct tf_kv_config *tf_kv_config(const struct tf_kv *kv);
/* The store (borrowed, valid until tf_kv_free) and its backend. */
struct tf_kv_store *tf_kv_store(struct tf_kv *kv);
struct tf_be *tf_kv_backend(const struct tf_kv *kv);

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

/* Row addresses (host arithmetic over the host's bookkeeping; seq open,
 * layer and src in range: not checked). The ring row of `layer` at pos
 * (slot pos mod the ring of the sequence's ring: callers read only p -
 * window + 1 .. p); the carry row of u for the ratio-2 group starting at
 * even pos (g is the next row); the pool and index-key rows of a page
 * (TF_KV_PAGE / r); and the sequence's page table in the store, i32
 * [max pages] (a view). */
int64_t tf_kv_window_row(const struct tf_kv *kv, int seq, int layer, int64_t pos);
int64_t tf_kv_carry_row(const struct tf_kv *kv, int seq, int src, int64_t pos);
int tf_kv_page_rows(const struct tf_kv *kv, int src);
struct tf_tensor tf_kv_page_table(struct tf_kv *kv, int seq);
/* The physical row of pool row w of source src (positions w*r ..
 * w*r+r-1), which is also its index key's row. put: the row is about to be
 * written, so a shared page is copied first (by backend ops; TF_ERR_UNAVAILABLE
 * when no page is free for that). TF_ERR_RANGE past the reserved room. */
tf_status tf_kv_pool_row(struct tf_kv *kv, int seq, int src, int64_t w, int put, int32_t *row);

/* Single rows to and from host memory, quantised and dequantised by the
 * backend's ops: for tests and tools (each call is a round trip through
 * the backend; the forward moves rows with ops instead). The window row
 * of layer at pos; pool row w of source src and its index key; the fp32
 * [u|g] carry (2*dim values) of the ratio-2 group starting at even pos. */
tf_status tf_kv_window_put(struct tf_kv *kv, int seq, int layer, int64_t pos, const float *row);
tf_status tf_kv_window_get(struct tf_kv *kv, int seq, int layer, int64_t pos, float *row);
tf_status tf_kv_pool_put(struct tf_kv *kv, int seq, int src, int64_t w, const float *row);
tf_status tf_kv_pool_get(struct tf_kv *kv, int seq, int src, int64_t w, float *row);
tf_status tf_kv_ik_put(struct tf_kv *kv, int seq, int src, int64_t w, const float *key);
tf_status tf_kv_ik_get(struct tf_kv *kv, int seq, int src, int64_t w, float *key);
tf_status tf_kv_carry_put(struct tf_kv *kv, int seq, int src, int64_t pos, const float *ug);
tf_status tf_kv_carry_get(struct tf_kv *kv, int seq, int src, int64_t pos, float *ug);

#endif
