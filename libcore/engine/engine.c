/* engine.c: lanes, the engine thread and its rounds, cancel and halt.
 *
 * Locks: e->mu guards the queues, the halt and close flags and the
 * counters; each job's mu guards its delivered tokens and its end. The
 * engine thread never holds e->mu while it calls the backend, and never
 * holds a job's mu while it takes e->mu. */
#include "engine/engine.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/log.h"
#include "engine/constrain.h"
#include "grammar/grammar.h"
#include "engine/planner.h"

struct tf_engine_job {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int refs;                  /* the engine's and the caller's, under mu */
	struct tf_engine *e;
	struct tf_engine_job *next; /* queue link (under e->mu) */
	struct tf_lane lane;
	struct tf_engine_params params;
	int32_t *prompt;
	int32_t *toks;             /* delivered tokens, under mu */
	double *made;              /* when the forward that made each one returned */
	struct tf_engine_logprob *lps; /* their log-probabilities (params.logprobs), under mu */
	struct tf_engine_logprob *lpbuf; /* a round's, filled by the backend (params.logprobs) */
	size_t ntoks, cap, nread;
	enum tf_engine_end end;
	tf_status st;
	bool halted;
	char why[256];
	atomic_bool cancel;
	void (*notify)(void *ctx); /* under mu */
	void *nctx;
	bool notify_end_only;
	uint32_t rounds, drafts;
	double t_submit, t_admit, t_first, t_prefilled, t_end;
};

