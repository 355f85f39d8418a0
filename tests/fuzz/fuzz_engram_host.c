/* fuzz_engram_host.c: the Engram host-file and hash-fixture readers on
 * arbitrary bytes; whatever they accept must hash without faults. */
#include <stdint.h>
#include <stdlib.h>

#include "model/config.h"
#include "model/engram_hash.h"
#include "model/engram_host.h"
#include "model/engram_layout.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct tf_engram_layout lay;
	static int ready;
	if (!ready) {
		struct tf_config c;
		tf_config_preset(&c, "release");
		tf_engram_layout_init(&lay, &c);
		ready = 1;
	}
	struct tf_engram_host h;
	if (tf_engram_host_parse(data, size, "fuzz", &h) == TF_OK) {
		struct tf_engram_hasher hs;
		if (tf_engram_hasher_init(&hs, &lay, &h, 0) == TF_OK) {
			uint32_t ids[6] = {0, 1, h.vocab - 1, h.vocab, 7, 0};
			int64_t rows[6 * 2 * 24];
			tf_engram_hash(&hs, ids, 6, ids, 3, 0, 24, rows);
		}
		tf_engram_host_release(&h);
	}
	struct tf_engram_fixture f;
	if (tf_engram_fixture_parse(data, size, "fuzz", 24, &f) == TF_OK)
		tf_engram_fixture_release(&f);
	return 0;
}
