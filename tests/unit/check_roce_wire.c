/* check_roce_wire.c: the RoCE transport between two threaded ranks over a
 * real TCP bootstrap: set-up on fake verbs (the attributes of each step,
 * the inline bound, the region's madvise flags), the posting rules (a post
 * past its slot reaches no verb; the 1 MiB write cap; back-to-back posts
 * under lagging completions keep at most 2 MiB in flight), abort and
 * quiesce, and the roce backend's gathers over the shm wire (variable
 * lengths, chunked, striped as two HCAs) and over fake verbs. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fabric/bootstrap.h"
#include "fabric/comm.h"
#include "fabric/roce.h"
#include "fabric/roce_int.h" /* white box: the queue pairs' attributes */
#include "fabric/settings.h"
#include "fabric/verbs.h"

#define IP(a, b, c, d) (((uint32_t)(a) << 24) | ((uint32_t)(b) << 16) | ((uint32_t)(c) << 8) | (uint32_t)(d))

struct rank {
	struct tf_fabric_settings s;
	struct tf_boot b;
	struct tf_verbs v;
	struct tf_roce_opts o;
	struct tf_roce *t;
	tf_status st;
	char msg[300];
	int mode;
	struct tf_roce_info info;
	struct tf_verbs_fake_stats fs;
	bool kept;
	int extra; /* mode-specific result */
	struct ibv_qp_attr qa[2];
	struct ibv_qp_init_attr qi[2];
	bool dc, nh; /* smaps flags of the region */
};

/* The VmFlags of the mapping holding p. */
static void smaps_flags(const void *p, bool *dc, bool *nh)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	bool in = false;
	*dc = *nh = false;
	while (f && fgets(line, sizeof line, f)) {
		unsigned long lo, hi;
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
			in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
			continue;
		}
		if (in && !strncmp(line, "VmFlags:", 8)) {
			*dc = strstr(line, " dc") != NULL;
			*nh = strstr(line, " nh") != NULL;
			break;
		}
	}
	if (f)
		fclose(f);
}

static const char *no_env(const char *n) { (void)n; return NULL; }

static void *rank_main(void *arg);

