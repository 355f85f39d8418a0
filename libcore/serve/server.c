/* server.c: HTTP over libmicrohttpd: the route table, auth, limits, the
 * plain routes (health, models, metrics, tokenize), generation routes with
 * SSE, the stream writers, keepalive and disconnect detection, drain, and
 * --once. */
#include "serve/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/digest.h"
#include "base/log.h"
#include "base/thread.h"
#include "serve/metrics.h"
#include "serve/prep.h"
#include "serve/slots.h"
#include "serve/text.h"

enum route_kind {
	R_HEALTH, R_MODELS, R_METRICS, R_CHAT, R_COMPLETIONS, R_MESSAGES, R_COUNT, R_TOKENIZE,
	R_DETOKENIZE,
};

struct route {
	const char *method;
	const char *path;
	enum route_kind kind;
	bool anthropic;  /* errors in Anthropic's shape */
	bool open;       /* no API key needed */
};

/* The route table: every path the server answers. */
static const struct route routes[] = {
	{"GET", "/health", R_HEALTH, false, true},
	{"GET", "/v1/health", R_HEALTH, false, true},
	{"GET", "/v1/models", R_MODELS, false, false},
	{"GET", "/models", R_MODELS, false, false},
	{"GET", "/metrics", R_METRICS, false, false},
	{"GET", "/v1/metrics", R_METRICS, false, false},
	{"POST", "/v1/chat/completions", R_CHAT, false, false},
	{"POST", "/chat/completions", R_CHAT, false, false},
	{"POST", "/v1/completions", R_COMPLETIONS, false, false},
	{"POST", "/completions", R_COMPLETIONS, false, false},
	{"POST", "/v1/messages", R_MESSAGES, true, false},
	{"POST", "/messages", R_MESSAGES, true, false},
	{"POST", "/v1/messages/count_tokens", R_COUNT, true, false},
	{"POST", "/messages/count_tokens", R_COUNT, true, false},
	{"POST", "/tokenize", R_TOKENIZE, false, false},
	{"POST", "/v1/tokenize", R_TOKENIZE, false, false},
	{"POST", "/detokenize", R_DETOKENIZE, false, false},
	{"POST", "/v1/detokenize", R_DETOKENIZE, false, false},
};
#define NROUTES (sizeof(routes) / sizeof(routes[0]))

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
 * notification after the last look is seen under mu before parking. */
struct conn {
	struct tf_server *s;
	struct MHD_Connection *mc;
	struct tf_slot *slot;  /* the socket's (slots.h) */
	const struct route *route;
	struct tf_buf body;
	bool too_big, counted;
	bool refused;         /* refusal holds the reply, sent once the body is in */
	struct tf_reply refusal;
	const char *allow;    /* a 405's Allow */
	size_t discarded;     /* body bytes dropped after a refusal */
	bool http11;          /* HTTP/1.1: a 1xx may go before the reply */
	bool probed;          /* the client half-closed; probed once (see ticker_main) */
	atomic_bool probe;    /* a stream: send an SSE comment to probe the client */
	atomic_bool half;     /* an HTTP/1.1 client half-closed: a whole reply goes by a writer */
	bool self_sent;       /* a writer sent the whole reply (see whole_wire) */
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

static enum tf_api api_of(enum route_kind k)
{
	return k == R_CHAT ? TF_API_CHAT : k == R_COMPLETIONS ? TF_API_COMPLETIONS
		: k == R_MESSAGES ? TF_API_MESSAGES : TF_API_COUNT_TOKENS;
}

static bool generation(enum route_kind k)
{
	return k == R_CHAT || k == R_COMPLETIONS || k == R_MESSAGES;
}

/* Replies. */
static enum MHD_Result send_reply(struct MHD_Connection *mc, struct conn *c,
				  const struct tf_reply *r, const char *allow, bool close)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(
		r->body.len, r->body.data ? r->body.data : (char *)"", MHD_RESPMEM_MUST_COPY);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, "Content-Type", r->type ? r->type : "application/json");
	if (r->retry_after) {
		char ra[16];
		snprintf(ra, sizeof(ra), "%d", r->retry_after);
		MHD_add_response_header(resp, "Retry-After", ra);
	}
	if (allow)
		MHD_add_response_header(resp, "Allow", allow);
	if (r->status == 401)
		MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
	if (close)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
	enum MHD_Result ret = MHD_queue_response(mc, (unsigned)r->status, resp);
	MHD_destroy_response(resp);
	if (c) {
		tf_slot_busy(c->s->slots, c->slot);
		c->answered = true;
		tf_metrics_http(c->s->metrics, r->status);
	}
	return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *mc, struct conn *c, int status,
				 json_t *v, int retry_after)
{
	struct tf_reply r = {.status = status, .type = "application/json", .retry_after = retry_after};
	char *s = json_dumps(v, JSON_COMPACT);
	json_decref(v);
	if (s)
		tf_buf_puts(&r.body, s);
	free(s);
	enum MHD_Result ret = send_reply(mc, c, &r, NULL, false);
	tf_reply_release(&r);
	return ret;
}

static enum MHD_Result send_error(struct MHD_Connection *mc, struct conn *c, bool anthropic,
				  int status, const char *kind, const char *code, const char *msg)
{
	struct tf_reply r = {0};
	tf_reply_error(&r, anthropic, status, kind, code, NULL, "%s", msg);
	enum MHD_Result ret = send_reply(mc, c, &r, NULL, status >= 413 && status != 500);
	tf_reply_release(&r);
	return ret;
}

static double mono(void);

/* Count a finished generation: ok only when its reply went out whole (its
 * last byte handed to the socket); otherwise cancelled, unless it failed,
 * with only the tokens the client got counted as delivered. */
static void record(struct tf_server *s, struct tf_gen *g, bool whole, uint32_t delivered)
{
	struct tf_gen_outcome o;
	tf_gen_outcome(g, &o);
	if (!whole) {
		o.cancelled = !o.failed;
		o.delivered = delivered;
	}
	tf_metrics_generation(s->metrics, &o);
}

/* Resume a parked connection (any thread): MHD takes it over. */
static void wake(struct conn *c)
{
	pthread_mutex_lock(&c->mu);
	if (c->state == C_PARKED) {
		c->state = C_MHD;
		MHD_resume_connection(c->mc);
	}
	pthread_mutex_unlock(&c->mu);
}

/* Queue a parked stream for the writer; c->mu held. Once the writer is
 * down (a stop) MHD takes the connection back instead. */
static void queue_locked(struct conn *c)
{
	struct writer *w = c->w;
	pthread_mutex_lock(&w->mu);
	bool down = w->down, kick = false;
	if (!down) {
		c->wnext = NULL;
		if (w->tail)
			w->tail->wnext = c;
		else
			w->head = c;
		w->tail = c;
		kick = w->idle;
		w->idle = false;
	}
	pthread_mutex_unlock(&w->mu);
	if (down) {
		c->state = C_MHD;
		MHD_resume_connection(c->mc);
		return;
	}
	c->state = C_QUEUED;
	if (kick) {
		uint64_t one = 1;
		if (write(w->kick, &one, sizeof(one)) < 0 && errno != EAGAIN)
			tf_log(TF_LOG_WARN, "cannot wake a stream writer: %s", strerror(errno));
	}
}

