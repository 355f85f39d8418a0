/* mailbox.c: the same-host two-rank mailbox backend (kernel:
 * kernels/tp_mailbox.cu, whose header gives the protocol).
 *
 * Small messages (sum of f32 or bf16, all-gather and exchange with at most
 * TF_TP_MAILBOX_MAX_KB bytes per rank) take one launch of the mailbox
 * kernel; everything else goes to an NCCL communicator opened alongside.
 * The route depends only on sizes, so both ranks agree.
 *
 * Eligibility is agreed first: the ranks all-gather 65 bytes (has-kernel
 * byte, then the host's boot id, else its host name); the mailbox is used
 * only if rank 0 has the kernel and both blobs are equal, else rank 0 warns
 * and every rank uses NCCL alone.
 *
 * The shared pinned host region: rank 0 creates /dev/shm/tf-tp-<pid>-<ns>
 * (O_EXCL, 0600), broadcasts its name, both map it shared, rank 0 unlinks
 * it; both register it with the driver (portable, device-mapped). It holds
 * 4 KiB of control words (word 0 abort, word 1 poison, words 16 + 8r rank
 * r's failure record: failed, seq, seen, block, why, microseconds) and, when
 * the inboxes live there, both inboxes (rank 0's, then rank 1's).
 *
 * Inboxes (2 slots of 16-byte lines, one line per 8 payload bytes): with
 * TF_TP_MAILBOX_P2P on (the default), each rank allocates its inbox in its
 * GPU's memory and the peer maps it through a CUDA IPC handle sent over the
 * bootstrap, so a sender's stores cross NVLink and a receiver polls its own
 * memory; if either rank cannot (no peer access, no IPC), both fall back to
 * inboxes in the host region, which every step then crosses PCIe for.
 * Both choices are agreed by vote.
 *
 * A wait that passes TF_TP_MAILBOX_TIMEOUT_S, or an abort, poisons the
 * mailbox: later launches do nothing and check() reports the failure record
 * instead of hanging. */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "cuda/module.h"
#include "fabric/comm.h"

#define CTL_BYTES 4096
#define LINE 16          /* bytes of an inbox line: 8 payload, 2 seq copies */
#define THREADS 512      /* kernel block */
#define CHUNK_LINES 512  /* lines per chunk (1 per thread) */
#define MAX_BLOCKS 64
#define STATE_BYTES (4 * (32 + MAX_BLOCKS))

/* Same layout as struct tp_mail_args in the kernel. */
struct mail_args {
	uint64_t in, out, peer_inbox, my_inbox, ctl, state;
	uint64_t bytes, slot_lines, timeout_ns;
	int32_t op, rank;
};
_Static_assert(sizeof(struct mail_args) == 80, "mail_args must match tp_mail_args");

/* CUDA IPC entry points, by exact name (the shared driver table does not
 * carry them). */
typedef struct { char reserved[64]; } ipc_handle;
struct ipc_api {
	int (*get)(ipc_handle *h, tf_cu_ptr p);                    /* cuIpcGetMemHandle */
	int (*open)(tf_cu_ptr *p, ipc_handle h, unsigned flags);   /* cuIpcOpenMemHandle_v2 */
	int (*close)(tf_cu_ptr p);                                 /* cuIpcCloseMemHandle */
};

struct mcomm {
	struct tf_comm base;
	struct tf_comm *nccl;
	size_t max_bytes, slot_lines, inbox_bytes, region_bytes;
	bool p2p;           /* inboxes in GPU memory */
	uint8_t *region;    /* host mapping */
	tf_cu_ptr dregion;  /* its device address */
	tf_cu_ptr inbox;    /* p2p: own inbox (this GPU) */
	tf_cu_ptr peer_inbox; /* p2p: the peer's, mapped here */
	tf_cu_ptr state;    /* device: poison, block epochs */
	tf_cu_func fn;
	uint64_t timeout_ns;
	struct ipc_api ipc;
	int (*unregister)(void *p);
	bool registered;
};

