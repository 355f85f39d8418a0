/* group.c: world ranks of a model on threads of one process (group.h).
 *
 * Rank 0 runs on the caller's thread; ranks 1..world-1 each have a thread
 * that waits for a round (a generation count under one mutex), runs its
 * model's forward (or DSpark draft) and reports. Ranks other than 0 write
 * their logits (or drafts) to scratch of their own: every rank gathers the
 * same logits and draws the same drafts. */
#include "compute/group.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fabric/comm.h"

#define MAX_WORLD 8
/* How long a rank waits for the others inside one collective. */
#define WAIT_S 600.0

struct worker {
	struct tf_model_group *g;
	int rank;
	pthread_t th;
	bool started;
	float *logits;       /* scratch [cap] */
	size_t cap;
	int32_t *draft;      /* draft rounds: scratch [dcap] */
	float *conf;         /* [dcap] */
	size_t dcap;
	tf_status st;
	char msg[512];
};

struct tf_model_group {
	int world;
	struct tf_host_group *hg;
	struct tf_model *m[MAX_WORLD];
	struct worker w[MAX_WORLD];
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	uint64_t gen;        /* rounds started */
	int pending;         /* workers still running the round */
	bool quit;
	/* the round: a forward of R rows, or a draft of R sequences (anchor set) */
	int R;
	const int32_t *ids;
	const int64_t *pos;
	const int *seq;
	const int32_t *anchor;
	const struct tf_sample_params *params;
	bool want_conf;
	tf_status failed;    /* a rank failed earlier: the group is unusable */
	char why[512];
};

/* One rank's forward (into logits) or draft (into draft, conf); on
 * failure, end every rank's waits. */
static tf_status run_rank(struct tf_model_group *g, int r, float *logits, int32_t *draft,
			  float *conf, char *msg, size_t n)
{
	tf_status st = g->anchor
			       ? tf_model_draft(g->m[r], g->R, g->seq, g->anchor, g->params, draft, conf)
			       : tf_model_forward(g->m[r], g->R, g->ids, g->pos, g->seq, logits);
	if (st) {
		snprintf(msg, n, "rank %d: %s", r, tf_errmsg(st));
		tf_comm_abort(tf_host_group_comm(g->hg, r));
	}
	return st;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct tf_model_group *g = w->g;
	uint64_t seen = 0;
	pthread_mutex_lock(&g->mu);
	for (;;) {
		while (!g->quit && g->gen == seen)
			pthread_cond_wait(&g->go, &g->mu);
		if (g->quit)
			break;
		seen = g->gen;
		pthread_mutex_unlock(&g->mu);
		w->st = run_rank(g, w->rank, w->logits, w->draft, g->want_conf ? w->conf : NULL, w->msg,
				 sizeof w->msg);
		pthread_mutex_lock(&g->mu);
		if (--g->pending == 0)
			pthread_cond_signal(&g->done);
	}
	pthread_mutex_unlock(&g->mu);
	return NULL;
}

tf_status tf_model_group_open(const char *pack_dir, int world, const struct tf_model_opts *opts,
			      struct tf_model_group **out)
{
	return tf_model_group_open_on(pack_dir, world, opts, NULL, out);
}

tf_status tf_model_group_open_on(const char *pack_dir, int world, const struct tf_model_opts *opts,
				 const int *devices, struct tf_model_group **out)
{
	*out = NULL;
	if (world != 1 && world != 2 && world != 4 && world != 8)
		return tf_err(TF_ERR_CONFIG, "model group: world %d (1, 2, 4 or 8)", world);
	struct tf_model_group *g = calloc(1, sizeof *g);
	if (!g)
		return tf_err(TF_ERR_NOMEM, "model group: out of memory");
	g->world = world;
	pthread_mutex_init(&g->mu, NULL);
	pthread_cond_init(&g->go, NULL);
	pthread_cond_init(&g->done, NULL);
	tf_status st = TF_OK;
	if (world > 1 && (st = tf_host_group_new(world, WAIT_S, &g->hg)))
		goto fail;
	for (int r = 0; r < world; r++) {
		struct tf_model_opts o = opts ? *opts : (struct tf_model_opts){0};
		o.rank = r;
		o.world = world;
		o.comm = world > 1 ? tf_host_group_comm(g->hg, r) : NULL;
		if (devices)
			o.device = devices[r];
		if ((st = tf_model_open(pack_dir, &o, &g->m[r]))) {
			st = tf_err_wrap(st, "rank %d of %d: ", r, world);
			goto fail;
		}
	}
	for (int r = 1; r < world; r++) {
		struct worker *w = &g->w[r];
		w->g = g;
		w->rank = r;
		if (pthread_create(&w->th, NULL, worker_main, w)) {
			st = tf_err(TF_ERR_OS, "model group: cannot start rank %d's thread", r);
			goto fail;
		}
		w->started = true;
	}
	*out = g;
	return TF_OK;
fail:
	tf_model_group_free(g);
	return st;
}

