/* host.c: the host backend, between threads of one process and between
 * processes over the bootstrap's control sockets. Both compute results with
 * tf_comm_reduce from every rank's operand, so they are the reference the
 * GPU backends are checked against, and both refuse a call that differs
 * between ranks (kind, dtype, operation, count, lengths or peers). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "base/log.h"
#include "fabric/comm.h"

enum kind { K_REDUCE = 1, K_GATHER, K_GATHER_V, K_EXCHANGE, K_BARRIER };
static const char *const kind_name[] = {"?", "all-reduce", "all-gather", "all-gather-v",
					"exchange", "barrier"};

/* One rank's call, as sent to rank 0 (little-endian on the wire: the
 * struct is sent as bytes between processes of one architecture). */
struct call {
	uint32_t magic; /* "TFC1" */
	uint32_t kind, dtype, op;
	uint64_t seq, count, stride, bytes; /* bytes: this rank's operand size */
	int64_t peer;
	uint64_t lens_hash;
};
#define CALL_MAGIC 0x31434654u
#define MAX_OPERAND ((uint64_t)1 << 32)

static uint64_t fnv(const uint32_t *lens, int n)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (int i = 0; lens && i < n; i++)
		for (int k = 0; k < 4; k++)
			h = (h ^ ((lens[i] >> (8 * k)) & 0xff)) * 0x100000001b3ull;
	return h;
}

/* Describe a call; TF_ERR_ARG for a bad one (checked before any wait, and
 * identically on every rank only if the arguments are: a rank that fails
 * here still joins the call, with kind 0, so that the others refuse). */
static tf_status describe(struct call *c, int kind, size_t count, enum tf_dtype dt,
			  enum tf_redop op, size_t stride, const uint32_t *lens, int peer,
			  int world, int rank, uint64_t seq)
{
	memset(c, 0, sizeof *c);
	c->magic = CALL_MAGIC, c->kind = (uint32_t)kind, c->dtype = (uint32_t)dt;
	c->op = (uint32_t)op, c->seq = seq, c->count = count, c->stride = stride, c->peer = peer;
	size_t es = tf_comm_dtype_size(dt);
	switch (kind) {
	case K_REDUCE:
	case K_GATHER:
		if (!es)
			return tf_err(TF_ERR_UNSUPPORTED, "%s of dtype %d", kind_name[kind], (int)dt);
		if (kind == K_REDUCE && dt == TF_DTYPE_U8)
			return tf_err(TF_ERR_UNSUPPORTED, "all-reduce of u8");
		c->bytes = count * es;
		break;
	case K_GATHER_V:
		c->lens_hash = fnv(lens, world);
		for (int r = 0; r < world; r++)
			if (lens[r] > stride)
				return tf_err(TF_ERR_ARG, "all-gather-v: rank %d's length %u exceeds the stride %zu",
					      r, lens[r], stride);
		c->bytes = lens[rank];
		break;
	case K_EXCHANGE:
		if (peer < 0 || peer >= world || peer == rank)
			return tf_err(TF_ERR_ARG, "exchange with rank %d (world %d, rank %d)", peer, world, rank);
		c->bytes = count;
		break;
	}
	if (c->bytes > MAX_OPERAND)
		return tf_err(TF_ERR_ARG, "%s of %llu bytes is too large", kind_name[kind],
			      (unsigned long long)c->bytes);
	return TF_OK;
}