bool tf_comm_mailbox_kernel(void)
{
	return tf_cu_kernels_built(); /* kernels/tp_mailbox.cu is in every fatbin */
}

unsigned tf_comm_mailbox_blocks(size_t bytes)
{
	size_t chunks = ((bytes + 7) / 8 + CHUNK_LINES - 1) / CHUNK_LINES;
	return chunks < 1 ? 1 : chunks > MAX_BLOCKS ? MAX_BLOCKS : (unsigned)chunks;
}

static tf_status launch(struct mcomm *m, const void *in, void *out, size_t bytes, int op,
			tf_cu_stream s)
{
	int r = m->base.rank;
	tf_cu_ptr mine, theirs;
	if (m->p2p) {
		mine = m->inbox, theirs = m->peer_inbox;
	} else {
		tf_cu_ptr boxes = m->dregion + CTL_BYTES;
		mine = boxes + (tf_cu_ptr)r * m->inbox_bytes;
		theirs = boxes + (tf_cu_ptr)(1 - r) * m->inbox_bytes;
	}
	struct mail_args a = {
		(uint64_t)(uintptr_t)in, (uint64_t)(uintptr_t)out, theirs, mine, m->dregion, m->state,
		bytes, m->slot_lines, m->timeout_ns, op, r,
	};
	void *params[] = {&a};
	return tf_cu_launch(m->fn, tf_comm_mailbox_blocks(bytes), THREADS, 0, s, params);
}

static tf_status m_all_reduce(struct tf_comm *c, const void *s, void *r, size_t n, enum tf_dtype dt,
			      enum tf_redop op, tf_cu_stream st)
{
	struct mcomm *m = (struct mcomm *)c;
	size_t es = tf_comm_dtype_size(dt);
	if (op == TF_REDOP_SUM && (dt == TF_DTYPE_F32 || dt == TF_DTYPE_BF16) && n * es <= m->max_bytes && n)
		return launch(m, s, r, n * es, dt == TF_DTYPE_F32 ? 0 : 1, st);
	m->nccl->calls++;
	return m->nccl->ops->all_reduce(m->nccl, s, r, n, dt, op, st);
}

static tf_status m_all_gather(struct tf_comm *c, const void *s, void *r, size_t n, enum tf_dtype dt,
			      tf_cu_stream st)
{
	struct mcomm *m = (struct mcomm *)c;
	size_t es = tf_comm_dtype_size(dt);
	if (es && n && n * es <= m->max_bytes)
		return launch(m, s, r, n * es, 2, st);
	m->nccl->calls++;
	return m->nccl->ops->all_gather(m->nccl, s, r, n, dt, st);
}

static tf_status m_all_gather_v(struct tf_comm *c, const void *s, void *r, size_t stride,
				const uint32_t *lens, tf_cu_stream st)
{
	struct mcomm *m = (struct mcomm *)c;
	m->nccl->calls++;
	return m->nccl->ops->all_gather_v(m->nccl, s, r, stride, lens, st);
}

static tf_status m_exchange(struct tf_comm *c, const void *s, void *r, size_t bytes, int peer,
			    tf_cu_stream st)
{
	struct mcomm *m = (struct mcomm *)c;
	if (bytes && bytes <= m->max_bytes && peer == 1 - c->rank)
		return launch(m, s, r, bytes, 3, st);
	m->nccl->calls++;
	return m->nccl->ops->exchange(m->nccl, s, r, bytes, peer, st);
}

static tf_status m_barrier(struct tf_comm *c)
{
	struct mcomm *m = (struct mcomm *)c;
	return m->nccl->ops->barrier(m->nccl);
}

static tf_status m_vote(struct tf_comm *c, bool mine, bool *all)
{
	struct mcomm *m = (struct mcomm *)c;
	m->nccl->calls++;
	return m->nccl->ops->vote(m->nccl, mine, all);
}

