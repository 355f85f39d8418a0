/* respond.c: replies handed to libmicrohttpd (server_impl.h): a reply
 * built as a struct tf_reply (reply.h), JSON or a route's error, with
 * Connection: close when asked or when the client half-closed. Called on
 * the connection's HTTP thread. Not the replies a writer sends itself
 * (writer.c). */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>

#include "serve/server_impl.h"

/* Whether the client half-closed its socket (HTTP/1.1 only): a reply MHD
 * sends to one that did says Connection: close (tf_respond_close), and a
 * text answer prepared off MHD's threads goes by a writer (text_keep in
 * route_text.c). */
bool tf_respond_half_closed(struct conn *c)
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
void tf_respond_close(struct MHD_Response *resp, struct conn *c, bool close)
{
	if (close || (c && tf_respond_half_closed(c)))
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
}

enum MHD_Result tf_respond(struct MHD_Connection *mc, struct conn *c,
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
	tf_respond_close(resp, c, close);
	enum MHD_Result ret = MHD_queue_response(mc, (unsigned)r->status, resp);
	MHD_destroy_response(resp);
	if (c) {
		tf_slot_busy(c->s->slots, c->slot);
		c->answered = true;
		tf_metrics_http(c->s->metrics, r->status);
	}
	return ret;
}

enum MHD_Result tf_respond_json(struct MHD_Connection *mc, struct conn *c, int status,
				 json_t *v, int retry_after)
{
	struct tf_reply r = {.status = status, .type = "application/json", .retry_after = retry_after};
	char *s = json_dumps(v, JSON_COMPACT);
	json_decref(v);
	if (s)
		tf_buf_puts(&r.body, s);
	free(s);
	enum MHD_Result ret = tf_respond(mc, c, &r, NULL, false);
	tf_reply_release(&r);
	return ret;
}

enum MHD_Result tf_respond_error(struct MHD_Connection *mc, struct conn *c, bool anthropic,
				  int status, const char *kind, const char *code, const char *msg)
{
	struct tf_reply r = {0};
	tf_reply_error(&r, anthropic, status, kind, code, NULL, "%s", msg);
	enum MHD_Result ret = tf_respond(mc, c, &r, NULL, status >= 413 && status != 500);
	tf_reply_release(&r);
	return ret;
}