/* Every rank's call must match rank 0's (exchanges: pairs must match). */
static tf_status validate(const struct call *const *cs, int world)
{
	const struct call *a = cs[0];
	for (int r = 0; r < world; r++) {
		const struct call *b = cs[r];
		if (b->magic != CALL_MAGIC || b->kind == 0 || b->kind > K_BARRIER)
			return tf_err(TF_ERR_MISMATCH, "rank %d made a bad call", r);
		if (b->kind != a->kind || b->seq != a->seq)
			return tf_err(TF_ERR_MISMATCH,
				      "ranks out of step: rank %d's call %llu is a %s, rank 0's call %llu a %s",
				      r, (unsigned long long)b->seq, kind_name[b->kind],
				      (unsigned long long)a->seq, kind_name[a->kind]);
		if (b->dtype != a->dtype || b->op != a->op || b->count != a->count ||
		    b->stride != a->stride || b->lens_hash != a->lens_hash)
			return tf_err(TF_ERR_MISMATCH,
				      "desynchronised %s: rank %d has count %llu dtype %u op %u stride %llu, rank 0 count %llu dtype %u op %u stride %llu%s",
				      kind_name[a->kind], r, (unsigned long long)b->count, b->dtype, b->op,
				      (unsigned long long)b->stride, (unsigned long long)a->count, a->dtype,
				      a->op, (unsigned long long)a->stride,
				      b->lens_hash != a->lens_hash ? " (lengths differ)" : "");
		if (a->kind == K_EXCHANGE && cs[b->peer]->peer != r)
			return tf_err(TF_ERR_MISMATCH, "exchange: rank %d sends to rank %lld, which sends to rank %lld",
				      r, (long long)b->peer, (long long)cs[b->peer]->peer);
	}
	return TF_OK;
}

/* Size of rank's result. */
static size_t result_bytes(const struct call *c, int world)
{
	switch (c->kind) {
	case K_REDUCE: return c->bytes;
	case K_GATHER: return c->bytes * (size_t)world;
	case K_GATHER_V: return c->stride * (size_t)world;
	case K_EXCHANGE: return c->bytes;
	}
	return 0;
}

/* Write rank's result into out (result_bytes long) from every operand. */
static tf_status compute(const struct call *c, const void *const *srcs, const uint32_t *lens,
			 int world, int rank, int peer, void *out)
{
	switch (c->kind) {
	case K_REDUCE:
		return tf_comm_reduce(out, srcs, world, c->count, (enum tf_dtype)c->dtype,
				      (enum tf_redop)c->op);
	case K_GATHER:
		for (int r = 0; r < world; r++)
			memcpy((uint8_t *)out + (size_t)r * c->bytes, srcs[r], c->bytes);
		return TF_OK;
	case K_GATHER_V:
		for (int r = 0; r < world; r++)
			memcpy((uint8_t *)out + (size_t)r * c->stride, srcs[r], lens[r]);
		return TF_OK;
	case K_EXCHANGE:
		memcpy(out, srcs[peer], c->bytes);
		return TF_OK;
	}
	return TF_OK;
}

/* Copy a result into recv: all-gather-v writes only each rank's bytes. */
static void deliver(const struct call *c, const uint32_t *lens, int world, const void *res, void *recv)
{
	if (c->kind == K_GATHER_V) {
		for (int r = 0; r < world; r++)
			memcpy((uint8_t *)recv + (size_t)r * c->stride, (const uint8_t *)res + (size_t)r * c->stride, lens[r]);
	} else {
		memcpy(recv, res, result_bytes(c, world));
	}
}

/* ---- the collective entry points, shared by both flavours ---- */

typedef tf_status (*call_fn)(struct tf_comm *base, int kind, const void *send, void *recv,
			     size_t count, enum tf_dtype dt, enum tf_redop op, size_t stride,
			     const uint32_t *lens, int peer);

/* Every host comm starts with this: the entry points below hand each
 * collective to the flavour's call. */
struct hbase {
	struct tf_comm base;
	call_fn call;
};

static tf_status hb_all_reduce(struct tf_comm *c, const void *s, void *r, size_t n, enum tf_dtype dt,
			       enum tf_redop op, tf_cu_stream st)
{
	return ((struct hbase *)c)->call(c, K_REDUCE, s, r, n, dt, op, 0, NULL, -1);
}
static tf_status hb_all_gather(struct tf_comm *c, const void *s, void *r, size_t n, enum tf_dtype dt,
			       tf_cu_stream st)
{
	return ((struct hbase *)c)->call(c, K_GATHER, s, r, n, dt, 0, 0, NULL, -1);
}
static tf_status hb_all_gather_v(struct tf_comm *c, const void *s, void *r, size_t stride,
				 const uint32_t *lens, tf_cu_stream st)
{
	return ((struct hbase *)c)->call(c, K_GATHER_V, s, r, 0, TF_DTYPE_U8, 0, stride, lens, -1);
}
static tf_status hb_exchange(struct tf_comm *c, const void *s, void *r, size_t n, int peer, tf_cu_stream st)
{
	return ((struct hbase *)c)->call(c, K_EXCHANGE, s, r, n, TF_DTYPE_U8, 0, 0, NULL, peer);
}
static tf_status hb_barrier(struct tf_comm *c)
{
	return ((struct hbase *)c)->call(c, K_BARRIER, NULL, NULL, 0, TF_DTYPE_U8, 0, 0, NULL, -1);
}

