/* roce.h: the RoCE transport between two ranks on two hosts: its region,
 * the guard every wire posts through, the choice of ports, the transport
 * (set-up over a verbs table, a proxy thread, quiesce and failure) and the
 * host-memory collectives over it.
 *
 * The region (one per rank, one memory region registered over all of it):
 *
 *   0     control words (u32): 0 doorbell seq, 1 and 2 the padded bytes
 *         of slot 0 and 1, 3 completed seq; byte 16 abort, 17 failed
 *   4096  flags: [2 slots][2 HCAs] lines of 128 bytes; the peer writes seq
 *         into the first 4 bytes of line (slot, hca)
 *   8192  send slots: 2 x slot
 *         receive slots: 2 x slot (the peer's writes land here)
 *
 * A slot is TF_TP_MAILBOX_MAX_KB rounded up to 4 KiB and never more than
 * TF_ROCE_MAX_WRITE: boot refuses a larger one (no clamping).
 *
 * An operation of seq s uses slot s & 1. The sender's proxy splits the
 * operation's padded bytes (a multiple of 16, at least 16) over the HCAs in
 * 16-byte packs (the remainder to the first HCAs) and, per HCA, posts an
 * unsignaled RDMA write of its stripe chained to a signaled inline 4-byte
 * write of s into the peer's flag line (slot, hca) on the same queue pair;
 * an empty stripe sends the flag only. The receiver waits for every HCA's
 * flag, then reads its receive slot. Two slots suffice: a rank stages op
 * s + 2 only after it received the peer's op s + 1, which the peer sends
 * only after it read op s. So the doorbell may run at most two operations
 * ahead of the proxy (the peer's flags can arrive before this rank's proxy
 * posted); more is a failure ("doorbell skipped").
 *
 * What is proven where: the guard, the port choice, the set-up sequence,
 * the posting rules (1 MiB write cap, 2 MiB in flight, 10 s without a
 * completion), quiesce and failure are proven on fake verbs (verbs.h) and
 * the protocol end to end over the shm wire between processes. Nothing here
 * has run on a real HCA: the attribute values of set-up are those of the
 * seed's transport, and their effect on real RoCE NICs (MTU pairing, GRH,
 * retry timers, IOMMU behaviour after an error) is unproven in this tree. */
#ifndef TF_FABRIC_ROCE_H
#define TF_FABRIC_ROCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "fabric/bootstrap.h"
#include "fabric/settings.h"

#define TF_ROCE_MAX_HCA 2
#define TF_ROCE_MAX_WRITE ((size_t)1 << 20)    /* one RDMA write, whatever the slot */
#define TF_ROCE_MAX_INFLIGHT ((size_t)2 << 20) /* posted, not completed, over all HCAs */
#define TF_ROCE_CTL 4096                       /* control words */
#define TF_ROCE_FLAGS 4096                     /* offset of the flag lines */
#define TF_ROCE_FLAG_LINE 128
#define TF_ROCE_DATA 8192                      /* offset of the send slots */
#define TF_ROCE_PACK 16                        /* posts are multiples of this */
#define TF_ROCE_MIN_INLINE 4                   /* the flag is posted inline */
#define TF_ROCE_STALL_S 10.0                   /* no completion that long fails the proxy */

/* ---- region and guard (roce_guard.c; pure) ---- */

/* A slot for TF_TP_MAILBOX_MAX_KB: max_kb KiB rounded up to 4 KiB. */
size_t tf_roce_slot_bytes(uint32_t max_kb);
/* The region for a slot: 8 KiB + 4 slots. */
size_t tf_roce_region_bytes(size_t slot);
/* Boot's refusal: TF_ERR_CONFIG naming TF_TP_MAILBOX_MAX_KB when its slot
 * would pass TF_ROCE_MAX_WRITE (1024 is the largest value taken). */
tf_status tf_roce_slot_check(uint32_t max_kb);

/* One post as the guard sees it: both sides' layouts (the peer's from its
 * connection record), the HCAs, the slot and the padded size. */
