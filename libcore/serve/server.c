/* server.c: HTTP over libmicrohttpd (server.h): the daemon on epoll
 * threads and its callbacks: a socket's slot, a request's head (limits,
 * route, API key; refusals held until the body is in), its body, the
 * dispatch to the routes, and its end; bodies prepared off the HTTP
 * threads. The routes, the writers, the ticker and the way down are their
 * own parts, listed in server_impl.h. */
#include "serve/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/thread.h"
#include "serve/server_impl.h"

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

/* A body big enough to stall the HTTP thread is prepared on the prep
 * thread (prep.h): the connection is suspended meanwhile, and the job
 * resumes it; MHD then calls the handler again (but see prep_keep in
 * route_gen.c). Returns false when the job could not be queued (prepare
 * inline). */
bool tf_server_prep_start(struct MHD_Connection *mc, struct conn *c, void (*fn)(void *))
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

void tf_server_prep_done(struct conn *c)
{
	atomic_store(&c->prep, PREP_DONE);
	MHD_resume_connection(c->mc);
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
		return tf_respond_error(mc, c, anthropic, 414, "invalid_request_error", NULL, m);
	}
	const union MHD_ConnectionInfo *hi =
		MHD_get_connection_info(mc, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
	if (MHD_get_connection_values(mc, MHD_HEADER_KIND, NULL, NULL) > (int)s->c.headers_max) {
		snprintf(m, sizeof(m), "more than %u header lines", s->c.headers_max);
		return tf_respond_error(mc, c, anthropic, 431, "invalid_request_error", NULL, m);
	}
	if (hi && hi->header_size > TF_SERVER_HEADER_BYTES) {
		snprintf(m, sizeof(m), "the request's header is larger than %d bytes",
			 TF_SERVER_HEADER_BYTES);
		return tf_respond_error(mc, c, anthropic, 431, "invalid_request_error", NULL, m);
	}
	const char *cl = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Content-Length");
	if (cl && strtoull(cl, NULL, 10) > s->c.body_max) {
		snprintf(m, sizeof(m), "the request body is larger than %zu bytes", s->c.body_max);
		return tf_respond_error(mc, c, anthropic, 413, "invalid_request_error", NULL, m);
	}
	const char *allow, *id;
	c->route = tf_route_find(method, url, &allow);
	if (!c->route && allow) {
		tf_reply_error(&c->refusal, anthropic, 405, "invalid_request_error", NULL, NULL,
			       "method %s is not allowed on %s", method, url);
		c->allow = allow;
	} else if (!c->route && (id = tf_route_stored_id(url))) {
		/* GET or DELETE of a stored response: answered now, sent once
		 * the (empty) body is in, as a refusal is */
		if (strcmp(method, "GET") && strcmp(method, "DELETE")) {
			tf_reply_error(&c->refusal, false, 405, "invalid_request_error", NULL, NULL,
				       "method %s is not allowed on %s", method, url);
			c->allow = "GET, DELETE";
		} else if (!tf_auth_ok(s, mc)) {
			tf_reply_error(&c->refusal, false, 401, "authentication_error", "invalid_api_key",
				       NULL, "invalid or missing API key");
		} else {
			tf_resp_stored(&s->c.env, method, id, &c->refusal);
		}
	} else if (!c->route) {
		c->refusal = (struct tf_reply){.status = 404, .type = "application/json"};
		tf_buf_puts(&c->refusal.body, "{\"error\":\"not found\"}");
	} else if (!c->route->open && !tf_auth_ok(s, mc)) {
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
			return c->discarded > s->c.body_max ? tf_respond(mc, c, &c->refusal, c->allow, true)
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
		return tf_route_gen_step(mc, c);
	if (c->answered) /* a reply was queued already */
		return MHD_YES;
	if (c->refused)
		return tf_respond(mc, c, &c->refusal, c->allow, false);
	const struct tf_route *rt = c->route;
	if (c->too_big) {
		char m[96];
		snprintf(m, sizeof(m), "the request body is larger than %zu bytes", s->c.body_max);
		return tf_respond_error(mc, c, rt->anthropic, 413, "invalid_request_error", NULL, m);
	}
	switch (rt->kind) {
	case TF_ROUTE_HEALTH: return tf_route_health(mc, c, tf_auth_ok(s, mc));
	case TF_ROUTE_MODELS: return tf_route_models(mc, c);
	case TF_ROUTE_METRICS: return tf_route_metrics(mc, c);
	case TF_ROUTE_COUNT:
	case TF_ROUTE_TOKENIZE:
	case TF_ROUTE_DETOKENIZE: return tf_route_text_serve(mc, c);
	default:
		return tf_route_gen_serve(mc, c);
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
	tf_route_gen_drop(c, why == MHD_REQUEST_TERMINATED_COMPLETED_OK || c->self_sent);
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
	if ((rc = tf_auth_init(s, c->keys, c->nkeys)))
		goto fail;
	s->c.keys = NULL;
	unsigned pool = c->threads;
	if (!pool)
		pool = tf_cpu_count() < 4 ? (unsigned)tf_cpu_count() : 4;
	if ((rc = tf_writer_start(s, pool))) /* as many stream writers as HTTP threads */
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
	int e = pthread_create(&s->ticker, NULL, tf_ticker_main, s);
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
	tf_writer_stop(s);
	tf_writer_free(s);
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

void tf_server_free(struct tf_server *s)
{
	if (!s)
		return;
	tf_server_stop(s);
	tf_slots_free(s->slots);
	tf_metrics_free(s->metrics);
	pthread_mutex_destroy(&s->list_mu);
	tf_writer_free(s);
	free(s->graves);
	free(s->keys);
	free(s);
}
