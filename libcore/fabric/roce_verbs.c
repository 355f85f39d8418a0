/* roce_verbs.c: the verbs wire's set-up over a verbs table (real
 * libibverbs or fake verbs), its halt and its release.
 *
 * Order: find the usable ports (port 1 ACTIVE, Ethernet, an IPv4-mapped
 * GID: the lowest such index) → all-gather their IPv4 addresses (every
 * rank, even with TF_TP_ROCE_HCA set, so the bootstrap stays in step) →
 * choose (tf_roce_choose_ports, or the named HCAs) → per HCA: PD, one MR
 * over the whole region, CQ of 256, RC QP (256 send requests, 16 bytes
 * inline asked; an actual max_inline_data under 4 is refused), INIT → vote
 * → all-gather the connection records (magic, HCAs, region address, slot,
 * length, per HCA rkey, QP number, MTU, GID; another layout is refused) →
 * RTR (the smaller MTU, PSN 0, RNR timer 12, GRH hop limit 64 and
 * TF_TP_ROCE_TC) and RTS (timeout 14, retry 7, RNR retry 7) → vote → the
 * rank's one log line.
 *
 * Unproven without HCAs: the GID-type check (a real port lists RoCE v1 and
 * v2 GIDs for one address; this takes the lowest IPv4-mapped index, the
 * seed read sysfs gid_attrs/types to prefer v2), and every attribute's
 * effect on a NIC. On fake verbs every step and value is checked. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "fabric/roce_int.h"

tf_status roce_vote(struct tf_boot *b, tf_status mine, const char *what)
{
	uint8_t ok = mine == TF_OK, all[TF_BOOT_MAX_WORLD * 8];
	size_t lens[TF_BOOT_MAX_WORLD];
	char msg[256];
	snprintf(msg, sizeof msg, "%s", mine ? tf_errmsg(mine) : "");
	tf_status st = tf_boot_all_gather(b, &ok, 1, all, 8, lens);
	if (st)
		return st;
	if (mine)
		return tf_err(TF_ERR_UNAVAILABLE, "roce: rank %d failed to %s: %s", b->rank, what, msg);
	for (int r = 0; r < b->world; r++)
		if (!all[8 * r])
			return tf_err(TF_ERR_UNAVAILABLE, "roce: rank %d failed to %s", r, what);
	return TF_OK;
}

/* A usable port: ACTIVE, Ethernet, with an IPv4-mapped GID. */
static bool usable(const struct tf_verbs *v, struct ibv_context *c, int gid_want, int *gid_index,
		   uint32_t *ip, uint8_t gid[16], enum ibv_mtu *mtu)
{
	struct ibv_port_attr pa;
	if (v->query_port(c, 1, &pa) || pa.state != IBV_PORT_ACTIVE || pa.link_layer != IBV_LINK_LAYER_ETHERNET)
		return false;
	*mtu = pa.active_mtu;
	for (int i = 0; i < pa.gid_tbl_len; i++) {
		union ibv_gid g;
		if (gid_want >= 0 && i != gid_want)
			continue;
		if (v->query_gid(c, 1, i, &g))
			continue;
		static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
		if (memcmp(g.raw, mapped, 12))
			continue;
		*gid_index = i;
		*ip = (uint32_t)g.raw[12] << 24 | (uint32_t)g.raw[13] << 16 | (uint32_t)g.raw[14] << 8 | g.raw[15];
		memcpy(gid, g.raw, 16);
		return true;
	}
	return false;
}

struct port_list {
	int n;
	struct tf_roce_port p[TF_ROCE_MAX_PORTS];
	enum ibv_mtu mtu[TF_ROCE_MAX_PORTS];
	uint8_t gid[TF_ROCE_MAX_PORTS][16];
};

