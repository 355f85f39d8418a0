/* stub.c: the stub engine backend (see stub.h for the markers). */
#include "engine/stub.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "engine/constrain.h"
#include "grammar/grammar.h"

#define BAR "\xef\xbd\x9c" /* U+FF5C, the DSML bar */

struct script {
	const char *marker;
	const char *reasoning;
	const char *content;
};

static const struct script scripts[] = {
	{"@short", "Short.", "Short reply."},
	{"@wait", "Waited.", "Short reply."},
	{"@think", "Let me think about the greeting.", "Hello there!"},
	{"@tool", "I should look up the weather.",
	 "Checking.\n\n<" BAR "DSML" BAR "calls>\n"
	 "<" BAR "DSML" BAR "invoke name=\"get_weather\">\n"
	 "<" BAR "DSML" BAR "parameter name=\"city\" string=\"true\">Paris</" BAR "DSML" BAR "parameter>\n"
	 "<" BAR "DSML" BAR "parameter name=\"days\" string=\"false\">3</" BAR "DSML" BAR "parameter>\n"
	 "</" BAR "DSML" BAR "invoke>\n"
	 "<" BAR "DSML" BAR "invoke name=\"get_weather\">\n"
	 "<" BAR "DSML" BAR "parameter name=\"city\" string=\"true\">\xe6\x9d\xb1\xe4\xba\xac</" BAR "DSML" BAR "parameter>\n"
	 "</" BAR "DSML" BAR "invoke>\n"
	 "</" BAR "DSML" BAR "calls>"},
	{"@stop", "ok", "abc END def"},
	{"@fail", "", "Never seen."},
	{NULL, "Plain answer.", "Plain answer."},
};

static const char long_text[] = "Plenty to say here, more than the limit lets through. ";

static const char *const words[] = {
	"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
	"india", "juliet", "kilo", "lima", "mike", "november", "oscar", "papa",
};

struct stub {
	struct tf_stub_config c;
};