struct tf_engine {
	struct tf_engine_backend be;
	struct tf_planner pl;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct tf_engine_job *fg, *fg_tail, *bg, *bg_tail; /* waiting, under mu */
	uint32_t nwaiting;
	bool work;       /* a submit or cancel since the thread last looked */
	bool halting, closing;
	char halt_why[256];
	uint64_t next_id;
	struct tf_engine_stats stats;
	/* Engine thread only. */
	struct tf_engine_job **run;
	size_t nrun, caprun;
	uint64_t round;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void deadline_in(struct timespec *ts, int ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

static void cond_init_mono(pthread_cond_t *cv)
{
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(cv, &a);
	pthread_condattr_destroy(&a);
}

const char *tf_engine_end_str(enum tf_engine_end end)
{
	switch (end) {
	case TF_ENGINE_RUNNING: return "running";
	case TF_ENGINE_EOS: return "eos";
	case TF_ENGINE_LENGTH: return "length";
	case TF_ENGINE_CANCELLED: return "cancelled";
	case TF_ENGINE_FAILED: return "failed";
	}
	return "unknown";
}

static void job_unref(struct tf_engine_job *j)
{
	pthread_mutex_lock(&j->mu);
	int left = --j->refs;
	pthread_mutex_unlock(&j->mu);
	if (left > 0)
		return;
	pthread_mutex_destroy(&j->mu);
	pthread_cond_destroy(&j->cv);
	free(j->prompt);
	free(j->toks);
	free(j->made);
	free(j->lps);
	free(j->lpbuf);
	tf_grammar_free(j->params.grammar);
	free(j);
}

/* End a job (engine side): record how (why NULL keeps the words already in
 * j->why) and wake the reader. The engine's reference stays: callers drop it
 * with job_unref once the job is off their lists. */
static void job_finish(struct tf_engine_job *j, enum tf_engine_end end, tf_status st,
		       const char *why, bool halted)
{
	pthread_mutex_lock(&j->mu);
	if (j->end == TF_ENGINE_RUNNING) {
		j->end = end;
		j->st = st;
		j->halted = halted;
		if (why)
			snprintf(j->why, sizeof(j->why), "%s", why);
		j->t_end = now_s();
		if (j->t_prefilled == 0 && j->t_admit > 0)
			j->t_prefilled = j->t_end;
	}
	pthread_cond_broadcast(&j->cv);
	if (j->notify)
		j->notify(j->nctx);
	pthread_mutex_unlock(&j->mu);
}

static void job_finish_unref(struct tf_engine_job *j, enum tf_engine_end end, tf_status st,
			     const char *why, bool halted)
{
	job_finish(j, end, st, why, halted);
	job_unref(j);
}

/* Deliver n tokens (lp: their log-probabilities, or NULL) made by the
 * forward that returned at made; returns true when the job ended (EOS or
 * length). */
static bool job_deliver(struct tf_engine *e, struct tf_engine_job *j, const int32_t *t,
			const struct tf_engine_logprob *lp, uint32_t n, double made)
{
	enum tf_engine_end end = TF_ENGINE_RUNNING;
	pthread_mutex_lock(&j->mu);
	for (uint32_t i = 0; i < n && end == TF_ENGINE_RUNNING; i++) {
		if (j->params.stop_eos && e->be.eos >= 0 && t[i] == e->be.eos) {
			end = TF_ENGINE_EOS;
			break;
		}
		if (j->ntoks == j->cap) {
			size_t cap = j->cap ? j->cap * 2 : 64;
			if (tf_realloc_array(&j->toks, cap, sizeof(*j->toks)) ||
			    tf_realloc_array(&j->made, cap, sizeof(*j->made)) ||
			    (j->lpbuf && tf_realloc_array(&j->lps, cap, sizeof(*j->lps)))) {
				snprintf(j->why, sizeof(j->why), "out of memory delivering tokens");
				end = TF_ENGINE_FAILED;
				break;
			}
			j->cap = cap;
			j->lane.gen = j->toks;
		}
		j->made[j->ntoks] = made;
		if (j->lpbuf)
			j->lps[j->ntoks] = lp ? lp[i] : (struct tf_engine_logprob){0};
		j->toks[j->ntoks++] = t[i];
		j->lane.ngen++;
		j->lane.last = t[i];
		if (j->t_first == 0)
			j->t_first = made;
		if (j->lane.ngen >= j->params.max_tokens)
			end = TF_ENGINE_LENGTH;
	}
	if (n)
		pthread_cond_broadcast(&j->cv);
	if (n && j->notify && !j->notify_end_only && end == TF_ENGINE_RUNNING)
		j->notify(j->nctx); /* job_finish notifies the end */
	pthread_mutex_unlock(&j->mu);
	if (end == TF_ENGINE_RUNNING)
		return false;
	e->be.end(e->be.ctx, &j->lane);
	if (end == TF_ENGINE_FAILED)
		job_finish(j, end, TF_ERR_NOMEM, NULL, false);
	else
		job_finish(j, end, TF_OK, NULL, false);
	return true;
}

static void run_remove(struct tf_engine *e, size_t i)
{
	memmove(&e->run[i], &e->run[i + 1], (e->nrun - i - 1) * sizeof(*e->run));
	e->nrun--;
}

/* End and fail every running job. */
static void fail_running(struct tf_engine *e, tf_status st, const char *why, bool halted)
{
	for (size_t i = 0; i < e->nrun; i++) {
		e->be.end(e->be.ctx, &e->run[i]->lane);
		job_finish_unref(e->run[i], TF_ENGINE_FAILED, st, why, halted);
	}
	e->nrun = 0;
}

static struct tf_engine_job *queue_take_all(struct tf_engine *e)
{
	struct tf_engine_job *all = e->fg;
	if (e->fg_tail)
		e->fg_tail->next = e->bg;
	else
		all = e->bg;
	e->fg = e->fg_tail = e->bg = e->bg_tail = NULL;
	e->nwaiting = 0;
	return all;
}

/* Walk one queue under e->mu: drop cancelled jobs onto *gone, ask the
 * planner about the rest. Returns false once the planner said WAIT. */
static bool admit_from(struct tf_engine *e, struct tf_engine_job **head,
		       struct tf_engine_job **tail, struct tf_engine_job **gone,
		       struct tf_engine_job **refused, struct tf_engine_job **admitted,
		       size_t *running)
{
	struct tf_engine_job **pp = head, *prev = NULL;
	while (*pp) {
		struct tf_engine_job *j = *pp;
		bool cancel = atomic_load(&j->cancel);
		enum tf_plan_verdict v = TF_PLAN_ADMIT;
		if (!cancel)
			v = e->pl.admit(e->pl.ctx, &j->lane, *running, j->why, sizeof(j->why));
		if (v == TF_PLAN_WAIT)
			return false;
		if (v == TF_PLAN_SKIP) {
			prev = j;
			pp = &j->next;
			continue;
		}
		*pp = j->next; /* unlink */
		if (*tail == j)
			*tail = prev;
		e->nwaiting--;
		struct tf_engine_job **to = cancel ? gone : v == TF_PLAN_REFUSE ? refused : admitted;
		j->next = *to;
		*to = j;
		if (v == TF_PLAN_ADMIT && !cancel)
			(*running)++;
	}
	return true;
}

static struct tf_engine_job *reverse(struct tf_engine_job *j)
{
	struct tf_engine_job *r = NULL;
	while (j) {
		struct tf_engine_job *n = j->next;
		j->next = r;
		r = j;
		j = n;
	}
	return r;
}

/* Take cancels and admit, under e->mu; returns false when the engine
 * should stop (halt). */
static void take_and_admit(struct tf_engine *e, struct tf_engine_job **gone,
			   struct tf_engine_job **refused, struct tf_engine_job **admitted)
{
	size_t running = e->nrun;
	*gone = *refused = *admitted = NULL;
	if (admit_from(e, &e->fg, &e->fg_tail, gone, refused, admitted, &running))
		admit_from(e, &e->bg, &e->bg_tail, gone, refused, admitted, &running);
	*admitted = reverse(*admitted); /* keep submission order */
}

static tf_status run_grow(struct tf_engine *e)
{
	if (e->nrun < e->caprun)
		return TF_OK;
	size_t cap = e->caprun ? e->caprun * 2 : 16;
	if (tf_realloc_array(&e->run, cap, sizeof(*e->run)))
		return tf_err(TF_ERR_NOMEM, "engine: out of memory for lanes");
	e->caprun = cap;
	return TF_OK;
}

static struct tf_engine_job *job_of(struct tf_lane *l)
{
	return (struct tf_engine_job *)((char *)l - offsetof(struct tf_engine_job, lane));
}

/* The backend's prompt cache counters into the stats. */
static void cache_stats(struct tf_engine *e)
{
	if (!e->be.cache_stats)
		return;
	struct tf_engine_cache_stats c = {0};
	e->be.cache_stats(e->be.ctx, &c);
	pthread_mutex_lock(&e->mu);
	e->stats.cache = c;
	pthread_mutex_unlock(&e->mu);
}

/* One round over the running lanes. Returns false when nothing ran. */
static bool run_round(struct tf_engine *e)
{
	size_t n = e->nrun, nrows = 0, nfill = 0;
	if (n == 0)
		return false;
	struct tf_engine_row *rows = tf_calloc(n, sizeof(*rows));
	struct tf_engine_piece *pieces = tf_calloc(n, sizeof(*pieces));
	struct tf_lane **filling = tf_calloc(n, sizeof(*filling));
	bool ran = false;
	if (!rows || !pieces || !filling) {
		fail_running(e, TF_ERR_NOMEM, "engine: out of memory planning a round", false);
		goto out;
	}
	for (int bg = 0; bg < 2; bg++)
		for (size_t i = 0; i < n; i++) {
			struct tf_lane *l = &e->run[i]->lane;
			if (l->params->background != bg)
				continue;
			if (l->filled >= l->nprompt) {
				rows[nrows].lp = job_of(l)->lpbuf;
				rows[nrows++].lane = l;
			} else {
				filling[nfill++] = l;
			}
		}
	size_t np = e->pl.plan(e->pl.ctx, filling, nfill, nrows, pieces, nfill);
	for (size_t i = 0; i < np; i++)
		pieces[i].lp = job_of(pieces[i].lane)->lpbuf;
	if (np == 0 && nrows == 0)
		goto out;
	struct tf_engine_round r = {++e->round, pieces, np, rows, nrows};
	double t0 = now_s();
	tf_status st = e->be.forward(e->be.ctx, &r);
	double made = now_s(), dt = made - t0;
	ran = true;
	if (st) {
		char why[256];
		snprintf(why, sizeof(why), "%s", tf_errmsg(st));
		tf_log(TF_LOG_ERROR, "engine: forward failed: %s", why);
		fail_running(e, st, why, false);
		goto out;
	}
	uint64_t ptoks = 0, gen = 0, drafts = 0, drafted = 0, accepted = 0;
	for (size_t i = 0; i < np; i++) {
		struct tf_engine_piece *p = &pieces[i];
		struct tf_engine_job *j = (struct tf_engine_job *)((char *)p->lane -
								  offsetof(struct tf_engine_job, lane));
		if (p->st) {
			e->be.end(e->be.ctx, p->lane);
			job_finish(j, TF_ENGINE_FAILED, p->st, tf_errmsg(p->st), false);
			p->lane = NULL;
			continue;
		}
		ptoks += p->end - p->start;
		p->lane->filled = p->end;
		p->lane->served = r.index;
		j->rounds++;
		if (p->end == p->lane->nprompt) {
			j->t_prefilled = now_s();
			gen += p->ntokens;
			if (job_deliver(e, j, p->tokens, p->lp, p->ntokens, made))
				p->lane = NULL;
		}
	}
	for (size_t i = 0; i < nrows; i++) {
		struct tf_engine_row *w = &rows[i];
		struct tf_engine_job *j = (struct tf_engine_job *)((char *)w->lane -
								  offsetof(struct tf_engine_job, lane));
		j->rounds++;
		if (w->st) {
			e->be.end(e->be.ctx, w->lane);
			job_finish(j, TF_ENGINE_FAILED, w->st, tf_errmsg(w->st), false);
			w->lane = NULL;
			continue;
		}
		gen += w->ntokens;
		if (w->drafted) {
			/* lane counts: the engine thread's; the result reads them under mu */
			pthread_mutex_lock(&j->mu);
			j->drafts++;
			w->lane->drafted += w->drafted;
			w->lane->accepted += w->accepted;
			pthread_mutex_unlock(&j->mu);
			drafts++;
			drafted += w->drafted;
			accepted += w->accepted;
		}
		if (job_deliver(e, j, w->tokens, w->lp, w->ntokens, made))
			w->lane = NULL;
	}
	/* Drop the lanes that ended (their jobs are finished). */
	for (size_t i = 0; i < e->nrun;) {
		struct tf_engine_job *j = e->run[i];
		pthread_mutex_lock(&j->mu);
		bool over = j->end != TF_ENGINE_RUNNING;
		pthread_mutex_unlock(&j->mu);
		if (over) {
			run_remove(e, i);
			job_unref(j);
		} else
			i++;
	}
	e->pl.after(e->pl.ctx, &r, dt);
	pthread_mutex_lock(&e->mu);
	e->stats.rounds++;
	e->stats.pieces += np;
	e->stats.rows += nrows;
	e->stats.prompt_tokens += ptoks;
	e->stats.generated += gen;
	e->stats.drafts += drafts;
	e->stats.drafted += drafted;
	e->stats.accepted += accepted;
	e->stats.forward_s += dt;
	pthread_mutex_unlock(&e->mu);
out:
	free(rows);
	free(pieces);
	free(filling);
	return ran;
}

/* Finish jobs on a list (linked by next). */
static void finish_list(struct tf_engine_job *j, enum tf_engine_end end, tf_status st,
			const char *why, bool halted)
{
	while (j) {
		struct tf_engine_job *n = j->next;
		job_finish_unref(j, end, st, why, halted);
		j = n;
	}
}

static void count_lanes(struct tf_engine *e)
{
	uint32_t filling = 0;
	for (size_t i = 0; i < e->nrun; i++)
		filling += e->run[i]->lane.filled < e->run[i]->lane.nprompt;
	pthread_mutex_lock(&e->mu);
	e->stats.running = (uint32_t)e->nrun;
	e->stats.filling = filling;
	e->stats.waiting = e->nwaiting;
	pthread_mutex_unlock(&e->mu);
}

static void *engine_main(void *arg)
{
	struct tf_engine *e = arg;
	bool idle = false;
	for (;;) {
		pthread_mutex_lock(&e->mu);
		if (!e->halting && !e->work && (e->nrun == 0 || idle)) {
			struct timespec ts;
			deadline_in(&ts, e->nrun == 0 ? 100 : 20);
			pthread_cond_timedwait(&e->cv, &e->mu, &ts);
		}
		e->work = false;
		if (e->halting) {
			char why[256];
			snprintf(why, sizeof(why), "%s", e->halt_why);
			struct tf_engine_job *q = queue_take_all(e);
			e->stats.halted = true;
			pthread_mutex_unlock(&e->mu);
			fail_running(e, TF_ERR_CANCELLED, why, true);
			finish_list(q, TF_ENGINE_FAILED, TF_ERR_CANCELLED, why, true);
			count_lanes(e);
			pthread_mutex_lock(&e->mu);
			while (!e->closing && !e->fg && !e->bg)
				pthread_cond_wait(&e->cv, &e->mu);
			bool closing = e->closing;
			pthread_mutex_unlock(&e->mu);
			if (closing)
				break;
			continue; /* a submission raced the halt: fail it too */
		}
		struct tf_engine_job *gone, *refused, *admitted;
		take_and_admit(e, &gone, &refused, &admitted);
		pthread_mutex_unlock(&e->mu);

		finish_list(gone, TF_ENGINE_CANCELLED, TF_OK, "", false);
		finish_list(refused, TF_ENGINE_FAILED, TF_ERR_ARG, NULL, false);
		/* Cancels among the running lanes take effect here, between rounds. */
		for (size_t i = 0; i < e->nrun;) {
			struct tf_engine_job *j = e->run[i];
			if (atomic_load(&j->cancel)) {
				e->be.end(e->be.ctx, &j->lane);
				job_finish_unref(j, TF_ENGINE_CANCELLED, TF_OK, "", false);
				run_remove(e, i);
			} else {
				i++;
			}
		}
		while (admitted) {
			struct tf_engine_job *j = admitted;
			admitted = j->next;
			j->next = NULL;
			j->t_admit = now_s();
			tf_status st = run_grow(e);
			if (!st)
				st = e->be.begin(e->be.ctx, &j->lane);
			if (st) {
				job_finish_unref(j, TF_ENGINE_FAILED, st, tf_errmsg(st), false);
				continue;
			}
			if (j->lane.cached > j->lane.nprompt - 1)
				j->lane.cached = j->lane.nprompt - 1;
			j->lane.filled = j->lane.cached;
			e->run[e->nrun++] = j;
		}
		idle = !run_round(e);
		count_lanes(e);
		if (!idle)
			cache_stats(e);
	}
	return NULL;
}

tf_status tf_engine_new(const struct tf_engine_backend *be, const struct tf_planner *pl,
			struct tf_engine **out)
{
	*out = NULL;
	struct tf_engine *e = tf_calloc(1, sizeof(*e));
	if (!e)
		return tf_err(TF_ERR_NOMEM, "engine: out of memory");
	e->be = *be;
	e->pl = *pl;
	pthread_mutex_init(&e->mu, NULL);
	cond_init_mono(&e->cv);
	cache_stats(e);
	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setstacksize(&a, 16u << 20);
	int rc = pthread_create(&e->thread, &a, engine_main, e);
	pthread_attr_destroy(&a);
	if (rc) {
		errno = rc;
		pthread_mutex_destroy(&e->mu);
		pthread_cond_destroy(&e->cv);
		free(e);
		return tf_err_errno(TF_ERR_OS, "engine: cannot start the engine thread");
	}
	*out = e;
	return TF_OK;
}

void tf_engine_halt(struct tf_engine *e, const char *reason)
{
	pthread_mutex_lock(&e->mu);
	if (!e->halting) {
		e->halting = true;
		snprintf(e->halt_why, sizeof(e->halt_why), "%s", reason ? reason : "engine halted");
	}
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->mu);
}

void tf_engine_close(struct tf_engine *e)
{
	if (!e)
		return;
	tf_engine_halt(e, "engine closed");
	pthread_mutex_lock(&e->mu);
	e->closing = true;
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->mu);
	pthread_join(e->thread, NULL);
	/* A submission that raced the close. */
	finish_list(queue_take_all(e), TF_ENGINE_FAILED, TF_ERR_CANCELLED, e->halt_why, true);
	if (e->be.free)
		e->be.free(e->be.ctx);
	if (e->pl.free)
		e->pl.free(e->pl.ctx);
	pthread_mutex_destroy(&e->mu);
	pthread_cond_destroy(&e->cv);
	free(e->run);
	free(e);
}

