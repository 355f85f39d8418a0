/* logprobs.c: the OpenAI wire shapes of log-probabilities (logprobs.h). */
#include "serve/logprobs.h"

#include <math.h>
#include <string.h>

void tf_lpout_init(struct tf_lpout *o, bool chat, const struct tf_family *f, unsigned ntop)
{
	memset(o, 0, sizeof(*o));
	o->chat = chat;
	o->family = f;
	o->ntop = ntop;
}

void tf_lpout_release(struct tf_lpout *o)
{
	tf_buf_release(&o->chat_entries);
	for (int i = 0; i < 4; i++)
		tf_buf_release(&o->lists[i]);
	tf_buf_release(&o->text);
	tf_buf_release(&o->raw);
}

static void number(struct tf_buf *b, float v)
{
	tf_buf_printf(b, "%.9g", isfinite(v) ? (double)v : -9999.0);
}

/* Token id's bytes into o->raw and its text (U+FFFD for invalid bytes)
 * into o->text. */
static void token_text(struct tf_lpout *o, int32_t id)
{
	const struct tf_family *f = o->family;
	tf_buf_reset(&o->raw);
	tf_buf_reset(&o->text);
	if (f->decode(f->ctx, &id, 1, &o->raw) != TF_OK)
		tf_buf_reset(&o->raw);
	if (o->raw.len)
		tf_utf8_fix(o->raw.data, o->raw.len, &o->text);
}

static const char *text_of(const struct tf_lpout *o)
{
	return o->text.data ? o->text.data : "";
}

/* {"token":..,"logprob":..,"bytes":[..] -- left open for the caller. */
static void chat_head(struct tf_lpout *o, struct tf_buf *b, int32_t id, float lp)
{
	token_text(o, id);
	tf_buf_puts(b, "{\"token\":");
	tf_json_quote(b, text_of(o), o->text.len);
	tf_buf_puts(b, ",\"logprob\":");
	number(b, lp);
	tf_buf_puts(b, ",\"bytes\":[");
	for (size_t i = 0; i < o->raw.len; i++)
		tf_buf_printf(b, i ? ",%u" : "%u", (unsigned)(uint8_t)o->raw.data[i]);
	tf_buf_puts(b, "]");
}

static void add_chat(struct tf_lpout *o, int32_t id, const struct tf_engine_logprob *l,
		     unsigned ntop)
{
	struct tf_buf *b = &o->chat_entries;
	if (o->count)
		tf_buf_puts(b, ",");
	chat_head(o, b, id, l->logprob);
	tf_buf_puts(b, ",\"top_logprobs\":[");
	for (unsigned k = 0; k < ntop; k++) {
		if (k)
			tf_buf_puts(b, ",");
		chat_head(o, b, l->top_ids[k], l->top_lp[k]);
		tf_buf_puts(b, "}");
	}
	tf_buf_puts(b, "]}");
}

static void add_completion(struct tf_lpout *o, int32_t id, const struct tf_engine_logprob *l,
			   unsigned ntop)
{
	struct tf_buf *tokens = &o->lists[0], *lps = &o->lists[1], *tops = &o->lists[2],
		      *offsets = &o->lists[3];
	const char *sep = o->count ? "," : "";
	/* The alternatives as one object; a repeated text keeps its first
	 * (more likely) value. Keys are compared in their quoted form: the
	 * spans of those written so far. */
	size_t at[TF_ENGINE_TOP_MAX], len[TF_ENGINE_TOP_MAX];
	unsigned nkept = 0;
	struct tf_buf key = TF_BUF_INIT;
	tf_buf_printf(tops, "%s{", sep);
	for (unsigned k = 0; k < ntop; k++) {
		token_text(o, l->top_ids[k]);
		tf_buf_reset(&key);
		tf_json_quote(&key, text_of(o), o->text.len);
		bool dup = false;
		for (unsigned q = 0; q < nkept && !dup; q++)
			dup = len[q] == key.len && !memcmp(tops->data + at[q], key.data, key.len);
		if (dup)
			continue;
		if (nkept)
			tf_buf_puts(tops, ",");
		at[nkept] = tops->len;
		len[nkept++] = key.len;
		tf_buf_append(tops, key.data, key.len);
		tf_buf_puts(tops, ":");
		number(tops, l->top_lp[k]);
	}
	tf_buf_puts(tops, "}");
	tf_buf_release(&key);
	token_text(o, id);
	tf_buf_puts(tokens, sep);
	tf_json_quote(tokens, text_of(o), o->text.len);
	tf_buf_puts(lps, sep);
	number(lps, l->logprob);
	tf_buf_printf(offsets, "%s%zu", sep, o->chars);
	for (size_t i = 0; i < o->text.len; i++) /* characters: the bytes that start one */
		o->chars += ((uint8_t)o->text.data[i] & 0xc0) != 0x80;
}

void tf_lpout_add(struct tf_lpout *o, int32_t id, const struct tf_engine_logprob *l)
{
	unsigned ntop = l->ntop < o->ntop ? l->ntop : o->ntop;
	if (ntop > TF_ENGINE_TOP_MAX)
		ntop = TF_ENGINE_TOP_MAX;
	if (o->chat)
		add_chat(o, id, l, ntop);
	else
		add_completion(o, id, l, ntop);
	o->count++;
}

void tf_lpout_flush(struct tf_lpout *o, struct tf_buf *out)
{
	if (o->chat) {
		tf_buf_puts(out, "{\"content\":[");
		tf_buf_append(out, o->chat_entries.data ? o->chat_entries.data : "",
			      o->chat_entries.len);
		tf_buf_puts(out, "],\"refusal\":null}");
		tf_buf_reset(&o->chat_entries);
	} else {
		static const char *const key[4] = {"tokens", "token_logprobs", "top_logprobs",
						   "text_offset"};
		for (int i = 0; i < 4; i++) {
			tf_buf_printf(out, "%s\"%s\":[", i ? "," : "{", key[i]);
			tf_buf_append(out, o->lists[i].data ? o->lists[i].data : "", o->lists[i].len);
			tf_buf_puts(out, "]");
			tf_buf_reset(&o->lists[i]);
		}
		tf_buf_puts(out, "}");
	}
	o->count = 0;
}