static tf_status m_check(struct tf_comm *c)
{
	struct mcomm *m = (struct mcomm *)c;
	volatile uint32_t *ctl = (volatile uint32_t *)m->region;
	if (ctl[1] || ctl[0]) {
		for (int r = 0; r < 2; r++) {
			volatile uint32_t *rec = ctl + 16 + 8 * r;
			if (rec[0]) {
				tf_log(TF_LOG_ERROR,
				       "tp mailbox: rank %d %s at seq %u (saw %u, block %u, after %u us)", r,
				       rec[4] == 2 ? "timed out" : "was aborted", rec[1], rec[2], rec[3], rec[5]);
				return tf_err(TF_ERR_UNAVAILABLE,
					      "mailbox poisoned: rank %d %s at seq %u (block %u, %u us)", r,
					      rec[4] == 2 ? "timed out waiting for its peer" : "was aborted",
					      rec[1], rec[3], rec[5]);
			}
		}
		return tf_err(TF_ERR_CANCELLED, "mailbox aborted");
	}
	return m->nccl->ops->check(m->nccl);
}

static void m_abort(struct tf_comm *c)
{
	struct mcomm *m = (struct mcomm *)c;
	__atomic_store_n((uint32_t *)m->region, 1u, __ATOMIC_SEQ_CST); /* ends both ranks' waits */
	m->nccl->ops->abort(m->nccl);
}

static void m_free(struct tf_comm *c)
{
	struct mcomm *m = (struct mcomm *)c;
	if (m->registered)
		m->unregister(m->region);
	if (m->region)
		munmap(m->region, m->region_bytes);
	if (m->peer_inbox)
		m->ipc.close(m->peer_inbox);
	if (m->inbox)
		tf_cu->MemFree(m->inbox);
	if (m->state)
		tf_cu->MemFree(m->state);
	tf_comm_free(m->nccl);
	free(m);
}

static const struct tf_comm_ops mailbox_ops = {m_all_reduce, m_all_gather, m_all_gather_v, m_exchange,
					       m_barrier, m_check, m_abort, m_free, m_vote};

/* 65 bytes: has-kernel, then the host identity, zero-padded. */
static void host_blob(uint8_t out[65])
{
	memset(out, 0, 65);
	out[0] = tf_comm_mailbox_kernel();
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
	char id[65] = "";
	if (!f || !fgets(id, sizeof id, f))
		gethostname(id, sizeof id - 1);
	if (f)
		fclose(f);
	id[strcspn(id, "\n")] = 0;
	memcpy(out + 1, id, strlen(id) < 64 ? strlen(id) : 64);
}

/* Every rank votes; TF_OK only if all said ok. */
static tf_status vote(struct tf_boot *b, tf_status mine, const char *what)
{
	uint8_t ok = mine == TF_OK, all[2 * 8];
	size_t lens[2];
	tf_status st = tf_boot_all_gather(b, &ok, 1, all, 8, lens);
	if (st)
		return st;
	if (mine)
		return mine;
	for (int r = 0; r < b->world; r++)
		if (!all[8 * r])
			return tf_err(TF_ERR_UNAVAILABLE, "mailbox: rank %d failed to %s", r, what);
	return TF_OK;
}

/* Create (rank 0) or open the region and map it; every rank votes. */
static tf_status map_region(struct tf_boot *b, struct mcomm *m)
{
	char name[64] = "";
	size_t n = 0;
	int fd = -1;
	tf_status st = TF_OK;
	if (b->rank == 0) {
		struct timespec t;
		clock_gettime(CLOCK_REALTIME, &t);
		snprintf(name, sizeof name, "/tf-tp-%d-%llx", (int)getpid(),
			 (unsigned long long)t.tv_sec * 1000000000ull + (unsigned long long)t.tv_nsec);
		fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd < 0 || ftruncate(fd, (off_t)m->region_bytes)) {
			st = tf_err_errno(TF_ERR_OS, "mailbox: cannot create /dev/shm%s", name);
			name[0] = 0;
		}
		n = strlen(name);
	}
	tf_status bs = tf_boot_broadcast(b, name, &n, sizeof name - 1);
	if (bs)
		return bs;
	name[n] = 0;
	if (b->rank != 0) {
		if (!n)
			st = tf_err(TF_ERR_UNAVAILABLE, "mailbox: rank 0 could not create the region");
		else if ((fd = shm_open(name, O_RDWR | O_CLOEXEC, 0600)) < 0)
			st = tf_err_errno(TF_ERR_OS, "mailbox: cannot open /dev/shm%s", name);
	}
	if (!st) {
		void *p = mmap(NULL, m->region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED)
			st = tf_err_errno(TF_ERR_OS, "mailbox: mmap");
		else
			m->region = p;
	}
	if (fd >= 0)
		close(fd);
	st = vote(b, st, "map the region");
	if (b->rank == 0 && n)
		shm_unlink(name);
	return st;
}

