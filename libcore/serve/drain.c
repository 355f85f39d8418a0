/* drain.c: the way down (server.h): drain (new generations refused,
 * running ones given drain_s, then halted), and stop (no connection left
 * suspended: the ticker and the writers stop, parked connections go back
 * to libmicrohttpd, the daemon stops, abandoned generations are pumped to
 * their end and counted). Called from the program's main thread. */
#include <errno.h>
#include <time.h>

#include "base/log.h"
#include "serve/server_impl.h"

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

long tf_server_drain(struct tf_server *s, double drain_s, atomic_int *signals)
{
	atomic_store(&s->draining, true);
	double end = conn_now() + drain_s;
	while (atomic_load(&s->inflight) > 0 && conn_now() < end && (!signals || atomic_load(signals) < 2))
		sleep_ms(20);
	long left = atomic_load(&s->inflight);
	if (left > 0) {
		tf_log(TF_LOG_WARN, "halting %ld request%s still running", left, left == 1 ? "" : "s");
		tf_engine_halt(s->c.env.engine, "server restarting: retry shortly");
		double cut = conn_now() + 2.0;
		while (atomic_load(&s->inflight) > 0 && conn_now() < cut)
			sleep_ms(20);
	}
	return left;
}

void tf_server_stop(struct tf_server *s)
{
	if (!s || !s->d)
		return;
	/* No connection may stay suspended past this point: stop the ticker,
	 * refuse new suspensions, wake the suspended. */
	atomic_store(&s->stopping, true);
	if (s->ticking) {
		pthread_join(s->ticker, NULL);
		s->ticking = false;
	}
	tf_writer_stop(s);
	tf_prep_free(s->prep); /* its jobs resume their connections */
	s->prep = NULL;
	pthread_mutex_lock(&s->list_mu);
	for (struct conn *c = s->gens; c; c = c->next)
		tf_writer_wake(c);
	pthread_mutex_unlock(&s->list_mu);
	MHD_stop_daemon(s->d);
	s->d = NULL;
	/* Generations whose clients left: wait for their end, then record. */
	for (size_t i = 0; i < s->ngraves; i++) {
		bool done = false;
		struct grave *gv = &s->graves[i];
		for (int k = 0; k < 100 && !done; k++)
			if (tf_gen_pump(gv->gen, 50, NULL, &done))
				tf_gen_cancel(gv->gen);
		tf_server_record(s, gv->gen, false, gv->delivered);
		tf_gen_free(gv->gen);
	}
	s->ngraves = 0;
}
