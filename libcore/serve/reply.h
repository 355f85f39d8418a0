/* reply.h: an HTTP reply as the routes build it (status, content type,
 * body, Retry-After) and the routes' error shapes: OpenAI's
 * {"error": {...}} and Anthropic's {"type": "error", "error": {...}}.
 * Not the sending: server.c's side (respond.c) hands a reply to
 * libmicrohttpd, a writer (writer.c) or stdout (once.c). */
#ifndef TF_SERVE_REPLY_H
#define TF_SERVE_REPLY_H

#include <jansson.h>
#include <stdbool.h>

#include "base/buf.h"

/* An HTTP reply: status, content type, body, Retry-After (0: none). */
struct tf_reply {
	int status;
	const char *type;
	struct tf_buf body;
	int retry_after;
};

void tf_reply_release(struct tf_reply *r);

/* The error shape of a route: OpenAI {"error": {...}} or Anthropic
 * {"type": "error", "error": {...}}. kind is the OpenAI type
 * ("invalid_request_error", "server_error", ...); code and param may be
 * NULL. The Anthropic type follows the status. */
void tf_reply_error(struct tf_reply *r, bool anthropic, int status, const char *kind,
		    const char *code, const char *param, const char *fmt, ...)
	__attribute__((format(printf, 7, 8)));

/* The body of tf_reply_error as a JSON value (for SSE error events). New
 * reference. */
json_t *tf_reply_error_json(bool anthropic, int status, const char *kind, const char *code,
			    const char *param, const char *msg);

/* v as compact JSON, reals with 9 significant digits (every float, as in
 * logprobs, round-trips without its nearest double's noise); takes v
 * over; the caller frees; NULL when out of memory. */
char *tf_reply_dump(json_t *v);

#endif
