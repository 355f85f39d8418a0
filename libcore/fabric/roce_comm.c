/* roce_comm.c: the roce backend: host-memory collectives of two ranks over
 * the RoCE transport, the host backend carrying what does not fit.
 *
 * Small path (one operation each, at most a slot per rank): all-gather,
 * all-gather-v, exchange, and all-reduce of every dtype and operation (the
 * operands are exchanged and each rank reduces them in rank order with
 * tf_comm_reduce, so results are bit-exact with the reference). With
 * TF_TP_ROCE_CHUNKED_KB, an all-gather(-v) whose stride passes the slot but
 * not that bound goes as ceil(stride / slot) operations (an operation
 * empty on both ranks is skipped). Everything else, and the barrier, goes
 * over the host backend (rank 0's TCP star). The route depends only on
 * sizes and lengths, which every rank shares, so ranks agree.
 *
 * Start: load the verbs (verbs wire), open the transport, then a load
 * probe (a 4 KiB all-gather and a 2048-element bf16 sum over RoCE and over
 * the host backend must give equal bytes); each step is voted on. If any
 * rank fails, TF_TP_ROCE_FALLBACK decides: nccl (warn; every rank uses the
 * backend RoCE stands in front of: this path carries host memory, so that
 * is the host backend) or error (every rank refuses, TF_ERR_UNAVAILABLE).
 *
 * The device path (a tp_roce kernel staging from GPU memory, as the seed
 * has) does not exist in this tree; a GPU program cannot use this backend
 * yet. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "fabric/comm.h"
#include "fabric/roce_int.h"

struct rcomm {
	struct tf_comm base;
	struct tf_roce *t;
	struct tf_comm *host; /* the large path and the barrier */
	struct tf_verbs v;
	size_t slot, chunked_max;
	uint8_t *a, *b;       /* two slots of scratch for all-reduce */
};

static tf_status large(struct rcomm *r)
{
	r->host->calls++;
	return TF_OK;
}

/* all-gather-v over RoCE: stride <= slot in one operation, else chunked. */
static tf_status gather_v(struct rcomm *r, const uint8_t *send, uint8_t *recv, size_t stride,
			  const uint32_t *lens)
{
	int me = r->base.rank, peer = 1 - me;
	uint8_t *mine = recv + (size_t)me * stride, *theirs = recv + (size_t)peer * stride;
	tf_status st = TF_OK;
	size_t ops = tf_roce_chunk_ops(stride, r->slot);
	for (size_t c = 0; c < ops && !st; c++) {
		size_t a = tf_roce_chunk_len(lens[me], c, r->slot), b = tf_roce_chunk_len(lens[peer], c, r->slot);
		if (!a && !b)
			continue; /* empty on both ranks: no doorbell */
		st = tf_roce_op(r->t, send + c * r->slot, a, theirs + c * r->slot, b);
	}
	if (!st && send != mine && lens[me])
		memmove(mine, send, lens[me]);
	return st;
}

static bool fits(const struct rcomm *r, size_t stride)
{
	return stride <= r->slot || stride <= r->chunked_max;
}

static tf_status r_all_gather_v(struct tf_comm *c, const void *s, void *rv, size_t stride,
				const uint32_t *lens, tf_cu_stream st)
{
	struct rcomm *r = (struct rcomm *)c;
	for (int k = 0; k < 2; k++)
		if (lens[k] > stride)
			return tf_err(TF_ERR_ARG, "all-gather-v: rank %d's length %u exceeds the stride %zu", k,
				      lens[k], stride);
	if (!fits(r, stride))
		return large(r), r->host->ops->all_gather_v(r->host, s, rv, stride, lens, st);
	return gather_v(r, s, rv, stride, lens);
}

static tf_status r_all_gather(struct tf_comm *c, const void *s, void *rv, size_t n, enum tf_dtype dt,
			      tf_cu_stream st)
{
	struct rcomm *r = (struct rcomm *)c;
	size_t es = tf_comm_dtype_size(dt), bytes = n * es;
	if (!es)
		return tf_err(TF_ERR_UNSUPPORTED, "roce all-gather of dtype %d", (int)dt);
	if (!fits(r, bytes) || bytes > UINT32_MAX)
		return large(r), r->host->ops->all_gather(r->host, s, rv, n, dt, st);
	uint32_t lens[2] = {(uint32_t)bytes, (uint32_t)bytes};
	return gather_v(r, s, rv, bytes, lens);
}

