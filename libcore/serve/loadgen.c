/* loadgen.c: the load generator: non-blocking HTTP/1.1 clients on one
 * epoll loop, chunked decoding, SSE framing, timing, statistics. */
#include "serve/loadgen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/rng.h"
#include "text/detok.h"

struct dvec {
	double *v;
	size_t n, cap;
};

static int dvec_push(struct dvec *d, double x)
{
	if (d->n == d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 256;
		if (tf_realloc_array(&d->v, cap, sizeof(*d->v)))
			return -1;
		d->cap = cap;
	}
	d->v[d->n++] = x;
	return 0;
}

enum { ST_IDLE, ST_CONNECT, ST_READ, ST_DONE };

struct lreq {
	int fd, state;
	uint32_t index;
	struct tf_buf out;      /* the request bytes */
	size_t sent;
	struct tf_buf in;       /* raw response bytes not yet consumed */
	bool head;              /* headers parsed */
	int status;
	bool chunked;
	long long left;         /* chunked: bytes left in the chunk; -1 before a size line */
	struct tf_buf body;     /* de-chunked body not yet framed */
	struct tf_buf text;     /* concatenated token text (verify) */
	double t_send, t_first, t_last, t_end;
	double made;            /* the pending ": tf-made" stamp, seconds (0: none) */
	uint32_t events, prompt_tokens, completion_tokens;
	uint32_t drafts, drafted, accepted; /* from the reply's tf block */
	bool got_done, failed, held;
	char why[128];
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void fail(struct lreq *q, const char *why)
{
	if (!q->failed)
		snprintf(q->why, sizeof(q->why), "%s", why);
	q->failed = true;
}

/* A token-bearing event arrived at t. */
static void event_at(struct lreq *q, double t)
{
	if (q->events == 0)
		q->t_first = t;
	q->t_last = t;
	q->events++;
}

static tf_status build_request(const struct tf_loadgen_config *c, uint32_t i, struct tf_buf *out)
{
	const char *prompt = c->nprompts ? c->prompts[i % c->nprompts] : c->prompt ? c->prompt : "";
	bool chat = strstr(c->path, "chat") != NULL;
	json_t *b = json_pack("{s:s,s:i,s:b,s:{s:b}}", "model", c->model ? c->model : "tf",
			      "max_tokens", (int)c->max_tokens, "stream", 1, "stream_options",
			      "include_usage", 1);
	if (chat)
		json_object_set_new(b, "messages", json_pack("[{s:s,s:s}]", "role", "user", "content", prompt));
	else
		json_object_set_new(b, "prompt", json_string(prompt));
	if (c->ignore_eos)
		json_object_set_new(b, "ignore_eos", json_true());
	if (c->temperature >= 0)
		json_object_set_new(b, "temperature", json_real(c->temperature));
	char *s = json_dumps(b, JSON_COMPACT);
	json_decref(b);
	if (!s)
		return tf_err(TF_ERR_NOMEM, "loadgen: out of memory");
	tf_buf_reset(out);
	tf_status rc = tf_buf_printf(out,
				     "POST %s HTTP/1.1\r\nHost: %s:%u\r\nContent-Type: application/json\r\n"
				     "Accept: text/event-stream\r\nX-TF-Timing: 1\r\nContent-Length: %zu\r\n%s%s%s"
				     "Connection: close\r\n\r\n%s",
				     c->path, c->host, (unsigned)c->port, strlen(s),
				     c->api_key ? "Authorization: Bearer " : "", c->api_key ? c->api_key : "",
				     c->api_key ? "\r\n" : "", s);
	free(s);
	return rc;
}

/* The common event without building a JSON tree: a scanner that walks
 * the text once (the load generator shares the server's cores, so its
 * cost per event is part of what it measures). */
struct scan {
	const char *p, *end;
};

static void scan_ws(struct scan *s)
{
	while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
		s->p++;
}

static bool scan_lit(struct scan *s, char c)
{
	scan_ws(s);
	if (s->p < s->end && *s->p == c) {
		s->p++;
		return true;
	}
	return false;
}

static long scan_hex4(struct scan *s)
{
	if (s->end - s->p < 4)
		return -1;
	long v = 0;
	for (int i = 0; i < 4; i++) {
		char c = *s->p++;
		int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
			: c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
		if (d < 0)
			return -1;
		v = v * 16 + d;
	}
	return v;
}

static void put_utf8(struct tf_buf *out, unsigned long cp)
{
	char b[4];
	size_t n;
	if (cp < 0x80) {
		b[0] = (char)cp, n = 1;
	} else if (cp < 0x800) {
		b[0] = (char)(0xc0 | cp >> 6), b[1] = (char)(0x80 | (cp & 0x3f)), n = 2;
	} else if (cp < 0x10000) {
		b[0] = (char)(0xe0 | cp >> 12), b[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		b[2] = (char)(0x80 | (cp & 0x3f)), n = 3;
	} else {
		b[0] = (char)(0xf0 | cp >> 18), b[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
		b[2] = (char)(0x80 | ((cp >> 6) & 0x3f)), b[3] = (char)(0x80 | (cp & 0x3f)), n = 4;
	}
	tf_buf_append(out, b, n);
}

/* A JSON string, unescaped into out (when set). False on anything a strict
 * parser would refuse: control bytes, bad escapes, lone surrogates, \u0000,
 * invalid UTF-8. */
static bool scan_string(struct scan *s, struct tf_buf *out)
{
	if (!scan_lit(s, '"'))
		return false;
	const char *run = s->p;
	while (s->p < s->end) {
		unsigned char c = (unsigned char)*s->p;
		if (c != '"' && c != '\\') {
			if (c < 0x20)
				return false;
			s->p++;
			continue;
		}
		if (!tf_utf8_valid(run, (size_t)(s->p - run)))
			return false;
		if (out)
			tf_buf_append(out, run, (size_t)(s->p - run));
		s->p++;
		if (c == '"')
			return true;
		if (s->p == s->end)
			return false;
		static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
		char e = *s->p++;
		const char *m = e ? strchr(from, e) : NULL;
		if (m) {
			if (out)
				tf_buf_putc(out, to[m - from]);
		} else if (e == 'u') {
			long cp = scan_hex4(s);
			if (cp >= 0xd800 && cp < 0xdc00) { /* a surrogate pair */
				long lo = s->end - s->p >= 2 && s->p[0] == '\\' && s->p[1] == 'u'
					? (s->p += 2, scan_hex4(s)) : -1;
				if (lo < 0xdc00 || lo >= 0xe000)
					return false;
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
			} else if (cp <= 0 || (cp >= 0xdc00 && cp < 0xe000)) {
				return false;
			}
			if (out)
				put_utf8(out, (unsigned long)cp);
		} else {
			return false;
		}
		run = s->p;
	}
	return false;
}

/* An object key (no escapes) into k, and its colon. */
static bool scan_key(struct scan *s, char *k, size_t cap)
{
	if (!scan_lit(s, '"'))
		return false;
	const char *a = s->p;
	while (s->p < s->end && *s->p != '"' && *s->p != '\\')
		s->p++;
	size_t n = (size_t)(s->p - a);
	if (s->p == s->end || *s->p != '"' || n >= cap)
		return false;
	memcpy(k, a, n);
	k[n] = 0;
	s->p++;
	return scan_lit(s, ':');
}

/* Any value, skipped. */
static bool scan_skip(struct scan *s, int depth)
{
	if (depth > 32)
		return false;
	scan_ws(s);
	if (s->p == s->end)
		return false;
	char c = *s->p;
	if (c == '"')
		return scan_string(s, NULL);
	if (c == '{' || c == '[') {
		char close = c == '{' ? '}' : ']';
		s->p++;
		if (scan_lit(s, close))
			return true;
		do {
			char k[64];
			if (c == '{' && !scan_key(s, k, sizeof(k)))
				return false;
			if (!scan_skip(s, depth + 1))
				return false;
		} while (scan_lit(s, ','));
		return scan_lit(s, close);
	}
	static const char *const lits[] = {"true", "false", "null"};
	for (int i = 0; i < 3; i++) {
		size_t n = strlen(lits[i]);
		if ((size_t)(s->end - s->p) >= n && !memcmp(s->p, lits[i], n)) {
			s->p += n;
			return true;
		}
	}
	const char *a = s->p; /* a number */
	while (s->p < s->end && *s->p && strchr("+-.0123456789eE", *s->p))
		s->p++;
	return s->p > a;
}

/* The first choice: delta.content / delta.reasoning_content, or text. */
static bool scan_choice(struct scan *s, struct tf_buf *text, bool *token)
{
	if (!scan_lit(s, '{'))
		return false;
	if (scan_lit(s, '}'))
		return true;
	int texts = 0; /* more than one: the full parser keeps their order */
	do {
		char k[32];
		if (!scan_key(s, k, sizeof(k)))
			return false;
		if (!strcmp(k, "text")) {
			size_t at = text->len;
			if (!scan_string(s, text) || (text->len > at && ++texts > 1))
				return false;
			*token |= text->len > at;
		} else if (!strcmp(k, "delta")) {
			if (!scan_lit(s, '{'))
				return false;
			if (scan_lit(s, '}'))
				continue;
			do {
				char d[32];
				if (!scan_key(s, d, sizeof(d)))
					return false;
				if (!strcmp(d, "content") || !strcmp(d, "reasoning_content")) {
					size_t at = text->len;
					if (!scan_string(s, text) || (text->len > at && ++texts > 1))
						return false;
					*token |= text->len > at;
				} else if (!strcmp(d, "role") || !strcmp(d, "reasoning")) {
					if (!scan_skip(s, 0))
						return false;
				} else {
					return false; /* tool calls and the rest */
				}
			} while (scan_lit(s, ','));
			if (!scan_lit(s, '}'))
				return false;
		} else if (!scan_skip(s, 0)) {
			return false;
		}
	} while (scan_lit(s, ','));
	return scan_lit(s, '}');
}

bool tf_loadgen_scan(const char *d, size_t n, struct tf_buf *text, bool *token)
{
	struct scan s = {d, d + n};
	size_t mark = text->len;
	*token = false;
	if (!scan_lit(&s, '{'))
		return false;
	if (!scan_lit(&s, '}')) {
		do {
			char k[32];
			if (!scan_key(&s, k, sizeof(k)))
				goto full;
			if (!strcmp(k, "choices")) {
				if (!scan_lit(&s, '['))
					goto full;
				if (scan_lit(&s, ']'))
					continue;
				if (!scan_choice(&s, text, token))
					goto full;
				while (scan_lit(&s, ','))
					if (!scan_skip(&s, 0))
						goto full;
				if (!scan_lit(&s, ']'))
					goto full;
			} else if (!strcmp(k, "usage") || !strcmp(k, "error") || !strcmp(k, "tf") ||
				   !scan_skip(&s, 0)) {
				goto full;
			}
		} while (scan_lit(&s, ','));
		if (!scan_lit(&s, '}'))
			goto full;
	}
	scan_ws(&s);
	if (s.p == s.end)
		return true;
full:
	text->len = mark;
	if (text->data)
		text->data[mark] = 0;
	*token = false;
	return false;
}

/* One SSE frame's data. */
static void on_data(struct lreq *q, const char *d, size_t n, double t)
{
	if (n == 6 && !memcmp(d, "[DONE]", 6)) {
		q->got_done = true;
		return;
	}
	bool carried;
	if (tf_loadgen_scan(d, n, &q->text, &carried)) {
		if (carried)
			event_at(q, t);
		return;
	}
	json_error_t e;
	/* text may hold U+0000 (a token of byte 0), which JSON allows as \u0000 */
	json_t *v = json_loadb(d, n, JSON_ALLOW_NUL, &e);
	if (!v) {
		fail(q, "an event is not JSON");
		return;
	}
	if (json_object_get(v, "error")) {
		const char *m = json_string_value(json_object_get(json_object_get(v, "error"), "message"));
		fail(q, m ? m : "error event");
	}
	const json_t *u = json_object_get(v, "usage");
	if (json_is_object(u)) {
		q->prompt_tokens = (uint32_t)json_integer_value(json_object_get(u, "prompt_tokens"));
		q->completion_tokens = (uint32_t)json_integer_value(json_object_get(u, "completion_tokens"));
	}
	const json_t *tf = json_object_get(v, "tf");
	if (json_is_object(tf)) {
		q->drafts = (uint32_t)json_integer_value(json_object_get(tf, "drafts"));
		q->drafted = (uint32_t)json_integer_value(json_object_get(tf, "drafted"));
		q->accepted = (uint32_t)json_integer_value(json_object_get(tf, "accepted"));
	}
	const json_t *ch = json_array_get(json_object_get(v, "choices"), 0);
	const json_t *delta = json_object_get(ch, "delta");
	const char *keys[] = {"content", "reasoning_content", NULL};
	bool token = false;
	for (int k = 0; keys[k]; k++) {
		const json_t *s = json_object_get(delta, keys[k]);
		if (json_is_string(s) && json_string_length(s)) {
			token = true;
			tf_buf_append(&q->text, json_string_value(s), json_string_length(s));
		}
	}
	if (json_object_get(delta, "tool_calls"))
		token = true;
	const json_t *txt = json_object_get(ch, "text");
	if (json_is_string(txt) && json_string_length(txt)) {
		token = true;
		tf_buf_append(&q->text, json_string_value(txt), json_string_length(txt));
	}
	if (token)
		event_at(q, t);
	json_decref(v);
}

/* Frame what the body holds so far. itl collects gaps; added the time
 * from a token's make stamp to now, for stamped token-bearing events. */
static void frame_body(struct lreq *q, double t, struct dvec *itl, struct dvec *added)
{
	char *s = q->body.data;
	size_t n = q->body.len, at = 0;
	for (;;) {
		char *end = s ? memmem(s + at, n - at, "\n\n", 2) : NULL;
		if (!end)
			break;
		size_t len = (size_t)(end - (s + at));
		/* A frame: lines; take each "data: " line. */
		char *line = s + at, *stop = s + at + len;
		while (line < stop) {
			char *nl = memchr(line, '\n', (size_t)(stop - line));
			char *le = nl ? nl : stop;
			if (le - line > 10 && !memcmp(line, ": tf-made ", 10)) {
				q->made = (double)strtoll(line + 10, NULL, 10) * 1e-9;
			} else if (le - line >= 6 && !memcmp(line, "data: ", 6)) {
				uint32_t before = q->events;
				double last = q->t_last;
				on_data(q, line + 6, (size_t)(le - line - 6), t);
				if (q->events > before && before > 0)
					dvec_push(itl, t - last);
				if (q->events > before && q->made > 0)
					dvec_push(added, t - q->made);
				if (q->events > before)
					q->made = 0;
			}
			line = le + 1;
		}
		at += len + 2;
	}
	if (at) {
		memmove(s, s + at, n - at);
		q->body.len = n - at;
		s[q->body.len] = 0;
	}
}

/* Consume raw bytes: headers, then the body (chunked or not). */
static void consume(struct lreq *q, double t, struct dvec *itl, struct dvec *added)
{
	if (!q->head) {
		char *e = q->in.data ? memmem(q->in.data, q->in.len, "\r\n\r\n", 4) : NULL;
		if (!e)
			return;
		*e = 0;
		if (sscanf(q->in.data, "HTTP/1.%*d %d", &q->status) != 1)
			fail(q, "not an HTTP response");
		q->chunked = strcasestr(q->in.data, "\r\ntransfer-encoding: chunked") != NULL;
		size_t hl = (size_t)(e - q->in.data) + 4;
		memmove(q->in.data, q->in.data + hl, q->in.len - hl);
		q->in.len -= hl;
		q->head = true;
		q->left = -1;
		if (q->status != 200) {
			char w[64];
			snprintf(w, sizeof(w), "HTTP %d", q->status);
			fail(q, w);
		}
	}
	size_t at = 0;
	char *s = q->in.data;
	while (at < q->in.len) {
		if (!q->chunked) {
			tf_buf_append(&q->body, s + at, q->in.len - at);
			at = q->in.len;
			break;
		}
		if (q->left < 0) { /* a size line */
			char *nl = memmem(s + at, q->in.len - at, "\r\n", 2);
			if (!nl)
				break;
			q->left = strtoll(s + at, NULL, 16);
			at = (size_t)(nl - s) + 2;
			if (q->left == 0) {
				q->left = -2; /* the last chunk: the rest is trailers */
				at = q->in.len;
			}
			continue;
		}
		if (q->left == -2) {
			at = q->in.len;
			break;
		}
		size_t take = q->in.len - at;
		if ((long long)take > q->left)
			take = (size_t)q->left;
		tf_buf_append(&q->body, s + at, take);
		at += take;
		q->left -= (long long)take;
		if (q->left == 0) { /* the chunk's CRLF */
			if (q->in.len - at < 2) {
				q->left = 0;
				break;
			}
			at += 2;
			q->left = -1;
		}
	}
	if (at) {
		memmove(s, s + at, q->in.len - at);
		q->in.len -= at;
	}
	frame_body(q, t, itl, added);
}

static int open_conn(const struct tf_loadgen_config *c, struct lreq *q, int ep)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(c->port)};
	if (inet_pton(AF_INET, c->host, &a.sin_addr) != 1)
		return -1;
	q->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (q->fd < 0)
		return -1;
	int one = 1;
	setsockopt(q->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(q->fd, (struct sockaddr *)&a, sizeof(a)) && errno != EINPROGRESS) {
		close(q->fd);
		q->fd = -1;
		return -1;
	}
	struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = q};
	epoll_ctl(ep, EPOLL_CTL_ADD, q->fd, &ev);
	q->state = ST_CONNECT;
	q->t_send = now_s();
	return 0;
}