/* Whether the client of a whole reply half-closed its socket (HTTP/1.1
 * only: one that did is sent its reply by a writer, see whole_wire). */
static bool half_closed(struct conn *c)
{
	if (!atomic_load(&c->half) && c->http11) {
		struct pollfd p = {.fd = c->fd, .events = POLLRDHUP};
		if (poll(&p, 1, 0) > 0 && (p.revents & POLLRDHUP))
			atomic_store(&c->half, true);
	}
	return atomic_load(&c->half);
}

/* The engine's notification: tokens arrived or the job ended. A parked
 * stream goes to the writer; a parked whole reply goes back to MHD. */
static void on_note(void *ctx)
{
	struct conn *c = ctx;
	atomic_fetch_add(&c->notes, 1);
	pthread_mutex_lock(&c->mu);
	if (c->state == C_PARKED) {
		if (atomic_load(&c->s->stopping) || (c->whole && !half_closed(c))) {
			c->state = C_MHD;
			MHD_resume_connection(c->mc);
		} else {
			queue_locked(c);
		}
	}
	pthread_mutex_unlock(&c->mu);
}

/* Suspend (park) unless a notification came since seen. Called from MHD's
 * callbacks only. Returns true when parked. */
static bool try_suspend(struct conn *c, unsigned seen)
{
	bool ok = false;
	pthread_mutex_lock(&c->mu);
	if (atomic_load(&c->notes) == seen && !atomic_load(&c->gone) &&
	    !atomic_load(&c->s->stopping)) {
		c->state = C_PARKED;
		MHD_suspend_connection(c->mc);
		ok = true;
	}
	pthread_mutex_unlock(&c->mu);
	return ok;
}

static void gens_add(struct conn *c)
{
	struct tf_server *s = c->s;
	pthread_mutex_lock(&s->list_mu);
	c->next = s->gens;
	if (s->gens)
		s->gens->prev = c;
	s->gens = c;
	pthread_mutex_unlock(&s->list_mu);
}

/* Take the generation off the connection: stop its notifications, and
 * record it (whole: its reply went out whole), or leave it to the ticker
 * while the engine still holds it. */
static void gens_drop(struct conn *c, bool whole)
{
	struct tf_server *s = c->s;
	if (!c->gen)
		return;
	tf_gen_notify(c->gen, NULL, NULL, false);
	pthread_mutex_lock(&s->list_mu);
	if (c->prev)
		c->prev->next = c->next;
	else
		s->gens = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->prev = c->next = NULL;
	bool grave = !tf_gen_done(c->gen);
	if (grave) {
		tf_gen_cancel(c->gen);
		if (s->ngraves == s->capgraves &&
		    !tf_realloc_array(&s->graves, s->capgraves ? s->capgraves * 2 : 16, sizeof(*s->graves)))
			s->capgraves = s->capgraves ? s->capgraves * 2 : 16;
		if (s->ngraves < s->capgraves)
			s->graves[s->ngraves++] = (struct grave){c->gen, c->delivered};
		else
			grave = false; /* out of memory: free it unrecorded */
	}
	pthread_mutex_unlock(&s->list_mu);
	if (!grave) {
		record(s, c->gen, whole && tf_gen_done(c->gen), c->delivered);
		tf_gen_free(c->gen);
	}
	c->gen = NULL;
}

/* The stream reader MHD calls: hand over what the generation has ready,
 * or suspend until the engine (or the ticker) has more. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct conn *c = cls;
	for (;;) {
		if (c->pend.len == c->sent) /* MHD took all: it asks again once it sent them */
			c->delivered = c->made_tok;
		if (c->pend.len > c->sent) {
			size_t n = c->pend.len - c->sent;
			if (n > max)
				n = max;
			memcpy(buf, c->pend.data + c->sent, n);
			c->sent += n;
			atomic_store(&c->last_write, mono());
			return (ssize_t)n;
		}
		if (c->eof)
			return MHD_CONTENT_READER_END_OF_STREAM;
		if (c->failed)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		if (atomic_load(&c->gone)) {
			tf_log(TF_LOG_INFO, "client left a stream; cancelling");
			tf_gen_cancel(c->gen);
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
		unsigned seen = atomic_load(&c->notes);
		tf_buf_reset(&c->pend);
		c->sent = 0;
		if (atomic_exchange(&c->probe, false))
			tf_buf_puts(&c->pend, ":\n\n");
		bool done = false;
		if (tf_gen_pump(c->gen, 0, &c->pend, &done)) {
			tf_gen_cancel(c->gen);
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
		c->made_tok = tf_gen_read(c->gen);
		if (done)
			c->eof = true;
		if (c->pend.len || c->eof)
			continue;
		if (try_suspend(c, seen))
			return 0;
		if (atomic_load(&c->s->stopping)) {
			tf_gen_cancel(c->gen);
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
	}
}

static void stream_free(void *cls)
{
	(void)cls; /* the connection record owns the stream; see completed() */
}

/* The stream writers. Everything below runs on a writer thread, on
 * connections in C_WRITING: MHD holds them suspended, so the socket and
 * the generation are the writer's alone. */

/* Give the connection back to MHD: it ends the stream (the last chunk
 * after eof, an error otherwise). The last touch of c: once resumed, MHD
 * may close and free it. */
static void writer_release(struct conn *c)
{
	pthread_mutex_lock(&c->mu);
	c->state = C_MHD;
	pthread_mutex_unlock(&c->mu);
	MHD_resume_connection(c->mc);
}

static void blocked_drop(struct writer *w, struct conn *c)
{
	for (size_t i = 0; i < w->nblocked; i++)
		if (w->blocked[i] == c) {
			w->blocked[i] = w->blocked[--w->nblocked];
			break;
		}
	epoll_ctl(w->ep, EPOLL_CTL_DEL, c->fd, NULL);
}

/* The socket took part of the wire: wait in the epoll for room. */
static void writer_block(struct writer *w, struct conn *c)
{
	/* Not EPOLLRDHUP: a client that half-closed still reads its stream
	 * (one that closed answers the next bytes with a reset: EPOLLERR). */
	struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = c};
	if (w->nblocked == w->capblocked &&
	    !tf_realloc_array(&w->blocked, w->capblocked ? w->capblocked * 2 : 16, sizeof(*w->blocked)))
		w->capblocked = w->capblocked ? w->capblocked * 2 : 16;
	if (w->nblocked == w->capblocked || epoll_ctl(w->ep, EPOLL_CTL_ADD, c->fd, &ev)) {
		tf_log(TF_LOG_WARN, "stream writer: cannot wait for a socket: %s", strerror(errno));
		atomic_store(&c->gone, true);
		writer_release(c);
		return;
	}
	w->blocked[w->nblocked++] = c;
	c->blocked_at = mono();
}

