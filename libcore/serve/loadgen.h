/* loadgen.h: a load generator for a running server, like `vllm bench
 * serve`: N streaming requests at a concurrency limit and/or a request rate
 * (Poisson arrivals), over plain HTTP/1.1 on one epoll thread, timing every
 * streamed event. It reports, by vLLM's definitions: TTFT (send to the
 * first token-bearing event), TPOT ((E2EL - TTFT) / (output tokens - 1)),
 * ITL (gaps between token-bearing events), E2EL (send to the last byte),
 * with mean, p50, p90, p99; throughput; failures; and, for deterministic
 * replies, how many differ from the first (lost or duplicated tokens).
 *
 * The client side of the serve layer: no engine, no server state. */
#ifndef TF_SERVE_LOADGEN_H
#define TF_SERVE_LOADGEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/status.h"

struct tf_loadgen_config {
	const char *host;        /* numeric IPv4 */
	uint16_t port;
	const char *path;        /* /v1/chat/completions or /v1/completions */
	const char *model;
	const char *api_key;     /* or NULL */
	const char *prompt;      /* the prompt text of every request (or NULL) */
	const char **prompts;    /* or one per request, cycled */
	size_t nprompts;
	uint32_t requests;
	uint32_t concurrency;    /* 0: no limit */
	double rate;             /* requests per second, Poisson; 0: all at once */
	uint32_t max_tokens;
	bool ignore_eos;         /* ask for exactly max_tokens */
	double temperature;      /* < 0: leave to the server */
	double hold_s;           /* > 0: close each stream after this long (idle-stream tests) */
	double timeout_s;        /* a request past this fails (0: none) */
	bool verify;             /* compare every reply's text with the first */
	uint64_t seed;           /* arrivals */
};

struct tf_loadgen_stat {
	double mean, p50, p90, p99, max;
	size_t n;
};

struct tf_loadgen_result {
	uint32_t completed, failed, held, mismatched;
	uint64_t input_tokens, output_tokens;
	uint64_t drafts, drafted, accepted; /* the replies' tf blocks: rows that drafted,
					     * draft tokens verified, accepted */
	double duration_s;
	double request_rate, output_rate, total_rate; /* per second */
	struct tf_loadgen_stat ttft, tpot, itl, e2el;  /* seconds */
	struct tf_loadgen_stat added;  /* engine made the token -> client read the event (stamped) */
	uint32_t peak_concurrency;
	char first_error[256];
};

/* Run the load; the result is filled even when some requests fail.
 * TF_ERR_OS when no connection could be made at all. */
tf_status tf_loadgen_run(const struct tf_loadgen_config *c, struct tf_loadgen_result *r);

/* Read one stream event's JSON the quick way: append the token text of
 * its first choice (delta content or reasoning_content, or text) to text
 * and say whether it carried any. Returns false, taking nothing, for
 * whatever needs the full parser: usage, errors, tool calls, both content
 * and reasoning, or text a strict JSON parser would refuse. */
bool tf_loadgen_scan(const char *d, size_t n, struct tf_buf *text, bool *token);

/* Write the result as a table (or JSON with stable keys) to out. */
void tf_loadgen_report(const struct tf_loadgen_config *c, const struct tf_loadgen_result *r,
		       bool json, struct tf_buf *out);

#endif
