/* ranks.c: rank 0's mirror of its model's calls over the plan link, and
 * the followers' replay of them (ranks.h). */
#include "compute/ranks.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "compute/sample.h"
#include "cuda/driver.h"
#include "fabric/bootstrap.h"
#include "fabric/comm.h"
#include "fabric/fate.h"
#include "fabric/planlink.h"

struct hook {
	void (*fn)(void *);
	void *ctx;
};

struct tf_ranks {
	struct tf_fabric_settings s;
	struct tf_boot boot;
	bool connected;
	struct tf_comm *comm;
	struct tf_cu_device dev;   /* a device comm's GPU (s.device), or unopened */
	bool dev_open;
	struct tf_fate *fate;
	struct tf_plan_link link;
	struct hook hooks[6];
	int nhooks;
	atomic_bool failed;        /* this rank went fail-fast, or a send failed */
	int64_t *w;                /* rank 0: the plan being built */
	size_t nw, capw;
	tf_status held;            /* rank 0: a sequence plan that could not be held */
	atomic_uint_least64_t plans;
};

static double f64_of(int64_t v)
{
	double d;
	memcpy(&d, &v, sizeof d);
	return d;
}

static int64_t word_of(double d)
{
	int64_t v;
	memcpy(&v, &d, sizeof v);
	return v;
}

/* ---- plans ---- */

static tf_status put(int64_t **w, size_t *n, size_t *cap, int64_t v)
{
	if (*n == *cap) {
		size_t c = *cap ? *cap * 2 : 256;
		if (tf_realloc_array(w, c, sizeof **w))
			return tf_err(TF_ERR_NOMEM, "ranks: a plan of %zu words", c);
		*cap = c;
	}
	(*w)[(*n)++] = v;
	return TF_OK;
}

static tf_status put_params(int64_t **w, size_t *n, size_t *cap, const struct tf_sample_params *p)
{
	tf_status st = put(w, n, cap, (int64_t)p->seed);
	if (!st)
		st = put(w, n, cap, word_of(p->temperature));
	if (!st)
		st = put(w, n, cap, (int64_t)p->top_k);
	if (!st)
		st = put(w, n, cap, word_of(p->top_p));
	if (!st)
		st = put(w, n, cap, word_of(p->min_p));
	return st;
}

tf_status tf_ranks_encode(const struct tf_model_call *c, int64_t **w, size_t *n, size_t *cap)
{
	tf_status st = put(w, n, cap, c->op);
	switch (c->op) {
	case TF_MODEL_OP_SEQ_NEW:
		if (!st)
			st = put(w, n, cap, c->st);
		return st ? st : put(w, n, cap, c->dst);
	case TF_MODEL_OP_SEQ_FORK:
		if (!st)
			st = put(w, n, cap, c->src);
		if (!st)
			st = put(w, n, cap, c->st);
		return st ? st : put(w, n, cap, c->dst);
	case TF_MODEL_OP_SEQ_ROLLBACK:
		if (!st)
			st = put(w, n, cap, c->src);
		if (!st)
			st = put(w, n, cap, c->at);
		return st ? st : put(w, n, cap, c->st);
	case TF_MODEL_OP_SEQ_FREE:
		return st ? st : put(w, n, cap, c->src);
	case TF_MODEL_OP_FORWARD:
	case TF_MODEL_OP_FORWARD_SAMPLE:
		if (!st)
			st = put(w, n, cap, c->R);
		for (int i = 0; i < c->R && !st; i++)
			st = put(w, n, cap, c->ids[i]);
		for (int i = 0; i < c->R && !st; i++)
			st = put(w, n, cap, c->pos[i]);
		for (int i = 0; i < c->R && !st; i++)
			st = put(w, n, cap, c->seq[i]);
		if (c->op == TF_MODEL_OP_FORWARD)
			return st;
		for (int i = 0; i < c->R && !st; i++)
			st = put(w, n, cap, c->draw_pos[i]);
		for (int i = 0; i < c->R && !st; i++)
			st = put_params(w, n, cap, &c->params[i]);
		return st;
	case TF_MODEL_OP_DRAFT:
		if (!st)
			st = put(w, n, cap, c->R);
		if (!st)
			st = put(w, n, cap, c->params != NULL);
		for (int i = 0; i < c->R && !st; i++)
			st = put(w, n, cap, c->seq[i]);
		for (int i = 0; i < c->R && !st; i++)
			st = put(w, n, cap, c->ids[i]);
		for (int i = 0; c->params && i < c->R && !st; i++)
			st = put_params(w, n, cap, &c->params[i]);
		return st;
	}
	return tf_err(TF_ERR_ARG, "ranks: no plan for model call %d", (int)c->op);
}

