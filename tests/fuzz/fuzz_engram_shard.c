/* fuzz_engram_shard.c: the Engram row-shard header check on arbitrary
 * bytes (the input is the whole file), and the row decoder on whatever rows
 * an accepted header covers. */
#include <stdint.h>
#include <stdlib.h>

#include "model/engram_rows.h"
#include "model/engram_shard.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tf_engram_shard_header h;
	if (tf_engram_shard_header_parse(data, size < 48 ? size : 48, size, "fuzz", &h))
		return 0;
	size_t n = (size_t)(h.hi - h.lo);
	if (n > 64)
		n = 64;
	uint16_t *out = malloc(n * TF_ENGRAM_ROW_VALUES * sizeof(*out) + 2);
	if (out) {
		tf_engram_rows_decode(data + TF_ENGRAM_SHARD_HEADER, n, out);
		free(out);
	}
	return 0;
}