/* ---- between threads ---- */

struct hcomm {
	struct hbase hb;
	struct tf_host_group *g;
	uint64_t seq;
};

struct slot {
	struct call c;
	const void *send;
	const uint32_t *lens;
};

struct tf_host_group {
	int world;
	double timeout_s;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t gen;
	int arrived;
	bool broken;
	char why[200];
	struct slot slot[TF_BOOT_MAX_WORLD];
	struct hcomm comm[TF_BOOT_MAX_WORLD];
};

static tf_status group_wait(struct tf_host_group *g)
{
	tf_status st = TF_OK;
	pthread_mutex_lock(&g->mu);
	uint64_t gen = g->gen;
	if (++g->arrived == g->world) {
		g->arrived = 0;
		g->gen++;
		pthread_cond_broadcast(&g->cv);
	} else {
		struct timespec t;
		clock_gettime(CLOCK_REALTIME, &t);
		t.tv_sec += (time_t)g->timeout_s;
		t.tv_nsec += (long)((g->timeout_s - (double)(time_t)g->timeout_s) * 1e9);
		if (t.tv_nsec >= 1000000000L)
			t.tv_sec++, t.tv_nsec -= 1000000000L;
		while (g->gen == gen && !g->broken)
			if (pthread_cond_timedwait(&g->cv, &g->mu, &t)) {
				g->broken = true;
				snprintf(g->why, sizeof g->why, "a rank did not join within %.1f s", g->timeout_s);
				pthread_cond_broadcast(&g->cv);
			}
	}
	if (g->broken)
		st = tf_err(TF_ERR_CANCELLED, "host collective ended: %s", g->why);
	pthread_mutex_unlock(&g->mu);
	return st;
}

static tf_status thread_call(struct tf_comm *base, int kind, const void *send, void *recv,
			     size_t count, enum tf_dtype dt, enum tf_redop op, size_t stride,
			     const uint32_t *lens, int peer)
{
	struct hcomm *h = (struct hcomm *)base;
	struct tf_host_group *g = h->g;
	int rank = base->rank, world = base->world;
	struct slot *me = &g->slot[rank];
	tf_status bad = describe(&me->c, kind, count, dt, op, stride, lens, peer, world, rank, h->seq++);
	if (bad)
		me->c.kind = 0;
	me->send = send, me->lens = lens;
	tf_status st = group_wait(g);
	if (st)
		return st;
	const struct call *cs[TF_BOOT_MAX_WORLD];
	const void *srcs[TF_BOOT_MAX_WORLD];
	for (int r = 0; r < world; r++)
		cs[r] = &g->slot[r].c, srcs[r] = g->slot[r].send;
	char msg[512] = "";
	st = validate(cs, world);
	if (st)
		snprintf(msg, sizeof msg, "%s", tf_errmsg(st));
	void *res = NULL;
	size_t nres = st ? 0 : result_bytes(&me->c, world);
	if (!st && nres && !(res = malloc(nres)))
		st = tf_err(TF_ERR_NOMEM, "host collective: out of memory");
	if (!st && nres)
		st = compute(&me->c, srcs, lens, world, rank, peer, res);
	tf_status st2 = group_wait(g);
	if (!st && !st2 && nres)
		deliver(&me->c, lens, world, res, recv);
	free(res);
	if (bad)
		return bad;
	if (st)
		return tf_err(st, "%s", msg[0] ? msg : tf_errmsg(st));
	return st2;
}

static tf_status th_check(struct tf_comm *c)
{
	struct tf_host_group *g = ((struct hcomm *)c)->g;
	pthread_mutex_lock(&g->mu);
	tf_status st = g->broken ? tf_err(TF_ERR_CANCELLED, "host group: %s", g->why) : TF_OK;
	pthread_mutex_unlock(&g->mu);
	return st;
}
static void th_abort(struct tf_comm *c)
{
	struct tf_host_group *g = ((struct hcomm *)c)->g;
	pthread_mutex_lock(&g->mu);
	if (!g->broken)
		snprintf(g->why, sizeof g->why, "rank %d aborted", c->rank);
	g->broken = true;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
}
static void th_free(struct tf_comm *c)
{
	(void)c; /* owned by the group */
}

