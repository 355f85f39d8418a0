/* verbs_fake.c: fake verbs, an in-process implementation of the verbs the
 * RoCE transport calls (verbs.h says what it models). It is a test double
 * with teeth: keys, ranges, queue-pair states and the send queue's depth
 * are enforced as an HCA would, so a transport that passes here has at
 * least kept every rule a real HCA checks in software. What it does not
 * model: wire timing, packet loss and retries, MTU segmentation, the
 * IOMMU, and any vendor error. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fabric/verbs.h"

#define MAX_QP 16
#define MAX_MR 16
#define QDEPTH 1024

struct fake_fabric {
	pthread_mutex_t mu;
	int refs;
	struct fqp *qps[MAX_QP];
	struct fmr *mrs[MAX_MR];
	uint32_t next_key, next_qpn;
};

struct tf_verbs_fake {
	struct fake_fabric *fab;
	struct tf_verbs_fake_opts o;
	struct ibv_device dev[TF_FAKE_MAX_DEV];
	struct ibv_device *list[TF_FAKE_MAX_DEV + 1];
	struct tf_verbs_fake_stats st;
	bool flushed;
};

struct fctx { struct ibv_context c; struct tf_verbs_fake *f; int dev; };
struct fpd { struct ibv_pd pd; struct tf_verbs_fake *f; };
struct fmr { struct ibv_mr mr; int access; };
struct fcq {
	struct ibv_cq cq;
	struct tf_verbs_fake *f;
	struct ibv_wc ring[QDEPTH];
	unsigned head, tail; /* ring[head..tail) */
	uint64_t polls;
};

struct wr {
	uint64_t wr_id, remote, local, due;
	size_t len;
	uint32_t lkey, rkey;
	bool signaled, is_inline;
	uint8_t data[64];
};

struct fqp {
	struct ibv_qp qp;
	struct tf_verbs_fake *f;
	struct fcq *scq;
	struct ibv_qp_attr attr; /* what modify_qp set */
	struct ibv_qp_cap cap;
	struct wr q[QDEPTH];
	unsigned head, tail, depth;
};

static struct fake_fabric *fabric_of(struct tf_verbs_fake *f) { return f->fab; }

static void note(struct tf_verbs_fake *f, const char *fmt, const char *a, uint64_t x, uint64_t y)
{
	snprintf(f->st.last_error, sizeof f->st.last_error, fmt, a, (unsigned long long)x,
		 (unsigned long long)y);
}

/* ---- devices ---- */

static const char *f_get_device_name(struct ibv_device *d) { return d->name; }
static void f_free_device_list(struct ibv_device **l) { (void)l; }

static struct ibv_context *f_open_device(struct ibv_device *d)
{
	struct tf_verbs_fake *f;
	memcpy(&f, d->ibdev_path, sizeof f); /* stashed by fill() */
	struct fctx *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->c.device = d, c->f = f, c->dev = (int)(d - f->dev);
	return &c->c;
}

static int f_close_device(struct ibv_context *c) { free(c); return 0; }

static int f_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a)
{
	struct fctx *x = (struct fctx *)c;
	if (port != 1)
		return EINVAL;
	memset(a, 0, sizeof *a);
	const struct tf_verbs_fake_dev *d = &x->f->o.dev[x->dev];
	a->state = d->down ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
	a->max_mtu = IBV_MTU_4096;
	a->active_mtu = d->mtu ? d->mtu : IBV_MTU_4096;
	a->gid_tbl_len = 2;
	a->link_layer = IBV_LINK_LAYER_ETHERNET;
	return 0;
}