static void list_ports(const struct tf_verbs *v, struct port_list *l, char names[][64], int *gids, int nn)
{
	int n = 0;
	struct ibv_device **devs = v->get_device_list(v, &n);
	l->n = 0;
	for (int i = 0; devs && i < n && l->n < TF_ROCE_MAX_PORTS; i++) {
		const char *name = v->get_device_name(devs[i]);
		int want = -1;
		if (nn) {
			int k = 0;
			while (k < nn && strcmp(names[k], name))
				k++;
			if (k == nn)
				continue;
			want = gids[k];
		}
		struct ibv_context *c = v->open_device(devs[i]);
		if (!c)
			continue;
		struct tf_roce_port *p = &l->p[l->n];
		if (usable(v, c, want, &p->gid_index, &p->ipv4, l->gid[l->n], &l->mtu[l->n])) {
			snprintf(p->dev, sizeof p->dev, "%s", name);
			p->port = 1;
			l->n++;
		}
		v->close_device(c);
	}
	if (devs)
		v->free_device_list(devs);
}

static struct ibv_device *find_dev(const struct tf_verbs *v, struct ibv_device **devs, int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(v->get_device_name(devs[i]), name))
			return devs[i];
	return NULL;
}

/* PD, MR, CQ, QP to INIT for HCA h. */
static tf_status open_hca(struct tf_roce *t, struct roce_hca *h, struct ibv_device *dev)
{
	const struct tf_verbs *v = t->v;
	tf_status st;
	if ((st = TF_IBV_PTR(h->ctx, v->open_device(dev))) || (st = TF_IBV_PTR(h->pd, v->alloc_pd(h->ctx))))
		return st;
	h->mr = v->reg_mr(h->pd, t->region, t->len,
			  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!h->mr)
		return tf_err(TF_ERR_UNAVAILABLE, "roce: %s: cannot register the %zu-byte region: %s%s", h->name,
			      t->len, strerror(errno), errno == ENOMEM ? " (is `ulimit -l` unlimited?)" : "");
	if ((st = TF_IBV_PTR(h->cq, v->create_cq(h->ctx, 256, NULL, NULL, 0))))
		return st;
	struct ibv_qp_init_attr ia;
	memset(&ia, 0, sizeof ia);
	ia.send_cq = ia.recv_cq = h->cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 256, ia.cap.max_recv_wr = 1;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	ia.cap.max_inline_data = 16;
	if ((st = TF_IBV_PTR(h->qp, v->create_qp(h->pd, &ia))))
		return st;
	/* The flag is posted inline from a stack word with lkey 0: a queue
	 * pair that cannot inline 4 bytes would read it through no key. */
	if (ia.cap.max_inline_data < TF_ROCE_MIN_INLINE)
		return tf_err(TF_ERR_UNAVAILABLE,
			      "roce: %s: the queue pair inlines %u bytes, under the %d the flag needs", h->name,
			      ia.cap.max_inline_data, TF_ROCE_MIN_INLINE);
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT, a.pkey_index = 0, a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
	return TF_IBV(v->modify_qp(h->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
}

static tf_status connect_hca(struct tf_roce *t, struct roce_hca *h, const struct roce_rec *peer, int i)
{
	const struct tf_verbs *v = t->v;
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	enum ibv_mtu pm = (enum ibv_mtu)peer->hca[i].mtu;
	a.path_mtu = pm < h->mtu ? pm : h->mtu;
	a.dest_qp_num = peer->hca[i].qpn, a.rq_psn = 0;
	a.max_dest_rd_atomic = 1, a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1, a.ah_attr.port_num = 1;
	memcpy(a.ah_attr.grh.dgid.raw, peer->hca[i].gid, 16);
	a.ah_attr.grh.sgid_index = (uint8_t)h->gid_index;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.grh.traffic_class = (uint8_t)t->o.tc;
	tf_status st = TF_IBV(v->modify_qp(h->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER));
	if (st)
		return tf_err_wrap(st, "roce: %s: RTR: ", h->name);
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS, a.timeout = 14, a.retry_cnt = 7, a.rnr_retry = 7, a.sq_psn = 0;
	a.max_rd_atomic = 1;
	st = TF_IBV(v->modify_qp(h->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					    IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC));
	if (st)
		return tf_err_wrap(st, "roce: %s: RTS: ", h->name);
	h->peer_rkey = peer->hca[i].rkey;
	return TF_OK;
}

/* Find, exchange and choose the ports; open the chosen HCAs. */
static tf_status open_ports(struct tf_roce *t, struct tf_boot *b)
{
	char names[TF_ROCE_MAX_HCA][64];
	int gids[TF_ROCE_MAX_HCA], nn = 0;
	tf_status st = tf_roce_parse_hca(t->o.hca, names, gids, &nn);
	struct port_list l;
	memset(&l, 0, sizeof l);
	if (!st)
		list_ports(t->v, &l, names, gids, nn);
	/* Every rank sends its addresses, even with TF_TP_ROCE_HCA set. */
	uint32_t mine[TF_ROCE_MAX_PORTS], all[2 * TF_ROCE_MAX_PORTS];
	size_t lens[2];
	for (int i = 0; i < l.n; i++)
		mine[i] = l.p[i].ipv4;
	tf_status bs = tf_boot_all_gather(b, mine, (size_t)l.n * 4, (uint8_t *)all, sizeof mine, lens);
	if (bs)
		return bs;
	if (st)
		return st;
	int np = (int)(lens[1 - b->rank] / 4);
	const uint32_t *peer = all + (size_t)(1 - b->rank) * TF_ROCE_MAX_PORTS;
	if (l.n == 0)
		return tf_err(TF_ERR_UNAVAILABLE, "roce: no usable port (ACTIVE, Ethernet, IPv4 GID)%s%s",
			      nn ? " among TF_TP_ROCE_HCA=" : "", nn ? t->o.hca : "");
	struct tf_roce_choice c;
	int want = t->o.want_hca < 1 ? 2 : t->o.want_hca;
	if (nn) {
		/* Named: in the order given, as many as both sides name. */
		c.n = nn < l.n ? nn : l.n;
		c.n = c.n < np ? c.n : np;
		for (int i = 0; i < c.n; i++)
			c.mine[i] = c.peer[i] = i;
		c.shared = true;
	} else {
		tf_roce_choose_ports(mine, l.n, peer, np, want, &c);
		if (!c.shared && c.n)
			tf_log(TF_LOG_WARN, "tp roce: rank %d: no /24 shared with the peer; taking the first %d port%s "
			       "in order (set TF_TP_ROCE_HCA)", b->rank, c.n, c.n > 1 ? "s" : "");
	}
	if (c.n == 0)
		return tf_err(TF_ERR_UNAVAILABLE, "roce: the peer has no usable port");
	int n = 0;
	struct ibv_device **devs = t->v->get_device_list(t->v, &n);
	t->n_hca = c.n;
	for (int i = 0; i < c.n && !st; i++) {
		struct roce_hca *h = &t->hca[i];
		int k = c.mine[i];
		snprintf(h->name, sizeof h->name, "%s", l.p[k].dev);
		h->gid_index = l.p[k].gid_index, h->ipv4 = l.p[k].ipv4, h->mtu = l.mtu[k];
		memcpy(h->gid, l.gid[k], 16);
		struct ibv_device *d = devs ? find_dev(t->v, devs, n, h->name) : NULL;
		st = d ? open_hca(t, h, d) : tf_err(TF_ERR_UNAVAILABLE, "roce: %s went away", h->name);
	}
	if (devs)
		t->v->free_device_list(devs);
	return st;
}

tf_status roce_verbs_setup(struct tf_roce *t, struct tf_boot *b)
{
	tf_status st = roce_vote(b, open_ports(t, b), "open its HCAs");
	if (st)
		return st;
	struct roce_rec me, all[2];
	size_t lens[2];
	memset(&me, 0, sizeof me);
	me.magic = ROCE_REC_MAGIC, me.n_hca = (uint32_t)t->n_hca;
	me.va = (uint64_t)(uintptr_t)t->region, me.slot = t->slot, me.len = t->len;
	for (int i = 0; i < t->n_hca; i++) {
		me.hca[i].rkey = t->hca[i].mr->rkey, me.hca[i].qpn = t->hca[i].qp->qp_num;
		me.hca[i].mtu = (uint32_t)t->hca[i].mtu;
		memcpy(me.hca[i].gid, t->hca[i].gid, 16);
	}
	if ((st = tf_boot_all_gather(b, &me, sizeof me, (uint8_t *)all, sizeof me, lens)))
		return st;
	const struct roce_rec *p = &all[1 - b->rank];
	tf_status cs = TF_OK;
	if (lens[1 - b->rank] != sizeof me || p->magic != ROCE_REC_MAGIC)
		cs = tf_err(TF_ERR_FORMAT, "roce: the peer's connection record is of another version");
	else if (p->n_hca != me.n_hca)
		cs = tf_err(TF_ERR_MISMATCH, "roce: the peer connects %u HCAs, this rank %u", p->n_hca, me.n_hca);
	else if (p->slot != me.slot || p->len != me.len)
		cs = tf_err(TF_ERR_MISMATCH, "roce: the peer's region layout (slot %llu, %llu bytes) is not this "
			    "rank's (slot %llu, %llu bytes)", (unsigned long long)p->slot,
			    (unsigned long long)p->len, (unsigned long long)me.slot, (unsigned long long)me.len);
	for (int i = 0; i < t->n_hca && !cs; i++)
		cs = connect_hca(t, &t->hca[i], p, i);
	if ((st = roce_vote(b, cs, "connect its queue pairs")))
		return st;
	t->peer_va = p->va, t->peer_slot = p->slot, t->peer_len = p->len;
	char line[512];
	int k;
	k = snprintf(line, sizeof line, "tp roce: rank %d region %p + %zu;", b->rank, (void *)t->region, t->len);
	for (int i = 0; i < t->n_hca && k < (int)sizeof line; i++)
		k += snprintf(line + k, sizeof line - (size_t)k, " %s lkey 0x%x rkey 0x%x;", t->hca[i].name,
			      t->hca[i].mr->lkey, t->hca[i].mr->rkey);
	if (k < (int)sizeof line)
		k += snprintf(line + k, sizeof line - (size_t)k, " peer region 0x%llx + %llu, rkeys",
			      (unsigned long long)p->va, (unsigned long long)p->len);
	for (int i = 0; i < t->n_hca && k < (int)sizeof line; i++)
		k += snprintf(line + k, sizeof line - (size_t)k, " 0x%x", p->hca[i].rkey);
	tf_log(TF_LOG_INFO, "%s", line);
	return TF_OK;
}

void roce_verbs_halt(struct tf_roce *t)
{
	/* Every queue pair first; reaping comes after. */
	for (int i = 0; i < t->n_hca; i++)
		if (t->hca[i].qp) {
			struct ibv_qp_attr a;
			memset(&a, 0, sizeof a);
			a.qp_state = IBV_QPS_ERR;
			t->v->modify_qp(t->hca[i].qp, &a, IBV_QP_STATE);
		}
}

void roce_verbs_release(struct tf_roce *t)
{
	const struct tf_verbs *v = t->v;
	for (int i = 0; v && i < TF_ROCE_MAX_HCA; i++) {
		struct roce_hca *h = &t->hca[i];
		if (h->qp)
			v->destroy_qp(h->qp);
		if (h->cq)
			v->destroy_cq(h->cq);
		if (h->mr)
			v->dereg_mr(h->mr);
		if (h->pd)
			v->dealloc_pd(h->pd);
		if (h->ctx)
			v->close_device(h->ctx);
		h->qp = NULL, h->cq = NULL, h->mr = NULL, h->pd = NULL, h->ctx = NULL;
	}
}