/* Pump a generation for a writer: all that is there (with end_only
 * notifications the one note may have come already). Returns true once it
 * is done. */
static bool pump_all(struct conn *c)
{
	bool done = false;
	uint32_t got;
	do {
		got = tf_gen_read(c->gen);
		if (tf_gen_pump(c->gen, 0, NULL, &done)) {
			tf_gen_cancel(c->gen);
			c->failed = true;
			return true;
		}
	} while (!done && tf_gen_read(c->gen) != got);
	return done;
}

/* The whole reply of a client that half-closed, written by its writer:
 * false while the generation is not done. libmicrohttpd, taking back a
 * suspended connection whose reply is not queued yet, reads the client's
 * end of stream and drops the connection unanswered; so tf writes this
 * reply itself (Connection: close) and MHD only closes the connection. */
static bool whole_wire(struct conn *c)
{
	if (!pump_all(c))
		return false;
	if (c->failed)
		return true;
	struct tf_reply r = {0};
	tf_gen_reply(c->gen, &r);
	char ra[32] = "";
	if (r.retry_after)
		snprintf(ra, sizeof(ra), "Retry-After: %d\r\n", r.retry_after);
	if (tf_buf_printf(&c->wire, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
			  "%sConnection: close\r\n\r\n", r.status, MHD_get_reason_phrase_for((unsigned)r.status),
			  r.type ? r.type : "application/json", r.body.len, ra) ||
	    tf_buf_append(&c->wire, r.body.data ? r.body.data : "", r.body.len))
		c->failed = true;
	else
		tf_metrics_http(c->s->metrics, r.status);
	tf_reply_release(&r);
	c->eof = true;
	return true;
}

/* Send the wire, pump the generation into chunks, and repeat until there
 * is nothing more (park), the socket is full (block), or the stream is
 * over (release to MHD). */
static void writer_step(struct writer *w, struct conn *c)
{
	struct tf_server *s = w->s;
	if (!c->nodelay) { /* frames go out as they come: no Nagle delay */
		int one = 1;
		setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		c->nodelay = true;
	}
	for (;;) {
		if (c->failed || atomic_load(&c->gone) || atomic_load(&s->stopping)) {
			writer_release(c);
			return;
		}
		if (c->wsent < c->wire.len) {
			ssize_t n = send(c->fd, c->wire.data + c->wsent, c->wire.len - c->wsent,
					 MSG_NOSIGNAL | MSG_DONTWAIT);
			if (n > 0) {
				c->wsent += (size_t)n;
				atomic_store(&c->last_write, mono());
			}
			if (c->wsent == c->wire.len)
				c->delivered = c->made_tok;
			if (c->wsent < c->wire.len) {
				if (n >= 0 || errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
					writer_block(w, c);
				} else { /* the client left */
					atomic_store(&c->gone, true);
					writer_release(c);
				}
				return;
			}
			tf_buf_reset(&c->wire);
			c->wsent = 0;
		}
		if (c->eof) {
			c->self_sent = c->whole;
			writer_release(c);
			return;
		}
		unsigned seen = atomic_load(&c->notes);
		if (c->whole) {
			if (whole_wire(c))
				continue;
		} else {
			bool done = false;
			tf_buf_reset(&c->pend);
			c->sent = 0;
			if (tf_gen_pump(c->gen, 0, &c->pend, &done)) {
				tf_gen_cancel(c->gen);
				c->failed = true;
				continue;
			}
			c->made_tok = tf_gen_read(c->gen);
			if (done)
				c->eof = true;
			if (c->pend.len) { /* one HTTP chunk */
				if (tf_buf_printf(&c->wire, "%zx\r\n", c->pend.len) ||
				    tf_buf_append(&c->wire, c->pend.data, c->pend.len) ||
				    tf_buf_puts(&c->wire, "\r\n")) {
					tf_gen_cancel(c->gen);
					c->failed = true;
				}
				tf_buf_reset(&c->pend);
				continue;
			}
			if (c->eof)
				continue;
		}
		pthread_mutex_lock(&c->mu);
		bool park = atomic_load(&c->notes) == seen;
		if (park)
			c->state = C_PARKED;
		pthread_mutex_unlock(&c->mu);
		if (park)
			return;
	}
}

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	struct tf_server *s = w->s;
	struct epoll_event evs[64];
	for (;;) {
		pthread_mutex_lock(&w->mu);
		struct conn *q = w->head;
		w->head = w->tail = NULL;
		bool down = atomic_load(&s->stopping), idle = !q && !down;
		w->down = down;
		w->idle = idle;
		pthread_mutex_unlock(&w->mu);
		while (q) {
			struct conn *c = q;
			q = c->wnext;
			pthread_mutex_lock(&c->mu);
			c->state = C_WRITING;
			pthread_mutex_unlock(&c->mu);
			writer_step(w, c); /* with stopping set: released to MHD */
		}
		if (down)
			break;
		/* Idle (the queue was empty): sleep until a push kicks the
		 * eventfd; busy: only look at the blocked sockets. */
		int n = epoll_wait(w->ep, evs, 64, idle ? 100 : 0);
		for (int i = 0; i < n; i++) {
			struct conn *c = evs[i].data.ptr;
			if (!c) { /* the kick */
				uint64_t v;
				if (read(w->kick, &v, sizeof(v)) < 0 && errno != EAGAIN)
					tf_log(TF_LOG_WARN, "stream writer: %s", strerror(errno));
				continue;
			}
			blocked_drop(w, c);
			if (evs[i].events & (EPOLLERR | EPOLLHUP))
				atomic_store(&c->gone, true);
			writer_step(w, c);
		}
		/* A client that stopped reading: after the connection timeout
		 * with no room, it is treated as gone. */
		double t = mono();
		for (size_t i = 0; i < w->nblocked && s->c.timeout_s;) {
			struct conn *c = w->blocked[i];
			if (t - c->blocked_at < s->c.timeout_s) {
				i++;
				continue;
			}
			blocked_drop(w, c);
			atomic_store(&c->gone, true);
			writer_release(c);
		}
	}
	while (w->nblocked) { /* a stop: MHD ends them all */
		struct conn *c = w->blocked[0];
		blocked_drop(w, c);
		writer_release(c);
	}
	return NULL;
}