static int f_query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *gid)
{
	struct fctx *x = (struct fctx *)c;
	if (port != 1 || index < 0 || index > 1)
		return EINVAL;
	memset(gid, 0, sizeof *gid);
	if (index == 0) { /* a link-local GID first, as on real ports */
		gid->raw[0] = 0xfe, gid->raw[1] = 0x80, gid->raw[15] = (uint8_t)(x->dev + 1);
		return 0;
	}
	uint32_t ip = x->f->o.dev[x->dev].ipv4;
	gid->raw[10] = gid->raw[11] = 0xff;
	gid->raw[12] = (uint8_t)(ip >> 24), gid->raw[13] = (uint8_t)(ip >> 16);
	gid->raw[14] = (uint8_t)(ip >> 8), gid->raw[15] = (uint8_t)ip;
	return 0;
}

/* ---- protection domains and memory regions ---- */

static struct ibv_pd *f_alloc_pd(struct ibv_context *c)
{
	struct fpd *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	p->pd.context = c, p->f = ((struct fctx *)c)->f;
	return &p->pd;
}

static int f_dealloc_pd(struct ibv_pd *pd) { free(pd); return 0; }

static struct ibv_mr *f_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
	struct tf_verbs_fake *f = ((struct fpd *)pd)->f;
	struct fake_fabric *fab = fabric_of(f);
	if (f->o.fail_reg_mr) {
		errno = ENOMEM;
		return NULL;
	}
	struct fmr *m = calloc(1, sizeof *m);
	if (!m) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&fab->mu);
	int i = 0;
	while (i < MAX_MR && fab->mrs[i])
		i++;
	if (i == MAX_MR) {
		pthread_mutex_unlock(&fab->mu);
		free(m);
		errno = ENOMEM;
		return NULL;
	}
	uint32_t k = fab->next_key++;
	m->mr = (struct ibv_mr){pd->context, pd, addr, len, 0, 0x100 + 2 * k, 0x80000 + 2 * k};
	m->access = access;
	fab->mrs[i] = m;
	pthread_mutex_unlock(&fab->mu);
	return &m->mr;
}

static int f_dereg_mr(struct ibv_mr *mr)
{
	struct tf_verbs_fake *f = ((struct fpd *)mr->pd)->f;
	struct fake_fabric *fab = fabric_of(f);
	pthread_mutex_lock(&fab->mu);
	for (int i = 0; i < MAX_MR; i++)
		if (fab->mrs[i] == (struct fmr *)mr)
			fab->mrs[i] = NULL;
	pthread_mutex_unlock(&fab->mu);
	free(mr);
	return 0;
}

/* The region a key names over [addr, addr + len), or NULL (fabric lock held). */
static struct fmr *find_mr(struct fake_fabric *fab, uint32_t key, bool remote, uint64_t addr, size_t len)
{
	for (int i = 0; i < MAX_MR; i++) {
		struct fmr *m = fab->mrs[i];
		if (!m || (remote ? m->mr.rkey : m->mr.lkey) != key)
			continue;
		uint64_t lo = (uint64_t)(uintptr_t)m->mr.addr;
		if (addr < lo || addr > lo + m->mr.length || len > lo + m->mr.length - addr)
			return NULL;
		if (remote && !(m->access & IBV_ACCESS_REMOTE_WRITE))
			return NULL;
		return m;
	}
	return NULL;
}

/* ---- completion queues ---- */

static struct ibv_cq *f_create_cq(struct ibv_context *c, int cqe, void *ctx, struct ibv_comp_channel *ch, int vec)
{
	struct fcq *q = calloc(1, sizeof *q);
	if (!q)
		return NULL;
	q->cq.context = c, q->cq.cqe = cqe < QDEPTH ? cqe : QDEPTH, q->f = ((struct fctx *)c)->f;
	return &q->cq;
}

static int f_destroy_cq(struct ibv_cq *cq) { free(cq); return 0; }

static void complete(struct fcq *q, uint64_t wr_id, enum ibv_wc_status s, uint32_t qpn)
{
	if (q->tail - q->head >= QDEPTH)
		return; /* overrun: a real CQ would go to error; the tests size it */
	struct ibv_wc *w = &q->ring[q->tail++ % QDEPTH];
	memset(w, 0, sizeof *w);
	w->wr_id = wr_id, w->status = s, w->opcode = IBV_WC_RDMA_WRITE, w->qp_num = qpn;
	w->vendor_err = s == IBV_WC_SUCCESS ? 0 : 0x51;
}

