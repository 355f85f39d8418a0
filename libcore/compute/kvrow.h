/* kvrow.h: the row formats of the KV cache and their codecs (dsv41-
 * forward-spec.md §14-§15): window and pool rows (fp8_ds_mla, FP4, bf16)
 * and index keys (e4m3 with an fp32 scale, or bf16). These are the CPU
 * twins of the cache_write and cache_read ops (ops.h): every backend
 * stores and reads exactly these bytes. Pure functions, thread safe. */
#ifndef TF_COMPUTE_KVROW_H
#define TF_COMPUTE_KVROW_H

#include <stddef.h>
#include <stdint.h>

enum tf_kv_row_fmt {
	TF_KV_FP8 = 0,  /* fp8_ds_mla: e4m3 groups of 64 + bf16 rope + UE8M0 scales */
	TF_KV_FP4 = 1,  /* e2m1 pairs, groups of 16 with UE8M0 scales + bf16 rope (tf's layout) */
	TF_KV_BF16 = 2, /* plain bf16 (index keys) */
};

/* Bytes of one stored row of `dim` values (rope of them bf16) in fmt. */
size_t tf_kv_row_bytes(enum tf_kv_row_fmt fmt, int dim, int rope);
/* Quantise a row (fp32 in) into fmt's bytes, and back. For TF_KV_FP8 and
 * TF_KV_FP4 the last `rope` values are stored bf16 and the rest in groups
 * (64 for FP8, 16 for FP4; the last group may be partial, as in the tiny
 * preset's 96) scaled by 2^e, e = ceil(log2(max(amax, 1e-4) / max_code)),
 * one UE8M0 byte (e + 127) each, padded to 8 bytes. Layout: values (e4m3
 * bytes, or e2m1 pairs low nibble first), the bf16 tail, the scales. */
void tf_kv_row_encode(enum tf_kv_row_fmt fmt, const float *x, int dim, int rope, uint8_t *out);
void tf_kv_row_decode(enum tf_kv_row_fmt fmt, const uint8_t *in, int dim, int rope, float *x);
/* Index keys: TF_KV_FP8 is dim e4m3 values and a little-endian fp32 scale
 * (132 B for 128); TF_KV_BF16 is dim bf16 values. */
size_t tf_kv_ik_bytes(enum tf_kv_row_fmt fmt, int dim);
void tf_kv_ik_encode(enum tf_kv_row_fmt fmt, const float *x, int dim, uint8_t *out);
void tf_kv_ik_decode(enum tf_kv_row_fmt fmt, const uint8_t *in, int dim, float *x);
/* One stored row kind: window or pool rows (index_key 0: fmt with dim
 * values, rope of them the bf16 tail) or index keys (index_key 1: fmt
 * TF_KV_FP8 or TF_KV_BF16 with dim values, rope unused). */
struct tf_rowfmt {
	enum tf_kv_row_fmt fmt;
	int dim, rope, index_key;
};
/* Bytes of one stored row of f. */
size_t tf_rowfmt_bytes(const struct tf_rowfmt *f);
/* Encode and decode one row of f (the two pairs above). */
void tf_rowfmt_encode(const struct tf_rowfmt *f, const float *x, uint8_t *out);
void tf_rowfmt_decode(const struct tf_rowfmt *f, const uint8_t *in, float *x);

/* e2m1 (max 6) round-to-nearest-even, saturating: a 4-bit code. */
uint8_t tf_e2m1_encode(float x);
float tf_e2m1_decode(uint8_t c);

#endif