/* Start n writers. */
static tf_status writers_start(struct tf_server *s, unsigned n)
{
	s->writers = tf_calloc(n, sizeof(*s->writers));
	if (!s->writers)
		return tf_err(TF_ERR_NOMEM, "server: out of memory");
	for (unsigned i = 0; i < n; i++) {
		struct writer *w = &s->writers[i];
		w->s = s;
		pthread_mutex_init(&w->mu, NULL);
		s->nwriters++;
		struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
		w->kick = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		w->ep = epoll_create1(EPOLL_CLOEXEC);
		if (w->kick < 0 || w->ep < 0 || epoll_ctl(w->ep, EPOLL_CTL_ADD, w->kick, &ev))
			return tf_err_errno(TF_ERR_OS, "cannot set up a stream writer");
		int e = pthread_create(&w->thread, NULL, writer_main, w);
		if (e) {
			errno = e;
			return tf_err_errno(TF_ERR_OS, "cannot start a stream writer");
		}
		w->started = true;
	}
	return TF_OK;
}

/* Stop the writers (s->stopping is set): each gives every connection it
 * holds back to MHD and exits; later notifications resume directly. */
static void writers_stop(struct tf_server *s)
{
	for (unsigned i = 0; i < s->nwriters; i++) {
		struct writer *w = &s->writers[i];
		if (!w->started)
			continue;
		uint64_t one = 1;
		if (write(w->kick, &one, sizeof(one)) < 0 && errno != EAGAIN)
			tf_log(TF_LOG_WARN, "cannot wake a stream writer: %s", strerror(errno));
		pthread_join(w->thread, NULL);
		w->started = false;
	}
}

static void writers_free(struct tf_server *s)
{
	for (unsigned i = 0; i < s->nwriters; i++) {
		struct writer *w = &s->writers[i];
		if (w->kick >= 0)
			close(w->kick);
		if (w->ep >= 0)
			close(w->ep);
		pthread_mutex_destroy(&w->mu);
		free(w->blocked);
	}
	free(s->writers);
	s->writers = NULL;
	s->nwriters = 0;
}

/* A whole reply: called again each time the connection is resumed. */
static enum MHD_Result whole_step(struct MHD_Connection *mc, struct conn *c)
{
	if (c->self_sent) /* a writer sent it (whole_wire): close */
		return MHD_NO;
	if (atomic_load(&c->gone)) {
		tf_gen_cancel(c->gen);
		return MHD_NO;
	}
	for (;;) {
		unsigned seen = atomic_load(&c->notes);
		bool done = false;
		uint32_t got;
		do { /* all that is there: the one notification may have come already */
			got = tf_gen_read(c->gen);
			if (tf_gen_pump(c->gen, 0, NULL, &done)) {
				tf_gen_cancel(c->gen);
				break;
			}
		} while (!done && tf_gen_read(c->gen) != got);
		if (done)
			break;
		if (try_suspend(c, seen))
			return MHD_YES;
		if (atomic_load(&c->s->stopping)) {
			tf_gen_cancel(c->gen);
			return MHD_NO;
		}
	}
	struct tf_reply r = {0};
	tf_gen_reply(c->gen, &r);
	enum MHD_Result ret = send_reply(mc, c, &r, NULL, r.status >= 500);
	tf_reply_release(&r);
	return ret;
}

/* A body big enough to stall the HTTP thread is prepared on the prep
 * thread (prep.h): the connection is suspended meanwhile, and the job
 * resumes it; MHD then calls the handler again. Returns false when the
 * job could not be queued (prepare inline). */
static bool prep_start(struct MHD_Connection *mc, struct conn *c, void (*fn)(void *))
{
	if (c->body.len < TF_PREP_MIN_BODY)
		return false;
	atomic_store(&c->prep, PREP_RUNNING);
	MHD_suspend_connection(mc);
	if (!tf_prep_push(c->s->prep, fn, c))
		return true;
	atomic_store(&c->prep, PREP_NONE);
	MHD_resume_connection(mc);
	return false;
}

static void prep_done(struct conn *c)
{
	atomic_store(&c->prep, PREP_DONE);
	MHD_resume_connection(c->mc);
}

/* Parse and start (any thread): c->pgen, or the refusal in c->err. */
static void gen_prepare(struct conn *c)
{
	struct tf_server *s = c->s;
	const struct route *rt = c->route;
	struct tf_req req;
	tf_status rc = tf_req_parse(api_of(rt->kind), c->body.data, c->body.len,
				    s->c.env.family->vocab, &req);
	if (rc)
		tf_reply_error(&c->err, rt->anthropic, 400, "invalid_request_error", NULL, req.param,
			       "%s", tf_errmsg(rc));
	else if (tf_gen_start(&s->c.env, &req, &c->pgen, &c->err))
		c->pgen = NULL;
	tf_buf_release(&c->body);
}

static void gen_job(void *arg)
{
	gen_prepare(arg);
	prep_done(arg);
}

static enum MHD_Result serve_generation(struct MHD_Connection *mc, struct conn *c)
{
	struct tf_server *s = c->s;
	const struct route *rt = c->route;
	if (atomic_load(&c->prep) == PREP_NONE) {
		/* Count first, then look at draining: a stop cannot slip between. */
		atomic_fetch_add(&s->inflight, 1);
		c->counted = true;
		if (atomic_load(&s->draining)) {
			tf_metrics_rejected(s->metrics);
			struct tf_reply r = {0};
			if (rt->anthropic)
				tf_reply_error(&r, true, 503, "overloaded_error", NULL, NULL,
					       "server restarting: retry shortly");
			else
				tf_reply_error(&r, false, 503, "server_error", "server_restarting", NULL,
					       "server restarting: retry shortly");
			r.retry_after = 30;
			enum MHD_Result ret = send_reply(mc, c, &r, NULL, true);
			tf_reply_release(&r);
			return ret;
		}
		if (prep_start(mc, c, gen_job))
			return MHD_YES;
		gen_prepare(c);
	} else if (atomic_load(&c->prep) == PREP_RUNNING) {
		return MHD_YES;
	}
	if (!c->pgen)
		return send_reply(mc, c, &c->err, NULL, false);
	struct tf_gen *g = c->pgen;
	c->pgen = NULL;
	c->gen = g;
	c->whole = !tf_gen_streaming(g);
	c->w = &s->writers[atomic_fetch_add(&s->next_writer, 1) % s->nwriters];
	const char *timing = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "X-TF-Timing");
	tf_gen_timing(g, timing && !strcmp(timing, "1"));
	atomic_store(&c->last_write, mono());
	gens_add(c);
	tf_gen_notify(g, on_note, c, c->whole);
	if (c->whole)
		return whole_step(mc, c);
	struct MHD_Response *resp =
		MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, c, stream_free);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, "Content-Type", "text/event-stream");
	MHD_add_response_header(resp, "Cache-Control", "no-cache");
	MHD_add_response_header(resp, "X-Accel-Buffering", "no");
	enum MHD_Result ret = MHD_queue_response(mc, 200, resp);
	MHD_destroy_response(resp);
	c->answered = true;
	tf_metrics_http(s->metrics, 200);
	return ret;
}