static const struct tf_comm_ops thread_ops = {hb_all_reduce, hb_all_gather, hb_all_gather_v,
					      hb_exchange, hb_barrier, th_check, th_abort, th_free,
					      tf_comm_host_vote};

tf_status tf_host_group_new(int world, double timeout_s, struct tf_host_group **out)
{
	if (world < 1 || world > TF_BOOT_MAX_WORLD)
		return tf_err(TF_ERR_ARG, "host group of %d ranks", world);
	struct tf_host_group *g = calloc(1, sizeof *g);
	if (!g)
		return tf_err(TF_ERR_NOMEM, "host group: out of memory");
	g->world = world, g->timeout_s = timeout_s;
	pthread_mutex_init(&g->mu, NULL);
	pthread_cond_init(&g->cv, NULL);
	for (int r = 0; r < world; r++)
		g->comm[r] = (struct hcomm){{{&thread_ops, world, r, false, "host-threads", 0}, thread_call}, g, 0};
	*out = g;
	return TF_OK;
}

struct tf_comm *tf_host_group_comm(struct tf_host_group *g, int rank)
{
	return rank >= 0 && rank < g->world ? &g->comm[rank].hb.base : NULL;
}

void tf_host_group_free(struct tf_host_group *g)
{
	if (!g)
		return;
	pthread_mutex_destroy(&g->mu);
	pthread_cond_destroy(&g->cv);
	free(g);
}

/* ---- between processes, through rank 0 ---- */

struct tcomm {
	struct hbase hb;
	struct tf_boot *boot;
	uint64_t seq;
	bool dead;
};

struct reply {
	int32_t status;
	char msg[300];
};

