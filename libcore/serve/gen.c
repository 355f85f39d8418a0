/* gen.c: a generation's lifecycle (gen.h): the pump (tokens from the
 * engine into text and frames, keepalives, the end), the whole reply, the
 * outcome, and the frame helpers and wire-shape dispatch the parts share
 * (gen_impl.h lists them). */
#include "serve/gen.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "base/digest.h"
#include "serve/gen_impl.h"
#include "serve/metrics.h"

double tf_gen_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void tf_gen_hex(char *out, size_t nbytes)
{
	uint8_t b[32];
	if (nbytes > sizeof(b))
		nbytes = sizeof(b);
	if (getrandom(b, nbytes, 0) != (ssize_t)nbytes) { /* never in practice; stay unique-ish */
		uint64_t t = (uint64_t)(tf_gen_now() * 1e9);
		for (size_t i = 0; i < nbytes; i++)
			b[i] = (uint8_t)(t >> (8 * (i % 8))) ^ (uint8_t)i;
	}
	tf_hex(b, nbytes, out);
}

/* SSE frames. */
void tf_gen_sse(struct tf_gen *g, json_t *v)
{
	char *s = tf_reply_dump(v);
	if (!s)
		return;
	if (g->anthropic || g->req.api == TF_API_RESPONSES) {
		const char *type = strstr(s, "\"type\":\"");
		const char *end = type ? strchr(type + 8, '"') : NULL;
		if (end)
			tf_buf_printf(g->out, "event: %.*s\n", (int)(end - type - 8), type + 8);
	}
	tf_buf_puts(g->out, "data: ");
	tf_buf_puts(g->out, s);
	tf_buf_puts(g->out, "\n\n");
	free(s);
	g->t_last_write = tf_gen_now();
}

void tf_gen_note_event(struct tf_gen *g)
{
	double t = tf_gen_now();
	if (g->events) {
		double gap = t - g->t_last_event;
		g->itl_sum += gap;
		if (gap > g->itl_max)
			g->itl_max = gap;
		g->itl_n[tf_metrics_bucket(gap)]++;
	}
	g->events++;
	g->t_last_event = t;
}

void tf_gen_stream_delta(struct tf_gen *g, const struct tf_delta *d, const char *text)
{
	if (g->timing && g->t_made > 0) /* an SSE comment: every client skips it */
		tf_buf_printf(g->out, ": tf-made %lld\n", (long long)(g->t_made * 1e9));
	if (g->anthropic)
		tf_anthropic_delta(g, d, text);
	else
		tf_openai_delta(g, d, text);
}

const char *tf_gen_finish(const struct tf_gen *g, const char **stop_seq)
{
	*stop_seq = NULL;
	if (g->stop_hit) {
		*stop_seq = g->stop_hit;
		return g->anthropic ? "stop_sequence" : "stop";
	}
	if (g->res.end == TF_ENGINE_LENGTH)
		return g->anthropic ? "max_tokens" : "length";
	if (g->ncalls)
		return g->anthropic ? "tool_use" : "tool_calls";
	return g->anthropic ? "end_turn" : "stop";
}

bool tf_gen_failed(const struct tf_gen *g)
{
	return g->res.end == TF_ENGINE_FAILED;
}

const char *tf_gen_fail_message(const struct tf_gen *g)
{
	return g->res.halted ? "server restarting: retry shortly" : g->res.why;
}

static void stream_open(struct tf_gen *g)
{
	if (g->req.api == TF_API_RESPONSES)
		tf_resp_open(g);
	else if (g->anthropic)
		tf_anthropic_open(g);
	else
		tf_openai_open(g);
	g->t_last_write = tf_gen_now();
}

static void stream_close(struct tf_gen *g)
{
	if (g->req.api == TF_API_RESPONSES)
		tf_resp_close(g);
	else if (g->anthropic)
		tf_anthropic_close(g);
	else
		tf_openai_close(g);
}

/* The reasoning of a finished reply, for clients that drop it (memo.h). */
static void remember(struct tf_gen *g)
{
	struct tf_memo *m = g->env->memo;
	if (!m || !g->reasoning.len || g->req.api == TF_API_COMPLETIONS || tf_gen_failed(g))
		return;
	for (size_t i = 0; i < g->ncalls; i++)
		tf_memo_put_call(m, g->calls[i].id, g->reasoning.data, g->reasoning.len);
	if (g->content.len)
		tf_memo_put_content(m, g->content.data, g->content.len, g->reasoning.data,
				    g->reasoning.len);
}

void tf_gen_timing(struct tf_gen *g, bool on)
{
	g->timing = on;
}

bool tf_gen_streaming(const struct tf_gen *g)
{
	return g->stream;
}

