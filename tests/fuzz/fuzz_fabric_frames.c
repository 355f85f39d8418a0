/* fuzz_fabric_frames: the fabric's frame parsers (bootstrap hello, fate
 * frame, plan-link batch) on arbitrary bytes: none may crash or read past
 * its input. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fabric/bootstrap.h"
#include "fabric/fate.h"
#include "fabric/planlink.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size >= 20) {
		struct tf_boot_hello h;
		tf_boot_hello_parse(data, 1 + data[0] % 64, &h);
	}
	if (size >= 16) {
		uint32_t kind;
		int64_t v;
		tf_fate_frame_parse(data, &kind, &v);
	}
	size_t n = size / 8;
	if (n) {
		int64_t *w = malloc(n * 8);
		memcpy(w, data, n * 8);
		size_t np;
		tf_plan_frame_check(w, n, &np);
		free(w);
	}
	return 0;
}