void tf_model_group_free(struct tf_model_group *g)
{
	if (!g)
		return;
	pthread_mutex_lock(&g->mu);
	g->quit = true;
	pthread_cond_broadcast(&g->go);
	pthread_mutex_unlock(&g->mu);
	for (int r = 1; r < g->world; r++) {
		if (g->w[r].started)
			pthread_join(g->w[r].th, NULL);
		free(g->w[r].logits);
		free(g->w[r].draft);
		free(g->w[r].conf);
	}
	for (int r = 0; r < g->world; r++)
		tf_model_free(g->m[r]);
	tf_host_group_free(g->hg);
	pthread_mutex_destroy(&g->mu);
	pthread_cond_destroy(&g->go);
	pthread_cond_destroy(&g->done);
	free(g);
}

int tf_model_group_world(const struct tf_model_group *g)
{
	return g->world;
}

const struct tf_config *tf_model_group_config(const struct tf_model_group *g)
{
	return tf_model_config(g->m[0]);
}

struct tf_model *tf_model_group_rank(struct tf_model_group *g, int r)
{
	return r >= 0 && r < g->world ? g->m[r] : NULL;
}

/* A sequence call made on every rank must give every rank the same slot
 * (else each rank's new sequence is closed again). */
/* Open a sequence on every rank (a fork of src, or a new one): all ranks
 * must take the same slot; on a failure the ranks that opened one close
 * it again. */
static tf_status open_on_all(struct tf_model_group *g, bool fork, int src, int *out)
{
	int got[MAX_WORLD] = {0};
	tf_status st = TF_OK;
	int r = 0;
	for (; r < g->world && !st; r++)
		st = fork ? tf_model_seq_fork(g->m[r], src, &got[r]) : tf_model_seq_new(g->m[r], &got[r]);
	if (st) {
		for (int q = 0; q < r - 1; q++)
			tf_model_seq_free(g->m[q], got[q]);
		return st;
	}
	for (r = 1; r < g->world; r++)
		if (got[r] != got[0]) {
			st = tf_err(TF_ERR_INTERNAL, "model group: rank %d took slot %d, rank 0 slot %d", r,
				    got[r], got[0]);
			for (int q = 0; q < g->world; q++)
				tf_model_seq_free(g->m[q], got[q]);
			return st;
		}
	*out = got[0];
	return TF_OK;
}

tf_status tf_model_group_seq_new(struct tf_model_group *g, int *seq)
{
	return open_on_all(g, false, 0, seq);
}

tf_status tf_model_group_seq_fork(struct tf_model_group *g, int src, int *dst)
{
	return open_on_all(g, true, src, dst);
}

tf_status tf_model_group_seq_rollback(struct tf_model_group *g, int seq, int64_t pos)
{
	tf_status st = tf_model_seq_rollback(g->m[0], seq, pos);
	for (int r = 1; r < g->world && !st; r++)
		st = tf_model_seq_rollback(g->m[r], seq, pos);
	return st;
}

int64_t tf_model_group_seq_len(const struct tf_model_group *g, int seq)
{
	return tf_model_seq_len(g->m[0], seq);
}

void tf_model_group_seq_free(struct tf_model_group *g, int seq)
{
	for (int r = 0; r < g->world; r++)
		tf_model_seq_free(g->m[r], seq);
}

/* Run the round set in g on every rank: rank 0's outputs into logits, or
 * draft and conf. */
