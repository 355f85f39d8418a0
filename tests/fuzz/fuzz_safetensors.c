/* fuzz_safetensors.c: libFuzzer target for the safetensors header parser.
 * The input is a whole file image: u64 header length, header, data. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "pack/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 8)
		return 0;
	uint64_t n = 0;
	for (int i = 7; i >= 0; i--)
		n = n << 8 | data[i];
	if (n > size - 8 || n > TF_ST_MAX_HEADER)
		return 0;
	char *hdr = malloc(n + 1);
	if (!hdr)
		return 0;
	memcpy(hdr, data + 8, n);
	hdr[n] = 0;
	struct tf_st_file f;
	memset(&f, 0, sizeof f);
	f.fd = -1;
	if (tf_st_parse(&f, "fuzz", hdr, n, size) == TF_OK) {
		for (size_t i = 0; i < f.n; i++)
			if (tf_st_find(&f, f.t[i].name) == NULL)
				abort();
		/* differential: what the header reader accepts is valid JSON */
		json_t *j = json_loadb(hdr, n, 0, NULL);
		if (!j || !json_is_object(j))
			abort();
		json_decref(j);
	}
	tf_st_close(&f);
	free(hdr);
	return 0;
}