tf_status tf_engine_submit(struct tf_engine *e, const int32_t *prompt, size_t n,
			   const struct tf_engine_params *p, struct tf_engine_job **out)
{
	*out = NULL;
	if (n > UINT32_MAX)
		return tf_err(TF_ERR_RANGE, "engine: prompt of %zu tokens", n);
	struct tf_engine_job *j = tf_calloc(1, sizeof(*j));
	if (!j)
		return tf_err(TF_ERR_NOMEM, "engine: out of memory");
	j->prompt = tf_alloc_array(n ? n : 1, sizeof(*j->prompt));
	if (!j->prompt) {
		free(j);
		return tf_err(TF_ERR_NOMEM, "engine: out of memory");
	}
	if (n)
		memcpy(j->prompt, prompt, n * sizeof(*prompt));
	pthread_mutex_init(&j->mu, NULL);
	cond_init_mono(&j->cv);
	j->refs = 2;
	j->e = e;
	j->params = *p;
	if (j->params.max_tokens == 0)
		j->params.max_tokens = 1;
	if (j->params.top_logprobs > TF_ENGINE_TOP_MAX)
		j->params.top_logprobs = TF_ENGINE_TOP_MAX;
	if (j->params.logprobs &&
	    !(j->lpbuf = tf_calloc(TF_ENGINE_ROW_MAX, sizeof(*j->lpbuf)))) {
		free(j->prompt);
		free(j);
		return tf_err(TF_ERR_NOMEM, "engine: out of memory");
	}
	j->lane.prompt = j->prompt;
	j->lane.nprompt = (uint32_t)n;
	j->lane.last = -1;
	j->lane.params = &j->params;
	tf_lane_constrain_init(&j->lane);
	j->t_submit = now_s();
	if (p->grammar && !e->be.constrains) {
		char why[128];
		snprintf(why, sizeof(why), "the %s engine cannot constrain output", e->be.name);
		job_finish_unref(j, TF_ENGINE_FAILED, TF_ERR_UNSUPPORTED, why, false);
		*out = j;
		return TF_OK;
	}
	pthread_mutex_lock(&e->mu);
	j->lane.id = ++e->next_id;
	if (e->halting) {
		char why[256];
		snprintf(why, sizeof(why), "%s", e->halt_why);
		pthread_mutex_unlock(&e->mu);
		job_finish_unref(j, TF_ENGINE_FAILED, TF_ERR_CANCELLED, why, true);
		*out = j;
		return TF_OK;
	}
	struct tf_engine_job **head = p->background ? &e->bg : &e->fg;
	struct tf_engine_job **tail = p->background ? &e->bg_tail : &e->fg_tail;
	if (*tail)
		(*tail)->next = j;
	else
		*head = j;
	*tail = j;
	e->nwaiting++;
	e->stats.waiting = e->nwaiting;
	e->work = true;
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->mu);
	*out = j;
	return TF_OK;
}

