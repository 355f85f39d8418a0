/* server_impl.h: what the parts of the HTTP server (server.h) share: the
 * server, a request's connection record, and each part's functions. Not
 * an interface: only these include it.
 *
 *   server.c       the libmicrohttpd daemon and its callbacks: a socket's
 *                  slot, a request's head (limits, route, key), its body,
 *                  the dispatch to the routes, its end; bodies prepared
 *                  off the HTTP threads
 *   auth.c         API keys
 *   respond.c      replies handed to libmicrohttpd
 *   route_plain.c  /health, /v1/models, /metrics
 *   route_text.c   count_tokens, /tokenize, /detokenize
 *   route_gen.c    the generation routes: parsed, started, parked while
 *                  the engine works, whole or streamed
 *   writer.c       the stream writers (epoll threads that send frames)
 *   ticker.c       keepalives, clients that left, abandoned generations
 *   drain.c        drain and stop
 *
 * The route table (route.h) and tf-serve --once (once.h) are modules of
 * their own, outside HTTP.
 *
 * Threads and locks: libmicrohttpd's epoll threads run the callbacks and
 * the routes; the prep thread (prep.h) parses large bodies; the writers
 * and the ticker are threads of this server; the engine thread calls
 * on_note. s->list_mu guards s->gens and s->graves; a writer's mu its
 * queue; a connection's mu its state, which says who holds the connection
 * and so owns its unannotated fields (enum conn_state). */
#ifndef TF_SERVE_SERVER_IMPL_H
#define TF_SERVE_SERVER_IMPL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#include "base/digest.h"
#include "serve/metrics.h"
#include "serve/prep.h"
#include "serve/route.h"
#include "serve/server.h"
#include "serve/slots.h"
#include "serve/text.h"

struct conn;

/* A stream writer (see struct conn): a thread with a queue of parked
 * streams that have news, in the order the engine delivered to them, and
 * an epoll for its kick and the sockets waiting for room. */
struct writer {
	struct tf_server *s;
	pthread_t thread;
	bool started;
	pthread_mutex_t mu;
	struct conn *head, *tail; /* the queue, under mu */
	bool idle, down;          /* under mu */
	int kick;                 /* eventfd: the queue has work */
	int ep;
	struct conn **blocked;    /* the writer's own */
	size_t nblocked, capblocked;
};

/* A generation whose client left before the engine ended it: pumped to
 * its end by the ticker, then recorded with the tokens the client got. */
struct grave {
	struct tf_gen *gen;
	uint32_t delivered;
};

struct tf_server {
	struct tf_server_config c;
	struct MHD_Daemon *d;
	struct tf_metrics *metrics;
	struct tf_slots *slots;
	struct tf_prep *prep;
	uint8_t (*keys)[TF_SHA256_LEN];
	size_t nkeys;
	atomic_long inflight;
	atomic_bool draining;
	long long started;
	uint16_t port;
	/* Generations in flight (for the ticker), and those whose client left
	 * before the engine ended them (pumped to their end by the ticker). */
	pthread_mutex_t list_mu;
	struct conn *gens;
	struct grave *graves;
	size_t ngraves, capgraves;
	pthread_t ticker;
	atomic_bool stopping;
	bool ticking;
	struct writer *writers;
	unsigned nwriters;
	atomic_uint next_writer;
};

enum { PREP_NONE, PREP_RUNNING, PREP_DONE };

/* Who holds a generation's connection (under conn.mu). */
enum conn_state {
	C_MHD,     /* MHD: running its callbacks, or about to */
	C_PARKED,  /* suspended in MHD with nothing to send; nobody pumps */
	C_QUEUED,  /* suspended, in the writer's queue */
	C_WRITING, /* suspended, the writer pumps and sends (or waits for room) */
};

