/* ticker.c: the server's ticker thread (server_impl.h): every 50 ms it
 * resumes parked streams due a keepalive, finds the clients of parked
 * requests that left or half-closed (MHD does not watch suspended
 * sockets), enforces the slots' deadlines (slots.h), and pumps abandoned
 * generations to their end and counts them. It takes s->list_mu for its
 * walk and each connection's mu to read its state. */
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "base/alloc.h"
#include "serve/server_impl.h"

/* The client of a parked request half-closed its socket (ticker): it may
 * have closed it whole, or only its sending side and still be reading.
 * Send it a few harmless bytes: a closed socket answers them with a reset,
 * which the next look sees (POLLERR). A whole reply gets an interim
 * "100 Continue" (HTTP/1.1 clients skip 1xx replies; MHD has sent nothing
 * yet, the connection is suspended), a stream an SSE comment line through
 * its writer. An HTTP/1.0 client cannot take a 1xx: it counts as gone. */
static void probe(struct conn *c)
{
	static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
	if (!c->whole) {
		atomic_store(&c->probe, true);
		tf_writer_wake(c);
		return;
	}
	pthread_mutex_lock(&c->mu);
	bool parked = c->state == C_PARKED;
	ssize_t n = parked && c->http11 ? send(c->fd, cont, sizeof(cont) - 1,
					       MSG_NOSIGNAL | MSG_DONTWAIT) : 0;
	pthread_mutex_unlock(&c->mu);
	if (!parked) { /* resumed meanwhile: look again later */
		c->probed = false;
	} else if (n != (ssize_t)sizeof(cont) - 1) {
		atomic_store(&c->gone, true);
		tf_writer_wake(c);
	}
}

/* The ticker: every 50 ms, resume streams due a keepalive, find clients
 * that left suspended requests (MHD does not watch suspended sockets), and
 * pump abandoned generations to their end. */
void *tf_ticker_main(void *arg)
{
	struct tf_server *s = arg;
	double keep = s->c.env.keepalive_s, last_peek = 0;
	struct pollfd *pf = NULL;
	struct conn **pc = NULL;
	size_t cap = 0;
	while (!atomic_load(&s->stopping)) {
		struct timespec ts = {0, 50 * 1000000L};
		nanosleep(&ts, NULL);
		double t = conn_now();
		bool peek = t - last_peek >= 0.1;
		size_t n = 0;
		pthread_mutex_lock(&s->list_mu);
		for (struct conn *c = s->gens; c; c = c->next) {
			pthread_mutex_lock(&c->mu);
			bool susp = c->state == C_PARKED;
			pthread_mutex_unlock(&c->mu);
			if (!susp)
				continue;
			if (!c->whole && keep > 0 && t - atomic_load(&c->last_write) >= keep) {
				tf_writer_wake(c);
				continue;
			}
			if (!peek)
				continue;
			if (n == cap) {
				size_t nc = cap ? cap * 2 : 64;
				if (tf_realloc_array(&pf, nc, sizeof(*pf)) || tf_realloc_array(&pc, nc, sizeof(*pc)))
					break;
				cap = nc;
			}
			pf[n] = (struct pollfd){.fd = c->fd, .events = POLLRDHUP};
			pc[n++] = c;
		}
		if (n && poll(pf, n, 0) > 0)
			for (size_t i = 0; i < n; i++) {
				short r = pf[i].revents;
				if (r & (POLLERR | POLLHUP | POLLNVAL)) { /* closed, or reset */
					atomic_store(&pc[i]->gone, true);
					tf_writer_wake(pc[i]);
				} else if ((r & POLLRDHUP) && !pc[i]->probed) {
					pc[i]->probed = true;
					probe(pc[i]);
				}
			}
		if (peek) {
			last_peek = t;
			tf_slots_tick(s->slots);
		}
		/* Abandoned generations: pump to the end (the cancel lands at the
		 * next round boundary), then record and free. */
		for (size_t i = 0; i < s->ngraves;) {
			bool done = false;
			struct grave *gv = &s->graves[i];
			for (int k = 0; k < 64 && !done; k++)
				if (tf_gen_pump(gv->gen, 0, NULL, &done))
					tf_gen_cancel(gv->gen);
			if (done) {
				tf_server_record(s, gv->gen, false, gv->delivered);
				tf_gen_free(gv->gen);
				*gv = s->graves[--s->ngraves];
			} else {
				i++;
			}
		}
		pthread_mutex_unlock(&s->list_mu);
	}
	free(pf);
	free(pc);
	return NULL;
}
