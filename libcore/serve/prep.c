/* prep.c: the preparation thread (see prep.h): a FIFO under a mutex. After
 * each job the heap's free pages go back to the system (a big body's
 * working memory is many small blocks the allocator would keep). */
#include "serve/prep.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "base/alloc.h"

struct job {
	void (*fn)(void *arg);
	void *arg;
	struct job *next;
};

struct tf_prep {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct job *head, *tail; /* under mu */
	bool down;               /* under mu */
};

static void *prep_main(void *arg)
{
	struct tf_prep *p = arg;
	for (;;) {
		pthread_mutex_lock(&p->mu);
		while (!p->head && !p->down)
			pthread_cond_wait(&p->cv, &p->mu);
		struct job *j = p->head;
		if (j) {
			p->head = j->next;
			if (!p->head)
				p->tail = NULL;
		}
		pthread_mutex_unlock(&p->mu);
		if (!j)
			return NULL; /* down, and nothing left */
		j->fn(j->arg);
		free(j);
		malloc_trim(0);
	}
}

tf_status tf_prep_new(struct tf_prep **out)
{
	*out = NULL;
	struct tf_prep *p = tf_calloc(1, sizeof(*p));
	if (!p)
		return tf_err(TF_ERR_NOMEM, "server: out of memory");
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	int e = pthread_create(&p->thread, NULL, prep_main, p);
	if (e) {
		pthread_cond_destroy(&p->cv);
		pthread_mutex_destroy(&p->mu);
		free(p);
		errno = e;
		return tf_err_errno(TF_ERR_OS, "cannot start the server's preparation thread");
	}
	*out = p;
	return TF_OK;
}

tf_status tf_prep_push(struct tf_prep *p, void (*fn)(void *arg), void *arg)
{
	struct job *j = tf_calloc(1, sizeof(*j));
	if (!j)
		return tf_err(TF_ERR_NOMEM, "server: out of memory");
	j->fn = fn;
	j->arg = arg;
	pthread_mutex_lock(&p->mu);
	if (p->tail)
		p->tail->next = j;
	else
		p->head = j;
	p->tail = j;
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mu);
	return TF_OK;
}

void tf_prep_free(struct tf_prep *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->down = true;
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mu);
	pthread_join(p->thread, NULL);
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	free(p);
}
