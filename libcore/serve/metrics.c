/* metrics.c: counters and histograms in the Prometheus text format. */
#include "serve/metrics.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"

static const double bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25,
				0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0};
#define NB (sizeof(bounds) / sizeof(bounds[0]))
_Static_assert(NB == TF_METRICS_NB, "TF_METRICS_NB is the number of bounds");

size_t tf_metrics_bucket(double v)
{
	size_t i = 0;
	while (i < NB && v > bounds[i])
		i++;
	return i;
}

struct hist {
	uint64_t n[NB + 1];
	uint64_t count;
	double sum;
};

struct tf_metrics {
	pthread_mutex_t mu;
	double t0;
	uint64_t requests, ok, failed, cancelled, halted, rejected;
	uint64_t http[6]; /* by status class 1xx..5xx (index 1..5) */
	uint64_t prompt, cached, completion, delivered, reasoning;
	uint64_t conn[TF_CONN_NEVENTS];
	uint64_t fin_stop, fin_length;
	struct hist ttft, e2e, tpot, itl, queue, prefill, decode;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

tf_status tf_metrics_new(struct tf_metrics **out)
{
	struct tf_metrics *m = tf_calloc(1, sizeof(*m));
	if (!m)
		return tf_err(TF_ERR_NOMEM, "metrics: out of memory");
	pthread_mutex_init(&m->mu, NULL);
	m->t0 = now_s();
	*out = m;
	return TF_OK;
}

void tf_metrics_free(struct tf_metrics *m)
{
	if (!m)
		return;
	pthread_mutex_destroy(&m->mu);
	free(m);
}

static void observe(struct hist *h, double v)
{
	h->n[tf_metrics_bucket(v)]++;
	h->count++;
	h->sum += v;
}

void tf_metrics_generation(struct tf_metrics *m, const struct tf_gen_outcome *o)
{
	pthread_mutex_lock(&m->mu);
	m->requests++;
	if (o->failed) {
		m->failed++;
		m->halted += o->halted;
	} else if (o->cancelled) {
		m->cancelled++;
	} else {
		m->ok++;
	}
	m->prompt += o->prompt;
	m->cached += o->cached;
	m->completion += o->completion;
	m->delivered += o->delivered < o->completion ? o->delivered : o->completion;
	m->reasoning += o->reasoning;
	if (o->completion && o->ttft_s > 0)
		observe(&m->ttft, o->ttft_s);
	observe(&m->e2e, o->e2e_s);
	observe(&m->queue, o->queued_s);
	observe(&m->prefill, o->prefill_s);
	observe(&m->decode, o->decode_s);
	if (o->completion > 1)
		observe(&m->tpot, o->decode_s / (o->completion - 1));
	if (o->itl_n && o->events > 1) {
		for (size_t i = 0; i <= NB; i++)
			m->itl.n[i] += o->itl_n[i];
		m->itl.count += o->events - 1;
		m->itl.sum += o->itl_sum_s;
	}
	pthread_mutex_unlock(&m->mu);
}

void tf_metrics_http(struct tf_metrics *m, int status)
{
	int c = status / 100;
	if (c < 1 || c > 5)
		return;
	pthread_mutex_lock(&m->mu);
	m->http[c]++;
	pthread_mutex_unlock(&m->mu);
}

void tf_metrics_rejected(struct tf_metrics *m)
{
	pthread_mutex_lock(&m->mu);
	m->rejected++;
	pthread_mutex_unlock(&m->mu);
}

void tf_metrics_conn(struct tf_metrics *m, enum tf_conn_event e)
{
	pthread_mutex_lock(&m->mu);
	m->conn[e]++;
	pthread_mutex_unlock(&m->mu);
}

/* A label value in the text format: backslash, double quote and newline
 * escaped; cut (never mid-escape) to fit n bytes. */
static void label(char *out, size_t n, const char *name, const char *v)
{
	size_t k = (size_t)snprintf(out, n, "%s=\"", name);
	for (; *v && k + 4 < n; v++) {
		if (*v == '\\' || *v == '"' || *v == '\n')
			out[k++] = '\\';
		out[k++] = *v == '\n' ? 'n' : *v;
	}
	out[k++] = '"';
	out[k] = 0;
}

static void metric(struct tf_buf *o, const char *name, const char *type, const char *help,
		   const char *labels, double v)
{
	tf_buf_printf(o, "# HELP %s %s\n# TYPE %s %s\n%s{%s} %.17g\n", name, help, name, type, name,
		      labels, v);
}

static void histogram(struct tf_buf *o, const char *name, const char *help, const char *labels,
		      const struct hist *h)
{
	tf_buf_printf(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
	uint64_t cum = 0;
	for (size_t i = 0; i < NB; i++) {
		cum += h->n[i];
		tf_buf_printf(o, "%s_bucket{%s,le=\"%g\"} %llu\n", name, labels, bounds[i],
			      (unsigned long long)cum);
	}
	tf_buf_printf(o, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, labels, (unsigned long long)h->count);
	tf_buf_printf(o, "%s_sum{%s} %.17g\n%s_count{%s} %llu\n", name, labels, h->sum, name, labels,
		      (unsigned long long)h->count);
}

void tf_metrics_write(struct tf_metrics *m, const char *model, const struct tf_engine_stats *es,
		      const struct tf_metrics_now *now, struct tf_buf *o)
{
	char tl[512], vl[512];
	label(tl, sizeof(tl), "model", model);
	label(vl, sizeof(vl), "model_name", model);
	pthread_mutex_lock(&m->mu);
	struct tf_metrics c = *m;
	pthread_mutex_unlock(&m->mu);
	metric(o, "tf_requests_total", "counter", "generations finished (errors included)", tl, (double)c.requests);
	metric(o, "tf_request_errors_total", "counter", "generations that failed", tl, (double)c.failed);
	metric(o, "tf_requests_cancelled_total", "counter", "generations whose client left", tl, (double)c.cancelled);
	metric(o, "tf_requests_halted_total", "counter", "generations failed by a halt", tl, (double)c.halted);
	metric(o, "tf_requests_rejected_total", "counter", "generations refused while draining", tl, (double)c.rejected);
	metric(o, "tf_prompt_tokens_total", "counter", "prompt tokens of finished generations", tl, (double)c.prompt);
	metric(o, "tf_cached_tokens_total", "counter", "prompt tokens resumed instead of prefilled", tl, (double)c.cached);
	metric(o, "tf_completion_tokens_total", "counter", "generated tokens (delivered or not)", tl, (double)c.completion);
	metric(o, "tf_delivered_tokens_total", "counter", "generated tokens whose bytes were handed to the client's socket", tl, (double)c.delivered);
	metric(o, "tf_reasoning_tokens_total", "counter", "generated tokens of reasoning", tl, (double)c.reasoning);
	tf_buf_printf(o, "# HELP tf_http_responses_total HTTP responses by status class\n"
			 "# TYPE tf_http_responses_total counter\n");
	for (int i = 1; i <= 5; i++)
		tf_buf_printf(o, "tf_http_responses_total{%s,code=\"%dxx\"} %llu\n", tl, i,
			      (unsigned long long)c.http[i]);
	metric(o, "tf_engine_rounds_total", "counter", "engine rounds run", tl, (double)es->rounds);
	metric(o, "tf_engine_forward_seconds_total", "counter", "seconds in backend forwards", tl, es->forward_s);
	metric(o, "tf_draft_rows_total", "counter", "decode rows that verified drafts", tl, (double)es->drafts);
	metric(o, "tf_draft_tokens_total", "counter", "draft tokens verified", tl, (double)es->drafted);
	metric(o, "tf_draft_accepted_tokens_total", "counter", "draft tokens accepted (delivered as drawn)", tl, (double)es->accepted);
	metric(o, "tf_requests_running", "gauge", "requests holding a lane", tl, es->running);
	metric(o, "tf_requests_filling", "gauge", "running requests still prefilling", tl, es->filling);
	metric(o, "tf_requests_waiting", "gauge", "requests queued for a lane", tl, es->waiting);
	metric(o, "tf_requests_inflight", "gauge", "generation requests the server holds", tl, (double)now->inflight);
	metric(o, "tf_draining", "gauge", "1 while the server drains", tl, now->draining);
	metric(o, "tf_connections_open", "gauge", "connections holding a slot", tl, now->connections);
	metric(o, "tf_connections_refused_total", "counter", "new connections answered 503: every slot taken", tl, (double)c.conn[TF_CONN_REFUSED]);
	tf_buf_printf(o, "# HELP tf_connections_shed_total connections closed to make room for new ones\n"
			 "# TYPE tf_connections_shed_total counter\n"
			 "tf_connections_shed_total{%s,why=\"idle\"} %llu\n"
			 "tf_connections_shed_total{%s,why=\"slow\"} %llu\n",
		      tl, (unsigned long long)c.conn[TF_CONN_SHED_IDLE], tl,
		      (unsigned long long)c.conn[TF_CONN_SHED_SLOW]);
	metric(o, "tf_request_timeouts_total", "counter", "requests not whole by the deadline (408)", tl, (double)c.conn[TF_CONN_TIMEOUT]);
	metric(o, "tf_engine_halted", "gauge", "1 once the engine was halted", tl, es->halted);
	metric(o, "tf_uptime_seconds", "gauge", "seconds since the server started", tl, now_s() - c.t0);
	const struct tf_engine_cache_stats *pc = &es->cache;
	metric(o, "tf_prefix_cache_enabled", "gauge", "1 when the engine keeps a prompt (prefix) cache", tl, pc->on);
	metric(o, "tf_prefix_cache_lookups_total", "counter", "prompts looked up in the prefix cache", tl, (double)pc->lookups);
	metric(o, "tf_prefix_cache_hits_total", "counter", "prompts that resumed a cached prefix", tl, (double)pc->hits);
	metric(o, "tf_prefix_cache_hit_tokens_total", "counter", "prompt tokens resumed from the prefix cache", tl, (double)pc->hit_tokens);
	metric(o, "tf_prefix_cache_saves_total", "counter", "prompt prefixes saved", tl, (double)pc->saves);
	metric(o, "tf_prefix_cache_evictions_total", "counter", "saved prefixes evicted (least recently used first)", tl, (double)pc->evictions);
	metric(o, "tf_prefix_cache_entries", "gauge", "prompt prefixes held now", tl, pc->entries);
	histogram(o, "tf_time_to_first_token_seconds", "submission to the first token", tl, &c.ttft);
	histogram(o, "tf_e2e_request_latency_seconds", "request start to its last token", tl, &c.e2e);
	histogram(o, "tf_time_per_output_token_seconds", "decode time per token after the first", tl, &c.tpot);
	histogram(o, "tf_inter_token_latency_seconds", "gaps between streamed token events", tl, &c.itl);
	/* The same under vLLM's names. */
	metric(o, "vllm:num_requests_running", "gauge", "requests running", vl, es->running);
	metric(o, "vllm:num_requests_waiting", "gauge", "requests waiting", vl, es->waiting);
	metric(o, "vllm:prompt_tokens_total", "counter", "prefill tokens processed", vl, (double)c.prompt);
	metric(o, "vllm:generation_tokens_total", "counter", "generation tokens processed", vl, (double)c.completion);
	metric(o, "vllm:spec_decode_num_drafts_total", "counter", "speculative draft rows", vl, (double)es->drafts);
	metric(o, "vllm:spec_decode_num_draft_tokens_total", "counter", "speculative draft tokens", vl, (double)es->drafted);
	metric(o, "vllm:spec_decode_num_accepted_tokens_total", "counter", "speculative tokens accepted", vl, (double)es->accepted);
	metric(o, "vllm:prefix_cache_hits_total", "counter", "prompt tokens found cached", vl, (double)c.cached);
	metric(o, "vllm:prefix_cache_queries_total", "counter", "prompt tokens looked up", vl, (double)c.prompt);
	tf_buf_printf(o, "# HELP vllm:request_success_total finished requests\n"
			 "# TYPE vllm:request_success_total counter\n"
			 "vllm:request_success_total{%s,finished_reason=\"ok\"} %llu\n"
			 "vllm:request_success_total{%s,finished_reason=\"abort\"} %llu\n",
		      vl, (unsigned long long)c.ok, vl, (unsigned long long)(c.cancelled + c.failed));
	histogram(o, "vllm:time_to_first_token_seconds", "time to first token", vl, &c.ttft);
	histogram(o, "vllm:e2e_request_latency_seconds", "end to end request latency", vl, &c.e2e);
	histogram(o, "vllm:time_per_output_token_seconds", "time per output token", vl, &c.tpot);
	histogram(o, "vllm:inter_token_latency_seconds", "inter-token latency", vl, &c.itl);
	histogram(o, "vllm:request_queue_time_seconds", "time waiting for a lane", vl, &c.queue);
	histogram(o, "vllm:request_prefill_time_seconds", "time prefilling", vl, &c.prefill);
	histogram(o, "vllm:request_decode_time_seconds", "time decoding", vl, &c.decode);
}
