/* dtype.c: safetensors dtype names and widths. */
#include "pack/dtype.h"

#include <string.h>

static const struct {
	const char *name;
	unsigned bits;
} table[TF_DTYPE_COUNT] = {
	{"BOOL", 8}, {"F4", 4}, {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8}, {"I8", 8},
	{"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"I16", 16}, {"U16", 16},
	{"F16", 16}, {"BF16", 16}, {"I32", 32}, {"U32", 32}, {"F32", 32}, {"C64", 64},
	{"F64", 64}, {"I64", 64}, {"U64", 64},
};

const char *tf_dtype_name(enum tf_dtype d)
{
	return (unsigned)d < TF_DTYPE_COUNT ? table[d].name : "?";
}

int tf_dtype_parse(const char *name)
{
	for (int i = 0; i < TF_DTYPE_COUNT; i++)
		if (!strcmp(name, table[i].name))
			return i;
	return -1;
}

unsigned tf_dtype_bits(enum tf_dtype d)
{
	return (unsigned)d < TF_DTYPE_COUNT ? table[d].bits : 0;
}
