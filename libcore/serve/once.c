/* once.c: tf-serve --once (once.h): one request served outside HTTP, its
 * reply or stream written to a FILE. */
#include "serve/once.h"

#include "serve/route.h"
#include "serve/text.h"

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
	const struct tf_route *rt = tf_route_find("POST", path, &allow);
	struct tf_reply r = {0};
	tf_status rc = TF_OK;
	*status = 200;
	if (!rt) {
		*status = 404;
		return tf_err(TF_ERR_ARG, "'%s' is not a POST route (chat/completions, completions, "
			      "responses, messages, messages/count_tokens, tokenize, detokenize)", path);
	}
	if (!tf_route_generates(rt->kind))
		return once_text(env, tf_route_text(rt->kind), body, n, out, status);
	struct tf_req req;
	rc = tf_req_parse(tf_route_api(rt->kind), body, n, env->family->vocab, &req);
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