static void *driver_sym(const char *name)
{
	const struct tf_cu_driver *d = tf_cu_driver_get();
	return d && d->dl ? dlsym(d->dl, name) : NULL;
}

/* Each rank allocates its inbox in its GPU, exports it, and maps the
 * peer's. *ok: whether every rank did (else nothing is left behind, and
 * why says what failed here). Only a bootstrap failure is returned. */
static tf_status open_p2p(struct tf_boot *b, struct mcomm *m, bool *ok, char *why, size_t cap)
{
	ipc_handle mine, all[2];
	size_t lens[2];
	memset(&mine, 0, sizeof mine);
	tf_status st = TF_OK;
	*ok = false;
	m->ipc.get = (int (*)(ipc_handle *, tf_cu_ptr))driver_sym("cuIpcGetMemHandle");
	m->ipc.open = (int (*)(tf_cu_ptr *, ipc_handle, unsigned))driver_sym("cuIpcOpenMemHandle_v2");
	m->ipc.close = (int (*)(tf_cu_ptr))driver_sym("cuIpcCloseMemHandle");
	if (!m->ipc.get || !m->ipc.open || !m->ipc.close)
		st = tf_err(TF_ERR_UNAVAILABLE, "the driver lacks CUDA IPC");
	if (!st)
		st = TF_CU(tf_cu->MemAlloc(&m->inbox, m->inbox_bytes));
	if (!st)
		st = TF_CU(tf_cu->MemsetD8(m->inbox, 0, m->inbox_bytes));
	if (!st)
		st = TF_CU(tf_cu->CtxSynchronize());
	if (!st)
		st = TF_CU(m->ipc.get(&mine, m->inbox));
	tf_status bs = tf_boot_all_gather(b, &mine, sizeof mine, (uint8_t *)all, sizeof mine, lens);
	if (bs)
		return bs;
	if (!st && lens[1 - b->rank] != sizeof mine)
		st = tf_err(TF_ERR_FORMAT, "an IPC handle of %zu bytes", lens[1 - b->rank]);
	if (!st && (st = TF_CU(m->ipc.open(&m->peer_inbox, all[1 - b->rank], 1)))) /* LAZY_ENABLE_PEER_ACCESS */
		m->peer_inbox = 0;
	snprintf(why, cap, "%s", st ? tf_errmsg(st) : "a peer could not map this rank's inbox");
	uint8_t me = st == TF_OK, votes[2 * 8];
	if ((bs = tf_boot_all_gather(b, &me, 1, votes, 8, lens)))
		return bs;
	*ok = votes[0] && votes[8];
	if (!*ok) {
		if (m->peer_inbox)
			m->ipc.close(m->peer_inbox);
		if (m->inbox)
			tf_cu->MemFree(m->inbox);
		m->peer_inbox = m->inbox = 0;
	}
	return TF_OK;
}