/* One request, from its headers to the end of its reply.
 *
 * A generation never blocks MHD's threads: when there is nothing to send it
 * suspends (parks) its connection. A whole reply is resumed by the engine's
 * notification at its end. A stream, once its headers and first frame went
 * out through MHD, is written by a stream writer: the engine's
 * notification queues the parked connection, and the writer thread pumps
 * the generation and sends its frames as HTTP chunks straight to the
 * socket, while MHD keeps the connection suspended and so never touches
 * the socket. This costs one send per event instead of MHD's resume (a
 * wakeup through its inter-thread pipe per connection and event), and each
 * writer delivers its streams in the engine's order. A socket that cannot
 * take a frame whole waits in the writer's epoll; the writer hands the
 * connection back to MHD (resume) for the end of the stream (MHD writes
 * the last chunk), a client that left, a failure or a stop. The notes
 * counter closes the race between "nothing to send" and "park": a
 * notification after the last look is seen under mu before parking.
 *
 * A whole reply is resumed into MHD only from a suspension that MHD files
 * as waiting for its reply, so that it does not read the socket (and drop
 * a client that half-closed) before the reply is queued: see
 * tf_route_gen_step in route_gen.c. A request whose body was prepared off MHD's threads is
 * suspended in the handler's first call, from where a resume does read
 * first; so it is never taken back before its reply is out (prep_keep in
 * route_gen.c): the writer sends its whole reply (whole_wire in writer.c),
 * refusal, stream (self_head: the head and the last chunk too) or text
 * answer (self_text), and MHD only closes the connection. */
struct conn {
	struct tf_server *s;
	struct MHD_Connection *mc;
	struct tf_slot *slot;  /* the socket's (slots.h) */
	const struct tf_route *route;
	struct tf_buf body;
	bool too_big, counted;
	bool refused;         /* refusal holds the reply, sent once the body is in */
	struct tf_reply refusal;
	const char *allow;    /* a 405's Allow */
	size_t discarded;     /* body bytes dropped after a refusal */
	bool http11;          /* HTTP/1.1: a 1xx may go before the reply */
	bool probed;          /* the client half-closed; probed once (ticker.c) */
	atomic_bool probe;    /* a stream: send an SSE comment to probe the client */
	atomic_bool half;     /* an HTTP/1.1 client half-closed (tf_respond_half_closed) */
	bool close_wanted;    /* an HTTP/1.1 client sent Connection: close (route_text.c) */
	bool settled;         /* tf_route_gen_step returned once unsuspended: it may suspend now */
	bool self_sent;       /* a writer sent the whole reply (whole_wire in writer.c) */
	bool self_head;       /* a writer sends the whole stream, its head too (prep_keep) */
	bool self_tail;       /* ... and has put its last chunk on the wire */
	bool by_writer;       /* a writer answers this request; MHD only closes (prep_keep) */
	bool self_text;       /* ... a text route's answer, from text */
	size_t tpos;          /* the text answer's bytes put on the wire */
	uint32_t made_tok;    /* completion tokens in the bytes produced so far */
	uint32_t delivered;   /* completion tokens in the bytes handed to the socket */
	bool answered;        /* a reply was queued */
	int fd;
	atomic_int prep;      /* the body's preparation (prep.h): PREP_* */
	struct tf_gen *pgen;  /* prepared, not yet opened */
	struct tf_reply err;  /* prepared: a refusal */
	struct tf_text_answer text; /* a text route's answer */
	struct tf_gen *gen;   /* a generation in flight */
	bool whole;           /* not streamed */
	struct tf_buf pend;   /* stream bytes not yet handed to MHD */
	size_t sent;
	bool eof;
	bool failed;          /* pumping failed: end the stream with an error */
	struct tf_buf wire;   /* the writer: chunked bytes not yet sent (from wsent) */
	size_t wsent;
	bool nodelay;         /* the writer set TCP_NODELAY */
	double blocked_at;    /* the writer: when the socket last refused bytes */
	struct writer *w;     /* the stream's writer */
	struct conn *wnext;   /* in the writer's queue */
	pthread_mutex_t mu;   /* guards state */
	enum conn_state state;
	atomic_uint notes;    /* engine notifications so far */
	atomic_bool gone;     /* the client left (seen by the ticker or a writer) */
	_Atomic double last_write; /* monotonic seconds of the last bytes out */
	struct conn *prev, *next; /* in s->gens while gen is set */
};