/* The client of a parked request half-closed its socket (ticker): it may
 * have closed it whole, or only its sending side and still be reading.
 * Send it a few harmless bytes: a closed socket answers them with a reset,
 * which the next look sees (POLLERR). A whole reply gets an interim
 * "100 Continue" (HTTP/1.1 clients skip 1xx replies; MHD has sent nothing
 * yet, the connection is suspended), a stream an SSE comment line through
 * its writer. An HTTP/1.0 client cannot take a 1xx: it counts as gone. */
static void probe(struct conn *c)
{
	static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
	if (!c->whole) {
		atomic_store(&c->probe, true);
		wake(c);
		return;
	}
	pthread_mutex_lock(&c->mu);
	bool parked = c->state == C_PARKED;
	ssize_t n = parked && c->http11 ? send(c->fd, cont, sizeof(cont) - 1,
					       MSG_NOSIGNAL | MSG_DONTWAIT) : 0;
	pthread_mutex_unlock(&c->mu);
	if (!parked) { /* resumed meanwhile: look again later */
		c->probed = false;
	} else if (n != (ssize_t)sizeof(cont) - 1) {
		atomic_store(&c->gone, true);
		wake(c);
	} else {
		atomic_store(&c->half, true);
	}
}

/* The ticker: every 50 ms, resume streams due a keepalive, find clients
 * that left suspended requests (MHD does not watch suspended sockets), and
 * pump abandoned generations to their end. */
static void *ticker_main(void *arg)
{
	struct tf_server *s = arg;
	double keep = s->c.env.keepalive_s, last_peek = 0;
	struct pollfd *pf = NULL;
	struct conn **pc = NULL;
	size_t cap = 0;
	while (!atomic_load(&s->stopping)) {
		struct timespec ts = {0, 50 * 1000000L};
		nanosleep(&ts, NULL);
		double t = mono();
		bool peek = t - last_peek >= 0.1;
		size_t n = 0;
		pthread_mutex_lock(&s->list_mu);
		for (struct conn *c = s->gens; c; c = c->next) {
			pthread_mutex_lock(&c->mu);
			bool susp = c->state == C_PARKED;
			pthread_mutex_unlock(&c->mu);
			if (!susp)
				continue;
			if (!c->whole && keep > 0 && t - atomic_load(&c->last_write) >= keep) {
				wake(c);
				continue;
			}
			if (!peek)
				continue;
			if (n == cap) {
				size_t nc = cap ? cap * 2 : 64;
				if (tf_realloc_array(&pf, nc, sizeof(*pf)) || tf_realloc_array(&pc, nc, sizeof(*pc)))
					break;
				cap = nc;
			}
			pf[n] = (struct pollfd){.fd = c->fd, .events = POLLRDHUP};
			pc[n++] = c;
		}
		if (n && poll(pf, n, 0) > 0)
			for (size_t i = 0; i < n; i++) {
				short r = pf[i].revents;
				if (r & (POLLERR | POLLHUP | POLLNVAL)) { /* closed, or reset */
					atomic_store(&pc[i]->gone, true);
					wake(pc[i]);
				} else if ((r & POLLRDHUP) && !pc[i]->probed) {
					pc[i]->probed = true;
					probe(pc[i]);
				}
			}
		if (peek) {
			last_peek = t;
			tf_slots_tick(s->slots);
		}
		/* Abandoned generations: pump to the end (the cancel lands at the
		 * next round boundary), then record and free. */
		for (size_t i = 0; i < s->ngraves;) {
			bool done = false;
			struct grave *gv = &s->graves[i];
			for (int k = 0; k < 64 && !done; k++)
				if (tf_gen_pump(gv->gen, 0, NULL, &done))
					tf_gen_cancel(gv->gen);
			if (done) {
				record(s, gv->gen, false, gv->delivered);
				tf_gen_free(gv->gen);
				*gv = s->graves[--s->ngraves];
			} else {
				i++;
			}
		}
		pthread_mutex_unlock(&s->list_mu);
	}
	free(pf);
	free(pc);
	return NULL;
}

static enum MHD_Result serve_health(struct MHD_Connection *mc, struct conn *c, bool authed)
{
	struct tf_server *s = c->s;
	long n = atomic_load(&s->inflight);
	if (atomic_load(&s->draining))
		return send_json(mc, c, 503, json_pack("{s:s,s:I}", "status", "draining",
						       "requests_in_progress", (json_int_t)n), 30);
	struct tf_engine_stats es;
	tf_engine_stats(s->c.env.engine, &es);
	if (es.halted)
		return send_json(mc, c, 503, json_pack("{s:s}", "status", "halted"), 30);
	if (!authed)
		return send_json(mc, c, 200, json_pack("{s:s}", "status", "ok"), 0);
	return send_json(mc, c, 200,
			 json_pack("{s:s,s:s,s:I,s:i,s:i,s:i,s:i,s:I,s:I}", "status", "ok", "model",
				   s->c.env.model, "requests_in_progress", (json_int_t)n,
				   "requests_running", (int)es.running, "requests_filling", (int)es.filling,
				   "requests_waiting", (int)es.waiting, "context_length",
				   (int)s->c.env.context, "rounds", (json_int_t)es.rounds, "generated",
				   (json_int_t)es.generated), 0);
}

static json_t *model_entry(struct tf_server *s, const char *id)
{
	return json_pack("{s:s,s:s,s:s,s:I,s:s,s:i,s:i}", "id", id, "object", "model", "owned_by",
			 "tf", "created", (json_int_t)s->started, "root", s->c.env.model,
			 "max_model_len", (int)s->c.env.context, "context_length",
			 (int)s->c.env.context);
}

static enum MHD_Result serve_models(struct MHD_Connection *mc, struct conn *c)
{
	struct tf_server *s = c->s;
	json_t *data = json_array();
	json_array_append_new(data, model_entry(s, s->c.env.model));
	for (size_t i = 0; i < s->c.naliases; i++)
		json_array_append_new(data, model_entry(s, s->c.aliases[i]));
	return send_json(mc, c, 200, json_pack("{s:s,s:o}", "object", "list", "data", data), 0);
}

static enum MHD_Result serve_metrics(struct MHD_Connection *mc, struct conn *c)
{
	struct tf_server *s = c->s;
	struct tf_engine_stats es;
	tf_engine_stats(s->c.env.engine, &es);
	struct tf_reply r = {.status = 200, .type = "text/plain; version=0.0.4"};
	struct tf_metrics_now now = {.inflight = atomic_load(&s->inflight),
				     .draining = atomic_load(&s->draining),
				     .connections = tf_slots_live(s->slots)};
	tf_metrics_write(s->metrics, s->c.env.model, &es, &now, &r.body);
	enum MHD_Result ret = send_reply(mc, c, &r, NULL, false);
	tf_reply_release(&r);
	return ret;
}

static enum tf_text_route text_route(enum route_kind k)
{
	return k == R_COUNT ? TF_TEXT_COUNT : k == R_TOKENIZE ? TF_TEXT_TOKENIZE : TF_TEXT_DETOKENIZE;
}

