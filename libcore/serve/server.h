/* server.h: the HTTP server (libmicrohttpd on epoll threads, plus stream
 * writers that send stream frames straight to the sockets): the route
 * table, authentication, limits, health, models, metrics, tokenize, and
 * the generation routes over gen.h, with keepalive and disconnect
 * detection on streams, and drain.
 *
 * Lifecycle: tf_server_new binds and serves; on a stop signal the program
 * calls tf_server_drain (new generations get 503, running ones finish or
 * are halted), then tf_server_stop (closes the listener and waits for the
 * connections), closes the engine, and tf_server_free. The parts are
 * listed in server_impl.h; tf-serve --once is once.h. */
#ifndef TF_SERVE_SERVER_H
#define TF_SERVE_SERVER_H

#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "serve/gen.h"
#include "serve/slots.h"

/* Limits of a request's head, past which it gets 414 or 431 (JSON in the
 * route's error shape) and the connection closes. libmicrohttpd holds a
 * request line and header section in its 64 KiB of connection memory
 * (TF_SLOTS_HEAD_MEMORY): past that it refuses the head itself, before
 * tf-serve sees the request, and tf_slots_refuse_head answers it in the
 * same JSON (the OpenAI shape: the path may not be known). */
#define TF_SERVER_URL_MAX TF_SLOTS_URL_MAX
#define TF_SERVER_HEADER_BYTES TF_SLOTS_HEADER_BYTES

struct tf_server_config {
	const char *host;          /* listen address (numeric IPv4 or IPv6) */
	uint16_t port;             /* 0: any free port (tf_server_port says which) */
	size_t body_max;           /* request body limit in bytes (413 past it) */
	unsigned headers_max;      /* header lines per request (431 past it) */
	unsigned timeout_s;        /* idle or slow connection limit */
	unsigned connections_max;  /* open connections at once */
	unsigned threads;          /* HTTP threads and stream writers, each (0: one per CPU, at most 4) */
	const char *const *keys;   /* API keys (copied as SHA-256 digests) */
	size_t nkeys;
	const char *const *aliases; /* other model names /v1/models lists */
	size_t naliases;
	struct tf_gen_env env;     /* engine, family, model name, limits */
	/* Tensor-parallel ranks behind the engine (compute/ranks.h): world
	 * (0 or 1: one rank, nothing reported) and each rank's state
	 * ("serving", "up", "failed"), which /health and /metrics report.
	 * rank_state is called from HTTP threads. */
	int world;
	const char *(*rank_state)(void *ctx, int rank);
	void *rank_ctx;
};

struct tf_server;

/* Bind and start serving. TF_ERR_OS with the reason when the address
 * cannot be bound. */
tf_status tf_server_new(const struct tf_server_config *c, struct tf_server **out);

uint16_t tf_server_port(const struct tf_server *s);

/* Drain: from now on new generations get 503 (Retry-After 30,
 * server_restarting / overloaded_error) and /health says draining; wait up
 * to drain_s for the counted generations to finish, polling every 20 ms,
 * cut short once *signals reaches 2. Generations left then are halted at a
 * round boundary ("server restarting: retry shortly"), waiting up to 2 s
 * for them to end. Returns how many were still running at the deadline. */
long tf_server_drain(struct tf_server *s, double drain_s, atomic_int *signals);

/* Generations the server holds now (counted from their arrival to the end
 * of their reply). */
long tf_server_inflight(const struct tf_server *s);

/* Stop listening and wait for the connection and writer threads. */
void tf_server_stop(struct tf_server *s);

void tf_server_free(struct tf_server *s);

#endif
