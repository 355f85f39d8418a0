/* fuzz_config.c: libFuzzer target for config.json parsing and validation. */
#include <stdint.h>
#include <stdlib.h>

#include "base/json.h"
#include "model/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *j;
	if (tf_json_parse((const char *)data, size, "fuzz", &j))
		return 0;
	struct tf_config c;
	if (tf_config_from_json(&c, j, "fuzz") == TF_OK) {
		for (uint32_t l = 0; l < tf_config_all_layers(&c); l++)
			(void)tf_config_mode(&c, l);
		json_t *back = tf_config_to_json(&c);
		struct tf_config d;
		if (tf_config_from_json(&d, back, "back") != TF_OK)
			abort();
		json_decref(back);
	}
	json_decref(j);
	return 0;
}