void tf_ranks_scratch_release(struct tf_ranks_scratch *sc)
{
	free(sc->logits), free(sc->tokens), free(sc->draft), free(sc->conf), free(sc->params);
	memset(sc, 0, sizeof *sc);
}

static tf_status scratch(struct tf_ranks_scratch *sc, const struct tf_model *m, size_t rows)
{
	size_t vocab = tf_model_config(m)->vocab;
	size_t block = (size_t)tf_model_draft_block(m) + 1;
	if (rows > sc->cap_rows) {
		size_t c = sc->cap_rows ? sc->cap_rows : 64;
		while (c < rows)
			c *= 2;
		if (tf_realloc_array(&sc->logits, c * vocab, sizeof *sc->logits) ||
		    tf_realloc_array(&sc->tokens, c, sizeof *sc->tokens) ||
		    tf_realloc_array(&sc->draft, c * block, sizeof *sc->draft) ||
		    tf_realloc_array(&sc->conf, c * block, sizeof *sc->conf) ||
		    tf_realloc_array(&sc->params, c, sizeof *sc->params))
			return tf_err(TF_ERR_NOMEM, "ranks: scratch of %zu rows", c);
		sc->cap_rows = c;
	}
	return TF_OK;
}

/* Read back what tf_ranks_encode wrote: n words at w. */
struct rd {
	const int64_t *w;
	size_t n, at;
	bool bad;
};

static int64_t take(struct rd *r)
{
	if (r->at >= r->n) {
		r->bad = true;
		return 0;
	}
	return r->w[r->at++];
}

static bool has(const struct rd *r, size_t words)
{
	return r->n - r->at >= words;
}

static tf_status same(const char *what, int64_t mine, int64_t theirs, tf_status st, int64_t want_st)
{
	if (st == want_st && mine == theirs)
		return TF_OK;
	return tf_err(TF_ERR_MISMATCH, "ranks: the cache is out of step with rank 0's: %s gave %lld "
		      "(status %d) here, %lld (status %lld) on rank 0", what, (long long)mine, st,
		      (long long)theirs, (long long)want_st);
}

static void get_params(struct rd *r, struct tf_sample_params *p)
{
	p->seed = (uint64_t)take(r);
	p->temperature = f64_of(take(r));
	p->top_k = (uint32_t)take(r);
	p->top_p = f64_of(take(r));
	p->min_p = f64_of(take(r));
}

static tf_status replay_rows(struct tf_model *m, struct rd *r, int op, struct tf_ranks_scratch *sc)
{
	int64_t R = take(r);
	size_t per = op == TF_MODEL_OP_FORWARD ? 3 : 9;
	if (r->bad || R < 1 || R > INT32_MAX || !has(r, (size_t)R * per))
		return tf_err(TF_ERR_FORMAT, "ranks: a forward plan of %lld rows in %zu words",
			      (long long)R, r->n);
	tf_status st = scratch(sc, m, (size_t)R);
	if (st)
		return st;
	/* The plan's words are int64; the model takes int32 ids and int
	 * sequences: narrow in place into the scratch. */
	int32_t *ids = sc->tokens;
	int64_t *pos = malloc((size_t)R * sizeof *pos * 2);
	int *seq = malloc((size_t)R * sizeof *seq);
	if (!pos || !seq) {
		free(pos), free(seq);
		return tf_err(TF_ERR_NOMEM, "ranks: %lld rows", (long long)R);
	}
	int64_t *draw = pos + R;
	for (int64_t i = 0; i < R; i++)
		ids[i] = (int32_t)take(r);
	for (int64_t i = 0; i < R; i++)
		pos[i] = take(r);
	for (int64_t i = 0; i < R; i++)
		seq[i] = (int)take(r);
	if (op == TF_MODEL_OP_FORWARD) {
		st = tf_model_forward(m, (int)R, ids, pos, seq, sc->logits);
	} else {
		for (int64_t i = 0; i < R; i++)
			draw[i] = take(r);
		for (int64_t i = 0; i < R; i++)
			get_params(r, &sc->params[i]);
		/* tokens land in the draft scratch: ids still feed the call */
		st = tf_model_forward_sample(m, (int)R, ids, pos, seq, sc->params, draw, sc->draft);
	}
	free(pos), free(seq);
	return st;
}