static tf_status r_all_reduce(struct tf_comm *c, const void *s, void *rv, size_t n, enum tf_dtype dt,
			      enum tf_redop op, tf_cu_stream st)
{
	struct rcomm *r = (struct rcomm *)c;
	size_t es = tf_comm_dtype_size(dt), bytes = n * es;
	if (!es || dt == TF_DTYPE_U8)
		return tf_err(TF_ERR_UNSUPPORTED, "roce all-reduce of dtype %d", (int)dt);
	if (bytes > r->slot)
		return large(r), r->host->ops->all_reduce(r->host, s, rv, n, dt, op, st);
	int me = r->base.rank;
	uint8_t *ops[2] = {r->a, r->b};
	memcpy(ops[me], s, bytes); /* send may be recv */
	tf_status e = tf_roce_op(r->t, ops[me], bytes, ops[1 - me], bytes);
	if (e)
		return e;
	const void *srcs[2] = {ops[0], ops[1]};
	return tf_comm_reduce(rv, srcs, 2, n, dt, op);
}

static tf_status r_exchange(struct tf_comm *c, const void *s, void *rv, size_t bytes, int peer,
			    tf_cu_stream st)
{
	struct rcomm *r = (struct rcomm *)c;
	if (peer != 1 - c->rank)
		return tf_err(TF_ERR_ARG, "exchange with rank %d (world 2, rank %d)", peer, c->rank);
	if (bytes > r->slot)
		return large(r), r->host->ops->exchange(r->host, s, rv, bytes, peer, st);
	memcpy(r->a, s, bytes); /* send may be recv */
	return tf_roce_op(r->t, r->a, bytes, rv, bytes);
}

static tf_status r_barrier(struct tf_comm *c)
{
	struct rcomm *r = (struct rcomm *)c;
	large(r);
	return r->host->ops->barrier(r->host);
}

static tf_status r_vote(struct tf_comm *c, bool mine, bool *all)
{
	struct rcomm *r = (struct rcomm *)c;
	large(r);
	r->host->calls++;
	return r->host->ops->vote(r->host, mine, all);
}

static tf_status r_check(struct tf_comm *c)
{
	struct rcomm *r = (struct rcomm *)c;
	tf_status st = tf_roce_check(r->t);
	return st ? st : r->host->ops->check(r->host);
}

static void r_abort(struct tf_comm *c)
{
	struct rcomm *r = (struct rcomm *)c;
	tf_roce_abort(r->t);
	r->host->ops->abort(r->host);
}

static void r_free(struct tf_comm *c)
{
	struct rcomm *r = (struct rcomm *)c;
	tf_roce_close(r->t, NULL);
	tf_comm_free(r->host);
	tf_verbs_close(&r->v);
	free(r->a);
	free(r);
}

static const struct tf_comm_ops roce_ops = {r_all_reduce, r_all_gather, r_all_gather_v, r_exchange,
					    r_barrier, r_check, r_abort, r_free, r_vote};

struct tf_roce *tf_comm_roce_transport(struct tf_comm *c)
{
	return c && c->ops == &roce_ops ? ((struct rcomm *)c)->t : NULL;
}

/* The probe: a 4 KiB all-gather and a 2048-element bf16 sum over RoCE and
 * over the host backend give equal bytes. */