size_t tf_engine_job_read(struct tf_engine_job *j, int32_t *buf, size_t cap, int wait_ms,
			  bool *done)
{
	return tf_engine_job_read_timed(j, buf, NULL, cap, wait_ms, done);
}

size_t tf_engine_job_read_timed(struct tf_engine_job *j, int32_t *buf, double *made, size_t cap,
				int wait_ms, bool *done)
{
	struct timespec ts;
	if (wait_ms > 0)
		deadline_in(&ts, wait_ms);
	pthread_mutex_lock(&j->mu);
	while (j->nread == j->ntoks && j->end == TF_ENGINE_RUNNING && wait_ms != 0) {
		if (wait_ms < 0)
			pthread_cond_wait(&j->cv, &j->mu);
		else if (pthread_cond_timedwait(&j->cv, &j->mu, &ts) == ETIMEDOUT)
			break;
	}
	size_t n = j->ntoks - j->nread;
	if (n > cap)
		n = cap;
	if (n)
		memcpy(buf, j->toks + j->nread, n * sizeof(*buf));
	if (n && made)
		memcpy(made, j->made + j->nread, n * sizeof(*made));
	j->nread += n;
	*done = j->end != TF_ENGINE_RUNNING && j->nread == j->ntoks;
	pthread_mutex_unlock(&j->mu);
	return n;
}

