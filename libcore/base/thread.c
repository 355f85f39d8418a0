/* thread.c: parallel-for over a fixed worker pool (pthreads). */
#include "base/thread.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

struct tf_pool {
	int n;
	pthread_t *threads;
	pthread_mutex_t mu;
	pthread_cond_t wake, done;
	unsigned long gen;   /* bumped per job */
	int pending;         /* workers still on the current job */
	int quit;
	/* the current job */
	tf_pool_fn fn;
	void *ctx;
	size_t total, grain;
	atomic_size_t next;
};

int tf_cpu_count(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)n : 1;
}

static void run_chunks(struct tf_pool *p, int worker)
{
	for (;;) {
		size_t b = atomic_fetch_add(&p->next, p->grain);
		if (b >= p->total)
			return;
		size_t e = b + p->grain < p->total ? b + p->grain : p->total;
		p->fn(p->ctx, b, e, worker);
	}
}

struct worker_arg {
	struct tf_pool *p;
	int id;
};

static void *worker_main(void *arg)
{
	struct worker_arg *wa = arg;
	struct tf_pool *p = wa->p;
	int id = wa->id;
	free(wa);
	unsigned long seen = 0;
	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->quit && p->gen == seen)
			pthread_cond_wait(&p->wake, &p->mu);
		if (p->quit)
			break;
		seen = p->gen;
		pthread_mutex_unlock(&p->mu);
		run_chunks(p, id);
		pthread_mutex_lock(&p->mu);
		if (--p->pending == 0)
			pthread_cond_signal(&p->done);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

tf_status tf_pool_new(int n, struct tf_pool **out)
{
	*out = NULL;
	if (n <= 0)
		n = tf_cpu_count();
	struct tf_pool *p = calloc(1, sizeof *p);
	if (!p || !(p->threads = calloc((size_t)n, sizeof *p->threads))) {
		free(p);
		return tf_err(TF_ERR_NOMEM, "out of memory");
	}
	p->n = 1;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->wake, NULL);
	pthread_cond_init(&p->done, NULL);
	for (int i = 1; i < n; i++) {
		struct worker_arg *wa = malloc(sizeof *wa);
		if (wa) {
			wa->p = p;
			wa->id = i;
		}
		if (!wa || pthread_create(&p->threads[i], NULL, worker_main, wa)) {
			free(wa);
			tf_pool_free(p);
			return tf_err(TF_ERR_OS, "cannot start worker thread %d of %d", i, n);
		}
		p->n++;
	}
	*out = p;
	return TF_OK;
}

void tf_pool_free(struct tf_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->quit = 1;
	pthread_cond_broadcast(&p->wake);
	pthread_mutex_unlock(&p->mu);
	for (int i = 1; i < p->n; i++)
		pthread_join(p->threads[i], NULL);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->wake);
	pthread_cond_destroy(&p->done);
	free(p->threads);
	free(p);
}

int tf_pool_size(const struct tf_pool *p)
{
	return p ? p->n : 1;
}

void tf_pool_for(struct tf_pool *p, size_t n, size_t grain, tf_pool_fn fn, void *ctx)
{
	if (!n)
		return;
	if (!grain)
		grain = 1;
	if (!p || p->n == 1 || n <= grain) {
		fn(ctx, 0, n, 0);
		return;
	}
	/* Aim for a few chunks per thread so uneven chunks balance out. */
	size_t want = (n + (size_t)p->n * 4 - 1) / ((size_t)p->n * 4);
	if (want > grain)
		grain = want;
	pthread_mutex_lock(&p->mu);
	p->fn = fn;
	p->ctx = ctx;
	p->total = n;
	p->grain = grain;
	atomic_store(&p->next, 0);
	p->pending = p->n - 1;
	p->gen++;
	pthread_cond_broadcast(&p->wake);
	pthread_mutex_unlock(&p->mu);
	run_chunks(p, 0);
	pthread_mutex_lock(&p->mu);
	while (p->pending)
		pthread_cond_wait(&p->done, &p->mu);
	pthread_mutex_unlock(&p->mu);
}
