/* fuzz_tokenize.c: libFuzzer target for encode of arbitrary bytes with the
 * mini tokenizer (tests/data/mini_tokenizer.json, or $TF_TEST_DATA/...):
 * never a crash; decode(encode(x)) is x with invalid UTF-8 replaced as
 * from_utf8_lossy does; the built-in DeepSeek splitter and the PCRE2
 * regexes give the same ids; streaming decode equals whole decode. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/file.h"
#include "text/detok.h"
#include "text/tokenizer.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct tf_tok *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *dir = getenv("TF_TEST_DATA");
	char *p = tf_path_join(dir ? dir : "tests/data", "mini_tokenizer.json");
	tf_status st = tf_tok_load(p, &tok);
	if (st) {
		fprintf(stderr, "fuzz_tokenize: %s\n", tf_errmsg(st));
		abort();
	}
	free(p);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tf_ids fast = TF_IDS_INIT, slow = TF_IDS_INIT;
	struct tf_buf want = TF_BUF_INIT, got = TF_BUF_INIT, streamed = TF_BUF_INIT;
	tf_status st;
	tf_tok_set_fast_split(tok, true);
	if (tf_tok_encode(tok, (const char *)data, size, &fast))
		abort();
	tf_tok_set_fast_split(tok, false);
	if (tf_tok_encode(tok, (const char *)data, size, &slow))
		abort();
	if (fast.n != slow.n || (fast.n && memcmp(fast.v, slow.v, fast.n * sizeof fast.v[0])))
		abort();
	tf_utf8_lossy(data, size, true, &want, &st);
	if (st || tf_tok_decode(tok, fast.v, fast.n, &got))
		abort();
	if (got.len != want.len || (want.len && memcmp(got.data, want.data, want.len)))
		abort();
	struct tf_detok d;
	tf_detok_init(&d, tok);
	for (size_t i = 0; i < fast.n; i++)
		if (tf_detok_push(&d, fast.v[i], &streamed))
			abort();
	if (tf_detok_flush(&d, &streamed) || streamed.len != want.len ||
	    (want.len && memcmp(streamed.data, want.data, want.len)))
		abort();
	tf_ids_release(&fast);
	tf_ids_release(&slow);
	tf_buf_release(&want);
	tf_buf_release(&got);
	tf_buf_release(&streamed);
	return 0;
}
