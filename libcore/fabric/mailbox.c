/* mailbox.c: the same-host two-rank mailbox backend (kernel:
 * kernels/tp_mailbox.cu, whose header gives the region layout).
 *
 * Small messages (sum of f32 or bf16, all-gather and exchange with at most
 * TF_TP_MAILBOX_MAX_KB bytes per rank) go through a shared pinned host region
 * that both GPUs map; everything else goes to an NCCL communicator opened
 * alongside. The route depends only on sizes, so both ranks agree.
 *
 * Eligibility is agreed first: the ranks all-gather 65 bytes (has-kernel
 * byte, then the host's boot id, else its host name); the mailbox is used
 * only if rank 0 has the kernel and both blobs are equal, else rank 0 warns
 * and every rank uses NCCL alone. Rank 0 creates /dev/shm/tf-tp-<pid>-<ns>
 * (O_EXCL, 0600), broadcasts its name, both map it shared, rank 0 unlinks it;
 * both register it with the driver (portable, device-mapped) and agree that
 * they are ready. A wait that passes TF_TP_MAILBOX_TIMEOUT_S, or an abort,
 * poisons the mailbox: later launches do nothing and check() reports the
 * failure record instead of hanging. */
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
#define FLAG_BYTES 4096

/* Same layout as struct tp_mail_args in the kernel. */
struct mail_args {
	uint64_t in, out, peer_inbox, my_inbox, ctl, state;
	uint64_t bytes, slot_bytes, timeout_ns;
	int32_t op, rank;
};

struct mcomm {
	struct tf_comm base;
	struct tf_comm *nccl;
	size_t max_bytes, slot_bytes, region_bytes;
	uint8_t *region;    /* host mapping */
	tf_cu_ptr dregion;  /* its device address */
	tf_cu_ptr state;    /* device: epoch, counter */
	tf_cu_func fn;
	uint64_t timeout_ns;
	int (*unregister)(void *p);
	bool registered;
};

bool tf_comm_mailbox_kernel(void)
{
	return tf_cu_kernels_built(); /* kernels/tp_mailbox.cu is in every fatbin */
}

static unsigned blocks_for(size_t bytes)
{
	size_t want = (bytes + 16383) / 16384;
	unsigned g = 1;
	while (g < want && g < 16)
		g *= 2;
	return g;
}

static tf_status launch(struct mcomm *m, const void *in, void *out, size_t bytes, int op,
			tf_cu_stream s)
{
	size_t inbox = FLAG_BYTES + 2 * m->slot_bytes;
	int r = m->base.rank;
	struct mail_args a = {
		(uint64_t)(uintptr_t)in, (uint64_t)(uintptr_t)out,
		m->dregion + CTL_BYTES + (uint64_t)(1 - r) * inbox,
		m->dregion + CTL_BYTES + (uint64_t)r * inbox,
		m->dregion, m->state, bytes, m->slot_bytes, m->timeout_ns, op, r,
	};
	void *params[] = {&a};
	return tf_cu_launch(m->fn, blocks_for(bytes), 512, 0, s, params);
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
	if (m->state)
		tf_cu->MemFree(m->state);
	tf_comm_free(m->nccl);
	free(m);
}

static const struct tf_comm_ops mailbox_ops = {m_all_reduce, m_all_gather, m_all_gather_v, m_exchange,
					       m_barrier, m_check, m_abort, m_free};

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

static tf_status setup(struct tf_boot *b, const struct tf_fabric_settings *s, struct mcomm *m)
{
	tf_status st = map_region(b, m);
	if (st)
		return st;
	/* The driver entry points for host registration, by exact name (the
	 * shared driver table does not carry them). */
	void *dl = tf_cu_driver_get() ? tf_cu_driver_get()->dl : NULL;
	int (*reg)(void *, size_t, unsigned) = dl ? (int (*)(void *, size_t, unsigned))dlsym(dl, "cuMemHostRegister_v2") : NULL;
	int (*devp)(tf_cu_ptr *, void *, unsigned) = dl ? (int (*)(tf_cu_ptr *, void *, unsigned))dlsym(dl, "cuMemHostGetDevicePointer_v2") : NULL;
	m->unregister = dl ? (int (*)(void *))dlsym(dl, "cuMemHostUnregister") : NULL;
	if (!reg || !devp || !m->unregister)
		st = tf_err(TF_ERR_UNAVAILABLE, "mailbox: the driver lacks cuMemHostRegister_v2");
	if (!st && !(st = TF_CU(reg(m->region, m->region_bytes, 1 | 2)))) /* PORTABLE | DEVICEMAP */
		m->registered = true;
	if (!st)
		st = TF_CU(devp(&m->dregion, m->region, 0));
	if (!st)
		st = TF_CU(tf_cu->MemAlloc(&m->state, 16));
	if (!st)
		st = TF_CU(tf_cu->MemsetD8(m->state, 0, 16));
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
	m->slot_bytes = (m->max_bytes + 4095) & ~(size_t)4095;
	m->region_bytes = CTL_BYTES + 2 * (FLAG_BYTES + 2 * m->slot_bytes);
	m->timeout_ns = (uint64_t)(s->mailbox_timeout_s * 1e9);
	if ((st = tf_comm_nccl_new(boot, s, &m->nccl)) || (st = setup(boot, s, m))) {
		m_free(&m->base);
		return st;
	}
	*out = &m->base;
	return TF_OK;
}