static tf_status replay_draft(struct tf_model *m, struct rd *r, struct tf_ranks_scratch *sc)
{
	int64_t n = take(r), with = take(r);
	if (r->bad || n < 1 || n > INT32_MAX || !has(r, (size_t)n * (with ? 7 : 2)))
		return tf_err(TF_ERR_FORMAT, "ranks: a draft plan of %lld sequences", (long long)n);
	tf_status st = scratch(sc, m, (size_t)n);
	if (st)
		return st;
	int *seq = malloc((size_t)n * sizeof *seq);
	if (!seq)
		return tf_err(TF_ERR_NOMEM, "ranks: %lld sequences", (long long)n);
	for (int64_t i = 0; i < n; i++)
		seq[i] = (int)take(r);
	for (int64_t i = 0; i < n; i++)
		sc->tokens[i] = (int32_t)take(r);
	for (int64_t i = 0; with && i < n; i++)
		get_params(r, &sc->params[i]);
	st = tf_model_draft(m, (int)n, seq, sc->tokens, with ? sc->params : NULL, sc->draft, sc->conf);
	free(seq);
	return st;
}

tf_status tf_ranks_replay(struct tf_model *m, const int64_t *w, size_t n, struct tf_ranks_scratch *sc)
{
	struct rd r = {w, n, 0, false};
	int64_t op = take(&r);
	int dst = -1;
	tf_status st;
	switch (op) {
	case TF_MODEL_OP_SEQ_NEW: {
		int64_t want_st = take(&r), want = take(&r);
		if (r.bad)
			break;
		st = tf_model_seq_new(m, &dst);
		return same("a new sequence", st ? -1 : dst, want, st, want_st);
	}
	case TF_MODEL_OP_SEQ_FORK: {
		int64_t src = take(&r), want_st = take(&r), want = take(&r);
		if (r.bad)
			break;
		st = tf_model_seq_fork(m, (int)src, &dst);
		return same("a fork", st ? -1 : dst, want, st, want_st);
	}
	case TF_MODEL_OP_SEQ_ROLLBACK: {
		int64_t seq = take(&r), at = take(&r), want_st = take(&r);
		if (r.bad)
			break;
		st = tf_model_seq_rollback(m, (int)seq, at);
		return same("a rollback", 0, 0, st, want_st);
	}
	case TF_MODEL_OP_SEQ_FREE: {
		int64_t seq = take(&r);
		if (r.bad)
			break;
		tf_model_seq_free(m, (int)seq);
		return TF_OK;
	}
	case TF_MODEL_OP_FORWARD:
	case TF_MODEL_OP_FORWARD_SAMPLE:
		return replay_rows(m, &r, (int)op, sc);
	case TF_MODEL_OP_DRAFT:
		return replay_draft(m, &r, sc);
	}
	return tf_err(TF_ERR_FORMAT, "ranks: a plan of %zu words with op %lld", n, (long long)op);
}

/* ---- rank 0: the mirror ---- */

static void *fatal_thread(void *arg)
{
	struct tf_ranks *r = arg;
	tf_fate_fatal(r->fate, "the plan link", "a follower cannot be reached");
}

/* Rank 0 cannot go on: fail fast on another thread (so that the engine's
 * thread returns the error and fails its requests in the grace time). */
static void go_fatal(struct tf_ranks *r)
{
	if (atomic_exchange(&r->failed, true) || !r->fate)
		return;
	pthread_t t;
	if (!pthread_create(&t, NULL, fatal_thread, r))
		pthread_detach(t);
}

static tf_status before(void *ctx, const struct tf_model_call *c)
{
	struct tf_ranks *r = ctx;
	if (atomic_load(&r->failed))
		return tf_err(TF_ERR_UNAVAILABLE, "tensor-parallel ranks: a rank failed");
	r->nw = 0;
	tf_status st = r->held;
	if (!st)
		st = tf_ranks_encode(c, &r->w, &r->nw, &r->capw);
	if (!st)
		st = tf_plan_send(&r->link, r->w, r->nw, r->s.plan_timeout_s);
	if (st) {
		st = tf_err_wrap(st, "tensor-parallel ranks: ");
		go_fatal(r);
		return st;
	}
	atomic_fetch_add(&r->plans, 1);
	return TF_OK;
}

