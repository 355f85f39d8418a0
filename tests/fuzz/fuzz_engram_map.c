/* fuzz_engram_map.c: the Engram token-map key (UTF-8 check, NFKC, NFD,
 * marks, lowercase, whitespace rules) on arbitrary bytes, as a tokenizer
 * file can make a token decode to anything. */
#include <stdint.h>
#include <string.h>

#include "model/engram_map.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tf_buf key = TF_BUF_INIT;
	if (tf_engram_map_key(data, size, (const char *)data, size, &key) == TF_OK) {
		/* feed the key back in: a second pass over text the first produced */
		struct tf_buf again = TF_BUF_INIT;
		tf_engram_map_key((const uint8_t *)key.data, key.len, key.data, key.len, &again);
		tf_buf_release(&again);
	}
	tf_buf_release(&key);
	return 0;
}