tf_status tf_gen_pump(struct tf_gen *g, int wait_ms, struct tf_buf *out, bool *done)
{
	struct tf_buf sink = TF_BUF_INIT;
	g->out = out ? out : &sink;
	tf_status rc = TF_OK;
	if (!g->started) {
		g->started = true;
		if (g->stream)
			stream_open(g);
	}
	if (g->done) {
		*done = true;
		goto out;
	}
	int32_t t[256];
	double made[256];
	bool jdone = false;
	size_t n = tf_engine_job_read_timed(g->job, t, made, 256, wait_ms, &jdone);
	g->nread += (uint32_t)n;
	rc = tf_gen_text_tokens(g, t, made, n);
	if (rc) {
		tf_engine_job_cancel(g->job);
		goto out;
	}
	if (jdone) {
		rc = tf_gen_text_end(g);
		tf_engine_job_result(g->job, &g->res);
		if (g->stop_hit && (g->res.end == TF_ENGINE_CANCELLED ||
				    (g->res.end == TF_ENGINE_LENGTH && g->nused < g->max_tokens)))
			g->res.end = TF_ENGINE_EOS;
		/* A stop string ends the reply at the token that made it, however
		 * many the engine delivered past it before the cancel took (a
		 * drafted row delivers several at once): the count is the same
		 * drafted or not. */
		if (g->stop_hit && g->res.completion > g->nused)
			g->res.completion = g->nused;
		g->t_end = tf_gen_now();
		if (g->stream)
			stream_close(g);
		remember(g);
		if (g->req.api == TF_API_RESPONSES)
			tf_resp_keep(g);
		g->done = true;
		*done = true;
		goto out;
	}
	*done = false;
	if (g->stream && g->env->keepalive_s > 0 && tf_gen_now() - g->t_last_write >= g->env->keepalive_s) {
		if (g->anthropic)
			tf_buf_puts(g->out, "event: ping\ndata: {\"type\": \"ping\"}\n\n");
		else
			tf_buf_puts(g->out, ": keepalive\n\n");
		g->t_last_write = tf_gen_now();
	}
out:
	tf_buf_release(&sink);
	g->out = NULL;
	return rc;
}

void tf_gen_reply_json(struct tf_gen *g, struct tf_reply *r, json_t *v)
{
	char *s = tf_reply_dump(v);
	if (!s) {
		tf_reply_error(r, g->anthropic, 500, "server_error", NULL, NULL, "out of memory");
		return;
	}
	tf_buf_puts(&r->body, s);
	free(s);
}

void tf_gen_reply(struct tf_gen *g, struct tf_reply *r)
{
	tf_buf_reset(&r->body);
	r->type = "application/json";
	r->status = 200;
	if (tf_gen_failed(g)) {
		int status = g->res.halted ? 503 : 500;
		tf_reply_error(r, g->anthropic, status, "server_error",
			       g->res.halted ? "server_restarting" : NULL, NULL, "%s", tf_gen_fail_message(g));
		if (g->res.halted)
			r->retry_after = 30;
		return;
	}
	if (g->req.api == TF_API_RESPONSES)
		tf_resp_reply(g, r);
	else
		tf_gen_reply_json(g, r, g->anthropic ? tf_anthropic_reply(g) : tf_openai_reply(g));
}

void tf_gen_notify(struct tf_gen *g, void (*fn)(void *ctx), void *ctx, bool end_only)
{
	if (g->job)
		tf_engine_job_notify(g->job, fn, ctx, end_only);
}

bool tf_gen_done(const struct tf_gen *g)
{
	return g->done;
}

uint32_t tf_gen_read(const struct tf_gen *g)
{
	return g->nread;
}

void tf_gen_cancel(struct tf_gen *g)
{
	if (g->job)
		tf_engine_job_cancel(g->job);
}

void tf_gen_outcome(struct tf_gen *g, struct tf_gen_outcome *o)
{
	struct tf_engine_result r = g->res;
	if (!g->done && g->job)
		tf_engine_job_result(g->job, &r);
	*o = (struct tf_gen_outcome){
		.failed = r.end == TF_ENGINE_FAILED,
		.halted = r.halted,
		.cancelled = r.end == TF_ENGINE_CANCELLED,
		.prompt = r.prompt,
		.cached = r.cached,
		.completion = r.completion,
		.delivered = r.completion,
		.reasoning = g->reasoning_tokens,
		.ttft_s = r.ttft_s,
		.e2e_s = (g->t_end ? g->t_end : tf_gen_now()) - g->t_start,
		.queued_s = r.queued_s,
		.prefill_s = r.prefill_s,
		.decode_s = r.decode_s,
		.events = g->events,
		.itl_sum_s = g->itl_sum,
		.itl_max_s = g->itl_max,
		.itl_n = g->itl_n,
	};
}

void tf_gen_free(struct tf_gen *g)
{
	if (!g)
		return;
	tf_engine_job_free(g->job);
	if (g->reader)
		g->env->family->reader_free(g->reader);
	tf_req_release(&g->req);
	tf_buf_release(&g->raw);
	tf_buf_release(&g->fixed);
	tf_buf_release(&g->head);
	tf_buf_release(&g->held);
	tf_buf_release(&g->reasoning);
	tf_buf_release(&g->content);
	free(g->lpv);
	tf_lpout_release(&g->lpo);
	tf_resp_release(&g->resp);
	for (size_t i = 0; i < g->ncalls; i++) {
		free(g->calls[i].name);
		tf_buf_release(&g->calls[i].args);
	}
	free(g->calls);
	free(g);
}