static void text_job(void *arg)
{
	struct conn *c = arg;
	tf_text_serve(&c->s->c.env, text_route(c->route->kind), c->body.data, c->body.len, &c->body,
		      &c->text);
	prep_done(c);
}

static ssize_t text_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct conn *c = cls;
	size_t n = tf_text_read(&c->text, (size_t)pos, buf, max);
	return n ? (ssize_t)n : MHD_CONTENT_READER_END_WITH_ERROR;
}

/* count_tokens, /tokenize and /detokenize (text.h); a tokenize body is
 * written from its ids as it is sent. */
static enum MHD_Result serve_text(struct MHD_Connection *mc, struct conn *c)
{
	if (atomic_load(&c->prep) == PREP_NONE) {
		if (prep_start(mc, c, text_job))
			return MHD_YES;
		tf_text_serve(&c->s->c.env, text_route(c->route->kind), c->body.data, c->body.len,
			      &c->body, &c->text);
	} else if (atomic_load(&c->prep) == PREP_RUNNING) {
		return MHD_YES;
	}
	if (!c->text.ids)
		return send_reply(mc, c, &c->text.r, NULL, false);
	struct MHD_Response *resp =
		MHD_create_response_from_callback(c->text.size, 64 * 1024, text_read, c, NULL);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, "Content-Type", "application/json");
	enum MHD_Result ret = MHD_queue_response(mc, 200, resp);
	MHD_destroy_response(resp);
	c->answered = true;
	tf_metrics_http(c->s->metrics, 200);
	return ret;
}

/* Whether k is one of the keys: every key, every byte (constant time). */
static bool key_match(struct tf_server *s, const char *k)
{
	uint8_t d[TF_SHA256_LEN];
	if (!k || !*k || tf_sha256(k, strlen(k), d))
		return false;
	unsigned match = 0;
	for (size_t i = 0; i < s->nkeys; i++) {
		unsigned diff = 0;
		for (size_t j = 0; j < TF_SHA256_LEN; j++)
			diff |= d[j] ^ s->keys[i][j];
		match |= diff == 0;
	}
	return match != 0;
}

/* A key in x-api-key or as Authorization: Bearer; either may hold it (a
 * wrong or empty one in the other header does not count against it). */
static bool key_ok(struct tf_server *s, struct MHD_Connection *mc)
{
	if (s->nkeys == 0)
		return true;
	const char *k = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "x-api-key");
	const char *a = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Authorization");
	bool by_key = key_match(s, k);
	bool by_bearer = a && !strncasecmp(a, "Bearer ", 7) && key_match(s, a + 7);
	return by_key || by_bearer;
}

static const struct route *find_route(const char *method, const char *url, const char **allow)
{
	*allow = NULL;
	for (size_t i = 0; i < NROUTES; i++)
		if (!strcmp(routes[i].path, url)) {
			if (!strcmp(routes[i].method, method))
				return &routes[i];
			*allow = routes[i].method;
		}
	return NULL;
}

/* The headers are in: limits, route and key before any body. What breaks
 * a limit is answered at once and closes the connection (its body is not
 * read); a refusal (405, 404, 401) is answered once the body is in and
 * discarded, so the connection stays open for the next request. */
static enum MHD_Result headers(struct MHD_Connection *mc, struct conn *c, const char *url,
			       const char *method)
{
	struct tf_server *s = c->s;
	bool anthropic = !strncmp(url, "/v1/messages", 12) || !strncmp(url, "/messages", 9);
	char m[128];
	if (strlen(url) > TF_SERVER_URL_MAX) {
		snprintf(m, sizeof(m), "the request path is longer than %d bytes", TF_SERVER_URL_MAX);
		return send_error(mc, c, anthropic, 414, "invalid_request_error", NULL, m);
	}
	const union MHD_ConnectionInfo *hi =
		MHD_get_connection_info(mc, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
	if (MHD_get_connection_values(mc, MHD_HEADER_KIND, NULL, NULL) > (int)s->c.headers_max) {
		snprintf(m, sizeof(m), "more than %u header lines", s->c.headers_max);
		return send_error(mc, c, anthropic, 431, "invalid_request_error", NULL, m);
	}
	if (hi && hi->header_size > TF_SERVER_HEADER_BYTES) {
		snprintf(m, sizeof(m), "the request's header is larger than %d bytes",
			 TF_SERVER_HEADER_BYTES);
		return send_error(mc, c, anthropic, 431, "invalid_request_error", NULL, m);
	}
	const char *cl = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Content-Length");
	if (cl && strtoull(cl, NULL, 10) > s->c.body_max) {
		snprintf(m, sizeof(m), "the request body is larger than %zu bytes", s->c.body_max);
		return send_error(mc, c, anthropic, 413, "invalid_request_error", NULL, m);
	}
	const char *allow;
	c->route = find_route(method, url, &allow);
	if (!c->route && allow) {
		tf_reply_error(&c->refusal, anthropic, 405, "invalid_request_error", NULL, NULL,
			       "method %s is not allowed on %s", method, url);
		c->allow = allow;
	} else if (!c->route) {
		c->refusal = (struct tf_reply){.status = 404, .type = "application/json"};
		tf_buf_puts(&c->refusal.body, "{\"error\":\"not found\"}");
	} else if (!c->route->open && !key_ok(s, mc)) {
		tf_reply_error(&c->refusal, anthropic, 401, "authentication_error", "invalid_api_key",
			       NULL, "invalid or missing API key");
	} else {
		return MHD_YES;
	}
	c->refused = true;
	return MHD_YES;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *mc, const char *url,
			      const char *method, const char *version, const char *upload,
			      size_t *upload_size, void **con_cls)
{
	struct tf_server *s = cls;
	struct conn *c = *con_cls;
	if (!c) { /* the headers: route, limits and key before any body */
		c = tf_calloc(1, sizeof(*c));
		if (!c)
			return MHD_NO;
		c->s = s;
		c->mc = mc;
		c->fd = -1;
		c->http11 = !strcmp(version, MHD_HTTP_VERSION_1_1);
		pthread_mutex_init(&c->mu, NULL);
		*con_cls = c;
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
		if (ci)
			c->fd = ci->connect_fd;
		ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
		c->slot = ci ? ci->socket_context : NULL;
		if (tf_slot_dead(s->slots, c->slot)) /* refused or shed: answered already */
			return MHD_NO;
		tf_slot_headers(s->slots, c->slot);
		return headers(mc, c, url, method);
	}
	if (*upload_size) { /* a piece of the body */
		if (c->answered) { /* refused at the headers: discard */
			*upload_size = 0;
			return MHD_YES;
		}
		if (c->refused) { /* refused, the connection kept: discard up to the limit */
			c->discarded += *upload_size;
			*upload_size = 0;
			return c->discarded > s->c.body_max ? send_reply(mc, c, &c->refusal, c->allow, true)
							    : MHD_YES;
		}
		if (!c->too_big && c->body.len + *upload_size > s->c.body_max) {
			c->too_big = true;
			tf_buf_release(&c->body);
		}
		if (!c->too_big && tf_buf_append(&c->body, upload, *upload_size))
			return MHD_NO;
		*upload_size = 0;
		return MHD_YES;
	}
	tf_slot_busy(s->slots, c->slot); /* the request is whole */
	if (c->gen && c->whole && !c->answered) /* resumed: more of a whole reply */
		return whole_step(mc, c);
	if (c->answered) /* a reply was queued already */
		return MHD_YES;
	if (c->refused)
		return send_reply(mc, c, &c->refusal, c->allow, false);
	const struct route *rt = c->route;
	if (c->too_big) {
		char m[96];
		snprintf(m, sizeof(m), "the request body is larger than %zu bytes", s->c.body_max);
		return send_error(mc, c, rt->anthropic, 413, "invalid_request_error", NULL, m);
	}
	switch (rt->kind) {
	case R_HEALTH: return serve_health(mc, c, key_ok(s, mc));
	case R_MODELS: return serve_models(mc, c);
	case R_METRICS: return serve_metrics(mc, c);
	case R_COUNT:
	case R_TOKENIZE:
	case R_DETOKENIZE: return serve_text(mc, c);
	default:
		return serve_generation(mc, c);
	}
}

static void completed(void *cls, struct MHD_Connection *mc, void **con_cls,
		      enum MHD_RequestTerminationCode why)
{
	struct conn *c = *con_cls;
	if (!c)
		return;
	tf_slot_idle(c->s->slots, c->slot);
	if (c->gen && why != MHD_REQUEST_TERMINATED_COMPLETED_OK)
		tf_gen_cancel(c->gen);
	gens_drop(c, why == MHD_REQUEST_TERMINATED_COMPLETED_OK || c->self_sent);
	if (c->counted)
		atomic_fetch_sub(&c->s->inflight, 1);
	tf_gen_free(c->pgen);
	tf_reply_release(&c->err);
	tf_reply_release(&c->refusal);
	tf_text_release(&c->text);
	tf_buf_release(&c->body);
	tf_buf_release(&c->pend);
	tf_buf_release(&c->wire);
	pthread_mutex_destroy(&c->mu);
	free(c);
	*con_cls = NULL;
}

/* Sockets: each holds a slot from its accept to its close. */
static void on_socket(void *cls, struct MHD_Connection *mc, void **socket_context,
		      enum MHD_ConnectionNotificationCode toe)
{
	struct tf_server *s = cls;
	if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
		tf_slots_close(s->slots, *socket_context);
		*socket_context = NULL;
		return;
	}
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
	*socket_context = ci ? tf_slots_open(s->slots, ci->connect_fd) : NULL;
}