/* ---- queue pairs ---- */

static struct ibv_qp *f_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a)
{
	struct tf_verbs_fake *f = ((struct fpd *)pd)->f;
	struct fake_fabric *fab = fabric_of(f);
	if (a->qp_type != IBV_QPT_RC || !a->send_cq || a->cap.max_send_wr == 0 || a->cap.max_send_wr > QDEPTH) {
		errno = EINVAL;
		return NULL;
	}
	struct fqp *q = calloc(1, sizeof *q);
	if (!q) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&fab->mu);
	int i = 0;
	while (i < MAX_QP && fab->qps[i])
		i++;
	if (i == MAX_QP) {
		pthread_mutex_unlock(&fab->mu);
		free(q);
		errno = ENOMEM;
		return NULL;
	}
	q->qp.context = pd->context, q->qp.pd = pd, q->qp.send_cq = a->send_cq, q->qp.recv_cq = a->recv_cq;
	q->qp.qp_num = 0x40 + fab->next_qpn++;
	q->qp.qp_type = IBV_QPT_RC, q->qp.state = IBV_QPS_RESET;
	q->f = f, q->scq = (struct fcq *)a->send_cq, q->depth = a->cap.max_send_wr;
	/* The provider reports its actual inline limit back. */
	a->cap.max_inline_data = f->o.max_inline;
	q->cap = a->cap;
	fab->qps[i] = q;
	pthread_mutex_unlock(&fab->mu);
	return &q->qp;
}

static struct fqp *find_qp(struct fake_fabric *fab, uint32_t qpn)
{
	for (int i = 0; i < MAX_QP; i++)
		if (fab->qps[i] && fab->qps[i]->qp.qp_num == qpn)
			return fab->qps[i];
	return NULL;
}

/* The states of this table's queue pairs, in creation order. */
static void snap_states(struct tf_verbs_fake *f)
{
	struct fake_fabric *fab = fabric_of(f);
	int n = 0;
	for (int i = 0; i < 8; i++)
		f->st.qp_states_at_first_flush[i] = -1;
	for (int i = 0; i < MAX_QP && n < 8; i++)
		if (fab->qps[i] && fab->qps[i]->f == f)
			f->st.qp_states_at_first_flush[n++] = (int)fab->qps[i]->qp.state;
	f->st.nqp = n;
}

/* Flush everything q holds (fabric lock held). */
static void flush(struct fqp *q)
{
	while (q->head != q->tail) {
		struct wr *w = &q->q[q->head++ % QDEPTH];
		if (!q->f->flushed) {
			q->f->flushed = true;
			snap_states(q->f);
		}
		q->f->st.flushes++;
		if (!w->is_inline)
			q->f->st.inflight -= w->len;
		complete(q->scq, w->wr_id, IBV_WC_WR_FLUSH_ERR, q->qp.qp_num);
	}
}

/* An HCA generates the flushes of a queue pair in error asynchronously:
 * here at the next poll of its completion queue. */
static void to_error(struct fqp *q)
{
	q->qp.state = IBV_QPS_ERR;
}