static void after(void *ctx, const struct tf_model_call *c)
{
	struct tf_ranks *r = ctx;
	if (c->op >= TF_MODEL_OP_FORWARD) {
		/* The followers ran the same call: a refusal of the rows is
		 * theirs too; any other failure leaves them out of step. */
		if (c->st && c->st != TF_ERR_ARG && c->st != TF_ERR_UNSUPPORTED) {
			tf_log(TF_LOG_ERROR, "tensor-parallel rank 0: %s", tf_errmsg(c->st));
			go_fatal(r);
		}
		return;
	}
	if (r->held || atomic_load(&r->failed))
		return;
	r->nw = 0;
	tf_status st = tf_ranks_encode(c, &r->w, &r->nw, &r->capw);
	if (!st)
		st = tf_plan_hold(&r->link, r->w, r->nw, r->s.plan_timeout_s);
	if (st) {
		r->held = st; /* the next forward reports it */
		go_fatal(r);
		return;
	}
	atomic_fetch_add(&r->plans, 1);
}

/* ---- the session ---- */

tf_status tf_ranks_new(const struct tf_fabric_settings *s, struct tf_ranks **out)
{
	struct tf_ranks *r = tf_calloc(1, sizeof *r);
	if (!r)
		return tf_err(TF_ERR_NOMEM, "ranks: out of memory");
	r->s = *s;
	r->boot.listen_fd = -1;
	for (int k = 0; k < TF_BOOT_NROLES; k++)
		for (int i = 0; i < TF_BOOT_MAX_WORLD; i++)
			r->boot.fd[k][i] = -1;
	*out = r;
	return TF_OK;
}

int tf_ranks_world(const struct tf_ranks *r)
{
	return r->s.world;
}

int tf_ranks_rank(const struct tf_ranks *r)
{
	return r->s.rank;
}

tf_status tf_ranks_listen(struct tf_ranks *r, int *port)
{
	tf_status st = tf_boot_listen(&r->boot, &r->s);
	if (!st)
		*port = r->boot.port;
	return st;
}

static void comm_abort(void *arg)
{
	struct tf_ranks *r = arg;
	atomic_store(&r->failed, true);
	tf_comm_abort(r->comm);
	for (int i = 0; i < r->nhooks; i++)
		r->hooks[i].fn(r->hooks[i].ctx);
}

static void line_diff(const uint8_t *a, size_t na, const uint8_t *b, size_t nb, char *msg,
		      size_t cap);

tf_status tf_ranks_connect(struct tf_ranks *r, const char *text, const char *what)
{
	tf_status st = tf_boot_open(&r->boot, &r->s);
	if (st)
		return st;
	r->connected = true;
	/* Before fail-fast is armed: a refusal ends every rank with its own
	 * status, not 70. */
	if (text && (st = tf_boot_agree(&r->boot, text, strlen(text), what, line_diff)))
		return st;
	/* NCCL and the mailbox set up on the current context: the rank's GPU
	 * (the model's, which opens the same primary context later). */
	if (r->s.backend == TF_FABRIC_NCCL || r->s.backend == TF_FABRIC_MAILBOX) {
		if ((st = tf_cu_init()) || (st = tf_cu_device_open(r->s.device, &r->dev)))
			return tf_err_wrap(st, "rank %d: CUDA device %d for the %s backend: ", r->s.rank,
					   r->s.device, tf_fabric_backend_name(r->s.backend));
		r->dev_open = true;
	}
	if ((st = tf_comm_open(&r->boot, &r->s, &r->comm)))
		return tf_err_wrap(st, "rank %d: the %s backend: ", r->s.rank,
				   tf_fabric_backend_name(r->s.backend));
	tf_plan_link_init(&r->link, &r->boot);
	if (r->s.failfast) {
		struct tf_fate_opts fo = tf_fate_opts_of(&r->s);
		if ((st = tf_fate_start(&r->boot, &fo, &r->fate)))
			return st;
		tf_fate_on_abort(r->fate, comm_abort, r);
	}
	tf_log(TF_LOG_INFO, "rank %d of %d up (backend %s)", r->s.rank, r->s.world, r->comm->name);
	return TF_OK;
}