struct tf_roce_post {
	size_t slot_bytes, region_len;           /* here: slot, registered length */
	size_t peer_slot_bytes, peer_region_len; /* the peer's */
	int n_hca;
	int slot;      /* 0 or 1 */
	size_t padded; /* bytes of the operation: a multiple of 16, > 0 */
};

/* One HCA's share: its send range here, the peer's receive range and its
 * flag word (region offsets). len 0: the flag only. */
struct tf_roce_stripe {
	size_t src_off, dst_off, len, flag_off;
};

enum tf_roce_refusal {
	TF_ROCE_POST_OK = 0,
	TF_ROCE_BAD_POST,        /* no HCA, a third slot, an empty or unpadded post */
	TF_ROCE_WRITE_TOO_LARGE, /* over TF_ROCE_MAX_WRITE, whatever the slot */
	TF_ROCE_OUT_OF_REGION,   /* past a slot, the flag area or a registered region */
};
const char *tf_roce_refusal_name(enum tf_roce_refusal r); /* "OutOfRegion", ... */

/* The guard: fill out[0..n_hca) with each HCA's stripe of p, or refuse
 * (TF_ERR_RANGE for WriteTooLarge and OutOfRegion, TF_ERR_ARG for a bad
 * post; the message starts with the refusal's name, *why says which; why
 * may be NULL). Every wire calls it before any post; nothing is posted
 * after a refusal. The write cap is checked before the slot bounds. */
tf_status tf_roce_stripes(const struct tf_roce_post *p, struct tf_roce_stripe out[TF_ROCE_MAX_HCA],
			  enum tf_roce_refusal *why);

/* The padded size a length posts: max(16, round16(len)). */
size_t tf_roce_padded(size_t len);

/* Chunked all-gather-v: a stride past the slot goes as ceil(stride / slot)
 * operations; operation c carries at most a slot of each rank's shard from
 * c * slot. tf_roce_chunk_len: rank's bytes in operation c (0: none).
 * An operation empty on both ranks is skipped (no doorbell). */
size_t tf_roce_chunk_ops(size_t stride, size_t slot);
size_t tf_roce_chunk_len(uint32_t len, size_t c, size_t slot);

/* ---- port choice (roce_ports.c; pure) ---- */

/* A usable port: device name, port number, its IPv4 address (host order)
 * and the GID index carrying it. */
struct tf_roce_port {
	char dev[64];
	int port, gid_index;
	uint32_t ipv4;
};

#define TF_ROCE_MAX_PORTS 16

/* The choice: local ports mine[0..n) paired with the peer's peer[0..n)
 * (indices into each list). shared: false when no /24 is shared and the
 * first-n order was kept (warn: set TF_TP_ROCE_HCA). */
struct tf_roce_choice {
	int n;
	int mine[TF_ROCE_MAX_HCA], peer[TF_ROCE_MAX_HCA];
	bool shared;
};

/* Keep the ports whose /24 the peer also lists, ordered by subnet, each
 * /24 no more often than both sides have it (in list order within a /24),
 * at most want; with no shared /24, the first min(want, nl, np) of each
 * list in order. Symmetric: both ranks, each passing its own list first,
 * choose the same number and pair position i with position i. */
void tf_roce_choose_ports(const uint32_t *local, int nl, const uint32_t *peer, int np, int want,
			  struct tf_roce_choice *out);

/* Parse TF_TP_ROCE_HCA: "name[:gid],..." at most 2; gid -1 when not given.
 * TF_ERR_CONFIG naming the variable on a bad list. */
tf_status tf_roce_parse_hca(const char *s, char names[TF_ROCE_MAX_HCA][64], int gids[TF_ROCE_MAX_HCA],
			    int *n);

/* ---- the transport (roce.c, roce_verbs.c) ---- */

enum tf_roce_wire { TF_ROCE_WIRE_VERBS = 0, TF_ROCE_WIRE_SHM = 1 };

struct tf_verbs;

