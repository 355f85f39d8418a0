/* fuzz_tokenizer_json.c: libFuzzer target for loading a tokenizer.json:
 * any bytes either load or are refused with a status; a loaded tokenizer
 * encodes a fixed text, saves, and the saved file loads to the same ids. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "text/detok.h"
#include "text/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void encode(const struct tf_tok *tok, struct tf_ids *ids)
{
	static const char text[] = "Hello, world! 12345 中文 <｜User｜>x\n\n  y\xff";
	ids->n = 0;
	if (tf_tok_encode(tok, text, sizeof text - 1, ids))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tf_tok *tok, *again;
	if (tf_tok_load_mem((const char *)data, size, "fuzz", &tok))
		return 0;
	struct tf_ids a = TF_IDS_INIT, b = TF_IDS_INIT;
	struct tf_buf saved = TF_BUF_INIT, text = TF_BUF_INIT;
	encode(tok, &a);
	if (tf_tok_decode(tok, a.v, a.n, &text))
		abort();
	if (tf_tok_save(tok, &saved))
		abort();
	if (tf_tok_load_mem(saved.data, saved.len, "saved", &again))
		abort();
	encode(again, &b);
	if (a.n != b.n || (a.n && memcmp(a.v, b.v, a.n * sizeof a.v[0])))
		abort();
	tf_tok_free(again);
	tf_tok_free(tok);
	tf_ids_release(&a);
	tf_ids_release(&b);
	tf_buf_release(&saved);
	tf_buf_release(&text);
	return 0;
}