static int f_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
	struct fqp *q = (struct fqp *)qp;
	struct fake_fabric *fab = fabric_of(q->f);
	int rc = 0;
	pthread_mutex_lock(&fab->mu);
	enum ibv_qp_state to = (mask & IBV_QP_STATE) ? a->qp_state : qp->state;
	const int init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	const int rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	const int rts = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
			IBV_QP_MAX_QP_RD_ATOMIC;
	if (to == IBV_QPS_ERR) {
		to_error(q);
	} else if (to == IBV_QPS_RESET) {
		q->head = q->tail; /* RESET drops the queue without completions */
		qp->state = IBV_QPS_RESET;
	} else if (to == IBV_QPS_INIT && qp->state == IBV_QPS_RESET && (mask & init) == init && a->port_num == 1) {
		q->attr.qp_access_flags = a->qp_access_flags, q->attr.port_num = a->port_num;
		qp->state = IBV_QPS_INIT;
	} else if (to == IBV_QPS_RTR && qp->state == IBV_QPS_INIT && (mask & rtr) == rtr) {
		if (q->f->o.fail_rtr || !find_qp(fab, a->dest_qp_num) || a->path_mtu > IBV_MTU_4096)
			rc = EINVAL;
		else {
			q->attr.path_mtu = a->path_mtu, q->attr.dest_qp_num = a->dest_qp_num;
			q->attr.rq_psn = a->rq_psn, q->attr.min_rnr_timer = a->min_rnr_timer;
			q->attr.ah_attr = a->ah_attr, q->attr.max_dest_rd_atomic = a->max_dest_rd_atomic;
			qp->state = IBV_QPS_RTR;
		}
	} else if (to == IBV_QPS_RTS && qp->state == IBV_QPS_RTR && (mask & rts) == rts) {
		q->attr.timeout = a->timeout, q->attr.retry_cnt = a->retry_cnt;
		q->attr.rnr_retry = a->rnr_retry, q->attr.sq_psn = a->sq_psn;
		qp->state = IBV_QPS_RTS;
	} else {
		rc = EINVAL;
	}
	q->attr.qp_state = qp->state;
	pthread_mutex_unlock(&fab->mu);
	return rc;
}

static int f_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask, struct ibv_qp_init_attr *init)
{
	struct fqp *q = (struct fqp *)qp;
	struct fake_fabric *fab = fabric_of(q->f);
	pthread_mutex_lock(&fab->mu);
	*a = q->attr;
	a->qp_state = a->cur_qp_state = qp->state;
	a->cap = q->cap;
	if (init) {
		memset(init, 0, sizeof *init);
		init->cap = q->cap, init->qp_type = IBV_QPT_RC;
	}
	pthread_mutex_unlock(&fab->mu);
	return 0;
}

static int f_destroy_qp(struct ibv_qp *qp)
{
	struct fqp *q = (struct fqp *)qp;
	struct fake_fabric *fab = fabric_of(q->f);
	pthread_mutex_lock(&fab->mu);
	for (int i = 0; i < MAX_QP; i++)
		if (fab->qps[i] == q)
			fab->qps[i] = NULL;
	pthread_mutex_unlock(&fab->mu);
	free(q);
	return 0;
}

/* Execute one request (fabric lock held): it lands in the peer's memory or
 * fails, which puts q in the error state as an HCA does. */
static void execute(struct fqp *q, struct wr *w)
{
	struct tf_verbs_fake *f = q->f;
	struct fake_fabric *fab = fabric_of(f);
	enum ibv_wc_status s = IBV_WC_SUCCESS;
	struct fqp *peer = find_qp(fab, q->attr.dest_qp_num);
	if (!w->is_inline)
		f->st.inflight -= w->len;
	if (!w->is_inline && !find_mr(fab, w->lkey, false, w->local, w->len)) {
		s = IBV_WC_LOC_PROT_ERR;
		note(f, "%s: lkey 0x%llx over %llu bytes", "local protection error", w->lkey, w->len);
	} else if (!peer || peer->qp.state == IBV_QPS_ERR || peer->qp.state == IBV_QPS_RESET) {
		s = IBV_WC_RETRY_EXC_ERR; /* nobody answers */
		note(f, "%s: qpn 0x%llx (%llu)", "peer queue pair gone", q->attr.dest_qp_num, 0);
	} else {
		struct fmr *m = find_mr(fab, w->rkey, true, w->remote, w->len);
		if (!m || m->mr.pd != peer->qp.pd) {
			s = IBV_WC_REM_ACCESS_ERR;
			note(f, "%s: rkey 0x%llx at 0x%llx", "remote access error", w->rkey, w->remote);
		}
	}
	if (s == IBV_WC_SUCCESS) {
		if (f->o.tap)
			f->o.tap(f->o.tap_ctx, w->remote, w->len, w->is_inline);
		void *dst = (void *)(uintptr_t)w->remote;
		if (w->is_inline)
			memcpy(dst, w->data, w->len);
		else
			memmove(dst, (const void *)(uintptr_t)w->local, w->len);
		__atomic_thread_fence(__ATOMIC_RELEASE);
		if (w->signaled)
			complete(q->scq, w->wr_id, s, q->qp.qp_num);
		return;
	}
	complete(q->scq, w->wr_id, s, q->qp.qp_num);
	to_error(q);
}