static tf_status tcp_call(struct tf_comm *base, int kind, const void *send, void *recv,
			  size_t count, enum tf_dtype dt, enum tf_redop op, size_t stride,
			  const uint32_t *lens, int peer)
{
	struct tcomm *t = (struct tcomm *)base;
	struct tf_boot *b = t->boot;
	int world = base->world, rank = base->rank;
	if (t->dead)
		return tf_err(TF_ERR_CANCELLED, "host comm: aborted or failed earlier");
	struct call me;
	tf_status bad = describe(&me, kind, count, dt, op, stride, lens, peer, world, rank, t->seq++);
	if (bad)
		me.kind = 0, me.bytes = 0;
	double dl = tf_boot_now() + b->timeout_s;
	tf_status st = TF_OK;
	size_t n;
	struct reply rep;
	memset(&rep, 0, sizeof rep);
	if (rank != 0) {
		int fd = b->fd[TF_BOOT_CTL][0];
		if ((st = tf_sock_send_frame(fd, &me, sizeof me, dl)) ||
		    (st = tf_sock_send_frame(fd, send, me.bytes, dl)) ||
		    (st = tf_sock_recv_frame(fd, &rep, sizeof rep, &n, dl)))
			goto fail;
		if (rep.status) {
			rep.msg[sizeof rep.msg - 1] = 0;
			return bad ? bad : tf_err(rep.status, "%s", rep.msg);
		}
		size_t want = result_bytes(&me, world);
		if (kind == K_GATHER_V || want == 0) {
			void *tmp = want ? malloc(want) : NULL;
			if (want && !tmp)
				return tf_err(TF_ERR_NOMEM, "host comm: out of memory");
			st = tf_sock_recv_frame(fd, tmp, want, &n, dl);
			if (!st && want)
				deliver(&me, lens, world, tmp, recv);
			free(tmp);
		} else {
			st = tf_sock_recv_frame(fd, recv, want, &n, dl);
		}
		if (st)
			goto fail;
		return bad;
	}
	/* Rank 0: gather every call and operand in rank order. */
	struct call cs[TF_BOOT_MAX_WORLD];
	const struct call *cp[TF_BOOT_MAX_WORLD];
	void *ops[TF_BOOT_MAX_WORLD] = {0};
	const void *srcs[TF_BOOT_MAX_WORLD];
	void *res = NULL;
	cs[0] = me, cp[0] = &cs[0], srcs[0] = send;
	for (int r = 1; r < world && !st; r++) {
		int fd = b->fd[TF_BOOT_CTL][r];
		cp[r] = &cs[r];
		if ((st = tf_sock_recv_frame(fd, &cs[r], sizeof cs[r], &n, dl)))
			break;
		if (n != sizeof cs[r] || cs[r].bytes > MAX_OPERAND) {
			st = tf_err(TF_ERR_FORMAT, "rank %d sent a bad call header", r);
			break;
		}
		if (cs[r].bytes && !(ops[r] = malloc(cs[r].bytes))) {
			st = tf_err(TF_ERR_NOMEM, "host comm: out of memory");
			break;
		}
		size_t got;
		if ((st = tf_sock_recv_frame(fd, ops[r], cs[r].bytes, &got, dl)))
			break;
		srcs[r] = ops[r];
	}
	if (st)
		goto fail0;
	tf_status verdict = bad ? tf_err(TF_ERR_MISMATCH, "rank 0 made a bad call: %s", tf_errmsg(bad))
				: validate(cp, world);
	if (verdict) {
		rep.status = verdict;
		snprintf(rep.msg, sizeof rep.msg, "%s", tf_errmsg(verdict));
		for (int r = 1; r < world && !st; r++)
			st = tf_sock_send_frame(b->fd[TF_BOOT_CTL][r], &rep, sizeof rep, dl);
		for (int r = 1; r < world; r++)
			free(ops[r]);
		if (st)
			goto fail;
		return bad ? bad : tf_err(verdict, "%s", rep.msg);
	}
	size_t cap = result_bytes(&me, world);
	if (cap && !(res = malloc(cap))) {
		st = tf_err(TF_ERR_NOMEM, "host comm: out of memory");
		goto fail0;
	}
	for (int r = 1; r < world && !st; r++) {
		int fd = b->fd[TF_BOOT_CTL][r];
		if (cap && (st = compute(&me, srcs, lens, world, r, (int)cs[r].peer, res)))
			break;
		if (!(st = tf_sock_send_frame(fd, &rep, sizeof rep, dl)))
			st = tf_sock_send_frame(fd, res, cap, dl);
	}
	if (!st && cap && !(st = compute(&me, srcs, lens, world, 0, peer, res)))
		deliver(&me, lens, world, res, recv);
fail0:
	free(res);
	for (int r = 1; r < world; r++)
		free(ops[r]);
	if (st)
		goto fail;
	return TF_OK;
fail:
	t->dead = true;
	return tf_err_wrap(st, "host %s (rank %d): ", kind_name[kind], rank);
}

static tf_status tc_check(struct tf_comm *c)
{
	return ((struct tcomm *)c)->dead ? tf_err(TF_ERR_CANCELLED, "host comm failed earlier") : TF_OK;
}
static void tc_abort(struct tf_comm *c)
{
	struct tcomm *t = (struct tcomm *)c;
	t->dead = true;
	for (int r = 0; r < t->boot->world; r++)
		if (t->boot->fd[TF_BOOT_CTL][r] >= 0)
			shutdown(t->boot->fd[TF_BOOT_CTL][r], SHUT_RDWR);
}
static void tc_free(struct tf_comm *c)
{
	free(c);
}

static const struct tf_comm_ops tcp_ops = {hb_all_reduce, hb_all_gather, hb_all_gather_v,
					   hb_exchange, hb_barrier, tc_check, tc_abort, tc_free,
					   tf_comm_host_vote};

tf_status tf_comm_host_new(struct tf_boot *boot, struct tf_comm **out)
{
	struct tcomm *t = calloc(1, sizeof *t);
	if (!t)
		return tf_err(TF_ERR_NOMEM, "host comm: out of memory");
	t->hb = (struct hbase){{&tcp_ops, boot->world, boot->rank, false, "host", 0}, tcp_call};
	t->boot = boot;
	*out = &t->hb.base;
	return TF_OK;
}

void tf_comm_free(struct tf_comm *c)
{
	if (c)
		c->ops->free(c);
}
