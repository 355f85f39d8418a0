/* exl3.h: the EXL3 weight format on the CPU: geometry, the trellis tile
 * decoder and its three codebooks, the blockwise 128-point Hadamard, the
 * reference GEMV/GEMM, an encoder for tests and synthetic packs, and the
 * tensor-parallel slices of a group.
 *
 * It is not a quantiser: the encoder writes given codes (or random ones); a
 * Viterbi search over a Hessian is a later issue.
 *
 * Facts come from ../shared/reference/exl3-format.md (a bit-level
 * specification checked against turboderp-org/exllamav3 at 4f8ad0121f48);
 * each .c file names the section and the upstream source it follows.
 *
 * Notation (exl3-format.md §1): K = in_features, N = out_features, b = bits
 * per weight (1..8). The weight is held as [K][N], the transpose of HF's
 * [out, in], and y = x·W for a row x of length K:
 *
 *     W = diag(suh) · Ĥ_K · Ŵ · Ĥ_N · diag(svh)        (§5)
 *     y = ((x ⊙ suh) · Ĥ_K · Ŵ) · Ĥ_N ⊙ svh  (+ bias)
 *
 * Ĥ is the Sylvester Hadamard of size 128 over 128-element blocks, scaled
 * by 1/√128 (orthonormal and symmetric). Ŵ comes tile by tile from the
 * trellis: trellis is I16 [K/16][N/16][16·b], tile (i, j) covers rows
 * 16i..16i+15 and columns 16j..16j+15.
 *
 * Everything here is pure computation on caller memory and thread-safe,
 * except where a function takes a tf_pool (one caller per pool). */
#ifndef TF_MODEL_EXL3_H
#define TF_MODEL_EXL3_H

#include <stddef.h>
#include <stdint.h>

#include "base/rng.h"
#include "base/status.h"

struct tf_pool;

/* Codebooks (exl3-format.md §4). The values are the `cb` template argument
 * of exllamav3's decode_3inst<cb>; the marker tensors `.mcg`/`.mul1` pick
 * them, none means 3INST. Never renumber: prepared images store them. */
enum tf_exl3_cb {
	TF_EXL3_CB_3INST = 0,
	TF_EXL3_CB_MCG = 1,
	TF_EXL3_CB_MUL1 = 2,
};

/* The scalar written into `<p>.mcg` and `<p>.mul1` (only presence counts). */
#define TF_EXL3_MCG_MARK 0xCBAC1FEDu
#define TF_EXL3_MUL1_MARK 0x83DCD12Du

/* RMS of the 3INST codebook (codebook_scale in exl3_lib/quantize.py). */
#define TF_EXL3_CB_RMS 1.24371088f

/* ---- geometry (exl3_geom.c) ---- */

/* The shape of one EXL3 linear layer. */
struct tf_exl3_geom {
	uint32_t k;        /* in_features, a multiple of 128 */
	uint32_t n;        /* out_features, a multiple of 128 */
	uint32_t bits;     /* bits per weight, 1..8 */
	enum tf_exl3_cb cb;
};

/* int16 words in one 16×16 tile: 16·bits. */
static inline size_t tf_exl3_tile_words(uint32_t bits) { return (size_t)16 * bits; }
/* Bytes of one tile: 32·bits. */
static inline size_t tf_exl3_tile_bytes(uint32_t bits) { return (size_t)32 * bits; }
/* Bytes of the whole trellis: (K/16)·(N/16)·32·bits. */
size_t tf_exl3_trellis_bytes(const struct tf_exl3_geom *g);

/* Check that g is a shape exllamav3 can store (§6): K and N positive
 * multiples of 128, bits in 1..8, a known codebook. TF_ERR_FORMAT with the
 * reason otherwise. */
tf_status tf_exl3_geom_check(const struct tf_exl3_geom *g);

/* Read a geometry from the trellis shape [K/16, N/16, 16·bits] and the
 * codebook markers (has_mcg, has_mul1: the tensors exist). Both markers at
 * once is an error (E/quant/exl3_gemm.cu). */
tf_status tf_exl3_geom_from_shape(const uint64_t shape[3], int has_mcg, int has_mul1,
				  struct tf_exl3_geom *g);

/* Name of a codebook ("3inst", "mcg", "mul1"); "?" for others. */
const char *tf_exl3_cb_name(enum tf_exl3_cb cb);

