/* comm.h: the collectives every tensor-parallel rank calls, over one of the
 * backends: host (host memory; the reference and the CPU path), NCCL and
 * the same-host mailbox (device memory, asynchronous on a CUDA stream and
 * capturable in a graph).
 *
 * Results are bit-exact and independent of the backend: sums run in rank
 * order (rank 0's operand first), bf16 and f16 are summed in fp32 and
 * rounded to the type after each rank's addition (with two ranks: once),
 * i32 wraps. One exception: NCCL past two ranks sums in its own order
 * (its ring's), so its f32 sums of three or more ranks may differ from the
 * others' in the last bits (with two, a + b is b + a). Every rank must make the same calls with the same counts; the
 * host backends check this and refuse a desynchronised call on every rank
 * with TF_ERR_MISMATCH.
 *
 * A struct tf_comm is driven by one thread at a time, except
 * tf_comm_abort, which any thread may call to end waits. */
#ifndef TF_FABRIC_COMM_H
#define TF_FABRIC_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "cuda/driver.h"
#include "fabric/bootstrap.h"
#include "fabric/settings.h"
#include "pack/dtype.h"

enum tf_redop { TF_REDOP_SUM = 0, TF_REDOP_MAX = 1, TF_REDOP_MIN = 2 };

struct tf_comm;

struct tf_comm_ops {
	tf_status (*all_reduce)(struct tf_comm *c, const void *send, void *recv, size_t count,
				enum tf_dtype dt, enum tf_redop op, tf_cu_stream s);
	tf_status (*all_gather)(struct tf_comm *c, const void *send, void *recv, size_t count,
				enum tf_dtype dt, tf_cu_stream s);
	tf_status (*all_gather_v)(struct tf_comm *c, const void *send, void *recv, size_t stride,
				  const uint32_t *lens, tf_cu_stream s);
	tf_status (*exchange)(struct tf_comm *c, const void *send, void *recv, size_t bytes,
			      int peer, tf_cu_stream s);
	tf_status (*barrier)(struct tf_comm *c);
	tf_status (*check)(struct tf_comm *c);
	void (*abort)(struct tf_comm *c);
	void (*free)(struct tf_comm *c);
	tf_status (*vote)(struct tf_comm *c, bool mine, bool *all);
};

struct tf_comm {
	const struct tf_comm_ops *ops;
	int world, rank;
	bool device;       /* buffers are device addresses (NCCL, mailbox) */
	const char *name;  /* "host", "host-threads", "nccl", "mailbox", "roce" */
	uint64_t calls;    /* collective calls made (for desync checks) */
};

/* Element size of the dtypes the fabric carries (u8, i32, f16, bf16, f32);
 * 0 for any other. */
size_t tf_comm_dtype_size(enum tf_dtype dt);
const char *tf_redop_name(enum tf_redop op);

/* Reference reduction: dst[i] = srcs[0][i] op srcs[1][i] op ... in rank
 * order, with the rounding rules above. dst may alias a source. */
tf_status tf_comm_reduce(void *dst, const void *const *srcs, int n, size_t count,
			 enum tf_dtype dt, enum tf_redop op);

/* all-reduce: recv[count] = reduce over ranks of send[count]; send may equal
 * recv. all-gather: recv[world * count] holds rank r's send at r * count;
 * send may be recv + rank * count. all-gather-v: rank r's first lens[r]
 * bytes land at recv + r * stride (lens[r] <= stride, lens equal on every
 * rank); bytes past lens[r] are unspecified. exchange: send bytes to peer
 * and receive as many from it (pairs must match). barrier: host-side, all
 * ranks. check: TF_OK, or the recorded failure of a peer or the backend.
 * abort: ends every wait on this rank (any thread). */
#define tf_comm_all_reduce(c, ...) ((c)->calls++, (c)->ops->all_reduce((c), __VA_ARGS__))
#define tf_comm_all_gather(c, ...) ((c)->calls++, (c)->ops->all_gather((c), __VA_ARGS__))
#define tf_comm_all_gather_v(c, ...) ((c)->calls++, (c)->ops->all_gather_v((c), __VA_ARGS__))
#define tf_comm_exchange(c, ...) ((c)->calls++, (c)->ops->exchange((c), __VA_ARGS__))
#define tf_comm_barrier(c) ((c)->calls++, (c)->ops->barrier(c))
#define tf_comm_check(c) ((c)->ops->check(c))
#define tf_comm_abort(c) ((c)->ops->abort(c))
void tf_comm_free(struct tf_comm *c);