static tf_status run_round(struct tf_model_group *g, float *logits, int32_t *draft, float *conf)
{
	pthread_mutex_lock(&g->mu);
	g->pending = g->world - 1;
	g->gen++;
	pthread_cond_broadcast(&g->go);
	pthread_mutex_unlock(&g->mu);
	char msg[512] = "";
	tf_status st = run_rank(g, 0, logits, draft, conf, msg, sizeof msg);
	pthread_mutex_lock(&g->mu);
	while (g->pending)
		pthread_cond_wait(&g->done, &g->mu);
	pthread_mutex_unlock(&g->mu);
	/* the first failure that is not another rank's abort says why */
	for (int r = 1; r < g->world && (!st || st == TF_ERR_CANCELLED); r++)
		if (g->w[r].st && (!st || g->w[r].st != TF_ERR_CANCELLED)) {
			st = g->w[r].st;
			snprintf(msg, sizeof msg, "%s", g->w[r].msg);
		}
	if (st) {
		g->failed = st;
		snprintf(g->why, sizeof g->why, "%s", msg);
		return tf_err(st, "model group: %s", msg);
	}
	return TF_OK;
}

tf_status tf_model_group_forward(struct tf_model_group *g, int R, const int32_t *ids,
				 const int64_t *pos, const int *seq, float *logits)
{
	if (g->world == 1)
		return tf_model_forward(g->m[0], R, ids, pos, seq, logits);
	if (g->failed)
		return tf_err(g->failed, "model group: unusable after an earlier failure: %s", g->why);
	tf_status st = tf_model_check_rows(g->m[0], R, ids, pos, seq);
	if (st)
		return st;
	size_t need = (size_t)R * tf_model_config(g->m[0])->vocab;
	for (int r = 1; r < g->world; r++) {
		struct worker *w = &g->w[r];
		if (w->cap < need) {
			float *p = realloc(w->logits, need * sizeof *p);
			if (!p)
				return tf_err(TF_ERR_NOMEM, "model group: logits of %d rows", R);
			w->logits = p;
			w->cap = need;
		}
	}
	g->R = R, g->ids = ids, g->pos = pos, g->seq = seq, g->anchor = NULL;
	return run_round(g, logits, NULL, NULL);
}

int tf_model_group_draft_block(const struct tf_model_group *g)
{
	return tf_model_draft_block(g->m[0]);
}

tf_status tf_model_group_draft(struct tf_model_group *g, int n, const int *seq,
			       const int32_t *anchor, const struct tf_sample_params *params,
			       int32_t *draft, float *confidence)
{
	if (g->world == 1)
		return tf_model_draft(g->m[0], n, seq, anchor, params, draft, confidence);
	if (g->failed)
		return tf_err(g->failed, "model group: unusable after an earlier failure: %s", g->why);
	int B = tf_model_draft_block(g->m[0]);
	if (!B)
		return tf_err(TF_ERR_UNSUPPORTED, "model group: the pack has no DSpark blocks");
	if (n < 1 || !seq || !anchor || !draft)
		return tf_err(TF_ERR_ARG, "model group: %d sequences, or a missing array", n);
	/* what a rank would refuse, refused before any rank runs: the draft
	 * rows of each sequence, [anchor, noise...] at its length */
	uint32_t V = tf_model_config(g->m[0])->vocab;
	for (int i = 0; i < n; i++) {
		if (anchor[i] < 0 || (uint32_t)anchor[i] >= V)
			return tf_err(TF_ERR_ARG, "model group: token id %d of %u", anchor[i], V);
		for (int q = 0; q < i; q++)
			if (seq[q] == seq[i])
				return tf_err(TF_ERR_ARG, "model group: sequence %d drafts twice", seq[i]);
		int64_t P = tf_model_seq_len(g->m[0], seq[i]);
		tf_status st = tf_model_check_rows(g->m[0], 1, &anchor[i], &P, &seq[i]);
		if (st)
			return st;
	}
	size_t need = (size_t)n * (size_t)B;
	for (int r = 1; r < g->world; r++) {
		struct worker *w = &g->w[r];
		if (w->dcap < need) {
			int32_t *d = realloc(w->draft, need * sizeof *d);
			if (d)
				w->draft = d;
			float *c = realloc(w->conf, need * sizeof *c);
			if (c)
				w->conf = c;
			if (!d || !c)
				return tf_err(TF_ERR_NOMEM, "model group: drafts of %d sequences", n);
			w->dcap = need;
		}
	}
	g->R = n, g->seq = seq, g->anchor = anchor, g->params = params;
	g->want_conf = confidence != NULL; /* the others compute them when rank 0 does */
	return run_round(g, NULL, draft, confidence);
}