struct stream {
	int32_t *ids;
	size_t n, pos;
	bool endless; /* repeat ids from the start (@long) */
	bool hang, fail;
	double ready; /* monotonic seconds when tokens may flow */
	float *row;   /* constrained lanes: a row of zero logits to mask */
	uint64_t draws; /* constrained draws made */
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_s(double s)
{
	if (s <= 0)
		return;
	struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static bool ends_with(const struct tf_buf *b, const char *s)
{
	size_t n = strlen(s);
	return b->len >= n && !memcmp(b->data + b->len - n, s, n);
}

/* The script text for a prompt into out; sets the stream's flags. */
static tf_status script_for(struct stub *s, struct tf_lane *lane, const struct tf_buf *prompt,
			    struct stream *st, struct tf_buf *out)
{
	const char *p = prompt->data ? prompt->data : "";
	bool thinking = ends_with(prompt, "<think>");
	if (strstr(p, "@hang")) {
		st->hang = true;
		return TF_OK;
	}
	if (strstr(p, "@long")) {
		st->endless = true;
		return tf_buf_puts(out, long_text);
	}
	if (strstr(p, "@sample")) {
		const struct tf_engine_params *q = lane->params;
		for (uint32_t i = 0; i < q->max_tokens; i++) {
			uint64_t k = q->temperature > 0 ? mix(q->seed ^ mix(i)) : i;
			tf_status rc = tf_buf_printf(out, " %s", words[k % (sizeof(words) / sizeof(*words))]);
			if (rc)
				return rc;
		}
		return TF_OK;
	}
	const struct script *sc = scripts;
	while (sc->marker && !strstr(p, sc->marker))
		sc++;
	if (sc->marker && !strcmp(sc->marker, "@wait"))
		st->ready = now_s() + s->c.wait_ms / 1000.0;
	if (sc->marker && !strcmp(sc->marker, "@fail"))
		st->fail = true;
	tf_status rc = TF_OK;
	if (thinking && sc->reasoning[0]) {
		rc = tf_buf_puts(out, sc->reasoning);
		if (!rc)
			rc = tf_buf_puts(out, "</think>");
	}
	return rc ? rc : tf_buf_puts(out, sc->content);
}

static tf_status stub_begin(void *ctx, struct tf_lane *lane)
{
	struct stub *s = ctx;
	struct stream *st = tf_calloc(1, sizeof(*st));
	struct tf_buf prompt = TF_BUF_INIT, text = TF_BUF_INIT;
	tf_status rc;
	if (!st)
		return tf_err(TF_ERR_NOMEM, "stub: out of memory");
	rc = s->c.text.decode(s->c.text.ctx, lane->prompt, lane->nprompt, &prompt);
	if (!rc)
		rc = script_for(s, lane, &prompt, st, &text);
	if (!rc && text.len)
		rc = s->c.text.encode(s->c.text.ctx, text.data, text.len, &st->ids, &st->n);
	if (!rc && !st->endless && !st->hang) { /* then end-of-sequence */
		if (tf_realloc_array(&st->ids, st->n + 1, sizeof(*st->ids)))
			rc = tf_err(TF_ERR_NOMEM, "stub: out of memory");
		else
			st->ids[st->n++] = s->c.text.eos;
	}
	if (!rc && st->endless && st->n == 0)
		rc = tf_err(TF_ERR_INTERNAL, "stub: the @long text encodes to nothing");
	tf_buf_release(&prompt);
	tf_buf_release(&text);
	if (rc) {
		free(st->ids);
		free(st);
		return rc;
	}
	lane->state = st;
	lane->cached = 0;
	return TF_OK;
}

/* A constrained draw: the grammar masks a row of equal logits; end-of-
 * sequence as soon as the grammar allows it, else one of the allowed ids
 * picked by the request's seed and the draw's number (so a request gives
 * the same output streamed or whole, alone or among others). */
static tf_status draw(struct stub *s, struct tf_lane *lane, struct stream *st, int32_t *out)
{
	int32_t eos = s->c.text.eos;
	size_t n = tf_grammar_vocab(lane->params->grammar);
	if (eos >= 0 && (size_t)eos >= n)
		n = (size_t)eos + 1;
	if (!st->row && !(st->row = tf_alloc_array(n, sizeof(*st->row))))
		return tf_err(TF_ERR_NOMEM, "stub: out of memory");
	memset(st->row, 0, n * sizeof(*st->row));
	tf_status rc = tf_lane_constrain(lane, st->row, n, eos);
	if (rc)
		return rc;
	int32_t tok = -1;
	if (eos >= 0 && isfinite(st->row[eos])) {
		tok = eos;
	} else {
		size_t count = 0;
		for (size_t i = 0; i < n; i++)
			count += isfinite(st->row[i]) != 0;
		if (!count)
			return tf_err(TF_ERR_RANGE, "stub: constrained output: no token can continue");
		size_t k = mix(lane->params->seed ^ mix(st->draws++)) % count;
		for (size_t i = 0; i < n && tok < 0; i++)
			if (isfinite(st->row[i]) && k-- == 0)
				tok = (int32_t)i;
	}
	tf_lane_constrain_step(lane, tok);
	*out = tok;
	return TF_OK;
}

/* The next token(s) of a stream: at most one a round. A constrained lane
 * draws under its grammar once the grammar applies (after reasoning, the
 * script's until then). */
static tf_status next_tokens(struct stub *s, struct tf_lane *lane, double t, int32_t *out,
			     uint32_t *ntokens)
{
	struct stream *st = lane->state;
	*ntokens = 0;
	if (st->hang || t < st->ready)
		return TF_OK;
	*ntokens = 1;
	if (tf_lane_constrained(lane))
		return draw(s, lane, st, out);
	if (st->endless)
		out[0] = st->ids[st->pos++ % st->n];
	else if (st->pos >= st->n) /* past the end (ignore_eos): end-of-sequence again */
		out[0] = st->n ? st->ids[st->n - 1] : 0;
	else
		out[0] = st->ids[st->pos++];
	if (lane->params->grammar)
		tf_lane_constrain_step(lane, out[0]); /* waiting for grammar_after */
	return TF_OK;
}

/* The stub's tokens are certain: log-probability 0, the token its own
 * only alternative. */
static void certain(const struct tf_lane *lane, const int32_t *tokens, uint32_t n,
		    struct tf_engine_logprob *lp)
{
	for (uint32_t i = 0; lp && i < n; i++) {
		lp[i] = (struct tf_engine_logprob){.logprob = 0,
						   .ntop = lane->params->top_logprobs ? 1 : 0};
		lp[i].top_ids[0] = tokens[i];
	}
}

static tf_status stub_forward(void *ctx, struct tf_engine_round *r)
{
	struct stub *s = ctx;
	double cost = r->nrows ? s->c.token_ms / 1000.0 : 0;
	for (size_t i = 0; i < r->npieces; i++)
		cost += (r->pieces[i].end - r->pieces[i].start) * s->c.piece_us * 1e-6;
	sleep_s(cost);
	double t = now_s();
	for (size_t i = 0; i < r->npieces; i++) {
		struct tf_engine_piece *p = &r->pieces[i];
		struct stream *st = p->lane->state;
		if (p->end < p->lane->nprompt)
			continue;
		if (st->fail) {
			p->st = tf_err(TF_ERR_INTERNAL, "stub: @fail: this prompt's last piece fails");
			continue;
		}
		if ((p->st = next_tokens(s, p->lane, t, p->tokens, &p->ntokens)))
			p->ntokens = 0;
		certain(p->lane, p->tokens, p->ntokens, p->lp);
	}
	for (size_t i = 0; i < r->nrows; i++) {
		struct tf_engine_row *w = &r->rows[i];
		if ((w->st = next_tokens(s, w->lane, t, w->tokens, &w->ntokens)))
			w->ntokens = 0;
		certain(w->lane, w->tokens, w->ntokens, w->lp);
	}
	return TF_OK;
}

static void stub_end(void *ctx, struct tf_lane *lane)
{
	struct stream *st = lane->state;
	if (st) {
		free(st->ids);
		free(st->row);
		free(st);
	}
	lane->state = NULL;
}

static void stub_free(void *ctx)
{
	free(ctx);
}

tf_status tf_stub_new(const struct tf_stub_config *c, struct tf_engine_backend *out)
{
	struct stub *s = tf_calloc(1, sizeof(*s));
	if (!s)
		return tf_err(TF_ERR_NOMEM, "stub: out of memory");
	s->c = *c;
	if (s->c.token_ms <= 0 && !s->c.zero_ok)
		s->c.token_ms = 15;
	if (s->c.piece_us <= 0 && !s->c.zero_ok)
		s->c.piece_us = 20;
	if (s->c.wait_ms <= 0)
		s->c.wait_ms = 800;
	*out = (struct tf_engine_backend){"stub", s, c->text.eos, stub_begin, stub_forward,
					  stub_end, stub_free, NULL, true};
	return TF_OK;
}
