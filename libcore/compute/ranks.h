/* ranks.h: the tensor-parallel ranks of one model as processes, one rank a
 * process (on this host or others): the process-level form of
 * compute/group.h. Rank 0 runs the engine over its own tf_model (model.h);
 * every call rank 0 makes on it that changes the cache or runs collectives
 * (sequence new, fork, rollback and free, forward with logits or with
 * sampling settings, DSpark drafts) is sent to the other ranks over the
 * fabric's plan link (fabric/planlink.h) through the model's mirror, and
 * each follower replays it on its own model (its own slices, its own
 * cache) in tf_ranks_follow; the forwards' collectives go through the
 * rank's comm (fabric/comm.h: the host backend over TCP on CPUs). The
 * engine sees a plain tf_model on rank 0.
 *
 * Sequence calls are held and go out with the next forward (they run no
 * collective); a follower checks each one's result against rank 0's, so a
 * cache out of step is a failure, never a silent difference.
 *
 * Failure is fail-fast (fabric/fate.h): a rank that fails, dies or closes
 * its sockets ends every rank with exit 70 after TF_TP_FAILFAST_GRACE_S.
 * On rank 0 the comm is aborted first (blocked forwards return an error,
 * so the engine fails the requests running) and the hooks of
 * tf_ranks_on_fail run (tf-serve halts the engine, so new requests get
 * 503), during the grace time.
 *
 * Plans (int64 words): SEQ_NEW [op, st, dst]; SEQ_FORK [op, src, st,
 * dst]; SEQ_ROLLBACK [op, seq, pos, st]; SEQ_FREE [op, seq]; FORWARD [op,
 * R, ids R, pos R, seq R]; FORWARD_SAMPLE the same, then draw_pos R and 5
 * words of sampling settings per row (seed, temperature, top_k, top_p,
 * min_p; doubles as their bits); DRAFT [op, n, has params, seq n, anchor
 * n, 5 n settings]; STOP [8].
 *
 * On GPUs (a cuda model) the comm is TF_COMM_BACKEND's: the host backend
 * (the forward stages its collectives through pinned host memory: what
 * runs several ranks on one GPU), or NCCL or the mailbox (device memory:
 * the rank's GPU, TF_TP_DEVICE, is opened before the comm; the forward's
 * collectives run on the model's stream, and its graph cache votes over
 * the comm: compute/tp.h). The plans do not change. */
#ifndef TF_COMPUTE_RANKS_H
#define TF_COMPUTE_RANKS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "compute/model.h"
#include "fabric/settings.h"

#define TF_RANKS_OP_STOP 8

struct tf_ranks;

/* A world of s->world ranks, this process being s->rank (s copied). No
 * socket yet. */
tf_status tf_ranks_new(const struct tf_fabric_settings *s, struct tf_ranks **out);
/* Stop (rank 0: the stop plan goes to every follower, which ends its
 * tf_ranks_follow with TF_OK) and free: a clean stop, ending nobody. Safe
 * on NULL. Rank 0 calls it after the model it mirrors is freed. */
void tf_ranks_free(struct tf_ranks *r);

int tf_ranks_world(const struct tf_ranks *r);
int tf_ranks_rank(const struct tf_ranks *r);

/* Rank 0, optional: listen now and give the port followers connect to
 * (s->plan_port; 0 picks a free one), so that a launcher can tell them. */
tf_status tf_ranks_listen(struct tf_ranks *r, int *port);
/* Connect the star, agree on the fabric settings (a difference refuses on
 * every rank with TF_ERR_CONFIG naming the variable) and on text (NULL:
 * nothing more), the caller's settings that must be equal, one "name
 * value" a line (a difference refuses on every rank with TF_ERR_CONFIG
 * naming what, the first line that differs and rank 0's), then open the
 * comm and arm fail-fast. */
tf_status tf_ranks_connect(struct tf_ranks *r, const char *text, const char *what);
/* Run fn(ctx) when this rank goes fail-fast (after the comm's abort, on
 * the fate's thread, during the grace time). At most 6. */
void tf_ranks_on_fail(struct tf_ranks *r, void (*fn)(void *), void *ctx);

/* Open this rank's model of pack_dir (opts' rank, world and comm are set
 * here); on rank 0 its calls are mirrored to the followers from now on.
 * The caller owns *out (rank 0: frees it before tf_ranks_free). */
tf_status tf_ranks_model_open(struct tf_ranks *r, const char *pack_dir,
			      const struct tf_model_opts *opts, struct tf_model **out);

/* A follower: replay rank 0's calls on m until the stop plan (TF_OK). A
 * failed replay or a lost link goes fail-fast (exit 70, never returns). */
tf_status tf_ranks_follow(struct tf_ranks *r, struct tf_model *m);

/* This rank failed outside a model call (loading, say): fail fast, naming
 * where and why (exit 70 on every rank; without fail-fast, this one). */
void tf_ranks_fatal(struct tf_ranks *r, const char *where, const char *why)
	__attribute__((noreturn));

/* What rank 0 knows of each rank: "serving" (rank 0), "up", "failed". */
const char *tf_ranks_state(const struct tf_ranks *r, int rank);
/* Plans sent (rank 0) or replayed (followers). */
uint64_t tf_ranks_plans(const struct tf_ranks *r);

/* For tests: a rank's plan of one model call (model.h), appended to a
 * buffer of words; and its replay on a model (TF_ERR_MISMATCH when a
 * sequence call's result differs from the one in the plan, TF_ERR_FORMAT
 * for a malformed plan). */
struct tf_ranks_scratch {
	float *logits;
	int32_t *tokens, *draft;
	float *conf;
	struct tf_sample_params *params;
	size_t cap_rows, cap_params;
};
tf_status tf_ranks_encode(const struct tf_model_call *c, int64_t **w, size_t *n, size_t *cap);
tf_status tf_ranks_replay(struct tf_model *m, const int64_t *w, size_t n,
			  struct tf_ranks_scratch *sc);
void tf_ranks_scratch_release(struct tf_ranks_scratch *sc);

#endif