struct tf_roce_opts {
	size_t slot;              /* bytes (tf_roce_slot_bytes); at most TF_ROCE_MAX_WRITE */
	enum tf_roce_wire wire;
	const struct tf_verbs *verbs; /* verbs wire: the table (borrowed; outlives the transport) */
	const char *hca;          /* TF_TP_ROCE_HCA ("" or NULL: choose) */
	int want_hca;             /* TF_TP_ROCE_HCAS: 1..2 */
	int tc;                   /* TF_TP_ROCE_TC: GRH traffic class */
	int shm_stripes;          /* shm wire: stripe as this many HCAs (1..2) */
	double timeout_s;         /* a wait for the peer's flags (TF_TP_MAILBOX_TIMEOUT_S) */
	double stall_s;           /* no completion that long fails the proxy (0: 10 s) */
	bool no_proxy;            /* tests: no proxy thread (they drive tf_roce_post) */
};

struct tf_roce;

/* Set up the transport between the two ranks of boot (world 2): the
 * region (MADV_DONTFORK and MADV_NOHUGEPAGE, a refusal fails), the wire
 * (verbs: PD, one MR over the region, CQ, RC QP per HCA, RTR/RTS; shm: a
 * shared mapping of both regions), the proxy thread. Each step ends with a
 * vote, so a failure on any rank fails every rank (TF_ERR_UNAVAILABLE
 * naming the rank and step). Logs one line: region base and length, each
 * HCA's lkey and rkey, the peer's region and rkeys. */
tf_status tf_roce_open(struct tf_boot *b, const struct tf_roce_opts *o, struct tf_roce **out);

/* One operation: stage bytes (len <= slot) of src, ring the doorbell, wait
 * for the peer's operation, copy its bytes (peer_len) into dst. The
 * caller's thread plays the part of the device kernel. TF_ERR_TIMEOUT past
 * timeout_s, TF_ERR_CANCELLED once aborted, TF_ERR_UNAVAILABLE once
 * failed. Not thread safe (one caller). */
tf_status tf_roce_op(struct tf_roce *t, const void *src, size_t len, void *dst, size_t peer_len);

/* The proxy's post of operation seq (slot seq & 1, padded bytes) through
 * the guard: nothing reaches a verb after a refusal. On the verbs wire it
 * first waits while the bytes posted and not completed would pass
 * TF_ROCE_MAX_INFLIGHT (no completion for stall_s fails the transport).
 * Exposed for tests that post back to back without a proxy. */
tf_status tf_roce_post(struct tf_roce *t, uint32_t seq, size_t padded);

/* The failure path (the proxy's, any error's): every QP to the error
 * state first (nothing more is sent, no peer write lands), then the record
 * and the abort byte. Any thread; once. */
void tf_roce_fail(struct tf_roce *t, const char *why);
/* The fail-fast hook: abort waits and halt the QPs (any thread). */
void tf_roce_abort(struct tf_roce *t);
/* TF_OK, or why it failed / was aborted. */
tf_status tf_roce_check(const struct tf_roce *t);
/* Whether every HCA's posts have completed (the link is idle); without a
 * proxy it polls the completions itself. */
bool tf_roce_idle(struct tf_roce *t);

struct tf_roce_info {
	int n_hca;
	int qp_state[TF_ROCE_MAX_HCA];  /* read back with query_qp; -1 unknown */
	uint64_t chains_posted[TF_ROCE_MAX_HCA], chains_reaped[TF_ROCE_MAX_HCA];
	uint64_t drained[TF_ROCE_MAX_HCA], drained_flushes[TF_ROCE_MAX_HCA];
	size_t inflight, peak_inflight, max_write;
	bool failed, quiesced, kept;
	const uint8_t *region;
	size_t region_len;
};
void tf_roce_info(struct tf_roce *t, struct tf_roce_info *out);

/* Quiesce (stop the proxy, QPs to error, reap every posted request; a
 * caller with a GPU synchronises it first) and free. A failed transport,
 * or one that does not quiesce within 2 s, keeps its region registered
 * and mapped until the process exits (a late device write must not reach a
 * reused page); *kept (may be NULL) says so. */
void tf_roce_close(struct tf_roce *t, bool *kept);

#endif