/* A layer in memory. All pointers are borrowed. */
struct tf_exl3_layer {
	struct tf_exl3_geom g;
	const uint16_t *trellis; /* [K/16][N/16][16·bits] i16 */
	const uint16_t *suh;     /* [K] f16 */
	const uint16_t *svh;     /* [N] f16 */
	const uint16_t *bias;    /* [N] f16, or NULL */
};

/* ---- codebooks and tiles (exl3_tile.c) ---- */

/* Decode one 16-bit trellis state to its fp16 weight (bit pattern), exactly
 * as the device code does. Reference speed. */
uint16_t tf_exl3_cb_decode(enum tf_exl3_cb cb, uint16_t state);

/* The 65536-entry table state → weight as float (the fp16 value widened),
 * built on first use; never freed; NULL when its 768 KiB could not be
 * allocated (the caller reports it: libcore never aborts). Thread-safe. */
const float *tf_exl3_cb_table(enum tf_exl3_cb cb);

/* State t (0..255) of a tile: the 16 stream bits ending at bit (t+1)·b − 1,
 * indices mod 256·b (tail-biting; §2). tile holds 16·bits words. */
uint16_t tf_exl3_tile_state(const uint16_t *tile, uint32_t bits, unsigned t);

/* Code t of a tile: stream bits t·b .. t·b+b−1, MSB first (§2). */
uint8_t tf_exl3_tile_code(const uint16_t *tile, uint32_t bits, unsigned t);

/* Stream position t → tile row r (k offset) and column c (n offset), the
 * tensor-core fragment order (§3). Returns r·16 + c. */
static inline unsigned tf_exl3_tile_pos(unsigned t)
{
	unsigned l = t >> 3, j = t & 7;
	unsigned r = 2 * (l & 3) + (j & 1) + 8 * ((j >> 1) & 1);
	unsigned c = (l >> 2) + 8 * (j >> 2);
	return r * 16 + c;
}

/* Decode a tile to out[r·16 + c] (row-major within the tile): fp16 bits,
 * or floats. */
void tf_exl3_tile_decode(const uint16_t *tile, uint32_t bits, enum tf_exl3_cb cb,
			 uint16_t out[256]);
void tf_exl3_tile_decode_f32(const uint16_t *tile, uint32_t bits, enum tf_exl3_cb cb,
			     float out[256]);

/* Ŵ of a whole layer as fp16 bits, [K][N] row-major (What: K·N entries). */
void tf_exl3_decode(const struct tf_exl3_geom *g, const uint16_t *trellis, uint16_t *What);

/* ---- Hadamard (exl3_had.c) ---- */

/* x[0..128) ← x · Ĥ (Ĥ = H/√128, Sylvester order), in fp32. */
void tf_exl3_had128(float *x);
/* Apply tf_exl3_had128 to each 128-block of x[0..len); len % 128 == 0. */
void tf_exl3_had_blocks(float *x, size_t len);

/* ---- GEMV / GEMM (exl3_matmul.c) ---- */

/* y[rows][N] = x[rows][K] · W (+ bias), f32 in and out, f32 accumulation.
 * x·suh and both Hadamards stay in fp32 (the device kernels round to fp16
 * on the way; compare with a tolerance, §5). Each tile is decoded once per
 * call and applied to every row. The work is split over N in 128-column
 * blocks on pool (NULL: the calling thread). x and y must not overlap.
 * TF_ERR_NOMEM or TF_ERR_ARG (bad geometry). */
tf_status tf_exl3_matmul(const struct tf_exl3_layer *L, const float *x, size_t rows, float *y,
			 struct tf_pool *pool);

/* Which code tf_exl3_matmul runs: the fastest this CPU has (AUTO), the
 * portable C (C), or AVX2+FMA+F16C (AVX2; TF_ERR_UNSUPPORTED where the CPU
 * lacks it). For tests and benchmarks; the results agree within fp32
 * rounding (the sums run in another order). */
enum tf_exl3_impl {
	TF_EXL3_IMPL_AUTO = 0,
	TF_EXL3_IMPL_C = 1,
	TF_EXL3_IMPL_AVX2 = 2,
};
tf_status tf_exl3_matmul_impl(const struct tf_exl3_layer *L, const float *x, size_t rows, float *y,
			      struct tf_pool *pool, enum tf_exl3_impl impl);