size_t tf_engine_job_logprobs(struct tf_engine_job *j, size_t from, struct tf_engine_logprob *out,
			      size_t n)
{
	pthread_mutex_lock(&j->mu);
	size_t have = from < j->ntoks ? j->ntoks - from : 0;
	if (n > have)
		n = have;
	for (size_t i = 0; i < n; i++)
		out[i] = j->lps ? j->lps[from + i] : (struct tf_engine_logprob){0};
	pthread_mutex_unlock(&j->mu);
	return n;
}

void tf_engine_job_notify(struct tf_engine_job *j, void (*fn)(void *ctx), void *ctx,
			  bool end_only)
{
	pthread_mutex_lock(&j->mu);
	j->notify = fn;
	j->nctx = ctx;
	j->notify_end_only = end_only;
	if (fn && j->end != TF_ENGINE_RUNNING)
		fn(ctx);
	pthread_mutex_unlock(&j->mu);
}

void tf_engine_job_cancel(struct tf_engine_job *j)
{
	pthread_mutex_lock(&j->mu);
	bool running = j->end == TF_ENGINE_RUNNING;
	pthread_mutex_unlock(&j->mu);
	if (!running || atomic_exchange(&j->cancel, true))
		return;
	/* The engine outlives every running job (close fails them first). */
	struct tf_engine *e = j->e;
	pthread_mutex_lock(&e->mu);
	e->work = true;
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->mu);
}

