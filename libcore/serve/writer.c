/* writer.c: the stream writers (server_impl.h): threads, each with a
 * queue of parked connections that have news (in the order the engine
 * delivered to them) and an epoll for its kick and the sockets waiting for
 * room. A writer pumps a parked stream's generation and sends its frames
 * as HTTP chunks straight to the socket (and, for a body prepared off the
 * HTTP threads, the whole reply, stream head or text answer), while MHD
 * keeps the connection suspended; it hands the connection back to MHD for
 * the end, a client that left, a failure or a stop. See struct conn in
 * server_impl.h for who holds a connection when. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/log.h"
#include "serve/server_impl.h"

/* Resume a parked connection (any thread): MHD takes it over, or, for a
 * stream MHD never saw (self_head), its writer. */
void tf_writer_wake(struct conn *c)
{
	pthread_mutex_lock(&c->mu);
	if (c->state == C_PARKED && c->self_head && !atomic_load(&c->s->stopping)) {
		tf_writer_queue_locked(c); /* MHD never sees this stream: its writer looks */
	} else if (c->state == C_PARKED) {
		c->state = C_MHD;
		MHD_resume_connection(c->mc);
	}
	pthread_mutex_unlock(&c->mu);
}

/* Queue a parked stream for the writer; c->mu held. Once the writer is
 * down (a stop) MHD takes the connection back instead. */
void tf_writer_queue_locked(struct conn *c)
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

/* A writer for a new request, in turn. Any thread. */
struct writer *tf_writer_pick(struct tf_server *s)
{
	return &s->writers[atomic_fetch_add(&s->next_writer, 1) % s->nwriters];
}

/* The head of a whole reply a writer sends (Connection: close). Returns
 * non-zero when out of memory. */
tf_status tf_writer_head(struct tf_buf *wire, int status, const char *type, size_t len,
			 int retry_after)
{
	char ra[32] = "";
	if (retry_after)
		snprintf(ra, sizeof(ra), "Retry-After: %d\r\n", retry_after);
	return tf_buf_printf(wire, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
			     "%sConnection: close\r\n\r\n", status,
			     MHD_get_reason_phrase_for((unsigned)status), type ? type : "application/json",
			     len, ra);
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
	c->blocked_at = conn_now();
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

/* The whole reply of a request whose body was prepared off MHD's threads,
 * written by its writer: false while the generation is not done.
 * libmicrohttpd, taking back a connection suspended in the handler's first
 * call, reads the socket before the reply is queued, and a read of a
 * half-closed client's end of stream drops it unanswered; so tf writes
 * this reply itself (Connection: close) and MHD only closes the connection
 * (prep_keep in route_gen.c). */
static bool whole_wire(struct conn *c)
{
	if (c->gen && !pump_all(c))
		return false;
	if (c->failed)
		return true;
	struct tf_reply r = {0};
	if (c->gen)
		tf_gen_reply(c->gen, &r);
	else /* a refusal prepared off MHD's threads (prep_keep in route_gen.c) */
		r = c->err, c->err = (struct tf_reply){0};
	if (tf_writer_head(&c->wire, r.status, r.type, r.body.len, r.retry_after) ||
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
				atomic_store(&c->last_write, conn_now());
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
		if (c->self_text && !c->eof) { /* the next piece of a text answer */
			char piece[16384];
			size_t n = c->text.ids ? tf_text_read(&c->text, c->tpos, piece, sizeof(piece)) : 0;
			if (n && tf_buf_append(&c->wire, piece, n))
				c->failed = true;
			c->tpos += n;
			if (!n || c->tpos >= c->text.size)
				c->eof = true;
			continue;
		}
		if (c->eof && c->self_head && !c->self_tail) { /* the last chunk */
			c->self_tail = true;
			if (tf_buf_puts(&c->wire, "0\r\n\r\n"))
				c->failed = true;
			continue;
		}
		if (c->eof) {
			c->self_sent = c->whole || c->by_writer;
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
			if (atomic_exchange(&c->probe, false))
				tf_buf_puts(&c->pend, ":\n\n");
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
		double t = conn_now();
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
tf_status tf_writer_start(struct tf_server *s, unsigned n)
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
void tf_writer_stop(struct tf_server *s)
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

void tf_writer_free(struct tf_server *s)
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