static void finish(struct lreq *q, int ep)
{
	if (q->fd >= 0) {
		epoll_ctl(ep, EPOLL_CTL_DEL, q->fd, NULL);
		close(q->fd);
		q->fd = -1;
	}
	q->t_end = now_s();
	q->state = ST_DONE;
	if (!q->held && !q->failed && !q->got_done)
		fail(q, "the stream ended without [DONE]");
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* numpy's default (linear) percentile of sorted v. */
static double pct(const double *v, size_t n, double p)
{
	if (n == 0)
		return 0;
	double r = p / 100.0 * (double)(n - 1);
	size_t lo = (size_t)floor(r), hi = lo + 1 < n ? lo + 1 : lo;
	return v[lo] + (v[hi] - v[lo]) * (r - (double)lo);
}

static struct tf_loadgen_stat stat_of(struct dvec *d)
{
	struct tf_loadgen_stat s = {0};
	if (d->n == 0)
		return s;
	qsort(d->v, d->n, sizeof(*d->v), cmp_d);
	double sum = 0;
	for (size_t i = 0; i < d->n; i++)
		sum += d->v[i];
	s.n = d->n;
	s.mean = sum / (double)d->n;
	s.p50 = pct(d->v, d->n, 50);
	s.p90 = pct(d->v, d->n, 90);
	s.p99 = pct(d->v, d->n, 99);
	s.max = d->v[d->n - 1];
	return s;
}

tf_status tf_loadgen_run(const struct tf_loadgen_config *c, struct tf_loadgen_result *r)
{
	memset(r, 0, sizeof(*r));
	struct lreq *q = tf_calloc(c->requests ? c->requests : 1, sizeof(*q));
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct dvec ttft = {0}, tpot = {0}, itl = {0}, e2el = {0}, added = {0};
	tf_status rc = TF_OK;
	if (!q || ep < 0) {
		rc = tf_err_errno(TF_ERR_OS, "loadgen: cannot set up");
		goto out;
	}
	struct tf_rng rng;
	tf_rng_seed(&rng, c->seed ? c->seed : 1);
	double t0 = now_s(), next = t0;
	uint32_t started = 0, finished = 0, inflight = 0, connected_any = 0;
	char rbuf[65536];
	while (finished < c->requests) {
		double t = now_s();
		while (started < c->requests && (!c->concurrency || inflight < c->concurrency) &&
		       (c->rate <= 0 || t >= next)) {
			struct lreq *x = &q[started];
			x->index = started;
			if ((rc = build_request(c, started, &x->out)))
				goto out;
			if (open_conn(c, x, ep)) {
				fail(x, "cannot connect");
				x->state = ST_DONE;
				x->t_end = x->t_send = t;
				finished++;
			} else {
				inflight++;
			}
			started++;
			if (inflight > r->peak_concurrency)
				r->peak_concurrency = inflight;
			if (c->rate > 0) /* Poisson arrivals: exponential gaps */
				next += -log(1.0 - (double)tf_rng_f32(&rng) * 0.999999) / c->rate;
		}
		int wait = 20;
		if (c->rate > 0 && started < c->requests) {
			int ms = (int)((next - now_s()) * 1000);
			wait = ms < 0 ? 0 : ms < wait ? ms : wait;
		}
		struct epoll_event evs[256];
		int n = epoll_wait(ep, evs, 256, wait);
		t = now_s();
		for (int i = 0; i < n; i++) {
			struct lreq *x = evs[i].data.ptr;
			if (x->state == ST_CONNECT) {
				int err = 0;
				socklen_t el = sizeof(err);
				getsockopt(x->fd, SOL_SOCKET, SO_ERROR, &err, &el);
				if (err) {
					fail(x, strerror(err));
					finish(x, ep);
					finished++, inflight--;
					continue;
				}
				connected_any = 1;
				ssize_t w = send(x->fd, x->out.data + x->sent, x->out.len - x->sent, MSG_NOSIGNAL);
				if (w > 0)
					x->sent += (size_t)w;
				if (x->sent == x->out.len) {
					x->state = ST_READ;
					struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = x};
					epoll_ctl(ep, EPOLL_CTL_MOD, x->fd, &ev);
				} else if (w < 0 && errno != EAGAIN) {
					fail(x, "send failed");
					finish(x, ep);
					finished++, inflight--;
				}
				continue;
			}
			if (x->state != ST_READ)
				continue;
			for (;;) {
				ssize_t got = recv(x->fd, rbuf, sizeof(rbuf), MSG_DONTWAIT);
				if (got > 0) {
					t = now_s(); /* when these bytes were read, not when epoll woke */
					tf_buf_append(&x->in, rbuf, (size_t)got);
					consume(x, t, &itl, &added);
					if ((size_t)got < sizeof(rbuf))
						break; /* drained: epoll says when more comes */
					continue;
				}
				if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
					if (got < 0)
						fail(x, "receive failed");
					finish(x, ep);
					finished++, inflight--;
				}
				break;
			}
		}
		/* Holds and timeouts. */
		if (c->hold_s > 0 || c->timeout_s > 0)
			for (uint32_t i = 0; i < started; i++) {
				struct lreq *x = &q[i];
				if (x->state == ST_DONE)
					continue;
				if (c->hold_s > 0 && t - x->t_send >= c->hold_s) {
					x->held = true;
					finish(x, ep);
					finished++, inflight--;
				} else if (c->timeout_s > 0 && t - x->t_send >= c->timeout_s) {
					fail(x, "timed out");
					finish(x, ep);
					finished++, inflight--;
				}
			}
	}
	r->duration_s = now_s() - t0;
	if (!connected_any && c->requests) {
		rc = tf_err(TF_ERR_OS, "loadgen: no connection to %s:%u", c->host, (unsigned)c->port);
		goto out;
	}
	const struct lreq *ref = NULL;
	for (uint32_t i = 0; i < c->requests; i++) {
		struct lreq *x = &q[i];
		if (x->held) {
			r->held++;
			continue;
		}
		if (x->failed) {
			if (!r->failed)
				snprintf(r->first_error, sizeof(r->first_error), "request %u: %s", i, x->why);
			r->failed++;
			continue;
		}
		r->completed++;
		r->input_tokens += x->prompt_tokens;
		uint32_t out = x->completion_tokens ? x->completion_tokens : x->events;
		r->output_tokens += out;
		r->drafts += x->drafts;
		r->drafted += x->drafted;
		r->accepted += x->accepted;
		double e2e = x->t_end - x->t_send, first = x->t_first - x->t_send;
		dvec_push(&e2el, e2e);
		if (x->events)
			dvec_push(&ttft, first);
		if (out > 1 && x->events)
			dvec_push(&tpot, (e2e - first) / (out - 1));
		if (c->verify) {
			if (!ref)
				ref = x;
			else if (x->text.len != ref->text.len ||
				 memcmp(x->text.data, ref->text.data, x->text.len))
				r->mismatched++;
		}
	}
	r->ttft = stat_of(&ttft);
	r->tpot = stat_of(&tpot);
	r->itl = stat_of(&itl);
	r->e2el = stat_of(&e2el);
	r->added = stat_of(&added);
	if (r->duration_s > 0) {
		r->request_rate = r->completed / r->duration_s;
		r->output_rate = (double)r->output_tokens / r->duration_s;
		r->total_rate = (double)(r->input_tokens + r->output_tokens) / r->duration_s;
	}
