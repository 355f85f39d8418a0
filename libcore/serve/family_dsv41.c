/* family_dsv41.c: the DeepSeek-V4.1 family hook over the text layer: the
 * pack's tokenizer.json (text/tokenizer.h), the chat encoding
 * (text/chat.h) and the DSML reader (text/dsml.h). */
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/file.h"
#include "serve/family.h"
#include "text/chat.h"
#include "text/dsml.h"
#include "text/tokenizer.h"
#include "serve/constrain.h"

struct dsv41 {
	struct tf_tok *tok;
};

/* A reader: the offered tools and the DSML stream over them. */
struct dsv41_reader {
	struct tf_dsml_tools *tools;
	struct tf_dsml_stream *s;
};

static tf_status render(void *ctx, const json_t *req, struct tf_buf *text, bool *thinking)
{
	struct tf_chat_prompt p;
	tf_chat_prompt_init(&p);
	tf_status st = tf_chat_render_request(req, NULL, &p);
	if (!st) {
		*thinking = p.thinking;
		st = tf_buf_append(text, p.text.data ? p.text.data : "", p.text.len);
	}
	tf_chat_prompt_release(&p);
	return st;
}

static tf_status encode(void *ctx, const char *text, size_t n, int32_t **ids, size_t *nids)
{
	struct dsv41 *f = ctx;
	struct tf_ids v = TF_IDS_INIT;
	tf_status st = tf_tok_encode(f->tok, text, n, &v);
	*ids = NULL;
	*nids = 0;
	if (!st && !(*ids = tf_alloc_array(v.n ? v.n : 1, sizeof(**ids))))
		st = tf_err(TF_ERR_NOMEM, "encode: out of memory");
	if (!st) {
		for (size_t i = 0; i < v.n; i++)
			(*ids)[i] = (int32_t)v.v[i];
		*nids = v.n;
	}
	tf_ids_release(&v);
	return st;
}

static tf_status decode(void *ctx, const int32_t *ids, size_t n, struct tf_buf *out)
{
	struct dsv41 *f = ctx;
	for (size_t i = 0; i < n; i++) {
		size_t len;
		const uint8_t *b = ids[i] < 0 ? NULL : tf_tok_bytes(f->tok, (uint32_t)ids[i], &len);
		if (b && tf_buf_append(out, b, len))
			return tf_err(TF_ERR_NOMEM, "decode: out of memory");
	}
	return TF_OK;
}

static const uint8_t *text_bytes(void *ctx, uint32_t id, size_t *len)
{
	struct dsv41 *f = ctx;
	if (tf_tok_added_flags(f->tok, id) >= 0)
		return NULL;
	return tf_tok_bytes(f->tok, id, len);
}

static tf_status reader_new(void *ctx, bool thinking, const json_t *tools, struct tf_reader **out)
{
	struct dsv41_reader *r = tf_calloc(1, sizeof(*r));
	if (!r || !(r->tools = tf_dsml_tools_new(tools)) ||
	    !(r->s = tf_dsml_stream_new(thinking, r->tools))) {
		if (r)
			tf_dsml_tools_free(r->tools);
		free(r);
		return tf_err(TF_ERR_NOMEM, "reader: out of memory");
	}
	/* A streamed reply must read the same as the whole one, however the
	 * tokens cut the text. */
	tf_dsml_stream_consistent(r->s, true);
	*out = (struct tf_reader *)r;
	return TF_OK;
}

static tf_status reader_feed(struct tf_reader *rd, const char *text, size_t n, bool final,
			     tf_delta_fn fn, void *fctx)
{
	struct dsv41_reader *r = (struct dsv41_reader *)rd;
	const struct tf_dsml_delta *d;
	size_t nd;
	tf_status st = final ? tf_dsml_stream_finish(r->s, text, n, &d, &nd)
			     : tf_dsml_stream_push(r->s, text, n, &d, &nd);
	for (size_t i = 0; !st && i < nd; i++) {
		static const enum tf_delta_kind kinds[] = {
			[TF_DSML_REASONING] = TF_DELTA_REASONING,
			[TF_DSML_CONTENT] = TF_DELTA_CONTENT,
			[TF_DSML_CALL] = TF_DELTA_CALL,
			[TF_DSML_ARGS] = TF_DELTA_ARGS,
		};
		struct tf_delta x = {
			.kind = kinds[d[i].kind],
			.text = d[i].text,
			.len = d[i].len,
			.index = (int)d[i].index,
			.name = d[i].name,
			.id = d[i].id,
		};
		st = fn(fctx, &x);
	}
	return st;
}

static void reader_free(struct tf_reader *rd)
{
	struct dsv41_reader *r = (struct dsv41_reader *)rd;
	if (!r)
		return;
	tf_dsml_stream_free(r->s);
	tf_dsml_tools_free(r->tools);
	free(r);
}

static void family_free(void *ctx)
{
	struct dsv41 *f = ctx;
	if (f)
		tf_tok_free(f->tok);
	free(f);
}

tf_status tf_family_dsv41(const char *pack_dir, struct tf_family *out)
{
	memset(out, 0, sizeof(*out));
	struct dsv41 *f = tf_calloc(1, sizeof(*f));
	char *path = tf_path_join(pack_dir, "tokenizer.json");
	tf_status st = f && path ? TF_OK : tf_err(TF_ERR_NOMEM, "out of memory");
	if (!st && !tf_file_exists(path))
		st = tf_err(TF_ERR_NOTFOUND, "'%s': no tokenizer.json", pack_dir);
	if (!st)
		st = tf_tok_load(path, &f->tok);
	if (!st)
		st = tf_tok_add_v41_markers(f->tok, tf_tok_vocab_size(f->tok) > TF_TOK_V41_VOCAB
							      ? tf_tok_vocab_size(f->tok)
							      : TF_TOK_V41_VOCAB);
	int64_t eos = st ? -1 : tf_tok_id_of(f->tok, TF_CHAT_EOS);
	if (!st && eos < 0)
		st = tf_err(TF_ERR_FORMAT, "'%s': the tokenizer has no %s", path, TF_CHAT_EOS);
	free(path);
	if (st) {
		family_free(f);
		return st;
	}
	*out = (struct tf_family){
		.name = "dsv41",
		.ctx = f,
		.vocab = tf_tok_vocab_size(f->tok),
		.eos = (int32_t)eos,
		.default_thinking = true,
		.render = render,
		.encode = encode,
		.decode = decode,
		.reader_new = reader_new,
		.reader_feed = reader_feed,
		.reader_free = reader_free,
		.free = family_free,
		.text_bytes = text_bytes,
		.think_end = (int32_t)tf_tok_id_of(f->tok, TF_CHAT_THINK_END),
		.grammar = tf_fgrammar_new(),
	};
	if (!out->grammar) {
		tf_family_release(out);
		return tf_err(TF_ERR_NOMEM, "out of memory");
	}
	return TF_OK;
}