void tf_ranks_on_fail(struct tf_ranks *r, void (*fn)(void *), void *ctx)
{
	if (r->nhooks < 6)
		r->hooks[r->nhooks++] = (struct hook){fn, ctx};
}

/* Name the first line in which two texts differ. */
static void line_diff(const uint8_t *a, size_t na, const uint8_t *b, size_t nb, char *msg, size_t cap)
{
	size_t i = 0, start = 0;
	while (i < na && i < nb && a[i] == b[i])
		if (a[i++] == '\n')
			start = i;
	size_t ea = start, eb = start;
	while (ea < na && a[ea] != '\n')
		ea++;
	while (eb < nb && b[eb] != '\n')
		eb++;
	/* a: the other rank's, b: rank 0's (tf_boot_agree's order) */
	snprintf(msg, cap, "'%.*s' vs rank 0's '%.*s'", (int)(ea - start), (const char *)a + start,
		 (int)(eb - start), (const char *)b + start);
}

tf_status tf_ranks_model_open(struct tf_ranks *r, const char *pack_dir,
			      const struct tf_model_opts *opts, struct tf_model **out)
{
	struct tf_model_opts o = opts ? *opts : (struct tf_model_opts){0};
	o.rank = r->s.rank, o.world = r->s.world, o.comm = r->s.world > 1 ? r->comm : NULL;
	tf_status st = tf_model_open(pack_dir, &o, out);
	if (st)
		return st;
	if (r->s.rank == 0 && r->s.world > 1)
		tf_model_set_mirror(*out, &(struct tf_model_mirror){before, after, r});
	return TF_OK;
}

tf_status tf_ranks_follow(struct tf_ranks *r, struct tf_model *m)
{
	if (r->s.rank == 0)
		return tf_err(TF_ERR_ARG, "ranks: rank 0 does not follow");
	struct tf_ranks_scratch sc = {0};
	for (;;) {
		const int64_t *w = NULL;
		size_t n = 0;
		tf_status st = tf_plan_recv_view(&r->link, &w, &n, 0);
		if (!st && n == 1 && w[0] == TF_RANKS_OP_STOP)
			break;
		if (!st)
			st = tf_ranks_replay(m, w, n, &sc);
		if (st && (n < 1 || (w[0] != TF_MODEL_OP_FORWARD && w[0] != TF_MODEL_OP_FORWARD_SAMPLE &&
				     w[0] != TF_MODEL_OP_DRAFT) || (st != TF_ERR_ARG && st != TF_ERR_UNSUPPORTED))) {
			char why[512];
			snprintf(why, sizeof why, "%s", tf_errmsg(st));
			if (r->fate)
				tf_fate_fatal(r->fate, "a replayed call", why);
			tf_ranks_scratch_release(&sc);
			return st;
		}
		atomic_fetch_add(&r->plans, 1);
	}
	tf_ranks_scratch_release(&sc);
	return TF_OK;
}

void tf_ranks_fatal(struct tf_ranks *r, const char *where, const char *why)
{
	if (r->fate)
		tf_fate_fatal(r->fate, where, why);
	fprintf(stderr, "%s: rank %d failed in %s: %s\n", tf_log_prog(), r->s.rank, where, why);
	exit(TF_FATE_EXIT);
}

const char *tf_ranks_state(const struct tf_ranks *r, int rank)
{
	if (atomic_load(&r->failed))
		return "failed";
	return rank == 0 ? "serving" : "up";
}

uint64_t tf_ranks_plans(const struct tf_ranks *r)
{
	return atomic_load(&r->plans);
}

void tf_ranks_free(struct tf_ranks *r)
{
	if (!r)
		return;
	if (r->connected && r->s.rank == 0 && r->s.world > 1 && !atomic_load(&r->failed)) {
		int64_t stop = TF_RANKS_OP_STOP;
		tf_status st = tf_plan_send(&r->link, &stop, 1, r->s.plan_timeout_s);
		if (st)
			tf_log(TF_LOG_WARN, "rank 0: cannot send the stop plan: %s", tf_errmsg(st));
	}
	tf_fate_stop(r->fate);
	tf_plan_link_release(&r->link);
	tf_comm_free(r->comm);
	if (r->dev_open)
		tf_cu_device_close(&r->dev);
	if (r->connected || r->boot.listen_fd >= 0)
		tf_boot_close(&r->boot);
	free(r->w);
	free(r);
}
