/* group.h: world tensor-parallel ranks of a model in one process, on
 * threads, over the fabric's host backend (fabric/comm.h): the in-process
 * form of TP that tests and tf-bench decode --world use (tf-serve's engine
 * opens one rank, model.h). Each rank is a tf_model (model.h) holding its
 * plan's slices; a forward runs every rank at once (rank 0 on the
 * caller's thread, the others on threads of the group) and gives the
 * logits every rank gathered. World 1 is a plain model with no thread and
 * no collective.
 *
 * The interface mirrors model.h. Sequence calls are made on every rank in
 * turn (they run no collective) and must give every rank the same slot.
 * Rows a model would refuse (ids, positions, sequences) are refused before
 * any rank runs, with TF_ERR_ARG; a rank that fails once ranks run ends
 * every rank's waits (tf_comm_abort), and the group then refuses further
 * forwards with the first failure's status. One call at a time. */
#ifndef TF_COMPUTE_GROUP_H
#define TF_COMPUTE_GROUP_H

#include <stdint.h>

#include "base/status.h"
#include "compute/model.h"

struct tf_model_group;

/* Open world ranks (1, 2, 4 or 8) of the pack in pack_dir with opts (NULL:
 * defaults; its rank, world and comm are set per rank; opts->prepared, if
 * set, must be tf-prepare's DIR holding every rank's folder). threads is
 * per rank. */
tf_status tf_model_group_open(const char *pack_dir, int world, const struct tf_model_opts *opts,
			      struct tf_model_group **out);
/* The same with rank r on device devices[r] (opts->backend cuda: one GPU
 * a rank, or several ranks on one; devices NULL: every rank on
 * opts->device). The collectives stay the host backend's, staged through
 * pinned memory on each rank's GPU (tp.h). */
tf_status tf_model_group_open_on(const char *pack_dir, int world, const struct tf_model_opts *opts,
				 const int *devices, struct tf_model_group **out);
void tf_model_group_free(struct tf_model_group *g);
int tf_model_group_world(const struct tf_model_group *g);
const struct tf_config *tf_model_group_config(const struct tf_model_group *g);
/* Rank r's model (borrowed), for inspection. */
struct tf_model *tf_model_group_rank(struct tf_model_group *g, int r);

tf_status tf_model_group_seq_new(struct tf_model_group *g, int *seq);
tf_status tf_model_group_seq_fork(struct tf_model_group *g, int src, int *dst);
tf_status tf_model_group_seq_rollback(struct tf_model_group *g, int seq, int64_t pos);
int64_t tf_model_group_seq_len(const struct tf_model_group *g, int seq);
void tf_model_group_seq_free(struct tf_model_group *g, int seq);

/* Run R rows on every rank; logits [R, vocab] f32 (rank 0's, which every
 * rank holds alike). */
tf_status tf_model_group_forward(struct tf_model_group *g, int R, const int32_t *ids,
				 const int64_t *pos, const int *seq, float *logits);

/* DSpark drafting on every rank (model.h's tf_model_draft: the draft pass
 * runs the collectives of the forward); rank 0's drafts and confidences,
 * which every rank draws alike. */
int tf_model_group_draft_block(const struct tf_model_group *g);
tf_status tf_model_group_draft(struct tf_model_group *g, int n, const int *seq,
			       const int32_t *anchor, const struct tf_sample_params *params,
			       int32_t *draft, float *confidence);

#endif