void tf_engine_job_result(struct tf_engine_job *j, struct tf_engine_result *r)
{
	pthread_mutex_lock(&j->mu);
	double end = j->t_end ? j->t_end : now_s();
	*r = (struct tf_engine_result){
		.end = j->end,
		.st = j->st,
		.why = j->why,
		.halted = j->halted,
		.prompt = j->lane.nprompt,
		.cached = j->lane.cached,
		.completion = (uint32_t)j->ntoks,
		.rounds = j->rounds,
		.drafts = j->drafts,
		.drafted = (uint32_t)j->lane.drafted,
		.accepted = (uint32_t)j->lane.accepted,
		.queued_s = j->t_admit ? j->t_admit - j->t_submit : end - j->t_submit,
		.ttft_s = j->t_first ? j->t_first - j->t_submit : 0,
		.prefill_s = j->t_admit ? (j->t_prefilled ? j->t_prefilled : end) - j->t_admit : 0,
		.decode_s = j->t_prefilled ? end - j->t_prefilled : 0,
	};
	pthread_mutex_unlock(&j->mu);
}

void tf_engine_job_free(struct tf_engine_job *j)
{
	if (!j)
		return;
	tf_engine_job_cancel(j);
	job_unref(j);
}

void tf_engine_stats(struct tf_engine *e, struct tf_engine_stats *s)
{
	pthread_mutex_lock(&e->mu);
	*s = e->stats;
	s->waiting = e->nwaiting;
	s->halted = e->halting;
	pthread_mutex_unlock(&e->mu);
}

int32_t tf_engine_eos(const struct tf_engine *e)
{
	return e->be.eos;
}
