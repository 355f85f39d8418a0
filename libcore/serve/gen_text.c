/* gen_text.c: a generation's tokens into text (gen_impl.h): each token's
 * log-probabilities taken, its bytes decoded by the family, complete UTF-8
 * characters let through (invalid bytes become U+FFFD), the text cut at
 * the first stop string (what may start one is held back), then fed to
 * the family's reader, whose deltas (reasoning, content, tool calls and
 * their arguments) are kept for the whole reply and, in a stream, written
 * at once in the route's shape. Not the shapes themselves (gen_openai.c,
 * gen_anthropic.c, gen_responses.c). */
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "serve/gen_impl.h"

static tf_status on_delta(void *ctx, const struct tf_delta *d)
{
	struct tf_gen *g = ctx;
	if ((d->kind == TF_DELTA_REASONING || d->kind == TF_DELTA_CONTENT || d->kind == TF_DELTA_ARGS) &&
	    d->len == 0)
		return TF_OK;
	char *text = tf_strndup(d->text ? d->text : "", d->len);
	if (!text)
		return tf_err(TF_ERR_NOMEM, "out of memory");
	tf_status rc = TF_OK;
	switch (d->kind) {
	case TF_DELTA_REASONING:
		rc = tf_buf_append(&g->reasoning, d->text, d->len);
		break;
	case TF_DELTA_CONTENT:
		g->saw_answer = true;
		rc = tf_buf_append(&g->content, d->text, d->len);
		break;
	case TF_DELTA_CALL: {
		g->saw_answer = true;
		if (d->index != (int)g->ncalls) {
			rc = tf_err(TF_ERR_INTERNAL, "reader: call %d opened out of order", d->index);
			break;
		}
		if (tf_realloc_array(&g->calls, g->ncalls + 1, sizeof(*g->calls))) {
			rc = tf_err(TF_ERR_NOMEM, "out of memory");
			break;
		}
		struct call *c = &g->calls[g->ncalls++];
		memset(c, 0, sizeof(*c));
		if (d->id && !g->anthropic && strlen(d->id) < sizeof(c->id)) {
			strcpy(c->id, d->id);
		} else {
			strcpy(c->id, g->anthropic ? "toolu_" : "call_");
			tf_gen_hex(c->id + strlen(c->id), 12);
		}
		c->name = tf_strdup(d->name ? d->name : "");
		break;
	}
	case TF_DELTA_ARGS:
		if (d->index < 0 || (size_t)d->index >= g->ncalls)
			rc = tf_err(TF_ERR_INTERNAL, "reader: arguments for unknown call %d", d->index);
		else
			rc = tf_buf_append(&g->calls[d->index].args, d->text, d->len);
		break;
	}
	if (!rc && g->req.api == TF_API_RESPONSES)
		rc = tf_resp_delta(g, d);
	else if (!rc && g->stream)
		tf_gen_stream_delta(g, d, text);
	free(text);
	return rc;
}

static tf_status feed(struct tf_gen *g, const char *text, size_t n, bool final)
{
	g->reader_final |= final;
	if (g->reader)
		return g->env->family->reader_feed(g->reader, text, n, final, on_delta, g);
	struct tf_delta d = {.kind = TF_DELTA_CONTENT, .text = text, .len = n};
	return n ? on_delta(g, &d) : TF_OK;
}

/* Complete text in: cut at stop strings, hold back what may start one. */
static tf_status text_in(struct tf_gen *g, const char *text, size_t n, bool final)
{
	if (g->stop_hit)
		return TF_OK;
	if (g->req.nstop == 0)
		return feed(g, text, n, final);
	if (tf_buf_append(&g->held, text, n))
		return tf_err(TF_ERR_NOMEM, "out of memory");
	const char *s = g->held.data ? g->held.data : "";
	size_t len = g->held.len, cut = len, keep = 0;
	for (size_t i = 0; i < g->req.nstop; i++) {
		const char *st = g->req.stop[i];
		size_t sl = strlen(st);
		const char *at = memmem(s, len, st, sl);
		if (at && (size_t)(at - s) < cut) {
			cut = (size_t)(at - s);
			g->stop_hit = st;
		}
		for (size_t k = sl - 1; k > keep && !final; k--)
			if (len >= k && !memcmp(s + len - k, st, k)) {
				keep = k;
				break;
			}
	}
	tf_status rc;
	if (g->stop_hit) {
		rc = feed(g, s, cut, true);
		tf_engine_job_cancel(g->job);
		tf_buf_reset(&g->held);
		return rc;
	}
	rc = feed(g, s, len - keep, final);
	memmove(g->held.data, s + len - keep, keep);
	g->held.len = keep;
	if (g->held.data)
		g->held.data[keep] = 0;
	return rc;
}

tf_status tf_gen_text_tokens(struct tf_gen *g, const int32_t *t, const double *made, size_t n)
{
	const struct tf_family *f = g->env->family;
	size_t nlp = 0;
	if (g->lp && n) {
		nlp = tf_engine_job_logprobs(g->job, g->lp_read, g->lpv, n);
		g->lp_read += n;
	}
	for (size_t i = 0; i < n; i++) {
		if (g->stop_hit)
			return TF_OK;
		g->nused++;
		g->t_made = made[i];
		if (i < nlp)
			tf_lpout_add(&g->lpo, t[i], &g->lpv[i]);
		tf_status rc = f->decode(f->ctx, &t[i], 1, &g->raw);
		if (rc)
			return rc;
		size_t ok = tf_utf8_complete(g->raw.data ? g->raw.data : "", g->raw.len);
		if (ok) {
			/* Complete characters go on; invalid bytes become U+FFFD. */
			tf_buf_reset(&g->fixed);
			tf_utf8_fix(g->raw.data, ok, &g->fixed);
			rc = text_in(g, g->fixed.data, g->fixed.len, false);
			memmove(g->raw.data, g->raw.data + ok, g->raw.len - ok);
			g->raw.len -= ok;
			g->raw.data[g->raw.len] = 0;
			if (rc)
				return rc;
		}
		if (g->thinking && !g->saw_answer)
			g->reasoning_tokens++;
	}
	return TF_OK;
}

tf_status tf_gen_text_end(struct tf_gen *g)
{
	tf_status rc = TF_OK;
	if (g->raw.len && !g->stop_hit)
		rc = text_in(g, "\xef\xbf\xbd", 3, false);
	g->raw.len = 0;
	if (!rc)
		rc = text_in(g, "", 0, true);
	if (!rc && g->reader && !g->reader_final)
		rc = g->env->family->reader_feed(g->reader, "", 0, true, on_delta, g);
	return rc;
}
