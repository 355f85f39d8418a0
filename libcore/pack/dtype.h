/* dtype.h: the safetensors element types, their names and bit widths. The
 * enum order is the spec's order of increasing alignment (the writer sorts
 * by it); values only grow at the end. */
#ifndef TF_PACK_DTYPE_H
#define TF_PACK_DTYPE_H

#include <stdint.h>

enum tf_dtype {
	TF_DTYPE_BOOL,
	TF_DTYPE_F4,
	TF_DTYPE_F6_E2M3,
	TF_DTYPE_F6_E3M2,
	TF_DTYPE_U8,
	TF_DTYPE_I8,
	TF_DTYPE_F8_E5M2,
	TF_DTYPE_F8_E4M3,
	TF_DTYPE_F8_E8M0,
	TF_DTYPE_I16,
	TF_DTYPE_U16,
	TF_DTYPE_F16,
	TF_DTYPE_BF16,
	TF_DTYPE_I32,
	TF_DTYPE_U32,
	TF_DTYPE_F32,
	TF_DTYPE_C64,
	TF_DTYPE_F64,
	TF_DTYPE_I64,
	TF_DTYPE_U64,
	TF_DTYPE_COUNT
};

/* "BF16" for TF_DTYPE_BF16; "?" for an invalid value. */
const char *tf_dtype_name(enum tf_dtype d);
/* Parse a safetensors dtype name (exact, upper case); -1 if unknown. */
int tf_dtype_parse(const char *name);
/* Bits per element (4 for F4, 6 for F6_*, 8..64 otherwise). */
unsigned tf_dtype_bits(enum tf_dtype d);

#endif