/* vote: *all = the AND over every rank of mine, on the host, blocking
 * (a device backend's runs on a private stream of its own, ordered with
 * nothing the caller queued): the graph cache's agreement
 * (cuda/graph.h), one call that every rank makes at the same point. */
tf_status tf_comm_vote(struct tf_comm *c, bool mine, bool *all);
/* For backends: a vote over c's host all-gather of one byte a rank. */
tf_status tf_comm_host_vote(struct tf_comm *c, bool mine, bool *all);

/* Host backend over the bootstrap's control sockets (processes): rank 0
 * gathers each call's operands, checks that every rank made the same call,
 * computes the result with tf_comm_reduce and sends each rank its share.
 * Borrows boot (it must outlive the comm). */
tf_status tf_comm_host_new(struct tf_boot *boot, struct tf_comm **out);

/* Host backend between threads of one process: a group of world ranks;
 * each thread takes its rank's comm. timeout_s bounds every wait. */
struct tf_host_group;
tf_status tf_host_group_new(int world, double timeout_s, struct tf_host_group **out);
struct tf_comm *tf_host_group_comm(struct tf_host_group *g, int rank); /* borrowed */
void tf_host_group_free(struct tf_host_group *g);

/* GPU backends (need tf_cu_init and a current context on the device):
 * NCCL through libnccl.so.2 (version agreed over boot); the mailbox for
 * two ranks of one host, NCCL carrying what exceeds TF_TP_MAILBOX_MAX_KB.
 * TF_ERR_UNAVAILABLE without the library or the kernel. */
tf_status tf_comm_nccl_new(struct tf_boot *boot, const struct tf_fabric_settings *s,
			   struct tf_comm **out);
tf_status tf_comm_mailbox_new(struct tf_boot *boot, const struct tf_fabric_settings *s,
			      struct tf_comm **out);
/* Whether the mailbox kernel is embedded in this build. */
bool tf_comm_mailbox_kernel(void);
/* The mailbox kernel's grid for a message of bytes per rank: one block per
 * 4 KiB, 1 to 64. */
unsigned tf_comm_mailbox_blocks(size_t bytes);
/* Whether c is a mailbox whose inboxes are in GPU memory (peer-to-peer). */
bool tf_comm_mailbox_p2p(const struct tf_comm *c);
/* The NCCL backend a mailbox c routes large messages to (borrowed); NULL
 * if c is no mailbox. */
struct tf_comm *tf_comm_mailbox_nccl(struct tf_comm *c);

/* NCCL's own entry point and communicator behind an NCCL backend c, for a
 * baseline that calls ncclAllReduce directly (no routing, no checks):
 * all_reduce(send, recv, count, bf16, sum, comm, stream) with NCCL's dtype
 * and op codes. TF_ERR_ARG if c is not an NCCL backend. */
struct ncclComm;
struct tf_nccl_raw {
	int (*all_reduce)(const void *s, void *r, size_t n, int dt, int op, struct ncclComm *comm,
			  tf_cu_stream st);
	struct ncclComm *comm;
	int bf16, sum; /* ncclBfloat16, ncclSum */
};
tf_status tf_comm_nccl_raw(struct tf_comm *c, struct tf_nccl_raw *out);
/* The NCCL version agreed (10000*major + 100*minor + patch), 0 if none. */
int tf_comm_nccl_version(const struct tf_comm *c);

/* RoCE between the two ranks of two hosts (roce.h): host-memory
 * collectives, small ones by RDMA writes (or over the shm wire on one
 * host), the host backend for the rest. Falls back to the host backend
 * when RoCE cannot start on any rank, or refuses with TF_ERR_UNAVAILABLE
 * under TF_TP_ROCE_FALLBACK=error. The caller of tf_comm_free on a failed
 * roce comm goes fail-fast first (tf_fate_fatal), so the peer halts its
 * queue pairs before this rank's transport is closed. */
tf_status tf_comm_roce_new(struct tf_boot *boot, const struct tf_fabric_settings *s,
			   struct tf_comm **out);
/* The transport behind a roce comm (borrowed), NULL for any other. */
struct tf_roce *tf_comm_roce_transport(struct tf_comm *c);

/* The backend named by s over boot (host, nccl, mailbox or roce). */
tf_status tf_comm_open(struct tf_boot *boot, const struct tf_fabric_settings *s,
		       struct tf_comm **out);

#endif
