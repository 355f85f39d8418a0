/* fuzz_dsml.c: the DSML reader on arbitrary replies, whole and streamed in
 * chunks the input chooses. Byte 0: bit 0 thinking, bit 1 tools offered,
 * bit 2 the consistent stream; byte 1 seeds the chunk sizes. Never
 * crashes; the argument fragments a stream sends concatenate to its calls'
 * arguments; the consistent stream, assembled, is the whole parse. The
 * reader's contract is valid UTF-8 (the detokenizer hands it nothing
 * else), so the equalities are checked on the input made valid the way
 * the detokenizer makes it (from_utf8_lossy); the raw bytes are run too,
 * for safety alone. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "text/detok.h"
#include "text/dsml.h"

static struct tf_dsml_tools *tools;

static void setup(void)
{
	json_t *t = json_loads("[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\":"
			       " {\"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"},"
			       " \"tags\": {\"type\": \"array\"}, \"when\": {\"anyOf\": [{\"type\": \"string\"},"
			       " {\"type\": \"null\"}]}, \"k\": {\"enum\": [1, \"a\"]}}}}}, {\"name\": \"ns::search\"}]",
			       0, NULL);
	tools = tf_dsml_tools_new(t);
	json_decref(t);
}

static void run(const uint8_t *data, const char *text, size_t n, bool check);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!tools)
		setup();
	if (size < 2)
		return 0;
	run(data, (const char *)data + 2, size - 2, false);
	struct tf_buf valid = TF_BUF_INIT;
	tf_status st = TF_OK;
	tf_utf8_lossy(data + 2, size - 2, true, &valid, &st);
	if (st)
		abort();
	run(data, valid.data ? valid.data : "", valid.len, true);
	tf_buf_release(&valid);
	return 0;
}

/* One reply: whole, then streamed; with check, the equalities must hold. */
static void run(const uint8_t *data, const char *text, size_t n, bool check)
{
	bool thinking = data[0] & 1;
	const struct tf_dsml_tools *offered = data[0] & 2 ? tools : NULL;
	bool consistent = data[0] & 4;
	struct tf_dsml_reply r;
	if (tf_dsml_parse(text, n, thinking, offered, &r))
		abort();
	struct tf_rng rng;
	tf_rng_seed(&rng, data[1]);
	struct tf_dsml_stream *s = tf_dsml_stream_new(thinking, offered);
	tf_dsml_stream_consistent(s, consistent);
	struct tf_buf args[64] = {0}, rs = TF_BUF_INIT, cs = TF_BUF_INIT;
	size_t at = 0;
	for (;;) {
		size_t step = 1 + tf_rng_below(&rng, 24);
		bool last = at + step >= n;
		if (last)
			step = n - at;
		const struct tf_dsml_delta *d;
		size_t nd;
		tf_status st = last ? tf_dsml_stream_finish(s, text + at, step, &d, &nd) :
				      tf_dsml_stream_push(s, text + at, step, &d, &nd);
		if (st)
			abort();
		for (size_t i = 0; i < nd; i++) {
			if (d[i].kind == TF_DSML_ARGS && d[i].index < 64)
				tf_buf_append(&args[d[i].index], d[i].text, d[i].len);
			if (d[i].kind == TF_DSML_REASONING || d[i].kind == TF_DSML_CONTENT)
				tf_buf_append(d[i].kind == TF_DSML_REASONING ? &rs : &cs, d[i].text, d[i].len);
		}
		at += step;
		if (last)
			break;
	}
	size_t nc;
	const struct tf_dsml_call *c = tf_dsml_stream_calls(s, &nc);
	for (size_t i = 0; i < nc && i < 64; i++) {
		struct tf_buf whole = TF_BUF_INIT;
		tf_dsml_call_arguments(&c[i], &whole);
		if (check && (whole.len != args[i].len || memcmp(whole.data, args[i].data, whole.len)))
			abort();
		if (check && consistent && (i >= r.ncalls || strcmp(c[i].name, r.calls[i].name)))
			abort();
		struct tf_buf w = TF_BUF_INIT;
		if (check && consistent && i < r.ncalls &&
		    (tf_dsml_call_arguments(&r.calls[i], &w), w.len != whole.len ||
				   memcmp(w.data, whole.data, w.len)))
			abort();
		tf_buf_release(&w);
		tf_buf_release(&whole);
	}
	if (check && consistent && (nc != r.ncalls || rs.len != r.reasoning.len || cs.len != r.content.len ||
			   (rs.len && memcmp(rs.data, r.reasoning.data, rs.len)) ||
			   (cs.len && memcmp(cs.data, r.content.data, cs.len))))
		abort();
	tf_buf_release(&rs);
	tf_buf_release(&cs);
	tf_dsml_reply_release(&r);
	for (size_t i = 0; i < 64; i++)
		tf_buf_release(&args[i]);
	tf_dsml_stream_free(s);
}
