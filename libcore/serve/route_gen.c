/* route_gen.c: the generation routes over HTTP (server_impl.h): chat,
 * completions, responses and messages, whole or streamed. A request's body
 * is parsed and its generation started (gen.h) on the HTTP thread, or on
 * the prep thread for a body of TF_PREP_MIN_BODY or more; while the engine
 * works the connection is parked (suspended in libmicrohttpd) and the
 * engine's notification takes it on: a whole reply back to MHD, a stream
 * to its writer (writer.c). Not the sending of stream frames (writer.c)
 * nor the ticker (ticker.c). See struct conn in server_impl.h for who
 * holds a connection when. */
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "serve/server_impl.h"

/* The engine's notification: tokens arrived or the job ended. A parked
 * stream goes to the writer; a parked whole reply goes back to MHD (which
 * does not read its socket first: see tf_route_gen_step), unless a writer
 * sends it (prep_keep). */
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
			tf_writer_queue_locked(c);
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
void tf_route_gen_drop(struct conn *c, bool whole)
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
enum MHD_Result tf_route_gen_step(struct MHD_Connection *mc, struct conn *c)
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
	enum MHD_Result ret = tf_respond(mc, c, &r, NULL, r.status >= 500);
	tf_reply_release(&r);
	return ret;
}

/* Parse and start (any thread): c->pgen, or the refusal in c->err. */
static void gen_prepare(struct conn *c)
{
	struct tf_server *s = c->s;
	const struct tf_route *rt = c->route;
	struct tf_req req;
	tf_status rc = tf_req_parse(tf_route_api(rt->kind), c->body.data, c->body.len,
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
	c->w = tf_writer_pick(s);
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
		tf_writer_queue_locked(c);
		pthread_mutex_unlock(&c->mu);
		return true;
	}
	c->whole = true;
	if (!c->w)
		c->w = tf_writer_pick(c->s);
	pthread_mutex_lock(&c->mu);
	tf_writer_queue_locked(c); /* the writer pumps, parks or sends */
	pthread_mutex_unlock(&c->mu);
	return true;
}

static void gen_job(void *arg)
{
	struct conn *c = arg;
	gen_prepare(c);
	if (prep_keep(c))
		return;
	tf_server_prep_done(c);
}

enum MHD_Result tf_route_gen_serve(struct MHD_Connection *mc, struct conn *c)
{
	struct tf_server *s = c->s;
	const struct tf_route *rt = c->route;
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
			enum MHD_Result ret = tf_respond(mc, c, &r, NULL, true);
			tf_reply_release(&r);
			return ret;
		}
		if (tf_server_prep_start(mc, c, gen_job))
			return MHD_YES;
		gen_prepare(c);
	} else if (atomic_load(&c->prep) == PREP_RUNNING) {
		return MHD_YES;
	}
	if (!c->pgen)
		return tf_respond(mc, c, &c->err, NULL, false);
	gen_attach(mc, c);
	if (c->whole)
		return tf_route_gen_step(mc, c);
	struct MHD_Response *resp =
		MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, c, stream_free);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, "Content-Type", "text/event-stream");
	MHD_add_response_header(resp, "Cache-Control", "no-cache");
	MHD_add_response_header(resp, "X-Accel-Buffering", "no");
	tf_respond_close(resp, c, false);
	enum MHD_Result ret = MHD_queue_response(mc, 200, resp);
	MHD_destroy_response(resp);
	c->answered = true;
	tf_metrics_http(s->metrics, 200);
	return ret;
}
