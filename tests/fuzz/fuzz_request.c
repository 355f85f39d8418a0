/* fuzz_request.c: the request-body parser of the generation routes
 * (serve/request.h) and what follows it without an engine: the plain
 * family's rendering and encoding, and the </think> reader fed the same
 * bytes in two pieces. The first byte picks the route. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve/family.h"
#include "serve/gen.h"
#include "serve/request.h"

static tf_status sink(void *ctx, const struct tf_delta *d)
{
	size_t *n = ctx;
	*n += d->len;
	return TF_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	enum tf_api api = (enum tf_api)(data[0] % 5); /* through TF_API_RESPONSES */
	const char *body = (const char *)data + 1;
	size_t n = size - 1;
	struct tf_family f;
	tf_family_plain(&f);
	struct tf_req r;
	if (tf_req_parse(api, body, n, f.vocab, &r) == TF_OK) {
		if (r.chat) {
			struct tf_gen_env env = {.family = &f};
			int32_t *ids = NULL;
			size_t nids = 0;
			if (tf_gen_count(&env, r.chat, &ids, &nids) == TF_OK && nids) {
				struct tf_buf back = TF_BUF_INIT;
				f.decode(f.ctx, ids, nids, &back);
				tf_buf_release(&back);
			}
			free(ids);
		}
		tf_req_release(&r);
	}
	struct tf_reader *rd;
	size_t got = 0, cut = n / 2;
	if (tf_reader_think_new(data[0] & 1, &rd) == TF_OK) {
		size_t a = tf_utf8_complete(body, cut);
		tf_reader_think_feed(rd, body, a, false, sink, &got);
		tf_reader_think_feed(rd, body + a, n - a, true, sink, &got);
		tf_reader_think_free(rd);
		if (got > n) /* every byte comes out once at most */
			abort();
	}
	return 0;
}
