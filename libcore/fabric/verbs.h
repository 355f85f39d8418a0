/* verbs.h: the verbs the RoCE transport calls, as a table: rdma-core's
 * libibverbs opened at run time with dlopen (never linked: a host without
 * it runs every other backend), or fake verbs, an in-process
 * implementation of the same post/complete interface for tests.
 *
 * Types come from rdma-core's <infiniband/verbs.h> (Debian libibverbs-dev,
 * installed by `make deps`). ibv_post_send and ibv_poll_cq are inline
 * dispatches through the context's provider ops in that header; the real
 * table wraps them, so nothing here needs the library at link time.
 *
 * The fake HCAs: devices with one Ethernet port each, an ACTIVE state and
 * a configurable IPv4-mapped GID; memory regions with real lkeys and
 * rkeys; RC queue pairs whose state machine (RESET, INIT, RTR, RTS, ERR)
 * is enforced; RDMA writes that check the local key and range and the
 * peer's rkey and range, and land with memcpy in the peer's memory (which
 * is in this process: fake verbs join threads, not hosts). Completions can
 * lag: a fake HCA executes a posted request only when it is polled after
 * `lag` polls (0: at post). A queue pair moved to ERR flushes what it
 * holds (IBV_WC_WR_FLUSH_ERR, no byte lands). Counters let tests see
 * every post: writes, the largest write, bytes in flight and their peak,
 * and the states of all queue pairs when the first flush was generated. */
#ifndef TF_FABRIC_VERBS_H
#define TF_FABRIC_VERBS_H

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

struct tf_verbs {
	const char *name; /* "libibverbs.so.1" or "fake" */
	void *dl;
	struct ibv_device **(*get_device_list)(const struct tf_verbs *v, int *n);
	void (*free_device_list)(struct ibv_device **list);
	const char *(*get_device_name)(struct ibv_device *d);
	struct ibv_context *(*open_device)(struct ibv_device *d);
	int (*close_device)(struct ibv_context *c);
	int (*query_port)(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a);
	int (*query_gid)(struct ibv_context *c, uint8_t port, int index, union ibv_gid *gid);
	struct ibv_pd *(*alloc_pd)(struct ibv_context *c);
	int (*dealloc_pd)(struct ibv_pd *pd);
	struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t len, int access);
	int (*dereg_mr)(struct ibv_mr *mr);
	struct ibv_cq *(*create_cq)(struct ibv_context *c, int cqe, void *ctx,
				    struct ibv_comp_channel *ch, int vec);
	int (*destroy_cq)(struct ibv_cq *cq);
	struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *a);
	int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask);
	/* Optional (NULL when the library lacks it). */
	int (*query_qp)(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask, struct ibv_qp_init_attr *init);
	int (*destroy_qp)(struct ibv_qp *qp);
	int (*post_send)(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
	int (*poll_cq)(struct ibv_cq *cq, int n, struct ibv_wc *wc);
	struct tf_verbs_fake *fake; /* fake verbs: their state; NULL for the real ones */
};

/* Open libibverbs (path NULL: "libibverbs.so.1"). TF_ERR_UNAVAILABLE with
 * dlerror's text when it is missing or lacks an entry point. Free with
 * tf_verbs_close. */
tf_status tf_verbs_open(const char *path, struct tf_verbs *v);
void tf_verbs_close(struct tf_verbs *v);

/* A verbs call's failure as a tf_status naming the call, file and line
 * (verbs set errno; a NULL return or a non-zero code is a failure). */
tf_status tf_verbs_fail(int rc, const char *call, const char *file, int line);
#define TF_IBV(call) ({ int rc_ = (call); rc_ ? tf_verbs_fail(rc_, #call, __FILE__, __LINE__) : TF_OK; })
#define TF_IBV_PTR(p, call) ((p) = (call)) ? TF_OK : tf_verbs_fail(-1, #call, __FILE__, __LINE__)

/* ---- fake verbs (verbs_fake.c) ---- */

#define TF_FAKE_MAX_DEV 4

struct tf_verbs_fake_dev {
	char name[64];
	uint32_t ipv4;            /* its GID index 0 is ::ffff:ipv4 */
	bool down;                /* port state DOWN instead of ACTIVE */
	enum ibv_mtu mtu;         /* active MTU (default 4096) */
};

/* Counters over every fake HCA of a table (read with the lock of the
 * fake: tests read them after the threads are joined). */
struct tf_verbs_fake_stats {
	uint64_t posts, writes, inline_writes, flushes, bad_posts;
	size_t max_write;                 /* largest RDMA write seen */
	size_t inflight, peak_inflight;   /* write bytes posted, not executed */
	int qp_states_at_first_flush[8];  /* -1: no such queue pair */
	int nqp;
	char last_error[160];
};

/* Knobs a test sets before set-up. */
struct tf_verbs_fake_opts {
	int ndev;
	struct tf_verbs_fake_dev dev[TF_FAKE_MAX_DEV];
	uint32_t max_inline;  /* the actual max_inline_data create_qp reports (default 64) */
	int lag;              /* polls before a posted request executes (0: at post) */
	bool fail_reg_mr;     /* reg_mr fails (ENOMEM) */
	bool fail_rtr;        /* the RTR step fails (EINVAL) */
	/* Called for every RDMA write as it executes (data or inline flag),
	 * with the destination address and length; may be NULL. */
	void (*tap)(void *ctx, uint64_t remote, size_t len, bool is_inline);
	void *tap_ctx;
};

/* Fill v with fake verbs over opts (copied). Two tables made by one
 * tf_verbs_fake_new pair share the same fake fabric (their queue pairs
 * reach each other); make the second with tf_verbs_fake_peer. Free both
 * with tf_verbs_close (the fabric goes with the last). */
tf_status tf_verbs_fake_new(const struct tf_verbs_fake_opts *opts, struct tf_verbs *v);
tf_status tf_verbs_fake_peer(const struct tf_verbs *first, const struct tf_verbs_fake_opts *opts,
			     struct tf_verbs *v);
void tf_verbs_fake_stats(const struct tf_verbs *v, struct tf_verbs_fake_stats *out);

#endif