out:
	if (q)
		for (uint32_t i = 0; i < c->requests; i++) {
			if (q[i].fd > 0)
				close(q[i].fd);
			tf_buf_release(&q[i].out);
			tf_buf_release(&q[i].in);
			tf_buf_release(&q[i].body);
			tf_buf_release(&q[i].text);
		}
	free(q);
	free(ttft.v), free(tpot.v), free(itl.v), free(e2el.v), free(added.v);
	if (ep >= 0)
		close(ep);
	return rc;
}

static void stat_line(struct tf_buf *o, const char *name, const struct tf_loadgen_stat *s)
{
	tf_buf_printf(o, "%-6s ms   mean %9.3f  p50 %9.3f  p90 %9.3f  p99 %9.3f  max %9.3f  (n %zu)\n",
		      name, s->mean * 1e3, s->p50 * 1e3, s->p90 * 1e3, s->p99 * 1e3, s->max * 1e3, s->n);
}

static json_t *stat_json(const struct tf_loadgen_stat *s)
{
	return json_pack("{s:f,s:f,s:f,s:f,s:f,s:I}", "mean_ms", s->mean * 1e3, "p50_ms", s->p50 * 1e3,
			 "p90_ms", s->p90 * 1e3, "p99_ms", s->p99 * 1e3, "max_ms", s->max * 1e3, "n",
			 (json_int_t)s->n);
}