/* Run q's due requests in order (fabric lock held). */
static void progress(struct fqp *q, uint64_t now)
{
	if (q->qp.state == IBV_QPS_ERR) {
		flush(q);
		return;
	}
	while (q->head != q->tail && q->qp.state == IBV_QPS_RTS && q->q[q->head % QDEPTH].due <= now) {
		struct wr w = q->q[q->head % QDEPTH];
		q->head++;
		execute(q, &w);
	}
}

static int f_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct fqp *q = (struct fqp *)qp;
	struct tf_verbs_fake *f = q->f;
	struct fake_fabric *fab = fabric_of(f);
	int rc = 0;
	pthread_mutex_lock(&fab->mu);
	for (; wr; wr = wr->next) {
		f->st.posts++;
		size_t len = wr->num_sge == 1 ? wr->sg_list[0].length : 0;
		bool inl = wr->send_flags & IBV_SEND_INLINE;
		if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_ERR)
			rc = EINVAL;
		else if (wr->opcode != IBV_WR_RDMA_WRITE || wr->num_sge != 1)
			rc = EINVAL;
		else if (inl && len > q->cap.max_inline_data)
			rc = EINVAL;
		else if (q->tail - q->head >= q->depth)
			rc = ENOMEM;
		if (rc) {
			f->st.bad_posts++;
			*bad = wr;
			break;
		}
		struct wr *w = &q->q[q->tail % QDEPTH];
		memset(w, 0, sizeof *w);
		w->wr_id = wr->wr_id, w->remote = wr->wr.rdma.remote_addr, w->rkey = wr->wr.rdma.rkey;
		w->local = wr->sg_list[0].addr, w->lkey = wr->sg_list[0].lkey, w->len = len;
		w->signaled = wr->send_flags & IBV_SEND_SIGNALED, w->is_inline = inl;
		w->due = q->scq->polls + (uint64_t)f->o.lag;
		if (inl)
			memcpy(w->data, (const void *)(uintptr_t)w->local, len);
		f->st.writes++;
		if (inl) {
			f->st.inline_writes++;
		} else {
			if (len > f->st.max_write)
				f->st.max_write = len;
			f->st.inflight += len;
			if (f->st.inflight > f->st.peak_inflight)
				f->st.peak_inflight = f->st.inflight;
		}
		q->tail++;
	}
	if (qp->state == IBV_QPS_RTS && f->o.lag == 0)
		progress(q, q->scq->polls);
	pthread_mutex_unlock(&fab->mu);
	return rc;
}

static int f_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	struct fcq *c = (struct fcq *)cq;
	struct fake_fabric *fab = fabric_of(c->f);
	pthread_mutex_lock(&fab->mu);
	c->polls++;
	for (int i = 0; i < MAX_QP; i++)
		if (fab->qps[i] && fab->qps[i]->scq == c)
			progress(fab->qps[i], c->polls);
	int k = 0;
	while (k < n && c->head != c->tail)
		wc[k++] = c->ring[c->head++ % QDEPTH];
	pthread_mutex_unlock(&fab->mu);
	return k;
}

