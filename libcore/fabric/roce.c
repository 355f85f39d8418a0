/* roce.c: the RoCE transport's region, proxy thread, posts, failure and
 * quiesce (roce.h gives the protocol; roce_verbs.c the verbs set-up).
 *
 * Two wires post through one function, tf_roce_post, which asks the guard
 * (tf_roce_stripes) first: the verbs wire (an RDMA write per HCA stripe
 * chained to an inline flag write) and the shm wire (two processes of one
 * host sharing a mapping of both regions: a memcpy per stripe, then a
 * release store of the flag). The caller's thread stands in for the device
 * kernel of the seed's transport: it stages, rings the doorbell in the
 * region's control words, waits for the peer's flags and copies out; the
 * proxy thread spins on the doorbell and posts. No tp_roce kernel exists
 * in this tree, so the device path is absent, not merely unproven. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "fabric/roce_int.h"

static double now_s(void)
{
	return tf_boot_now();
}

static void nap_us(long us)
{
	struct timespec ts = {0, us * 1000};
	nanosleep(&ts, NULL);
}

/* ---- the region ---- */

static tf_status prepare(uint8_t *p, size_t n)
{
	/* A fork must not copy-on-write the registered pages, and a huge page
	 * split or merged under the HCA would move them: both before any
	 * registration, and a refusal fails the start. */
	if (madvise(p, n, MADV_DONTFORK))
		return tf_err_errno(TF_ERR_OS, "roce: madvise(MADV_DONTFORK) of the region");
	if (madvise(p, n, MADV_NOHUGEPAGE))
		return tf_err_errno(TF_ERR_OS, "roce: madvise(MADV_NOHUGEPAGE) of the region");
	return TF_OK;
}

/* Verbs wire: an anonymous mapping. Shm wire: rank 0 creates a shared
 * file of both regions (O_EXCL, 0600), both map it, rank 0 unlinks it. */
tf_status roce_map_region(struct tf_roce *t, struct tf_boot *b)
{
	tf_status st = TF_OK;
	t->len = tf_roce_region_bytes(t->slot);
	if (t->o.wire == TF_ROCE_WIRE_VERBS) {
		void *p = mmap(NULL, t->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			st = tf_err_errno(TF_ERR_OS, "roce: mmap of %zu bytes", t->len);
		else
			t->map = t->region = p, t->map_len = t->len;
		if (!st)
			st = prepare(t->region, t->len);
		return roce_vote(b, st, "map the region");
	}
	char name[64] = "";
	size_t n = 0;
	int fd = -1;
	t->map_len = 2 * t->len;
	if (b->rank == 0) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		snprintf(name, sizeof name, "/tf-roce-%d-%llx", (int)getpid(),
			 (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec);
		fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd < 0 || ftruncate(fd, (off_t)t->map_len)) {
			st = tf_err_errno(TF_ERR_OS, "roce shm wire: cannot create /dev/shm%s", name);
			name[0] = 0;
		}
		n = strlen(name);
	}
	tf_status bs = tf_boot_broadcast(b, name, &n, sizeof name - 1);
	if (bs) {
		if (fd >= 0)
			close(fd), shm_unlink(name);
		return bs;
	}
	name[n] = 0;
	if (b->rank != 0) {
		if (!n)
			st = tf_err(TF_ERR_UNAVAILABLE, "roce shm wire: rank 0 could not create the region");
		else if ((fd = shm_open(name, O_RDWR | O_CLOEXEC, 0600)) < 0)
			st = tf_err_errno(TF_ERR_OS, "roce shm wire: cannot open /dev/shm%s", name);
	}
	if (!st) {
		void *p = mmap(NULL, t->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED) {
			st = tf_err_errno(TF_ERR_OS, "roce shm wire: mmap");
		} else {
			t->map = p;
			t->region = t->map + (size_t)b->rank * t->len;
			t->peer_region = t->map + (size_t)(1 - b->rank) * t->len;
			st = prepare(t->map, t->map_len);
		}
	}
	if (fd >= 0)
		close(fd);
	st = roce_vote(b, st, "map the shm wire");
	if (b->rank == 0 && n)
		shm_unlink(name);
	if (!st) {
		t->peer_slot = t->slot, t->peer_len = t->len;
		t->n_hca = t->o.shm_stripes < 1 ? 1 : t->o.shm_stripes > 2 ? 2 : t->o.shm_stripes;
	}
	return st;
}