/* Each connection takes two descriptors (the library's and the slot's
 * dup): raise the soft limit as far as the hard one allows. */
static void fd_room(unsigned conns)
{
	struct rlimit rl;
	rlim_t want = (rlim_t)conns * 2 + 256;
	if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur >= want)
		return;
	rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	if (rl.rlim_cur < want)
		tf_log(TF_LOG_WARN, "open files are limited to %llu: fewer connections than "
		       "--connections may open", (unsigned long long)rl.rlim_cur);
}

/* libmicrohttpd's messages. It answers some requests itself, before the
 * handler (malformed, HTTP version, a request line or header section past
 * the connection memory): it says so here, and these replies are counted
 * like tf's own. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	struct tf_server *s = cls;
	char m[512];
	vsnprintf(m, sizeof(m), fmt, ap);
	const char *code = strstr(m, "HTTP response code is ");
	if (code)
		tf_metrics_http(s->metrics, (int)strtol(code + 22, NULL, 10));
	if (TF_LOG_INFO > tf_log_level_now)
		return;
	size_t n = strlen(m);
	while (n && m[n - 1] == '\n')
		m[--n] = 0;
	tf_log_write(TF_LOG_INFO, "http: %s", m);
}

tf_status tf_server_new(const struct tf_server_config *c, struct tf_server **out)
{
	*out = NULL;
	struct tf_server *s = tf_calloc(1, sizeof(*s));
	if (!s)
		return tf_err(TF_ERR_NOMEM, "server: out of memory");
	s->c = *c;
	pthread_mutex_init(&s->list_mu, NULL);
	s->started = (long long)time(NULL);
	tf_status rc = tf_metrics_new(&s->metrics);
	if (rc || (rc = tf_slots_new(c->connections_max, c->timeout_s, s->metrics, &s->slots)) ||
	    (rc = tf_prep_new(&s->prep)))
		goto fail;
	unsigned hard = tf_slots_hard_limit(c->connections_max);
	fd_room(hard);
	if (c->nkeys) {
		s->keys = tf_calloc(c->nkeys, sizeof(*s->keys));
		if (!s->keys) {
			rc = tf_err(TF_ERR_NOMEM, "server: out of memory");
			goto fail;
		}
		for (size_t i = 0; i < c->nkeys; i++)
			tf_sha256(c->keys[i], strlen(c->keys[i]), s->keys[i]);
		s->nkeys = c->nkeys;
		s->c.keys = NULL;
	}
	unsigned pool = c->threads;
	if (!pool)
		pool = tf_cpu_count() < 4 ? (unsigned)tf_cpu_count() : 4;
	if ((rc = writers_start(s, pool))) /* as many stream writers as HTTP threads */
		goto fail;
	struct sockaddr_storage ss = {0};
	/* epoll threads that never block: generations suspend their connection
	 * while they wait for the engine. */
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
			 MHD_USE_ERROR_LOG;
	struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
	if (inet_pton(AF_INET, c->host, &v4->sin_addr) == 1) {
		v4->sin_family = AF_INET;
		v4->sin_port = htons(c->port);
	} else if (inet_pton(AF_INET6, c->host, &v6->sin6_addr) == 1) {
		v6->sin6_family = AF_INET6;
		v6->sin6_port = htons(c->port);
		flags |= MHD_USE_IPv6;
	} else {
		rc = tf_err(TF_ERR_CONFIG, "'%s' is not a numeric IPv4 or IPv6 address", c->host);
		goto fail;
	}
	/* One thread is no pool at all (MHD refuses a pool of 1). */
	struct MHD_OptionItem pool_opt[] = {
		{pool > 1 ? MHD_OPTION_THREAD_POOL_SIZE : MHD_OPTION_END, (intptr_t)pool, NULL},
		{MHD_OPTION_END, 0, NULL},
	};
	s->d = MHD_start_daemon(flags, c->port, NULL, NULL, handle, s,
				MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
				MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
				MHD_OPTION_NOTIFY_COMPLETED, completed, s,
				MHD_OPTION_NOTIFY_CONNECTION, on_socket, s,
				MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)c->timeout_s,
				MHD_OPTION_CONNECTION_LIMIT, hard,
				MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
				MHD_OPTION_ARRAY, pool_opt,
				MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)1024,
				MHD_OPTION_END);
	if (!s->d) {
		rc = tf_err_errno(TF_ERR_OS, "cannot listen on %s port %u", c->host, (unsigned)c->port);
		goto fail;
	}
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
	s->port = di ? di->port : c->port;
	int e = pthread_create(&s->ticker, NULL, ticker_main, s);
	if (e) {
		errno = e;
		MHD_stop_daemon(s->d);
		s->d = NULL;
		rc = tf_err_errno(TF_ERR_OS, "cannot start the server's ticker");
		goto fail;
	}
	s->ticking = true;
	*out = s;
	return TF_OK;