static struct ibv_device **f_get_device_list(const struct tf_verbs *v, int *n)
{
	struct ibv_device **l = v->fake->list;
	int k = 0;
	while (l[k])
		k++;
	if (n)
		*n = k;
	return l;
}

static tf_status fill(struct tf_verbs *v, struct fake_fabric *fab, const struct tf_verbs_fake_opts *o)
{
	struct tf_verbs_fake *f = calloc(1, sizeof *f);
	if (!f)
		return tf_err(TF_ERR_NOMEM, "fake verbs: out of memory");
	f->fab = fab;
	f->o = *o;
	if (!f->o.max_inline && !o->max_inline)
		f->o.max_inline = 64;
	if (f->o.ndev > TF_FAKE_MAX_DEV)
		f->o.ndev = TF_FAKE_MAX_DEV;
	for (int i = 0; i < f->o.ndev; i++) {
		snprintf(f->dev[i].name, sizeof f->dev[i].name, "%s", f->o.dev[i].name);
		memcpy(f->dev[i].ibdev_path, &f, sizeof f);
		f->list[i] = &f->dev[i];
	}
	memset(v, 0, sizeof *v);
	v->name = "fake";
	v->get_device_list = f_get_device_list;
	v->free_device_list = f_free_device_list;
	v->get_device_name = f_get_device_name;
	v->open_device = f_open_device;
	v->close_device = f_close_device;
	v->query_port = f_query_port;
	v->query_gid = f_query_gid;
	v->alloc_pd = f_alloc_pd;
	v->dealloc_pd = f_dealloc_pd;
	v->reg_mr = f_reg_mr;
	v->dereg_mr = f_dereg_mr;
	v->create_cq = f_create_cq;
	v->destroy_cq = f_destroy_cq;
	v->create_qp = f_create_qp;
	v->modify_qp = f_modify_qp;
	v->query_qp = f_query_qp;
	v->destroy_qp = f_destroy_qp;
	v->post_send = f_post_send;
	v->poll_cq = f_poll_cq;
	v->fake = f;
	pthread_mutex_lock(&fab->mu);
	fab->refs++;
	pthread_mutex_unlock(&fab->mu);
	return TF_OK;
}

tf_status tf_verbs_fake_new(const struct tf_verbs_fake_opts *o, struct tf_verbs *v)
{
	struct fake_fabric *fab = calloc(1, sizeof *fab);
	if (!fab)
		return tf_err(TF_ERR_NOMEM, "fake verbs: out of memory");
	pthread_mutex_init(&fab->mu, NULL);
	fab->next_key = 1;
	tf_status st = fill(v, fab, o);
	if (st) {
		pthread_mutex_destroy(&fab->mu);
		free(fab);
	}
	return st;
}

tf_status tf_verbs_fake_peer(const struct tf_verbs *first, const struct tf_verbs_fake_opts *o,
			     struct tf_verbs *v)
{
	if (!first->fake)
		return tf_err(TF_ERR_ARG, "fake verbs: the first table is not fake");
	return fill(v, first->fake->fab, o);
}

void tf_verbs_fake_stats(const struct tf_verbs *v, struct tf_verbs_fake_stats *out)
{
	struct tf_verbs_fake *f = v->fake;
	pthread_mutex_lock(&f->fab->mu);
	*out = f->st;
	if (!f->flushed) {
		for (int i = 0; i < 8; i++)
			out->qp_states_at_first_flush[i] = -1;
		out->nqp = 0;
	}
	pthread_mutex_unlock(&f->fab->mu);
}

void tf_verbs_fake_release(struct tf_verbs *v);
void tf_verbs_fake_release(struct tf_verbs *v)
{
	struct tf_verbs_fake *f = v->fake;
	struct fake_fabric *fab = f->fab;
	pthread_mutex_lock(&fab->mu);
	bool last = --fab->refs == 0;
	pthread_mutex_unlock(&fab->mu);
	free(f);
	if (last) {
		pthread_mutex_destroy(&fab->mu);
		free(fab);
	}
	v->fake = NULL;
}