/* ---- failure ---- */

void roce_fail(struct tf_roce *t, const char *fmt, ...)
{
	char why[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	tf_roce_fail(t, why);
}

void tf_roce_fail(struct tf_roce *t, const char *why)
{
	pthread_mutex_lock(&t->mu);
	if (!atomic_load(&t->failed)) {
		/* Halt first: once this returns, nothing more is sent and no
		 * peer write lands in this region. */
		if (t->o.wire == TF_ROCE_WIRE_VERBS)
			roce_verbs_halt(t);
		atomic_store(&t->failed, true);
		snprintf(t->why, sizeof t->why, "%s", why);
		volatile uint8_t *c = t->region;
		c[CTL_FAILED_BYTE] = 1;
		__atomic_store_n(&c[CTL_ABORT_BYTE], 1, __ATOMIC_RELEASE);
		/* The shm wire can tell the peer directly; on the verbs wire
		 * the fate channel does (the caller goes fail-fast). */
		if (t->peer_region)
			__atomic_store_n(&t->peer_region[CTL_ABORT_BYTE], 1, __ATOMIC_RELEASE);
		tf_log(TF_LOG_ERROR, "tp roce: rank %d failed: %s; every queue pair halted", t->rank, why);
	}
	pthread_mutex_unlock(&t->mu);
}

void tf_roce_abort(struct tf_roce *t)
{
	atomic_store(&t->aborted, true);
	__atomic_store_n(&t->region[CTL_ABORT_BYTE], 1, __ATOMIC_RELEASE);
	tf_roce_fail(t, "aborted");
}

tf_status tf_roce_check(const struct tf_roce *t)
{
	if (atomic_load(&t->failed))
		return atomic_load(&t->aborted) ? tf_err(TF_ERR_CANCELLED, "roce: aborted")
						: tf_err(TF_ERR_UNAVAILABLE, "roce: %s", t->why);
	if (__atomic_load_n(&t->region[CTL_ABORT_BYTE], __ATOMIC_ACQUIRE))
		return tf_err(TF_ERR_CANCELLED, "roce: the peer stopped the transport");
	return TF_OK;
}

/* ---- completions ---- */

/* A completion status's name (libibverbs has ibv_wc_status_str, but this
 * file must not need the library at link time). */
static const char *wc_name(enum ibv_wc_status s)
{
	switch (s) {
	case IBV_WC_SUCCESS: return "success";
	case IBV_WC_LOC_LEN_ERR: return "local length error";
	case IBV_WC_LOC_QP_OP_ERR: return "local QP operation error";
	case IBV_WC_LOC_PROT_ERR: return "local protection error";
	case IBV_WC_WR_FLUSH_ERR: return "work request flushed error";
	case IBV_WC_REM_ACCESS_ERR: return "remote access error";
	case IBV_WC_REM_OP_ERR: return "remote operation error";
	case IBV_WC_RETRY_EXC_ERR: return "transport retry counter exceeded";
	case IBV_WC_RNR_RETRY_EXC_ERR: return "RNR retry counter exceeded";
	default: return "error";
	}
}

/* wr_id of a flag write: its chain's write bytes; of a data write: the
 * same with bit 63 (its flush is counted, the bytes go with its flag). */
#define DATA_BIT ((uint64_t)1 << 63)

static tf_status reap_hca(struct tf_roce *t, struct roce_hca *h, bool draining)
{
	struct ibv_wc wc[32];
	int n = t->v->poll_cq(h->cq, 32, wc);
	if (n < 0)
		return tf_err(TF_ERR_UNAVAILABLE, "roce: poll_cq on %s failed", h->name);
	tf_status st = TF_OK;
	for (int i = 0; i < n; i++) {
		bool data = wc[i].wr_id & DATA_BIT;
		size_t len = (size_t)(wc[i].wr_id & ~DATA_BIT);
		h->completions++;
		if (wc[i].status == IBV_WC_WR_FLUSH_ERR)
			h->flushes++, draining ? h->drained_flushes++ : 0;
		if (draining)
			h->drained++;
		if (!data) {
			h->chains_reaped++;
			h->inflight -= len, t->inflight -= len;
		}
		if (wc[i].status != IBV_WC_SUCCESS && wc[i].status != IBV_WC_WR_FLUSH_ERR && !st) {
			st = tf_err(TF_ERR_UNAVAILABLE, "roce: %s: completion %s (vendor error 0x%x)", h->name,
				    wc_name(wc[i].status), wc[i].vendor_err);
			tf_log(TF_LOG_ERROR, "tp roce: rank %d: %s: completion %s, vendor error 0x%x", t->rank,
			       h->name, wc_name(wc[i].status), wc[i].vendor_err);
		} else if (wc[i].status == IBV_WC_WR_FLUSH_ERR && !draining && !st) {
			st = tf_err(TF_ERR_UNAVAILABLE, "roce: %s: a write was flushed", h->name);
		}
	}
	return st;
}

tf_status roce_reap(struct tf_roce *t)
{
	if (t->o.wire != TF_ROCE_WIRE_VERBS)
		return TF_OK;
	for (int i = 0; i < t->n_hca; i++) {
		tf_status st = reap_hca(t, &t->hca[i], false);
		if (st) {
			if (!atomic_load(&t->failed))
				tf_roce_fail(t, tf_errmsg(st));
			return st;
		}
	}
	return TF_OK;
}

bool tf_roce_idle(struct tf_roce *t)
{
	if (t->o.no_proxy)
		roce_reap(t); /* nobody else polls */
	for (int i = 0; i < t->n_hca && t->o.wire == TF_ROCE_WIRE_VERBS; i++)
		if (t->hca[i].chains_posted != t->hca[i].chains_reaped)
			return false;
	return true;
}

/* ---- posting ---- */

/* Wait until more bytes fit in flight; no completion for stall_s fails. */
static tf_status make_room(struct tf_roce *t, size_t more)
{
	double stall = t->o.stall_s > 0 ? t->o.stall_s : TF_ROCE_STALL_S;
	double since = now_s();
	size_t before = t->inflight;
	while (t->inflight + more > TF_ROCE_MAX_INFLIGHT) {
		if (atomic_load(&t->failed))
			return tf_roce_check(t);
		tf_status st = roce_reap(t);
		if (st)
			return st;
		if (t->inflight != before) {
			before = t->inflight, since = now_s();
		} else if (now_s() - since > stall) {
			roce_fail(t, "no completion for %.1f s with %zu bytes in flight", stall, t->inflight);
			return tf_err(TF_ERR_TIMEOUT, "roce: no completion for %.1f s", stall);
		}
	}
	return TF_OK;
}

static tf_status post_verbs(struct tf_roce *t, int h, const struct tf_roce_stripe *s, uint32_t seq)
{
	struct roce_hca *x = &t->hca[h];
	tf_status st = make_room(t, s->len);
	if (st)
		return st;
	uint32_t word = seq; /* inline: copied at post */
	struct ibv_sge dsge = {(uint64_t)(uintptr_t)(t->region + s->src_off), (uint32_t)s->len, x->mr->lkey};
	struct ibv_sge fsge = {(uint64_t)(uintptr_t)&word, 4, 0};
	struct ibv_send_wr fwr, dwr, *bad = NULL;
	memset(&fwr, 0, sizeof fwr);
	memset(&dwr, 0, sizeof dwr);
	fwr.wr_id = s->len, fwr.sg_list = &fsge, fwr.num_sge = 1, fwr.opcode = IBV_WR_RDMA_WRITE;
	fwr.send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED;
	fwr.wr.rdma.remote_addr = t->peer_va + s->flag_off, fwr.wr.rdma.rkey = x->peer_rkey;
	dwr.wr_id = s->len | DATA_BIT, dwr.sg_list = &dsge, dwr.num_sge = 1, dwr.opcode = IBV_WR_RDMA_WRITE;
	dwr.wr.rdma.remote_addr = t->peer_va + s->dst_off, dwr.wr.rdma.rkey = x->peer_rkey;
	dwr.next = &fwr;
	if (atomic_load(&t->failed))
		return tf_roce_check(t);
	int rc = t->v->post_send(x->qp, s->len ? &dwr : &fwr, &bad);
	if (rc) {
		st = tf_verbs_fail(rc, "ibv_post_send", __FILE__, __LINE__);
		roce_fail(t, "%s: post of %zu bytes refused: %s", x->name, s->len, strerror(rc));
		return st;
	}
	x->chains_posted++;
	x->inflight += s->len, t->inflight += s->len;
	if (t->inflight > t->peak_inflight)
		t->peak_inflight = t->inflight;
	if (s->len > t->max_write)
		t->max_write = s->len;
	return TF_OK;
}

tf_status tf_roce_post(struct tf_roce *t, uint32_t seq, size_t padded)
{
	struct tf_roce_post p = {t->slot, t->len, t->peer_slot, t->peer_len, t->n_hca, (int)(seq & 1), padded};
	struct tf_roce_stripe s[TF_ROCE_MAX_HCA];
	tf_status st = tf_roce_stripes(&p, s, NULL);
	if (st)
		return st; /* refused before any post */
	for (int h = 0; h < t->n_hca; h++) {
		if (t->o.wire == TF_ROCE_WIRE_VERBS) {
			if ((st = post_verbs(t, h, &s[h], seq)))
				return st;
			continue;
		}
		if (atomic_load(&t->failed))
			return tf_roce_check(t);
		if (s[h].len)
			memcpy(t->peer_region + s[h].dst_off, t->region + s[h].src_off, s[h].len);
		if (s[h].len > t->max_write)
			t->max_write = s[h].len;
		__atomic_store_n((uint32_t *)(t->peer_region + s[h].flag_off), seq, __ATOMIC_RELEASE);
	}
	return TF_OK;
}

/* ---- the proxy ---- */

static void *proxy_main(void *arg)
{
	struct tf_roce *t = arg;
	volatile uint32_t *ctl = roce_ctl(t);
	unsigned long idle = 0;
	while (!atomic_load(&t->stop) && !atomic_load(&t->failed)) {
		uint32_t seq = __atomic_load_n(&ctl[CTL_DOORBELL], __ATOMIC_ACQUIRE);
		if (seq - t->posted_seq > 2) {
			roce_fail(t, "doorbell skipped: seq %u after %u", seq, t->posted_seq);
			break;
		}
		tf_status st = TF_OK;
		while (seq != t->posted_seq && !st) {
			uint32_t next = t->posted_seq + 1;
			size_t padded = ctl[CTL_PADDED + (next & 1)];
			if (!(st = tf_roce_post(t, next, padded)))
				__atomic_store_n(&t->posted_seq, next, __ATOMIC_RELEASE);
			idle = 0;
		}
		if (st) {
			if (!atomic_load(&t->failed))
				roce_fail(t, "post of operation %u: %s", t->posted_seq + 1, tf_errmsg(st));
			break;
		}
		if (roce_reap(t))
			break;
		if (++idle > 20000)
			nap_us(20);
	}
	return NULL;
}

tf_status roce_start_proxy(struct tf_roce *t);
tf_status roce_start_proxy(struct tf_roce *t)
{
	if (t->o.no_proxy)
		return TF_OK;
	int e = pthread_create(&t->proxy, NULL, proxy_main, t);
	if (e)
		return tf_err(TF_ERR_OS, "roce: cannot start the proxy thread: %s", strerror(e));
	t->proxy_running = true;
	return TF_OK;
}

static void stop_proxy(struct tf_roce *t)
{
	if (!t->proxy_running)
		return;
	/* The peer may still wait for this rank's last operation: a rank
	 * finishes an operation when the peer's bytes arrive, which can be
	 * before its own proxy posted. Let the proxy catch up first. */
	double deadline = now_s() + 5.0;
	while (!atomic_load(&t->failed) && __atomic_load_n(&t->posted_seq, __ATOMIC_ACQUIRE) != t->seq &&
	       now_s() < deadline)
		nap_us(20);
	atomic_store(&t->stop, true);
	pthread_join(t->proxy, NULL);
	t->proxy_running = false;
}

/* ---- an operation (the device kernel's part, on the host) ---- */

tf_status tf_roce_op(struct tf_roce *t, const void *src, size_t len, void *dst, size_t peer_len)
{
	tf_status st = tf_roce_check(t);
	if (st)
		return st;
	if (len > t->slot || peer_len > t->peer_slot)
		return tf_err(TF_ERR_ARG, "roce: an operation of %zu bytes (the peer's %zu) past the %zu-byte slot",
			      len, peer_len, t->slot);
	volatile uint32_t *ctl = roce_ctl(t);
	uint32_t seq = ++t->seq;
	int slot = (int)(seq & 1);
	size_t padded = tf_roce_padded(len);
	uint8_t *send = t->region + TF_ROCE_DATA + (size_t)slot * t->slot;
	if (len)
		memcpy(send, src, len);
	memset(send + len, 0, padded - len);
	ctl[CTL_PADDED + slot] = (uint32_t)padded;
	__atomic_store_n(&ctl[CTL_DOORBELL], seq, __ATOMIC_RELEASE);
	if (t->o.no_proxy && (st = tf_roce_post(t, seq, padded)))
		return st;
	double deadline = now_s() + t->timeout_s;
	for (int h = 0; h < t->n_hca; h++) {
		const volatile uint32_t *flag =
			(const uint32_t *)(t->region + TF_ROCE_FLAGS + (size_t)(2 * slot + h) * TF_ROCE_FLAG_LINE);
		for (unsigned long k = 0; __atomic_load_n(flag, __ATOMIC_ACQUIRE) != seq; k++) {
			if (t->o.no_proxy && t->o.wire == TF_ROCE_WIRE_VERBS && (st = roce_reap(t)))
				return st;
			if ((k & 63) == 0) {
				if ((st = tf_roce_check(t)))
					return st;
				if (now_s() > deadline) {
					roce_fail(t, "timed out after %.3f s waiting for the peer's operation %u (HCA %d)",
						  t->timeout_s, seq, h);
					return tf_err(TF_ERR_TIMEOUT, "roce: the peer's operation %u did not arrive in %.3f s",
						      seq, t->timeout_s);
				}
			}
			if (k > 100000)
				nap_us(5);
		}
	}
	const uint8_t *recv = t->region + TF_ROCE_DATA + 2 * t->slot + (size_t)slot * t->slot;
	if (peer_len)
		memcpy(dst, recv, peer_len);
	__atomic_store_n(&ctl[CTL_DONE], seq, __ATOMIC_RELEASE);
	return TF_OK;
}

/* ---- info and close ---- */

void tf_roce_info(struct tf_roce *t, struct tf_roce_info *out)
{
	memset(out, 0, sizeof *out);
	out->n_hca = t->n_hca;
	for (int i = 0; i < t->n_hca; i++) {
		struct roce_hca *h = &t->hca[i];
		out->qp_state[i] = -1;
		if (h->qp && t->v && t->v->query_qp) {
			struct ibv_qp_attr a;
			struct ibv_qp_init_attr ia;
			if (!t->v->query_qp(h->qp, &a, IBV_QP_STATE, &ia))
				out->qp_state[i] = (int)a.qp_state;
		}
		out->chains_posted[i] = h->chains_posted, out->chains_reaped[i] = h->chains_reaped;
		out->drained[i] = h->drained, out->drained_flushes[i] = h->drained_flushes;
	}
	out->inflight = t->inflight, out->peak_inflight = t->peak_inflight, out->max_write = t->max_write;
	out->failed = atomic_load(&t->failed), out->quiesced = t->quiesced, out->kept = t->kept;
	out->region = t->region, out->region_len = t->len;
}

/* QPs to error (all before any reaping), then reap every posted chain. */
static bool quiesce(struct tf_roce *t)
{
	if (t->o.wire != TF_ROCE_WIRE_VERBS)
		return true;
	roce_verbs_halt(t);
	double deadline = now_s() + 2.0;
	for (;;) {
		bool all = true;
		for (int i = 0; i < t->n_hca; i++) {
			reap_hca(t, &t->hca[i], true);
			all &= t->hca[i].chains_reaped == t->hca[i].chains_posted;
		}
		if (all)
			return true;
		if (now_s() > deadline)
			return false;
		nap_us(50);
	}
}

void tf_roce_close(struct tf_roce *t, bool *kept)
{
	if (!t) {
		if (kept)
			*kept = false;
		return;
	}
	stop_proxy(t);
	t->quiesced = quiesce(t);
	bool failed = atomic_load(&t->failed);
	t->kept = failed || !t->quiesced;
	struct tf_roce_info info;
	tf_roce_info(t, &info);
	for (int i = 0; i < info.n_hca && t->o.wire == TF_ROCE_WIRE_VERBS; i++)
		tf_log(TF_LOG_INFO, "tp roce: rank %d %s %s: qp state %d, %llu posted, %llu completed, drain reaped %llu (%llu flushed)",
		       t->rank, t->quiesced ? "quiesced" : "halted", t->hca[i].name, info.qp_state[i],
		       (unsigned long long)info.chains_posted[i], (unsigned long long)info.chains_reaped[i],
		       (unsigned long long)info.drained[i], (unsigned long long)info.drained_flushes[i]);
	if (kept)
		*kept = t->kept;
	if (t->kept) {
		/* Registered and mapped until exit: the struct goes (its
		 * handles with it), the HCA resources and pages stay. */
		tf_log(TF_LOG_WARN, "tp roce: rank %d keeps its region %p (%zu bytes) registered until exit (%s)",
		       t->rank, (void *)t->region, t->len, failed ? "the transport failed" : "it did not quiesce");
		pthread_mutex_destroy(&t->mu);
		free(t);
		return;
	}
	if (t->o.wire == TF_ROCE_WIRE_VERBS)
		roce_verbs_release(t);
	if (t->map)
		munmap(t->map, t->map_len);
	pthread_mutex_destroy(&t->mu);
	free(t);
}

tf_status tf_roce_open(struct tf_boot *b, const struct tf_roce_opts *o, struct tf_roce **out)
{
	*out = NULL;
	if (b->world != 2)
		return tf_err(TF_ERR_CONFIG, "roce: expected TF_TP_WORLD=2 (it is %d)", b->world);
	if (o->slot == 0 || o->slot > TF_ROCE_MAX_WRITE || o->slot % 4096)
		return tf_err(TF_ERR_CONFIG, "roce: a slot of %zu bytes (4 KiB multiples up to %zu)", o->slot,
			      TF_ROCE_MAX_WRITE);
	if (o->wire == TF_ROCE_WIRE_VERBS && !o->verbs)
		return tf_err(TF_ERR_ARG, "roce: the verbs wire needs a verbs table");
	struct tf_roce *t = calloc(1, sizeof *t);
	if (!t)
		return tf_err(TF_ERR_NOMEM, "roce: out of memory");
	t->o = *o;
	t->rank = b->rank, t->slot = o->slot, t->v = o->verbs;
	t->timeout_s = o->timeout_s > 0 ? o->timeout_s : 120;
	pthread_mutex_init(&t->mu, NULL);
	tf_status st = roce_map_region(t, b);
	if (!st && o->wire == TF_ROCE_WIRE_VERBS)
		st = roce_verbs_setup(t, b);
	if (!st)
		st = roce_vote(b, roce_start_proxy(t), "start the proxy");
	if (st) {
		/* Nothing was posted: a plain release. */
		stop_proxy(t);
		if (o->wire == TF_ROCE_WIRE_VERBS)
			roce_verbs_release(t);
		if (t->map)
			munmap(t->map, t->map_len);
		pthread_mutex_destroy(&t->mu);
		free(t);
		return st;
	}
	if (o->wire == TF_ROCE_WIRE_SHM)
		tf_log(TF_LOG_INFO, "tp roce: rank %d shm wire: region %p + %zu, striped as %d HCA%s, peer region %p",
		       t->rank, (void *)t->region, t->len, t->n_hca, t->n_hca > 1 ? "s" : "", (void *)t->peer_region);
	*out = t;
	return TF_OK;
}