static tf_status setup(struct tf_boot *b, const struct tf_fabric_settings *s, struct mcomm *m)
{
	tf_status st;
	m->p2p = false;
	if (s->mailbox_p2p) {
		char why[256];
		if ((st = open_p2p(b, m, &m->p2p, why, sizeof why)))
			return st;
		if (!m->p2p)
			tf_log(TF_LOG_WARN, "tp mailbox: rank %d: no peer GPU memory (%s); inboxes in the host region",
			       b->rank, why);
	}
	m->region_bytes = CTL_BYTES + (m->p2p ? 0 : 2 * m->inbox_bytes);
	if ((st = map_region(b, m)))
		return st;
	st = TF_OK;
	int (*reg)(void *, size_t, unsigned) = (int (*)(void *, size_t, unsigned))driver_sym("cuMemHostRegister_v2");
	int (*devp)(tf_cu_ptr *, void *, unsigned) = (int (*)(tf_cu_ptr *, void *, unsigned))driver_sym("cuMemHostGetDevicePointer_v2");
	m->unregister = (int (*)(void *))driver_sym("cuMemHostUnregister");
	if (!reg || !devp || !m->unregister)
		st = tf_err(TF_ERR_UNAVAILABLE, "mailbox: the driver lacks cuMemHostRegister_v2");
	if (!st && !(st = TF_CU(reg(m->region, m->region_bytes, 1 | 2)))) /* PORTABLE | DEVICEMAP */
		m->registered = true;
	if (!st)
		st = TF_CU(devp(&m->dregion, m->region, 0));
	if (!st)
		st = TF_CU(tf_cu->MemAlloc(&m->state, STATE_BYTES));
	if (!st)
		st = TF_CU(tf_cu->MemsetD8(m->state, 0, STATE_BYTES));
	if (!st)
		st = TF_CU(tf_cu->CtxSynchronize());
	if (!st)
		st = tf_cu_kernel("tp_mailbox", &m->fn);
	return vote(b, st, "set up the device side");
}

tf_status tf_comm_mailbox_new(struct tf_boot *boot, const struct tf_fabric_settings *s,
			      struct tf_comm **out)
{
	uint8_t mine[65], all[2 * 65];
	size_t lens[2];
	if (boot->world != 2)
		return tf_err(TF_ERR_CONFIG, "TF_COMM_BACKEND=mailbox: expected TF_TP_WORLD=2");
	host_blob(mine);
	tf_status st = tf_boot_all_gather(boot, mine, 65, all, 65, lens);
	if (st)
		return st;
	bool same_host = !memcmp(all + 1, all + 65 + 1, 64);
	if (!all[0] || !same_host) {
		if (boot->rank == 0)
			tf_log(TF_LOG_WARN, "tp: the mailbox is unavailable (%s); using NCCL alone",
			       !all[0] ? "this build has no mailbox kernel" : "the ranks are on different hosts");
		return tf_comm_nccl_new(boot, s, out);
	}
	struct mcomm *m = calloc(1, sizeof *m);
	if (!m)
		return tf_err(TF_ERR_NOMEM, "mailbox: out of memory");
	m->base = (struct tf_comm){&mailbox_ops, 2, boot->rank, true, "mailbox", 0};
	m->max_bytes = (size_t)s->mailbox_max_kb * 1024;
	m->slot_lines = (m->max_bytes + 7) / 8;
	m->inbox_bytes = 2 * m->slot_lines * LINE;
	m->timeout_ns = (uint64_t)(s->mailbox_timeout_s * 1e9);
	if ((st = tf_comm_nccl_new(boot, s, &m->nccl)) || (st = setup(boot, s, m))) {
		m_free(&m->base);
		return st;
	}
	if (boot->rank == 0)
		tf_log(TF_LOG_INFO, "tp mailbox: inboxes in %s, messages up to %zu bytes",
		       m->p2p ? "GPU memory (peer-to-peer)" : "the pinned host region", m->max_bytes);
	*out = &m->base;
	return TF_OK;
}

bool tf_comm_mailbox_p2p(const struct tf_comm *c)
{
	return c && c->ops == &mailbox_ops && ((const struct mcomm *)c)->p2p;
}

struct tf_comm *tf_comm_mailbox_nccl(struct tf_comm *c)
{
	return c && c->ops == &mailbox_ops ? ((struct mcomm *)c)->nccl : NULL;
}