/* Start two ranks (threads) over a real bootstrap and join them. */
static void run2(struct rank *r, int mode)
{
	pthread_t th[2];
	ck_assert_int_eq(tf_fabric_settings_env(&r[0].s, no_env), 0);
	r[0].s.world = 2, r[0].s.plan_port = 0, r[0].s.plan_timeout_s = 20, r[0].s.backend = TF_FABRIC_HOST;
	snprintf(r[0].s.master, sizeof r[0].s.master, "127.0.0.1");
	ck_assert_int_eq(tf_boot_listen(&r[0].b, &r[0].s), 0);
	r[1].s = r[0].s, r[1].s.rank = 1, r[1].s.plan_port = r[0].b.port;
	for (int i = 0; i < 2; i++) {
		r[i].mode = mode;
		pthread_create(&th[i], NULL, rank_main, &r[i]);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
}

static void fake_pair(struct rank *r, const struct tf_verbs_fake_opts *o0, const struct tf_verbs_fake_opts *o1)
{
	ck_assert_int_eq(tf_verbs_fake_new(o0, &r[0].v), 0);
	ck_assert_int_eq(tf_verbs_fake_peer(&r[0].v, o1, &r[1].v), 0);
	for (int i = 0; i < 2; i++) {
		r[i].o.wire = TF_ROCE_WIRE_VERBS, r[i].o.verbs = &r[i].v;
		r[i].o.want_hca = 2, r[i].o.timeout_s = 10;
		if (!r[i].o.slot)
			r[i].o.slot = 65536;
	}
}

static struct tf_verbs_fake_opts two_hcas(int host, uint32_t max_inline, int lag)
{
	struct tf_verbs_fake_opts o;
	memset(&o, 0, sizeof o);
	o.ndev = 2, o.max_inline = max_inline, o.lag = lag;
	snprintf(o.dev[0].name, 64, "fake%d_0", host);
	snprintf(o.dev[1].name, 64, "fake%d_1", host);
	o.dev[0].ipv4 = IP(10, 0, 1, 10 + host);
	o.dev[1].ipv4 = IP(10, 0, 2, 10 + host);
	return o;
}

enum { M_OPEN, M_POST_PAST_SLOT, M_CAP, M_BACK_TO_BACK, M_ABORT, M_GATHERS };

static void *rank_main(void *arg)
{
	struct rank *r = arg;
	if ((r->st = tf_boot_open(&r->b, &r->s))) {
		snprintf(r->msg, sizeof r->msg, "boot: %s", tf_errmsg(r->st));
		return NULL;
	}
	r->st = tf_roce_open(&r->b, &r->o, &r->t);
	if (r->st) {
		snprintf(r->msg, sizeof r->msg, "%s", tf_errmsg(r->st));
		tf_boot_close(&r->b);
		return NULL;
	}
	uint8_t one = 1, all[16];
	size_t lens[2];
	for (int h = 0; h < r->t->n_hca; h++)
		r->v.query_qp(r->t->hca[h].qp, &r->qa[h], IBV_QP_STATE, &r->qi[h]);
	smaps_flags(r->t->region, &r->dc, &r->nh);
	switch (r->mode) {
	case M_POST_PAST_SLOT: {
		/* Past its slot, and an unpadded post: refused, no verb called. */
		tf_status a = tf_roce_post(r->t, 1, r->o.slot + 16);
		r->extra = a == TF_ERR_RANGE && strstr(tf_errmsg(a), "OutOfRegion");
		tf_status b = tf_roce_post(r->t, 2, 24);
		r->extra += b == TF_ERR_ARG && strstr(tf_errmsg(b), "BadPost");
		/* A full slot goes out and stays inside the peer's region. */
		tf_boot_all_gather(&r->b, &one, 1, all, 8, lens);
		if (!(r->st = tf_roce_post(r->t, 3, r->o.slot)))
			while (!tf_roce_idle(r->t))
				;
		tf_boot_all_gather(&r->b, &one, 1, all, 8, lens);
		break;
	}
	case M_CAP: {
		/* A 1 MiB + 16 post is WriteTooLarge; 1 MiB goes. */
		tf_status a = tf_roce_post(r->t, 1, TF_ROCE_MAX_WRITE + 16);
		r->extra = a == TF_ERR_RANGE && strstr(tf_errmsg(a), "WriteTooLarge");
		tf_boot_all_gather(&r->b, &one, 1, all, 8, lens);
		if (!(r->st = tf_roce_post(r->t, 2, TF_ROCE_MAX_WRITE)))
			while (!tf_roce_idle(r->t))
				;
		tf_boot_all_gather(&r->b, &one, 1, all, 8, lens);
		break;
	}
	case M_BACK_TO_BACK: {
		/* A 128 MiB union in 1 MiB posts (and 300 KB ones), back to back,
		 * with completions lagging: the wire waits at 2 MiB. */
		tf_boot_all_gather(&r->b, &one, 1, all, 8, lens);
		size_t total = 0;
		uint32_t seq = 1;
		for (size_t p = 300000 / 16 * 16; total < ((size_t)128 << 20) && !r->st; seq++) {
			r->st = tf_roce_post(r->t, seq, p);
			total += p;
			p = p == TF_ROCE_MAX_WRITE ? 300000 / 16 * 16 : TF_ROCE_MAX_WRITE;
		}
		while (!r->st && !tf_roce_idle(r->t))
			tf_roce_check(r->t);
		tf_boot_all_gather(&r->b, &one, 1, all, 8, lens);
		break;
	}
	case M_ABORT: {
		/* Posts that never complete (a huge lag), then abort and close:
		 * every QP in error before the first flush, every post reaped. */
		tf_boot_all_gather(&r->b, &one, 1, all, 8, lens);
		for (uint32_t s = 1; s <= 6 && !r->st; s++)
			r->st = tf_roce_post(r->t, s, 4096);
		tf_boot_all_gather(&r->b, &one, 1, all, 8, lens);
		if (r->s.rank == 0)
			tf_roce_abort(r->t);
		else
			tf_roce_fail(r->t, "test: quiesce");
		break;
	}
	case M_GATHERS: {
		/* Operations through the proxy: bit for bit. */
		uint8_t *src = malloc(r->o.slot), *dst = malloc(r->o.slot);
		uint64_t x = 0x1234567ull + (uint64_t)r->s.rank;
		for (int i = 0; i < 300 && !r->st; i++) {
			size_t n = (size_t)(i * 977) % r->o.slot, pn = n; /* equal lengths: both know them */
			for (size_t k = 0; k < n; k++)
				src[k] = (uint8_t)(k * 31 + (size_t)i + 7u * (size_t)r->s.rank);
			if ((r->st = tf_roce_op(r->t, src, n, dst, pn)))
				break;
			for (size_t k = 0; k < pn; k++)
				if (dst[k] != (uint8_t)(k * 31 + (size_t)i + 7u * (size_t)(1 - r->s.rank))) {
					r->st = TF_ERR_MISMATCH;
					snprintf(r->msg, sizeof r->msg, "op %d byte %zu", i, k);
					break;
				}
			r->extra++;
		}
		(void)x;
		free(src), free(dst);
		break;
	}
	}
	tf_roce_info(r->t, &r->info);
	tf_roce_close(r->t, &r->kept);
	if (r->v.fake)
		tf_verbs_fake_stats(&r->v, &r->fs);
	tf_boot_close(&r->b);
	return NULL;
}

static void free_pair(struct rank *r)
{
	tf_verbs_close(&r[1].v);
	tf_verbs_close(&r[0].v);
}

START_TEST(fake_setup_attributes)
{
	struct rank r[2];
	memset(r, 0, sizeof r);
	struct tf_verbs_fake_opts a = two_hcas(0, 0, 0), b = two_hcas(1, 0, 0);
	fake_pair(r, &a, &b);
	r[0].o.tc = r[1].o.tc = 106;
	/* Open (the proxy runs), look at the queue pairs, 300 operations. */
	run2(r, M_GATHERS);
	for (int i = 0; i < 2; i++) {
		ck_assert_msg(r[i].st == 0, "rank %d: %s", i, r[i].msg);
		ck_assert(r[i].dc && r[i].nh);
		for (int h = 0; h < 2; h++) {
			struct ibv_qp_attr *q = &r[i].qa[h];
			ck_assert_int_eq(q->qp_state, IBV_QPS_RTS);
			ck_assert_int_eq(q->path_mtu, IBV_MTU_4096);
			ck_assert_int_eq(q->rq_psn, 0);
			ck_assert_int_eq(q->sq_psn, 0);
			ck_assert_int_eq(q->min_rnr_timer, 12);
			ck_assert_int_eq(q->timeout, 14);
			ck_assert_int_eq(q->retry_cnt, 7);
			ck_assert_int_eq(q->rnr_retry, 7);
			ck_assert_int_eq(q->ah_attr.is_global, 1);
			ck_assert_int_eq(q->ah_attr.grh.hop_limit, 64);
			ck_assert_int_eq(q->ah_attr.grh.traffic_class, 106);
			ck_assert_int_eq(q->ah_attr.grh.sgid_index, 1); /* the IPv4-mapped GID */
			/* Each HCA reaches the peer's HCA on its own /24. */
			ck_assert_int_eq(q->ah_attr.grh.dgid.raw[14], h + 1);
			ck_assert_int_eq(q->ah_attr.grh.dgid.raw[15], 10 + (1 - i));
			ck_assert_uint_ge(r[i].qi[h].cap.max_inline_data, 4);
		}
		ck_assert_int_eq(r[i].extra, 300);
		ck_assert_int_eq(r[i].info.n_hca, 2);
		ck_assert(!r[i].kept); /* quiesced and freed */
		ck_assert_uint_eq(r[i].fs.bad_posts, 0);
	}
	free_pair(r);
}
END_TEST

START_TEST(fake_inline_bound)
{
	for (uint32_t inl = 3; inl <= 4; inl++) {
		struct rank r[2];
		memset(r, 0, sizeof r);
		struct tf_verbs_fake_opts a = two_hcas(0, inl, 0), b = two_hcas(1, 64, 0);
		fake_pair(r, &a, &b);
		run2(r, M_GATHERS);
		for (int i = 0; i < 2; i++) {
			if (inl == 3) {
				ck_assert_int_eq(r[i].st, TF_ERR_UNAVAILABLE);
				ck_assert_msg(strstr(r[i].msg, i == 0 ? "inlines 3 bytes" : "rank 0 failed to open"),
					      "rank %d: %s", i, r[i].msg);
			} else {
				ck_assert_msg(r[i].st == 0, "rank %d: %s", i, r[i].msg);
			}
		}
		free_pair(r);
	}
}
END_TEST

START_TEST(fake_post_past_slot_reaches_no_verb)
{
	struct rank r[2];
	memset(r, 0, sizeof r);
	struct tf_verbs_fake_opts a = two_hcas(0, 0, 0), b = two_hcas(1, 0, 0);
	fake_pair(r, &a, &b);
	r[0].o.no_proxy = r[1].o.no_proxy = true;
	run2(r, M_POST_PAST_SLOT);
	for (int i = 0; i < 2; i++) {
		ck_assert_msg(r[i].st == 0, "rank %d: %s", i, r[i].msg);
		ck_assert_int_eq(r[i].extra, 2);
		/* Only the full-slot post reached the fake HCAs: 2 HCAs x
		 * (data + flag) work requests, none refused by the HCA. */
		ck_assert_uint_eq(r[i].fs.posts, 4);
		ck_assert_uint_eq(r[i].fs.bad_posts, 0);
		ck_assert_uint_eq(r[i].fs.max_write, r[i].o.slot / 2);
		ck_assert_str_eq(r[i].fs.last_error, "");
	}
	free_pair(r);
}
END_TEST

START_TEST(fake_write_cap)
{
	struct rank r[2];
	memset(r, 0, sizeof r);
	struct tf_verbs_fake_opts a = two_hcas(0, 0, 0), b = two_hcas(1, 0, 0);
	a.ndev = b.ndev = 1; /* one HCA: the whole 1 MiB is one write */
	fake_pair(r, &a, &b);
	for (int i = 0; i < 2; i++)
		r[i].o.no_proxy = true, r[i].o.slot = TF_ROCE_MAX_WRITE;
	run2(r, M_CAP);
	for (int i = 0; i < 2; i++) {
		ck_assert_msg(r[i].st == 0, "rank %d: %s", i, r[i].msg);
		ck_assert_int_eq(r[i].extra, 1);
		ck_assert_uint_eq(r[i].fs.posts, 2);
		ck_assert_uint_eq(r[i].fs.max_write, TF_ROCE_MAX_WRITE);
	}
	free_pair(r);
}
END_TEST

START_TEST(fake_back_to_back_inflight)
{
	struct rank r[2];
	memset(r, 0, sizeof r);
	struct tf_verbs_fake_opts a = two_hcas(0, 0, 3), b = two_hcas(1, 0, 3);
	fake_pair(r, &a, &b);
	for (int i = 0; i < 2; i++)
		r[i].o.no_proxy = true, r[i].o.slot = TF_ROCE_MAX_WRITE;
	run2(r, M_BACK_TO_BACK);
	for (int i = 0; i < 2; i++) {
		ck_assert_msg(r[i].st == 0, "rank %d: %s", i, r[i].msg);
		ck_assert_uint_le(r[i].fs.peak_inflight, TF_ROCE_MAX_INFLIGHT);
		ck_assert_uint_le(r[i].fs.max_write, TF_ROCE_MAX_WRITE);
		/* The cap is reached, and the wire's own count agrees with the
		 * fake HCAs'. */
		ck_assert_uint_ge(r[i].fs.peak_inflight, TF_ROCE_MAX_INFLIGHT - TF_ROCE_MAX_WRITE / 2);
		ck_assert_uint_eq(r[i].info.peak_inflight, r[i].fs.peak_inflight);
		ck_assert_uint_eq(r[i].info.max_write, r[i].fs.max_write);
		ck_assert_uint_eq(r[i].info.inflight, 0);
		ck_assert_uint_eq(r[i].fs.bad_posts, 0);
	}
	free_pair(r);
}
END_TEST

START_TEST(fake_abort_and_quiesce)
{
	struct rank r[2];
	memset(r, 0, sizeof r);
	struct tf_verbs_fake_opts a = two_hcas(0, 0, 1000000), b = two_hcas(1, 0, 1000000);
	fake_pair(r, &a, &b);
	r[0].o.no_proxy = r[1].o.no_proxy = true;
	run2(r, M_ABORT);
	for (int i = 0; i < 2; i++) {
		ck_assert_msg(r[i].st == 0, "rank %d: %s", i, r[i].msg);
		/* Both queue pairs were in the error state when the first flush
		 * came, and the drain reaped every posted chain (all flushed). */
		ck_assert_int_eq(r[i].fs.nqp, 2);
		ck_assert_int_eq(r[i].fs.qp_states_at_first_flush[0], IBV_QPS_ERR);
		ck_assert_int_eq(r[i].fs.qp_states_at_first_flush[1], IBV_QPS_ERR);
		ck_assert_int_eq(r[i].info.qp_state[0], IBV_QPS_ERR);
		ck_assert_int_eq(r[i].info.qp_state[1], IBV_QPS_ERR);
		for (int h = 0; h < 2; h++) {
			ck_assert_uint_eq(r[i].info.chains_posted[h], 6);
		}
		ck_assert_uint_eq(r[i].fs.flushes, 2 * 6 * 2);
		/* A failed transport keeps its region. */
		ck_assert(r[i].info.failed);
		ck_assert(r[i].kept);
	}
	free_pair(r);
}
END_TEST

START_TEST(region_flags_and_refusals)
{
	/* The region is DONTFORK and NOHUGEPAGE (smaps: dc, nh) before any
	 * registration; a refused registration fails both ranks. */
	struct rank r[2];
	memset(r, 0, sizeof r);
	struct tf_verbs_fake_opts a = two_hcas(0, 0, 0), b = two_hcas(1, 0, 0);
	b.fail_reg_mr = true;
	fake_pair(r, &a, &b);
	run2(r, M_GATHERS);
	ck_assert_int_eq(r[0].st, TF_ERR_UNAVAILABLE);
	ck_assert_msg(strstr(r[0].msg, "rank 1 failed to open its HCAs"), "%s", r[0].msg);
	ck_assert_msg(strstr(r[1].msg, "cannot register"), "%s", r[1].msg);
	free_pair(r);
	/* A failing RTR fails both. */
	memset(r, 0, sizeof r);
	a = two_hcas(0, 0, 0), b = two_hcas(1, 0, 0);
	a.fail_rtr = true;
	fake_pair(r, &a, &b);
	run2(r, M_GATHERS);
	ck_assert_int_eq(r[1].st, TF_ERR_UNAVAILABLE);
	ck_assert_msg(strstr(r[1].msg, "rank 0 failed to connect"), "%s", r[1].msg);
	free_pair(r);
}
END_TEST

/* ---- the roce backend over the shm wire ---- */

struct crank {
	struct tf_fabric_settings s;
	struct tf_boot b;
	tf_status st;
	char msg[300];
	int mode, gathers;
	bool kept;
	const char *name;
};

static void *crank_main(void *arg)
{
	struct crank *r = arg;
	struct tf_comm *c = NULL;
	if ((r->st = tf_boot_open(&r->b, &r->s)) || (r->st = tf_comm_open(&r->b, &r->s, &c))) {
		snprintf(r->msg, sizeof r->msg, "%s", tf_errmsg(r->st));
		tf_boot_close(&r->b);
		return NULL;
	}
	r->name = c->name;
	size_t slot = tf_roce_slot_bytes(r->s.mailbox_max_kb);
	size_t maxs = r->mode == 1 ? 4 * slot : slot;
	uint8_t *src = malloc(maxs), *dst = malloc(2 * maxs);
	uint64_t x = 0x9e3779b97f4a7c15ull;
	for (int i = 0; i < 2000 && !r->st; i++) {
		/* Both ranks draw the same lengths from one sequence. */
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		size_t stride = 16 + (size_t)(x % (maxs - 15));
		uint32_t lens[2] = {(uint32_t)((x >> 20) % (stride + 1)), (uint32_t)((x >> 40) % (stride + 1))};
		if (i % 50 == 0)
			lens[0] = lens[1] = 0;
		int me = r->s.rank;
		for (size_t k = 0; k < lens[me]; k++)
			src[k] = (uint8_t)(k * 13 + (size_t)i * 7 + (size_t)me * 101);
		memset(dst, 0xa5, 2 * stride);
		if ((r->st = tf_comm_all_gather_v(c, src, dst, stride, lens, NULL))) {
			snprintf(r->msg, sizeof r->msg, "gather %d: %s", i, tf_errmsg(r->st));
			break;
		}
		for (int q = 0; q < 2 && !r->st; q++)
			for (size_t k = 0; k < lens[q]; k++)
				if (dst[(size_t)q * stride + k] != (uint8_t)(k * 13 + (size_t)i * 7 + (size_t)q * 101)) {
					r->st = TF_ERR_MISMATCH;
					snprintf(r->msg, sizeof r->msg, "gather %d (stride %zu): rank %d byte %zu", i,
						 stride, q, k);
					break;
				}
		r->gathers++;
	}
	free(src), free(dst);
	if (r->mode == 2) {
		/* Both done (rank 0's last post may trail its last gather), then
		 * rank 0 aborts; rank 1 sees the stop; both close. */
		if (!r->st && (r->st = tf_comm_barrier(c)))
			snprintf(r->msg, sizeof r->msg, "barrier: %s", tf_errmsg(r->st));
		if (r->s.rank == 0)
			tf_comm_abort(c);
		else
			while (!tf_comm_check(c))
				;
	}
	struct tf_roce *t = tf_comm_roce_transport(c);
	if (t) {
		struct tf_roce_info info;
		tf_roce_info(t, &info);
		r->kept = info.failed;
	}
	tf_comm_free(c);
	tf_boot_close(&r->b);
	return NULL;
}

static void run_comm(struct crank *r, int mode, uint32_t chunked_kb)
{
	pthread_t th[2];
	ck_assert_int_eq(tf_fabric_settings_env(&r[0].s, no_env), 0);
	r[0].s.world = 2, r[0].s.plan_port = 0, r[0].s.plan_timeout_s = 20, r[0].s.backend = TF_FABRIC_ROCE;
	r[0].s.roce_wire = TF_ROCE_WIRE_SHM, r[0].s.roce_hcas = 2, r[0].s.mailbox_max_kb = 16;
	r[0].s.roce_chunked_kb = chunked_kb, r[0].s.mailbox_timeout_s = 20;
	snprintf(r[0].s.master, sizeof r[0].s.master, "127.0.0.1");
	ck_assert_int_eq(tf_boot_listen(&r[0].b, &r[0].s), 0);
	r[1].s = r[0].s, r[1].s.rank = 1, r[1].s.plan_port = r[0].b.port;
	for (int i = 0; i < 2; i++) {
		r[i].mode = mode;
		pthread_create(&th[i], NULL, crank_main, &r[i]);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
}

START_TEST(shm_gathers_bit_exact)
{
	struct crank r[2];
	memset(r, 0, sizeof r);
	run_comm(r, 0, 0);
	for (int i = 0; i < 2; i++) {
		ck_assert_msg(r[i].st == 0, "rank %d: %s", i, r[i].msg);
		ck_assert_str_eq(r[i].name, "roce");
		ck_assert_int_eq(r[i].gathers, 2000);
	}
}
END_TEST

START_TEST(shm_chunked_gathers_bit_exact)
{
	struct crank r[2];
	memset(r, 0, sizeof r);
	run_comm(r, 1, 64); /* strides up to four 16 KiB slots, chunked */
	for (int i = 0; i < 2; i++) {
		ck_assert_msg(r[i].st == 0, "rank %d: %s", i, r[i].msg);
		ck_assert_int_eq(r[i].gathers, 2000);
	}
}
END_TEST

START_TEST(shm_abort_keeps_region)
{
	struct crank r[2];
	memset(r, 0, sizeof r);
	run_comm(r, 2, 0);
	ck_assert_msg(r[0].st == 0 && r[1].st == 0, "%s / %s", r[0].msg, r[1].msg);
	ck_assert(r[0].kept);  /* the aborted rank keeps its region */
	ck_assert(!r[1].kept); /* the other frees it */
}
END_TEST

Suite *suite_roce_wire(void)
{
	Suite *s = suite_create("roce_wire");
	TCase *t = tcase_create("wire");
	tcase_set_timeout(t, 120);
	tcase_add_test(t, fake_setup_attributes);
	tcase_add_test(t, fake_inline_bound);
	tcase_add_test(t, fake_post_past_slot_reaches_no_verb);
	tcase_add_test(t, fake_write_cap);
	tcase_add_test(t, fake_back_to_back_inflight);
	tcase_add_test(t, fake_abort_and_quiesce);
	tcase_add_test(t, region_flags_and_refusals);
	tcase_add_test(t, shm_gathers_bit_exact);
	tcase_add_test(t, shm_chunked_gathers_bit_exact);
	tcase_add_test(t, shm_abort_keeps_region);
	suite_add_tcase(s, t);
	return s;
}
