/* metrics.h: the server's counters and latency histograms, written in the
 * Prometheus text format under tf_ names and again under the vLLM names
 * dashboards scrape (vllm: prefix, model_name label). Thread safe. */
#ifndef TF_SERVE_METRICS_H
#define TF_SERVE_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/status.h"
#include "engine/engine.h"
#include "serve/gen.h"

struct tf_metrics;

/* Latency histograms share one set of bucket bounds (seconds): NB bounds
 * and the +Inf bucket. tf_metrics_bucket gives a value's bucket index, so a
 * generation can count its own inter-token gaps and hand them over. */
#define TF_METRICS_NB 21
size_t tf_metrics_bucket(double seconds);

tf_status tf_metrics_new(struct tf_metrics **out);
void tf_metrics_free(struct tf_metrics *m);

/* A finished generation (success, failure or client gone). */
void tf_metrics_generation(struct tf_metrics *m, const struct tf_gen_outcome *o);
/* An HTTP request answered with status (every route). */
void tf_metrics_http(struct tf_metrics *m, int status);
/* A generation refused while draining. */
void tf_metrics_rejected(struct tf_metrics *m);

/* What the connection slots did (slots.h). */
enum tf_conn_event {
	TF_CONN_REFUSED,   /* a new connection answered 503: no slot */
	TF_CONN_SHED_IDLE, /* an idle keep-alive connection closed to make room */
	TF_CONN_SHED_SLOW, /* a slow sender answered 503 to make room */
	TF_CONN_TIMEOUT,   /* a request not whole by the deadline (408) */
	TF_CONN_NEVENTS
};
void tf_metrics_conn(struct tf_metrics *m, enum tf_conn_event e);

/* The gauges the exposition reads at the time of writing. */
struct tf_metrics_now {
	long inflight;       /* generations the server holds */
	bool draining;
	unsigned connections; /* connections holding a slot */
};

/* Append the exposition: counters, the engine's gauges from es and the
 * server's from now. The model name is escaped as a label value. */
void tf_metrics_write(struct tf_metrics *m, const char *model, const struct tf_engine_stats *es,
		      const struct tf_metrics_now *now, struct tf_buf *out);

#endif
