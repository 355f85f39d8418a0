/* engram_rows.h: the Engram row codec. A table row is 256 values stored
 * in 264 bytes: 256 FP8 E4M3 bytes (OCP "E4M3FN": bias 7, no infinities,
 * 0x7f/0xff NaN, largest 448), then 8 UE8M0 scale bytes, one per 32
 * values. A value is bf16(e4m3 * 2^(scale - 127)), a scale of 0 gives 0.
 * Decoding goes through a 65,536-entry table indexed scale << 8 | byte.
 *
 * The table is built once (thread-safe, on first use); every function here
 * may be called from any thread. */
#ifndef TF_MODEL_ENGRAM_ROWS_H
#define TF_MODEL_ENGRAM_ROWS_H

#include <stddef.h>
#include <stdint.h>

#define TF_ENGRAM_ROW_VALUES 256
#define TF_ENGRAM_ROW_BLOCK 32
#define TF_ENGRAM_ROW_BYTES 264 /* 256 + 256 / 32 */

/* The value of one E4M3 byte. */
float tf_engram_e4m3_to_f32(uint8_t b);
/* The nearest E4M3 byte (ties to even), saturating at +-448; NaN -> 0x7f. */
uint8_t tf_engram_f32_to_e4m3(float f);

/* The decode table: lut[scale << 8 | byte] is the bf16 bits. Borrowed,
 * static. */
const uint16_t *tf_engram_lut(void);

/* Decode n rows: raw [n][264] -> out [n][256] bf16 bits. */
void tf_engram_rows_decode(const uint8_t *raw, size_t n, uint16_t *out);

/* Encode one row of 256 floats: each block of 32 gets the smallest scale
 * that keeps its largest magnitude within 448 (scale 0 for an all-zero
 * block), then values round to E4M3. */
void tf_engram_row_encode(const float *v, uint8_t *row);

#endif
