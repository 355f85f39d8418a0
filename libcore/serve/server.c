/* server.c: HTTP over libmicrohttpd: the route table, auth, limits, the
 * connection slots' hooks, the plain routes (health, models, metrics),
 * GET and DELETE of stored responses (/v1/responses/{id}), the text routes
 * (text.h) and the generation routes (whole and SSE), bodies prepared off
 * the HTTP threads (prep.h), drain, and --once. What runs off
 * libmicrohttpd's threads (stream writers, the ticker) is in deliver.c;
 * the structures both share are in conn.h. */
#include "serve/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/digest.h"
#include "base/log.h"
#include "base/thread.h"
#include "serve/conn.h"

enum route_kind {
	R_HEALTH, R_MODELS, R_METRICS, R_CHAT, R_COMPLETIONS, R_MESSAGES, R_COUNT, R_TOKENIZE,
	R_DETOKENIZE, R_RESPONSES,
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
	{"POST", "/v1/responses", R_RESPONSES, false, false},
	{"POST", "/responses", R_RESPONSES, false, false},
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

static enum tf_api api_of(enum route_kind k)
{
	return k == R_CHAT ? TF_API_CHAT : k == R_COMPLETIONS ? TF_API_COMPLETIONS
		: k == R_MESSAGES ? TF_API_MESSAGES : k == R_RESPONSES ? TF_API_RESPONSES
		: TF_API_COUNT_TOKENS;
}

static bool generation(enum route_kind k)
{
	return k == R_CHAT || k == R_COMPLETIONS || k == R_MESSAGES || k == R_RESPONSES;
}

/* Whether the client half-closed its socket (HTTP/1.1 only): a reply MHD
 * sends to one that did says Connection: close (reply_close), and a text
 * answer prepared off MHD's threads goes by a writer (text_keep). */
static bool half_closed(struct conn *c)
{
	if (!atomic_load(&c->half) && c->http11) {
		struct pollfd p = {.fd = c->fd, .events = POLLRDHUP};
		if (poll(&p, 1, 0) > 0 && (p.revents & POLLRDHUP))
			atomic_store(&c->half, true);
	}
	return atomic_load(&c->half);
}

/* Connection: close on a reply MHD sends, when asked or when the client
 * half-closed already: libmicrohttpd (0.9.75) may never read an end of
 * stream that came with the request (a read of fewer bytes than it asked
 * for clears its read-ready flag, and under edge-triggered epoll no new
 * edge comes), and would hold the connection open for the next request
 * until --timeout. */
static void reply_close(struct MHD_Response *resp, struct conn *c, bool close)
{
	if (close || (c && half_closed(c)))
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
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
	reply_close(resp, c, close);
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

/* Count a finished generation: ok only when its reply went out whole (its
 * last byte handed to the socket); otherwise cancelled, unless it failed,
 * with only the tokens the client got counted as delivered. */
void tf_server_record(struct tf_server *s, struct tf_gen *g, bool whole, uint32_t delivered)
{
	struct tf_gen_outcome o;
	tf_gen_outcome(g, &o);
	if (!whole) {
		o.cancelled = !o.failed;
		o.delivered = delivered;
	}
	tf_metrics_generation(s->metrics, &o);
}

/* The engine's notification: tokens arrived or the job ended. A parked
 * stream goes to the writer; a parked whole reply goes back to MHD (which
 * does not read its socket first: see whole_step), unless a writer sends
 * it (prep_keep). */
static void on_note(void *ctx)
{
	struct conn *c = ctx;
	atomic_fetch_add(&c->notes, 1);
	pthread_mutex_lock(&c->mu);
	if (c->state == C_PARKED) {
		if (atomic_load(&c->s->stopping) || (c->whole && !c->by_writer)) {
			c->state = C_MHD;
			MHD_resume_connection(c->mc);
		} else {
			tf_deliver_queue_locked(c);
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
		tf_server_record(s, c->gen, whole && tf_gen_done(c->gen), c->delivered);
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
			atomic_store(&c->last_write, conn_now());
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

/* A whole reply: called again each time the connection is resumed.
 *
 * libmicrohttpd (0.9.75) takes a resumed connection up where its event
 * loop left it: a connection suspended in the handler's first call with
 * the whole request in still counts as one to read from (its loop state is
 * updated only when the handler returns unsuspended), so on resume it
 * reads the socket before it calls the handler again, and a read of the
 * end of stream of a client that half-closed meanwhile drops the request
 * unanswered; no look at the socket before the resume can rule that out.
 * So the first time a whole reply has to wait, the handler returns
 * without suspending: the library then files the connection as waiting
 * for its reply (nothing to read or write), calls the handler again at
 * once, and it suspends then; a resume from there never reads before the
 * reply is queued. */
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
		if (!c->settled) { /* called again at once, then it suspends */
			c->settled = true;
			return MHD_YES;
		}
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
 * resumes it; MHD then calls the handler again (but see prep_keep).
 * Returns false when the job could not be queued (prepare inline). */
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

/* Open a prepared generation on the connection (c->pgen to c->gen) and
 * ask for the engine's notifications. Any thread that holds the
 * connection (MHD's, or the prep thread while it is suspended). */
static void gen_attach(struct MHD_Connection *mc, struct conn *c)
{
	struct tf_server *s = c->s;
	struct tf_gen *g = c->pgen;
	c->pgen = NULL;
	c->gen = g;
	c->whole = !tf_gen_streaming(g);
	c->w = &s->writers[atomic_fetch_add(&s->next_writer, 1) % s->nwriters];
	const char *timing = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "X-TF-Timing");
	tf_gen_timing(g, timing && !strcmp(timing, "1"));
	atomic_store(&c->last_write, conn_now());
	gens_add(c);
	tf_gen_notify(g, on_note, c, c->whole);
}

/* libmicrohttpd, resuming a connection whose reply is not queued, reads
 * from its socket before it calls the handler, and a read of the client's
 * end of stream drops the request unanswered; a client may half-close at
 * any time before that read, and no look at its socket can rule it out.
 * So a request whose body was prepared off MHD's threads (64 KiB or
 * more, where reconnecting costs little) is never resumed before its
 * reply is out: the reply goes by a writer, with Connection: close, while
 * MHD keeps the connection suspended: a whole reply or a refusal whole
 * (whole_wire), a stream with its head and its last chunk (self_head), a
 * text answer (text_keep), and MHD only closes the connection after.
 * Returns false when MHD is to resume it (a stop). */
static bool prep_keep(struct conn *c)
{
	if (atomic_load(&c->s->stopping))
		return false;
	atomic_store(&c->prep, PREP_DONE);
	if (c->pgen)
		gen_attach(c->mc, c);
	c->by_writer = true;
	if (c->gen && !c->whole) {
		if (tf_buf_puts(&c->wire, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
				"Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n"
				"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"))
			c->failed = true;
		c->self_head = true;
		c->answered = true;
		tf_metrics_http(c->s->metrics, 200);
		pthread_mutex_lock(&c->mu);
		tf_deliver_queue_locked(c);
		pthread_mutex_unlock(&c->mu);
		return true;
	}
	c->whole = true;
	if (!c->w)
		c->w = &c->s->writers[atomic_fetch_add(&c->s->next_writer, 1) % c->s->nwriters];
	pthread_mutex_lock(&c->mu);
	tf_deliver_queue_locked(c); /* the writer pumps, parks or sends */
	pthread_mutex_unlock(&c->mu);
	return true;
}

static void gen_job(void *arg)
{
	struct conn *c = arg;
	gen_prepare(c);
	if (prep_keep(c))
		return;
	prep_done(c);
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
	gen_attach(mc, c);
	if (c->whole)
		return whole_step(mc, c);
	struct MHD_Response *resp =
		MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, c, stream_free);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, "Content-Type", "text/event-stream");
	MHD_add_response_header(resp, "Cache-Control", "no-cache");
	MHD_add_response_header(resp, "X-Accel-Buffering", "no");
	reply_close(resp, c, false);
	enum MHD_Result ret = MHD_queue_response(mc, 200, resp);
	MHD_destroy_response(resp);
	c->answered = true;
	tf_metrics_http(s->metrics, 200);
	return ret;
}

/* With ranks behind the engine: "world" and "ranks" [{rank, state}]. */
static json_t *with_world(const struct tf_server *s, json_t *o)
{
	if (!o || s->c.world < 2 || !s->c.rank_state)
		return o;
	json_t *ranks = json_array();
	for (int r = 0; r < s->c.world; r++)
		json_array_append_new(ranks, json_pack("{s:i,s:s}", "rank", r, "state",
						       s->c.rank_state(s->c.rank_ctx, r)));
	json_object_set_new(o, "world", json_integer(s->c.world));
	json_object_set_new(o, "ranks", ranks);
	return o;
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
		return send_json(mc, c, 503, with_world(s, json_pack("{s:s}", "status", "halted")), 30);
	if (!authed)
		return send_json(mc, c, 200, json_pack("{s:s}", "status", "ok"), 0);
	return send_json(mc, c, 200,
			 with_world(s, json_pack("{s:s,s:s,s:I,s:i,s:i,s:i,s:i,s:I,s:I}", "status", "ok",
				   "model", s->c.env.model, "requests_in_progress", (json_int_t)n,
				   "requests_running", (int)es.running, "requests_filling", (int)es.filling,
				   "requests_waiting", (int)es.waiting, "context_length",
				   (int)s->c.env.context, "rounds", (json_int_t)es.rounds, "generated",
				   (json_int_t)es.generated)), 0);
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
	if (s->c.world > 1 && s->c.rank_state) {
		tf_buf_printf(&r.body, "# HELP tf_tp_world tensor-parallel ranks serving the model\n"
			      "# TYPE tf_tp_world gauge\ntf_tp_world %d\n"
			      "# HELP tf_tp_rank_up 1 while the rank is up\n# TYPE tf_tp_rank_up gauge\n",
			      s->c.world);
		for (int k = 0; k < s->c.world; k++) {
			const char *st = s->c.rank_state(s->c.rank_ctx, k);
			tf_buf_printf(&r.body, "tf_tp_rank_up{rank=\"%d\",state=\"%s\"} %d\n", k, st,
				      strcmp(st, "failed") != 0);
		}
	}
	enum MHD_Result ret = send_reply(mc, c, &r, NULL, false);
	tf_reply_release(&r);
	return ret;
}

static enum tf_text_route text_route(enum route_kind k)
{
	return k == R_COUNT ? TF_TEXT_COUNT : k == R_TOKENIZE ? TF_TEXT_TOKENIZE : TF_TEXT_DETOKENIZE;
}

/* A text answer prepared off MHD's threads for a client that half-closed
 * or sent Connection: close: its writer sends it (see prep_keep). Others
 * keep their connection: MHD sends the answer (a 30 MB tokenize answer
 * goes out as fast, and other requests on its thread are not slowed). */
static bool text_keep(struct conn *c)
{
	struct tf_text_answer *a = &c->text;
	if (atomic_load(&c->s->stopping))
		return false;
	atomic_store(&c->prep, PREP_DONE);
	if (tf_buf_printf(&c->wire, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
			  "Connection: close\r\n\r\n", a->r.status,
			  MHD_get_reason_phrase_for((unsigned)a->r.status),
			  a->r.type ? a->r.type : "application/json", a->ids ? a->size : a->r.body.len) ||
	    (!a->ids && tf_buf_append(&c->wire, a->r.body.data ? a->r.body.data : "", a->r.body.len)))
		c->failed = true;
	c->by_writer = c->self_text = c->whole = true;
	c->answered = true;
	tf_metrics_http(c->s->metrics, a->r.status);
	c->w = &c->s->writers[atomic_fetch_add(&c->s->next_writer, 1) % c->s->nwriters];
	pthread_mutex_lock(&c->mu);
	tf_deliver_queue_locked(c);
	pthread_mutex_unlock(&c->mu);
	return true;
}

static void text_job(void *arg)
{
	struct conn *c = arg;
	tf_text_serve(&c->s->c.env, text_route(c->route->kind), c->body.data, c->body.len, &c->body,
		      &c->text);
	if ((c->close_wanted || half_closed(c)) && text_keep(c))
		return;
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
	reply_close(resp, c, false);
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

/* The id of /v1/responses/{id} (or /responses/{id}), or NULL for any
 * other path (one with a further segment among them). */
static const char *stored_id(const char *url)
{
	const char *id = !strncmp(url, "/v1/responses/", 14) ? url + 14
		: !strncmp(url, "/responses/", 11) ? url + 11 : NULL;
	return id && *id && !strchr(id, '/') ? id : NULL;
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
	const char *allow, *id;
	c->route = find_route(method, url, &allow);
	if (!c->route && allow) {
		tf_reply_error(&c->refusal, anthropic, 405, "invalid_request_error", NULL, NULL,
			       "method %s is not allowed on %s", method, url);
		c->allow = allow;
	} else if (!c->route && (id = stored_id(url))) {
		/* GET or DELETE of a stored response: answered now, sent once
		 * the (empty) body is in, as a refusal is */
		if (strcmp(method, "GET") && strcmp(method, "DELETE")) {
			tf_reply_error(&c->refusal, false, 405, "invalid_request_error", NULL, NULL,
				       "method %s is not allowed on %s", method, url);
			c->allow = "GET, DELETE";
		} else if (!key_ok(s, mc)) {
			tf_reply_error(&c->refusal, false, 401, "authentication_error", "invalid_api_key",
				       NULL, "invalid or missing API key");
		} else {
			tf_resp_stored(&s->c.env, method, id, &c->refusal);
		}
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
		const char *cn = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Connection");
		c->close_wanted = c->http11 && cn && strcasestr(cn, "close");
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
	if (c->self_sent || c->by_writer) /* a writer sent the reply, or gave up on it: close */
		return MHD_NO;
	if (c->gen && c->whole && !c->answered) /* resumed, or called again: more of a whole reply */
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
 * like tf's own. Its 414 and 431 (a head past the connection memory) are
 * answered in tf's JSON instead (tf_slots_refuse_head): the log comes on
 * the connection's thread just before the library queues its reply. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	struct tf_server *s = cls;
	char m[512];
	vsnprintf(m, sizeof(m), fmt, ap);
	const char *code = strstr(m, "HTTP response code is ");
	int status = code ? (int)strtol(code + 22, NULL, 10) : 0;
	if ((status == 414 || status == 431) && tf_slots_refuse_head(s->slots, status, s->c.headers_max))
		status = 0; /* answered in JSON, and counted, instead */
	if (status)
		tf_metrics_http(s->metrics, status);
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
	if ((rc = tf_deliver_writers_start(s, pool))) /* as many stream writers as HTTP threads */
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
				MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)TF_SLOTS_HEAD_MEMORY,
				MHD_OPTION_ARRAY, pool_opt,
				MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)1024,
				MHD_OPTION_END);
	if (!s->d) {
		rc = tf_err_errno(TF_ERR_OS, "cannot listen on %s port %u", c->host, (unsigned)c->port);
		goto fail;
	}
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
	s->port = di ? di->port : c->port;
	int e = pthread_create(&s->ticker, NULL, tf_deliver_ticker, s);
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
	tf_deliver_writers_stop(s);
	tf_deliver_writers_free(s);
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

long tf_server_drain(struct tf_server *s, double drain_s, atomic_int *signals)
{
	atomic_store(&s->draining, true);
	double end = conn_now() + drain_s;
	while (atomic_load(&s->inflight) > 0 && conn_now() < end && (!signals || atomic_load(signals) < 2))
		sleep_ms(20);
	long left = atomic_load(&s->inflight);
	if (left > 0) {
		tf_log(TF_LOG_WARN, "halting %ld request%s still running", left, left == 1 ? "" : "s");
		tf_engine_halt(s->c.env.engine, "server restarting: retry shortly");
		double cut = conn_now() + 2.0;
		while (atomic_load(&s->inflight) > 0 && conn_now() < cut)
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
	tf_deliver_writers_stop(s);
	tf_prep_free(s->prep); /* its jobs resume their connections */
	s->prep = NULL;
	pthread_mutex_lock(&s->list_mu);
	for (struct conn *c = s->gens; c; c = c->next)
		tf_deliver_wake(c);
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
		tf_server_record(s, gv->gen, false, gv->delivered);
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
	tf_deliver_writers_free(s);
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
			      "responses, messages, messages/count_tokens, tokenize, detokenize)", path);
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
