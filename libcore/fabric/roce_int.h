/* roce_int.h: the RoCE transport's insides, shared by roce.c (region,
 * proxy, posts, failure), roce_verbs.c (set-up over a verbs table) and
 * roce_comm.c (the collectives). Not an interface: nothing outside these
 * files includes it. */
#ifndef TF_FABRIC_ROCE_INT_H
#define TF_FABRIC_ROCE_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "fabric/roce.h"
#include "fabric/verbs.h"

/* Control words (u32 index into the region): the doorbell, each slot's
 * padded bytes, the completed seq, then bytes 16 (abort) and 17 (failed). */
enum { CTL_DOORBELL = 0, CTL_PADDED = 1, CTL_DONE = 3 };
#define CTL_ABORT_BYTE 16
#define CTL_FAILED_BYTE 17

/* The connection record each rank all-gathers (verbs wire). */
#define ROCE_REC_MAGIC 0x54465246u /* "FRFT": slot and length carried */
struct roce_rec {
	uint32_t magic, n_hca;
	uint64_t va, slot, len;
	struct {
		uint32_t rkey, qpn, mtu, pad;
		uint8_t gid[16];
	} hca[TF_ROCE_MAX_HCA];
};

struct roce_hca {
	char name[64];
	int gid_index;
	uint32_t ipv4;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	enum ibv_mtu mtu;
	uint8_t gid[16];
	uint32_t peer_rkey;
	/* Posting state (the proxy thread's, or the quiescing thread's once
	 * the proxy has stopped). */
	uint64_t chains_posted, chains_reaped, completions, flushes, drained, drained_flushes;
	size_t inflight; /* write bytes of chains posted, not reaped */
};

struct tf_roce {
	struct tf_roce_opts o;
	int rank;
	size_t slot, len;          /* here */
	size_t peer_slot, peer_len;/* the peer's, from its record */
	uint8_t *region;           /* this rank's region */
	uint8_t *peer_region;      /* shm wire: the peer's, mapped here */
	uint8_t *map;              /* shm wire: the whole mapping */
	size_t map_len;
	uint64_t peer_va;          /* verbs wire: the peer's region address */
	int n_hca;
	struct roce_hca hca[TF_ROCE_MAX_HCA];
	const struct tf_verbs *v;  /* verbs wire */
	/* The proxy. */
	pthread_t proxy;
	bool proxy_running;
	atomic_bool stop;
	atomic_bool failed;        /* fail() ran: QPs in error, nothing more is sent */
	atomic_bool aborted;
	char why[256];
	pthread_mutex_t mu;        /* why, and the failure path */
	uint32_t seq;              /* the caller's last operation */
	uint32_t posted_seq;       /* the proxy's last */
	size_t inflight, peak_inflight, max_write;
	bool quiesced, kept;       /* close: drained; region left mapped */
	double timeout_s;          /* a caller's wait (TF_TP_MAILBOX_TIMEOUT_S) */
};

static inline volatile uint32_t *roce_ctl(const struct tf_roce *t)
{
	return (volatile uint32_t *)t->region;
}

/* roce.c */
tf_status roce_map_region(struct tf_roce *t, struct tf_boot *b);
void roce_fail(struct tf_roce *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Poll every HCA's completions once; TF_OK, or the failure recorded. */
tf_status roce_reap(struct tf_roce *t);

/* roce_verbs.c */
tf_status roce_verbs_setup(struct tf_roce *t, struct tf_boot *b);
void roce_verbs_halt(struct tf_roce *t);       /* every QP to ERR */
void roce_verbs_release(struct tf_roce *t);    /* QPs, CQs, MRs, PDs, contexts */
tf_status roce_vote(struct tf_boot *b, tf_status mine, const char *what);

#endif