/* Monotonic seconds. */
static inline double conn_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* server.c. Count a finished generation (whole: its reply went out whole;
 * otherwise delivered tokens reached the client). Any thread. */
void tf_server_record(struct tf_server *s, struct tf_gen *g, bool whole, uint32_t delivered);
/* Prepare a body of TF_PREP_MIN_BODY or more on the prep thread: suspend
 * the connection and queue fn(c); false when it is smaller (or the job
 * could not be queued): prepare it inline. HTTP thread. */
bool tf_server_prep_start(struct MHD_Connection *mc, struct conn *c, void (*fn)(void *));
/* A prepared body's job is done: resume the connection (MHD calls the
 * handler again). The prep thread. */
void tf_server_prep_done(struct conn *c);

/* auth.c. Keep n keys as digests (s->keys); TF_ERR_NOMEM. */
tf_status tf_auth_init(struct tf_server *s, const char *const *keys, size_t n);
/* A key in x-api-key or as Authorization: Bearer (true when none are set). */
bool tf_auth_ok(struct tf_server *s, struct MHD_Connection *mc);

/* respond.c (HTTP threads). Queue r (allow: a 405's Allow; close:
 * Connection: close); the request counts as answered. */
enum MHD_Result tf_respond(struct MHD_Connection *mc, struct conn *c, const struct tf_reply *r,
			   const char *allow, bool close);
/* v (taken over) as JSON with status (retry_after: 0 or seconds). */
enum MHD_Result tf_respond_json(struct MHD_Connection *mc, struct conn *c, int status, json_t *v,
				int retry_after);
/* An error in the route's shape (413 and up, but 500: Connection: close). */
enum MHD_Result tf_respond_error(struct MHD_Connection *mc, struct conn *c, bool anthropic,
				 int status, const char *kind, const char *code, const char *msg);
/* Connection: close on resp when close, or when the client half-closed. */
void tf_respond_close(struct MHD_Response *resp, struct conn *c, bool close);
/* Whether the client half-closed its socket (HTTP/1.1 only). Any thread. */
bool tf_respond_half_closed(struct conn *c);

/* route_plain.c, route_text.c, route_gen.c: the routes (HTTP threads). */
enum MHD_Result tf_route_health(struct MHD_Connection *mc, struct conn *c, bool authed);
enum MHD_Result tf_route_models(struct MHD_Connection *mc, struct conn *c);
enum MHD_Result tf_route_metrics(struct MHD_Connection *mc, struct conn *c);
enum MHD_Result tf_route_text_serve(struct MHD_Connection *mc, struct conn *c);
/* The whole request is in: start (or go on with) its generation. */
enum MHD_Result tf_route_gen_serve(struct MHD_Connection *mc, struct conn *c);
/* A whole reply, called again each time the connection is resumed. */
enum MHD_Result tf_route_gen_step(struct MHD_Connection *mc, struct conn *c);
/* Take the generation off the connection at its end (whole: its reply went
 * out whole): recorded, or left to the ticker while the engine holds it. */
void tf_route_gen_drop(struct conn *c, bool whole);

/* writer.c. Resume a parked connection (any thread): MHD takes it over;
 * a stream whose writer sends it whole (self_head) goes to its writer. */
void tf_writer_wake(struct conn *c);
/* Queue a parked stream (or a whole reply a writer sends, prep_keep) for
 * its writer; c->mu held. Once the writer is down MHD takes it back. */
void tf_writer_queue_locked(struct conn *c);
/* The writer of a new request, in turn. Any thread. */
struct writer *tf_writer_pick(struct tf_server *s);
/* The head of a whole reply a writer sends itself, with Connection: close
 * (retry_after: 0 or seconds); non-zero when out of memory. */
tf_status tf_writer_head(struct tf_buf *wire, int status, const char *type, size_t len,
			 int retry_after);
/* Start n writers; stop them (s->stopping set: each hands its connections
 * back to MHD); free them. */
tf_status tf_writer_start(struct tf_server *s, unsigned n);
void tf_writer_stop(struct tf_server *s);
void tf_writer_free(struct tf_server *s);

/* ticker.c. The ticker thread's body (arg: the server). */
void *tf_ticker_main(void *arg);

#endif
