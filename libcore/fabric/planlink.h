/* planlink.h: rank 0 sends each round's plan (int64 words) to every other
 * rank over the role-1 sockets of the bootstrap star.
 *
 * Frame: a little-endian u32 byte length, then the words (little-endian,
 * native on the x86-64 and arm64 hosts tf runs on). A plan may be held
 * (tf_plan_hold, at most 1024 words queued); the next send carries the held
 * plans and its own in one batch frame [INT64_MIN, n, len_1, plan_1...,
 * len_n, plan_n...] of at most 2050 words (a bigger one flushes the queue
 * first). A plan cannot start with INT64_MIN. Followers validate a whole
 * batch before taking any plan from it. */
#ifndef TF_FABRIC_PLANLINK_H
#define TF_FABRIC_PLANLINK_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "fabric/bootstrap.h"

#define TF_PLAN_BATCH_TAG INT64_MIN
#define TF_PLAN_HOLD_MAX 1024u
#define TF_PLAN_BATCH_MAX 2050u
#define TF_PLAN_FRAME_MAX_WORDS ((size_t)64 << 20)

struct tf_plan_link {
	int world, rank;
	int fd[TF_BOOT_MAX_WORLD]; /* rank 0: fd[r] per peer; others fd[0] (borrowed) */
	int64_t held[TF_PLAN_BATCH_MAX];
	size_t nheld, nheld_plans;
	int64_t *rx;                   /* follower: the last frame's words */
	size_t rx_cap, rx_n, rx_pos, rx_left; /* rx_left: plans of a batch not yet taken */
	uint64_t sent, received;       /* plans */
};

/* Borrow the boot's plan sockets (the boot must outlive the link). */
void tf_plan_link_init(struct tf_plan_link *l, const struct tf_boot *b);
/* For tests and the fuzz target: a link over given sockets. */
void tf_plan_link_init_fds(struct tf_plan_link *l, int world, int rank, const int *fds);
void tf_plan_link_release(struct tf_plan_link *l);

/* Rank 0: send a plan of n words (n may be 0) to every peer, with any held
 * plans before it. TF_ERR_IO when a peer closed. */
tf_status tf_plan_send(struct tf_plan_link *l, const int64_t *plan, size_t n, double timeout_s);
/* Rank 0: queue a plan for the next send (flushing first if the queue
 * would pass TF_PLAN_HOLD_MAX words). */
tf_status tf_plan_hold(struct tf_plan_link *l, const int64_t *plan, size_t n, double timeout_s);
/* Rank 0: send what is held, if anything. */
tf_status tf_plan_flush(struct tf_plan_link *l, double timeout_s);

/* Followers: the next plan into buf (cap words), its length in *n.
 * TF_ERR_RANGE when it does not fit (the plan is dropped), TF_ERR_IO "peer
 * closed" on EOF or a malformed frame, TF_ERR_TIMEOUT when timeout_s (> 0)
 * passes with nothing. */
tf_status tf_plan_recv(struct tf_plan_link *l, int64_t *buf, size_t cap, size_t *n, double timeout_s);

/* Followers: the next plan in place, of any length up to
 * TF_PLAN_FRAME_MAX_WORDS: *plan points into the link's receive buffer
 * and stays valid until the next receive. Errors as tf_plan_recv. */
tf_status tf_plan_recv_view(struct tf_plan_link *l, const int64_t **plan, size_t *n,
			    double timeout_s);

/* Validate a frame's words: a plain plan, or a well-formed batch (its
 * plan count in *nplans). TF_ERR_FORMAT for a bad batch. Pure. */
tf_status tf_plan_frame_check(const int64_t *w, size_t n, size_t *nplans);

#endif