/* The dense weight W = diag(suh)·Ĥ_K·Ŵ·Ĥ_N·diag(svh) as f32 [K][N] (no
 * bias), computed in double then rounded. For tests and small layers. */
tf_status tf_exl3_dequant(const struct tf_exl3_layer *L, float *W);

/* ---- encoder and synthetic layers (exl3_enc.c) ---- */

/* Write 256 codes of bits bits each (the low bits of codes[t]) into a tile
 * of 16·bits words: code t MSB first at stream bit t·b, stream word m at
 * index m XOR 1 (§7, the inverse of pack_trellis_kernel). Higher bits of a
 * code are ignored. tf_exl3_tile_code reads them back exactly. */
void tf_exl3_tile_encode(const uint8_t codes[256], uint32_t bits, uint16_t *tile);

/* Fill a synthetic layer (§7): random trellis words (every bit pattern is
 * a valid tail-biting stream), suh = ±1/(rms_cb·√K), svh = ±1 with random
 * signs, so unit-RMS x gives y of about unit RMS. Buffers are the caller's,
 * sized by g. */
void tf_exl3_synth(const struct tf_exl3_geom *g, struct tf_rng *rng, uint16_t *trellis,
		   uint16_t *suh, uint16_t *svh);

/* ---- tensor-parallel slices (exl3_slice.c) ---- */

enum tf_exl3_split {
	TF_EXL3_WHOLE = 0, /* every rank holds the whole group */
	TF_EXL3_ROW = 1,   /* split K: partial outputs are summed */
	TF_EXL3_COL = 2,   /* split N: outputs are concatenated */
};

/* One rank's part of a group, and where its trellis lies in the whole
 * trellis: nruns runs of run_bytes each, run i at offset off + i·stride
 * (bytes, relative to the trellis start). A row part is one run; a column
 * part is one run per K-tile row. */
struct tf_exl3_part {
	enum tf_exl3_split split;
	struct tf_exl3_geom g; /* the part's own geometry */
	uint32_t k0, n0;       /* the part's first row and column in the whole */
	uint64_t off, stride, run_bytes;
	uint32_t nruns;
};

/* The part of whole for rank of world. Cuts fall on multiples of
 * world·128 (the split dimension must divide by world·128), so each part is
 * whole 128-blocks and the Hadamard survives. TF_ERR_ARG for a bad rank,
 * TF_ERR_FORMAT when the dimension does not divide. */
tf_status tf_exl3_part(const struct tf_exl3_geom *whole, enum tf_exl3_split split, uint32_t rank,
		       uint32_t world, struct tf_exl3_part *part);

/* Gather a part's trellis from the whole trellis (src) into dst
 * (tf_exl3_trellis_bytes(&part->g) bytes). src may be a covering window
 * that starts at whole-trellis offset src_off (that is, src[0] is byte
 * src_off of the whole trellis; src_off ≤ part->off). */
void tf_exl3_part_gather(const struct tf_exl3_part *part, const void *src, uint64_t src_off,
			 void *dst);

/* The covering byte range [*lo, *hi) of the whole trellis a part needs:
 * one read of it, then tf_exl3_part_gather. */
void tf_exl3_part_span(const struct tf_exl3_part *part, uint64_t *lo, uint64_t *hi);

/* A rank's layer view of whole: trellis gathered into trellis_buf (sized
 * tf_exl3_trellis_bytes(&part->g)), suh/svh/bias pointing into whole's
 * arrays. Bias goes to one rank only for a row split (rank 0), since row
 * parts are summed. */
void tf_exl3_part_layer(const struct tf_exl3_layer *whole, const struct tf_exl3_part *part,
			uint16_t *trellis_buf, struct tf_exl3_layer *out);

/* Layout of a projection's experts, back to back: stacked when all share
 * one width, ragged otherwise. offsets[e] (bytes) is each expert's trellis
 * start, aligned to 16 bytes; *total is the buffer size; *ragged is set
 * when widths differ. All experts must share K and N. */
tf_status tf_exl3_experts_layout(const struct tf_exl3_geom *g, uint32_t count, uint64_t *offsets,
				 uint64_t *total, int *ragged);

#endif