static tf_status probe(struct rcomm *r)
{
	enum { G = 4096, N = 2048 };
	/* g: G bytes; x, y: 2 G gathered; v, ra, rb: N bf16 each. */
	uint8_t *buf = malloc(5 * G + 6 * N);
	if (!buf)
		return tf_err(TF_ERR_NOMEM, "roce probe: out of memory");
	uint8_t *g = buf, *x = g + G, *y = x + 2 * G;
	uint16_t *v = (uint16_t *)(y + 2 * G), *ra = v + N, *rb = ra + N;
	for (int i = 0; i < G; i++)
		g[i] = (uint8_t)(i * 7 + r->base.rank * 131 + 1);
	for (int i = 0; i < N; i++)
		v[i] = (uint16_t)(0x3f80 + ((i * 13 + r->base.rank * 5) & 0x7f)); /* 1.0 .. 2.0 */
	tf_status st = r_all_gather(&r->base, g, x, G, TF_DTYPE_U8, NULL);
	if (!st)
		st = r->host->ops->all_gather(r->host, g, y, G, TF_DTYPE_U8, NULL);
	if (!st && memcmp(x, y, 2 * G))
		st = tf_err(TF_ERR_MISMATCH, "roce probe: the 4 KiB all-gather differs from the host backend's");
	if (!st)
		st = r_all_reduce(&r->base, v, ra, N, TF_DTYPE_BF16, TF_REDOP_SUM, NULL);
	if (!st)
		st = r->host->ops->all_reduce(r->host, v, rb, N, TF_DTYPE_BF16, TF_REDOP_SUM, NULL);
	if (!st && memcmp(ra, rb, 2 * N))
		st = tf_err(TF_ERR_MISMATCH, "roce probe: the bf16 sum differs from the host backend's");
	free(buf);
	return st;
}

static tf_status open_roce(struct tf_boot *boot, const struct tf_fabric_settings *s, struct rcomm *r)
{
	tf_status st = TF_OK;
	if (s->roce_wire == TF_ROCE_WIRE_VERBS)
		st = tf_verbs_open(NULL, &r->v);
	if ((st = roce_vote(boot, st, "load libibverbs")))
		return st;
	struct tf_roce_opts o = {
		.slot = r->slot, .wire = (enum tf_roce_wire)s->roce_wire, .verbs = r->v.dl ? &r->v : NULL,
		.hca = s->roce_hca, .want_hca = s->roce_hcas, .tc = s->roce_tc, .shm_stripes = s->roce_hcas,
		.timeout_s = s->mailbox_timeout_s,
	};
	if ((st = tf_roce_open(boot, &o, &r->t)))
		return st;
	return roce_vote(boot, probe(r), "pass the load probe");
}

tf_status tf_comm_roce_new(struct tf_boot *boot, const struct tf_fabric_settings *s, struct tf_comm **out)
{
	if (boot->world != 2)
		return tf_err(TF_ERR_CONFIG, "TF_COMM_BACKEND=roce: expected TF_TP_WORLD=2");
	tf_status st = tf_roce_slot_check(s->mailbox_max_kb);
	if (st)
		return st;
	struct rcomm *r = calloc(1, sizeof *r);
	if (!r)
		return tf_err(TF_ERR_NOMEM, "roce: out of memory");
	r->base = (struct tf_comm){&roce_ops, 2, boot->rank, false, "roce", 0};
	r->slot = tf_roce_slot_bytes(s->mailbox_max_kb);
	r->chunked_max = (size_t)s->roce_chunked_kb * 1024;
	if (!(r->a = malloc(2 * r->slot))) {
		free(r);
		return tf_err(TF_ERR_NOMEM, "roce: out of memory");
	}
	r->b = r->a + r->slot;
	if ((st = tf_comm_host_new(boot, &r->host))) {
		free(r->a), free(r);
		return st;
	}
	st = open_roce(boot, s, r);
	if (!st) {
		*out = &r->base;
		return TF_OK;
	}
	char why[300];
	snprintf(why, sizeof why, "%s", tf_errmsg(st));
	if (r->t)
		tf_roce_close(r->t, NULL);
	r->t = NULL;
	struct tf_comm *host = r->host;
	tf_verbs_close(&r->v);
	free(r->a), free(r);
	if (s->roce_fallback_error) {
		tf_comm_free(host);
		return tf_err(TF_ERR_UNAVAILABLE, "%s (TF_TP_ROCE_FALLBACK=error)", why);
	}
	if (boot->rank == 0)
		tf_log(TF_LOG_WARN, "tp: RoCE is unavailable (%s); every rank uses the host backend", why);
	*out = host;
	return TF_OK;
}
