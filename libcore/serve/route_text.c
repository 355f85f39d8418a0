/* route_text.c: the text routes over HTTP (server_impl.h): count_tokens,
 * /tokenize and /detokenize (text.h), answered on the HTTP thread or, for
 * a body of TF_PREP_MIN_BODY or more, on the prep thread; a tokenize body
 * is written from its ids as it is sent. */
#include <string.h>

#include "serve/server_impl.h"

/* A text answer prepared off MHD's threads for a client that half-closed
 * or sent Connection: close: its writer sends it (see prep_keep in
 * route_gen.c). Others
 * keep their connection: MHD sends the answer (a 30 MB tokenize answer
 * goes out as fast, and other requests on its thread are not slowed). */
static bool text_keep(struct conn *c)
{
	struct tf_text_answer *a = &c->text;
	if (atomic_load(&c->s->stopping))
		return false;
	atomic_store(&c->prep, PREP_DONE);
	if (tf_writer_head(&c->wire, a->r.status, a->r.type, a->ids ? a->size : a->r.body.len, 0) ||
	    (!a->ids && tf_buf_append(&c->wire, a->r.body.data ? a->r.body.data : "", a->r.body.len)))
		c->failed = true;
	c->by_writer = c->self_text = c->whole = true;
	c->answered = true;
	tf_metrics_http(c->s->metrics, a->r.status);
	c->w = tf_writer_pick(c->s);
	pthread_mutex_lock(&c->mu);
	tf_writer_queue_locked(c);
	pthread_mutex_unlock(&c->mu);
	return true;
}

static void text_job(void *arg)
{
	struct conn *c = arg;
	tf_text_serve(&c->s->c.env, tf_route_text(c->route->kind), c->body.data, c->body.len, &c->body,
		      &c->text);
	if ((c->close_wanted || tf_respond_half_closed(c)) && text_keep(c))
		return;
	tf_server_prep_done(c);
}

static ssize_t text_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct conn *c = cls;
	size_t n = tf_text_read(&c->text, (size_t)pos, buf, max);
	return n ? (ssize_t)n : MHD_CONTENT_READER_END_WITH_ERROR;
}

/* count_tokens, /tokenize and /detokenize (text.h); a tokenize body is
 * written from its ids as it is sent. */
enum MHD_Result tf_route_text_serve(struct MHD_Connection *mc, struct conn *c)
{
	if (atomic_load(&c->prep) == PREP_NONE) {
		if (tf_server_prep_start(mc, c, text_job))
			return MHD_YES;
		tf_text_serve(&c->s->c.env, tf_route_text(c->route->kind), c->body.data, c->body.len,
			      &c->body, &c->text);
	} else if (atomic_load(&c->prep) == PREP_RUNNING) {
		return MHD_YES;
	}
	if (!c->text.ids)
		return tf_respond(mc, c, &c->text.r, NULL, false);
	struct MHD_Response *resp =
		MHD_create_response_from_callback(c->text.size, 64 * 1024, text_read, c, NULL);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, "Content-Type", "application/json");
	tf_respond_close(resp, c, false);
	enum MHD_Result ret = MHD_queue_response(mc, 200, resp);
	MHD_destroy_response(resp);
	c->answered = true;
	tf_metrics_http(c->s->metrics, 200);
	return ret;
}
