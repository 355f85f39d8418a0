/* reply.c: the routes' replies and error shapes (reply.h). */
#include "serve/reply.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tf_reply_release(struct tf_reply *r)
{
	tf_buf_release(&r->body);
	memset(r, 0, sizeof(*r));
}

static const char *anthropic_type(int status)
{
	switch (status) {
	case 400: case 405: case 422: case 431: return "invalid_request_error";
	case 413: return "request_too_large";
	case 401: return "authentication_error";
	case 403: return "permission_error";
	case 404: return "not_found_error";
	case 429: return "rate_limit_error";
	case 503: return "overloaded_error";
	}
	return "api_error";
}

char *tf_reply_dump(json_t *v)
{
	char *s = json_dumps(v, JSON_COMPACT | JSON_REAL_PRECISION(9));
	json_decref(v);
	return s;
}

json_t *tf_reply_error_json(bool anthropic, int status, const char *kind, const char *code,
			    const char *param, const char *msg)
{
	if (anthropic)
		return json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type",
				 anthropic_type(status), "message", msg);
	json_t *e = json_pack("{s:s,s:s}", "message", msg, "type", kind);
	if (param)
		json_object_set_new(e, "param", json_string(param));
	else if (code)
		json_object_set_new(e, "param", json_null());
	if (code)
		json_object_set_new(e, "code", json_string(code));
	return json_pack("{s:o}", "error", e);
}

void tf_reply_error(struct tf_reply *r, bool anthropic, int status, const char *kind,
		    const char *code, const char *param, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	tf_buf_reset(&r->body);
	r->status = status;
	r->type = "application/json";
	char *s = tf_reply_dump(tf_reply_error_json(anthropic, status, kind, code, param, msg));
	if (s)
		tf_buf_puts(&r->body, s);
	free(s);
}