fail:
	atomic_store(&s->stopping, true);
	writers_stop(s);
	writers_free(s);
	tf_prep_free(s->prep);
	pthread_mutex_destroy(&s->list_mu);
	tf_slots_free(s->slots);
	tf_metrics_free(s->metrics);
	free(s->keys);
	free(s);
	return rc;
}

uint16_t tf_server_port(const struct tf_server *s)
{
	return s->port;
}

long tf_server_inflight(const struct tf_server *s)
{
	return atomic_load(&((struct tf_server *)s)->inflight);
}

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static double mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

long tf_server_drain(struct tf_server *s, double drain_s, atomic_int *signals)
{
	atomic_store(&s->draining, true);
	double end = mono() + drain_s;
	while (atomic_load(&s->inflight) > 0 && mono() < end && (!signals || atomic_load(signals) < 2))
		sleep_ms(20);
	long left = atomic_load(&s->inflight);
	if (left > 0) {
		tf_log(TF_LOG_WARN, "halting %ld request%s still running", left, left == 1 ? "" : "s");
		tf_engine_halt(s->c.env.engine, "server restarting: retry shortly");
		double cut = mono() + 2.0;
		while (atomic_load(&s->inflight) > 0 && mono() < cut)
			sleep_ms(20);
	}
	return left;
}

void tf_server_stop(struct tf_server *s)
{
	if (!s || !s->d)
		return;
	/* No connection may stay suspended past this point: stop the ticker,
	 * refuse new suspensions, wake the suspended. */
	atomic_store(&s->stopping, true);
	if (s->ticking) {
		pthread_join(s->ticker, NULL);
		s->ticking = false;
	}
	writers_stop(s);
	tf_prep_free(s->prep); /* its jobs resume their connections */
	s->prep = NULL;
	pthread_mutex_lock(&s->list_mu);
	for (struct conn *c = s->gens; c; c = c->next)
		wake(c);
	pthread_mutex_unlock(&s->list_mu);
	MHD_stop_daemon(s->d);
	s->d = NULL;
	/* Generations whose clients left: wait for their end, then record. */
	for (size_t i = 0; i < s->ngraves; i++) {
		bool done = false;
		struct grave *gv = &s->graves[i];
		for (int k = 0; k < 100 && !done; k++)
			if (tf_gen_pump(gv->gen, 50, NULL, &done))
				tf_gen_cancel(gv->gen);
		record(s, gv->gen, false, gv->delivered);
		tf_gen_free(gv->gen);
	}
	s->ngraves = 0;
}

void tf_server_free(struct tf_server *s)
{
	if (!s)
		return;
	tf_server_stop(s);
	tf_slots_free(s->slots);
	tf_metrics_free(s->metrics);
	pthread_mutex_destroy(&s->list_mu);
	writers_free(s);
	free(s->graves);
	free(s->keys);
	free(s);
}

static tf_status once_text(const struct tf_gen_env *env, enum tf_text_route k, const char *body,
			   size_t n, FILE *out, int *status)
{
	struct tf_text_answer a;
	tf_text_serve(env, k, body, n, NULL, &a);
	*status = a.r.status;
	tf_status rc = TF_OK;
	if (!a.ids) {
		if (a.r.body.len && fwrite(a.r.body.data, 1, a.r.body.len, out) != a.r.body.len)
			rc = TF_ERR_IO;
	} else {
		char buf[64 * 1024];
		size_t got;
		while (!rc && (got = tf_text_read(&a, a.pos, buf, sizeof(buf))))
			if (fwrite(buf, 1, got, out) != got)
				rc = TF_ERR_IO;
	}
	if (!rc && fputc('\n', out) == EOF)
		rc = TF_ERR_IO;
	tf_text_release(&a);
	return rc ? tf_err_errno(TF_ERR_IO, "cannot write the reply") : TF_OK;
}

tf_status tf_serve_once(const struct tf_gen_env *env, const char *path, const char *body,
			size_t n, FILE *out, int *status)
{
	const char *allow;
	const struct route *rt = find_route("POST", path, &allow);
	struct tf_reply r = {0};
	tf_status rc = TF_OK;
	*status = 200;
	if (!rt) {
		*status = 404;
		return tf_err(TF_ERR_ARG, "'%s' is not a POST route (chat/completions, completions, "
			      "messages, messages/count_tokens, tokenize, detokenize)", path);
	}
	if (!generation(rt->kind))
		return once_text(env, text_route(rt->kind), body, n, out, status);
	struct tf_req req;
	rc = tf_req_parse(api_of(rt->kind), body, n, env->family->vocab, &req);
	if (rc) {
		tf_reply_error(&r, rt->anthropic, 400, "invalid_request_error", NULL, req.param, "%s",
			       tf_errmsg(rc));
		*status = 400;
		rc = TF_OK;
		goto reply;
	}
	struct tf_gen *g;
	if (tf_gen_start(env, &req, &g, &r)) {
		*status = r.status;
		goto reply;
	}
	bool done = false;
	struct tf_buf b = TF_BUF_INIT;
	while (!done && !rc) {
		tf_buf_reset(&b);
		rc = tf_gen_pump(g, 100, tf_gen_streaming(g) ? &b : NULL, &done);
		if (b.len && (fwrite(b.data, 1, b.len, out) != b.len || fflush(out)))
			rc = tf_err_errno(TF_ERR_IO, "cannot write the stream");
	}
	tf_buf_release(&b);
	if (!rc && !tf_gen_streaming(g)) {
		tf_gen_reply(g, &r);
		*status = r.status;
		tf_gen_free(g);
		goto reply;
	}
	if (!rc) {
		struct tf_gen_outcome o;
		tf_gen_outcome(g, &o);
		*status = o.failed ? 500 : 200;
	}
	tf_gen_free(g);
	return rc;
reply:
	if (r.body.len && (fwrite(r.body.data, 1, r.body.len, out) != r.body.len || fputc('\n', out) == EOF))
		rc = tf_err_errno(TF_ERR_IO, "cannot write the reply");
	tf_reply_release(&r);
	return rc;
}
