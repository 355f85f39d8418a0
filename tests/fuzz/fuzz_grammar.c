/* fuzz_grammar.c: libFuzzer target for the grammar compilers: the first
 * byte picks a JSON schema (the rest as JSON) or a regex (the rest as
 * text); a grammar that compiles must give a start mask whose every
 * allowed token leads to a live state. */
#include <stdint.h>
#include <stdlib.h>

#include "base/json.h"
#include "grammar/grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint8_t *bytes(void *ctx, uint32_t id, size_t *len)
{
	static const char *const pieces[] = {"{\"", "\":", "\",", "}", "true", "12", " a", "ab", "\\u"};
	static uint8_t b[256];
	if (id < 256) {
		b[id] = (uint8_t)id;
		*len = 1;
		return &b[id];
	}
	if (id - 256 >= sizeof(pieces) / sizeof(pieces[0]))
		return NULL;
	*len = __builtin_strlen(pieces[id - 256]);
	return (const uint8_t *)pieces[id - 256];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct tf_gvocab *v;
	if (!v && tf_gvocab_new(256 + 10, bytes, NULL, &v))
		abort();
	if (!size || size > 2048)
		return 0;
	struct tf_grammar *g = NULL;
	if (data[0] & 1) {
		json_t *j;
		if (tf_json_parse((const char *)data + 1, size - 1, "fuzz", &j))
			return 0;
		(void)tf_grammar_schema(v, j, &g);
		json_decref(j);
	} else {
		(void)tf_grammar_regex(v, (const char *)data + 1, size - 1, &g);
	}
	if (!g)
		return 0;
	uint32_t count;
	const uint64_t *m = tf_grammar_mask(g, tf_grammar_start(g), &count);
	for (uint32_t id = 0; m && id < 266; id++)
		if ((m[id >> 6] >> (id & 63) & 1) && tf_grammar_next_token(g, tf_grammar_start(g), id) < 0)
			abort();
	tf_grammar_free(g);
	return 0;
}