void tf_loadgen_report(const struct tf_loadgen_config *c, const struct tf_loadgen_result *r,
		       bool json, struct tf_buf *o)
{
	if (json) {
		json_t *v = json_pack(
			"{s:s,s:I,s:I,s:f,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:f,s:f,s:f,s:f,s:o,s:o,s:o,s:o,s:o,s:s}",
			"path", c->path, "requests", (json_int_t)c->requests, "concurrency",
			(json_int_t)c->concurrency, "rate", c->rate, "completed", (json_int_t)r->completed,
			"failed", (json_int_t)r->failed, "held", (json_int_t)r->held, "mismatched",
			(json_int_t)r->mismatched, "peak_concurrency", (json_int_t)r->peak_concurrency,
			"input_tokens", (json_int_t)r->input_tokens, "output_tokens",
			(json_int_t)r->output_tokens, "duration_s", r->duration_s, "request_throughput",
			r->request_rate, "output_throughput", r->output_rate, "total_token_throughput",
			r->total_rate, "ttft", stat_json(&r->ttft), "tpot", stat_json(&r->tpot), "itl",
			stat_json(&r->itl), "e2el", stat_json(&r->e2el), "added", stat_json(&r->added),
			"first_error", r->first_error);
		json_object_set_new(v, "drafts", json_integer((json_int_t)r->drafts));
		json_object_set_new(v, "drafted", json_integer((json_int_t)r->drafted));
		json_object_set_new(v, "accepted", json_integer((json_int_t)r->accepted));
		json_object_set_new(v, "accept_rate", json_real(r->drafted ? (double)r->accepted / (double)r->drafted : 0));
		json_object_set_new(v, "mean_accepted_length",
				    json_real(r->drafts ? (double)r->accepted / (double)r->drafts : 0));
		char *s = json_dumps(v, JSON_INDENT(2));
		json_decref(v);
		if (s)
			tf_buf_printf(o, "%s\n", s);
		free(s);
		return;
	}
	tf_buf_printf(o, "requests %u at concurrency %u%s: completed %u, failed %u, held %u%s\n",
		      c->requests, c->concurrency, c->rate > 0 ? " (Poisson rate)" : "", r->completed,
		      r->failed, r->held, c->verify ? "" : " (replies not verified)");
	if (c->verify)
		tf_buf_printf(o, "replies differing from the first (lost or duplicated tokens): %u\n",
			      r->mismatched);
	tf_buf_printf(o, "duration %.3f s, peak concurrency %u\n", r->duration_s, r->peak_concurrency);
	tf_buf_printf(o, "tokens in %llu, out %llu; throughput %.2f req/s, %.1f out tok/s, %.1f total tok/s\n",
		      (unsigned long long)r->input_tokens, (unsigned long long)r->output_tokens,
		      r->request_rate, r->output_rate, r->total_rate);
	if (r->drafts)
		tf_buf_printf(o, "drafts: %llu rows verified %llu draft tokens, %llu accepted (%.1f%%), "
			      "mean accepted length %.2f a drafted row\n",
			      (unsigned long long)r->drafts, (unsigned long long)r->drafted,
			      (unsigned long long)r->accepted,
			      r->drafted ? 100.0 * (double)r->accepted / (double)r->drafted : 0.0,
			      (double)r->accepted / (double)r->drafts);
	else
		tf_buf_printf(o, "drafts: none verified\n");
	stat_line(o, "TTFT", &r->ttft);
	stat_line(o, "TPOT", &r->tpot);
	stat_line(o, "ITL", &r->itl);
	stat_line(o, "E2EL", &r->e2el);
	if (r->added.n)
		stat_line(o, "ADDED", &r->added);
	if (r->failed)
		tf_buf_printf(o, "first failure: %s\n", r->first_error);
}
