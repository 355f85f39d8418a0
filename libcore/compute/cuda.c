/* cuda.c: the CUDA backend: its state (device, one stream, a device arena,
 * cuBLAS, the EXL3 workspace, pinned staging), memory, kernel launch and
 * scratch, and the table. The ops live in cuda_dense.c (convert, linear,
 * embed, rmsnorm, rope), cuda_exl3.c, cuda_rows.c, cuda_attn.c,
 * cuda_moe.c, cuda_mhc.c and cuda_sample.c.
 *
 * Memory: every tensor and scratch block comes from one arena (VMM where
 * the device has it, else cuMemAlloc chunks; $TF_CUDA_ARENA=plain forces
 * the latter). Blocks up to CUDA_SMALL_MAX go back to the arena's free
 * lists at once: whatever reuses one is queued on the same stream after
 * the work that used it. A larger block is its own chunk, kept when freed
 * for the next request of its size (CUDA_SPARE_MAX bytes of them, the
 * newest first: a graphed call's scratch comes back at the same
 * addresses), on the same terms; past that the arena unmaps it, so its
 * free waits in a list until an event recorded after the work queued
 * before the release has passed (checked without waiting at each alloc
 * and release; all of them at sync and download).
 * An allocation that fails while frees wait waits for the stream once and
 * tries again.
 *
 * Uploads copy through CUDA_STAGE_CHUNKS pinned chunks of CUDA_STAGE_CHUNK
 * bytes in turn, small uploads packed into one chunk; the host waits only
 * to reuse a chunk whose copies are still queued (an event per chunk).
 * Downloads wait for the stream, then copy through the staging. Host
 * buffers from host_alloc are pinned already: copies to and from them
 * are queued directly, no staging (an upload's bytes must then stay put
 * until the copy has run: the caller's next download or sync). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "compute/cuda_be.h"
#include "cuda/module.h"

/* ---- deferred frees and arena blocks ---- */

/* Free the late blocks whose events have passed (all of them when the
 * stream is known to be idle), oldest first. */
static void late_reap(struct cuda_be *c, bool idle)
{
	size_t i = 0;
	for (; i < c->nlate; i++) {
		struct cuda_late *l = &c->late[i];
		if (!idle && (!l->ev || !tf_cu->EventQuery || tf_cu->EventQuery(l->ev) != TF_CU_SUCCESS))
			break;
		tf_arena_dealloc(c->arena, l->p);
		if (l->ev)
			tf_cu->EventDestroy(l->ev);
	}
	if (!i)
		return;
	memmove(c->late, c->late + i, (c->nlate - i) * sizeof *c->late);
	c->nlate -= i;
}

/* Wait for the stream; then every late block and staging chunk is free. */
static tf_status wait_idle(struct cuda_be *c)
{
	if (c->g.mode != CUDA_EAGER)
		return tf_err(TF_ERR_UNSUPPORTED, "cuda: a wait for the stream inside a graphed call");
	tf_status st = TF_CU(tf_cu->StreamSynchronize(c->stream));
	if (st)
		return st;
	late_reap(c, true);
	memset(c->pending, 0, sizeof c->pending);
	c->fill = 0;
	return TF_OK;
}

tf_status cuda_wait_idle(struct cuda_be *c)
{
	return wait_idle(c);
}

void cuda_late_drop(struct cuda_be *c)
{
	late_reap(c, true);
}

/* The newest spare block of n bytes, taken (0 when none). */
static tf_cu_ptr spare_take(struct cuda_be *c, size_t n)
{
	for (size_t i = c->nspare; i-- > 0;)
		if (c->spare[i].n == n) {
			tf_cu_ptr p = c->spare[i].p;
			memmove(c->spare + i, c->spare + i + 1, (c->nspare - i - 1) * sizeof *c->spare);
			c->nspare--;
			c->spare_bytes -= n;
			return p;
		}
	return 0;
}

/* Room in the spare list for one more block. */
static bool spare_room(struct cuda_be *c)
{
	if (c->nspare < c->spare_cap)
		return true;
	size_t cap = c->spare_cap ? 2 * c->spare_cap : 16;
	if (tf_realloc_array(&c->spare, cap, sizeof *c->spare))
		return false;
	c->spare_cap = cap;
	return true;
}

void cuda_spare_mark(struct cuda_be *c)
{
	c->nspare_mark = 0;
	if (c->nspare > c->spare_mark_cap) {
		if (tf_realloc_array(&c->spare_mark, c->nspare, sizeof *c->spare_mark))
			return; /* no mark: reset keeps the list as it is */
		c->spare_mark_cap = c->nspare;
	}
	memcpy(c->spare_mark, c->spare, c->nspare * sizeof *c->spare);
	c->nspare_mark = c->nspare;
}

void cuda_spare_reset(struct cuda_be *c)
{
	if (!c->nspare_mark && !c->nspare)
		return;
	/* blocks the pass added: back to the arena (its work never ran) */
	for (size_t i = 0; i < c->nspare; i++) {
		size_t j = 0;
		while (j < c->nspare_mark && c->spare_mark[j].p != c->spare[i].p)
			j++;
		if (j == c->nspare_mark)
			tf_arena_dealloc(c->arena, c->spare[i].p);
	}
	/* the marked ones still spare, in their marked order */
	size_t n = 0, bytes = 0;
	for (size_t j = 0; j < c->nspare_mark; j++) {
		size_t i = 0;
		while (i < c->nspare && c->spare[i].p != c->spare_mark[j].p)
			i++;
		if (i < c->nspare) {
			c->spare_mark[n++] = c->spare_mark[j];
			bytes += c->spare_mark[j].n;
		}
	}
	memcpy(c->spare, c->spare_mark, n * sizeof *c->spare);
	c->nspare = n;
	c->spare_bytes = bytes;
	c->nspare_mark = 0;
}

/* Every spare block back to the arena: only when nothing queued can use
 * them (the stream is idle). */
static void spare_drop(struct cuda_be *c)
{
	while (c->nspare)
		tf_arena_dealloc(c->arena, c->spare[--c->nspare].p);
	c->spare_bytes = 0;
}

/* In a dry or captured pass nothing is reaped (no event calls while
 * capturing; the pass's own late blocks must stay until its graph has run
 * or the pass is undone) and nothing waits. */
tf_status cuda_mem_alloc(struct cuda_be *c, size_t n, tf_cu_ptr *p)
{
	bool eager = c->g.mode == CUDA_EAGER;
	if (eager)
		late_reap(c, false);
	tf_status st = TF_OK;
	if (!(n > CUDA_SMALL_MAX && (*p = spare_take(c, n))))
		st = tf_arena_alloc(c->arena, n, p);
	if (st == TF_ERR_NOMEM && (c->nlate || c->nspare) && eager) {
		if ((st = wait_idle(c)))
			return st;
		spare_drop(c);
		st = tf_arena_alloc(c->arena, n, p);
	}
	if (st)
		return st;
	if ((st = tf_hmap_put(&c->blocks, *p, n))) {
		tf_arena_dealloc(c->arena, *p);
		return st;
	}
	return TF_OK;
}

void cuda_mem_free(struct cuda_be *c, tf_cu_ptr p)
{
	uintptr_t n;
	if (!p || !tf_hmap_del(&c->blocks, p, &n))
		return; /* not ours: nothing to free */
	if (n <= CUDA_SMALL_MAX) {
		tf_arena_dealloc(c->arena, p);
		return;
	}
	if (c->spare_bytes + n <= CUDA_SPARE_MAX && spare_room(c)) {
		c->spare[c->nspare++] = (struct cuda_spare){p, (size_t)n};
		c->spare_bytes += n;
		return;
	}
	bool eager = c->g.mode == CUDA_EAGER;
	if (c->nlate == c->late_cap) {
		size_t cap = c->late_cap ? 2 * c->late_cap : 16;
		if (tf_realloc_array(&c->late, cap, sizeof *c->late)) {
			/* no room to defer it: wait for the work that may use it
			 * (in a dry or captured pass: keep it, a leak, not a fault) */
			if (eager && !TF_CU(tf_cu->StreamSynchronize(c->stream)))
				tf_arena_dealloc(c->arena, p);
			return;
		}
		c->late_cap = cap;
	}
	tf_cu_event ev = NULL;
	if (!eager) {
		/* a dry or captured pass: freed when its graph has run (the next
		 * wait for the stream) or when the pass is undone */
		c->late[c->nlate++] = (struct cuda_late){p, NULL};
		return;
	}
	if (tf_cu->EventCreate(&ev, TF_CU_EVENT_DISABLE_TIMING) != TF_CU_SUCCESS)
		ev = NULL;
	else if (tf_cu->EventRecord(ev, c->stream) != TF_CU_SUCCESS) {
		tf_cu->EventDestroy(ev);
		ev = NULL;
	}
	c->late[c->nlate++] = (struct cuda_late){p, ev};
	late_reap(c, false);
}

/* ---- staging ---- */

/* Room for up to want bytes in the current chunk: *dst and *m (> 0). A
 * chunk with less room than min(want, chunk) is left for the next, whose
 * queued copies are waited for. */
static tf_status stage_room(struct cuda_be *c, size_t want, unsigned char **dst, size_t *m)
{
	size_t need = want < CUDA_STAGE_CHUNK ? want : CUDA_STAGE_CHUNK;
	if (CUDA_STAGE_CHUNK - c->fill < need) {
		tf_status st = TF_CU(tf_cu->EventRecord(c->ev[c->cur], c->stream));
		if (st)
			return st;
		c->pending[c->cur] = true;
		c->cur = (c->cur + 1) % CUDA_STAGE_CHUNKS;
		c->fill = 0;
		if (c->pending[c->cur]) {
			if ((st = TF_CU(tf_cu->EventSynchronize(c->ev[c->cur]))))
				return st;
			c->pending[c->cur] = false;
		}
	}
	*dst = c->stage + (size_t)c->cur * CUDA_STAGE_CHUNK + c->fill;
	*m = CUDA_STAGE_CHUNK - c->fill < want ? CUDA_STAGE_CHUNK - c->fill : want;
	return TF_OK;
}

tf_status cuda_put(struct cuda_be *c, tf_cu_ptr dst, const void *src, size_t n)
{
	if (c->g.mode != CUDA_EAGER)
		return cuda_graph_put(c, dst, src, n);
	const unsigned char *s = src;
	while (n) {
		unsigned char *p;
		size_t m;
		tf_status st = stage_room(c, n, &p, &m);
		if (st)
			return st;
		memcpy(p, s, m);
		if (!tf_cu_rec_copy(c->stream, 'H', dst, (uint64_t)(uintptr_t)p, m) &&
		    (st = TF_CU(tf_cu->MemcpyHtoDAsync(dst, p, m, c->stream))))
			return st;
		c->fill += m;
		dst += m;
		s += m;
		n -= m;
	}
	return TF_OK;
}

/* ---- memory ops ---- */

/* Whether [p, p + n) lies in one of host_alloc's pinned buffers. */
static bool pinned(const struct cuda_be *c, const void *p, size_t n)
{
	const unsigned char *b = p;
	for (int i = 0; i < c->nhost; i++)
		if (b >= c->host[i].p && n <= c->host[i].n && (size_t)(b - c->host[i].p) <= c->host[i].n - n)
			return true;
	return false;
}

static tf_status cuda_host_alloc(struct tf_be *be, size_t n, void **p)
{
	struct cuda_be *c = cuda_of(be);
	*p = NULL;
	if (c->nhost == CUDA_HOST_MAX)
		return tf_err(TF_ERR_NOMEM, "cuda: more than %d pinned host buffers", CUDA_HOST_MAX);
	void *h = NULL;
	tf_status st = TF_CU(tf_cu->MemAllocHost(&h, n ? n : 1));
	if (st)
		return tf_err_wrap(st, "cuda: %zu bytes of pinned host memory: ", n);
	c->host[c->nhost].p = h, c->host[c->nhost].n = n;
	c->nhost++;
	*p = h;
	return TF_OK;
}

static void cuda_host_free(struct tf_be *be, void *p)
{
	struct cuda_be *c = cuda_of(be);
	for (int i = 0; p && i < c->nhost; i++)
		if (c->host[i].p == p) {
			/* queued copies may still read it */
			if (c->g.mode == CUDA_EAGER)
				(void)TF_CU(tf_cu->StreamSynchronize(c->stream));
			tf_cu->MemFreeHost(p);
			c->host[i] = c->host[--c->nhost];
			return;
		}
}

static tf_status cuda_alloc(struct tf_be *be, struct tf_tensor *t)
{
	struct cuda_be *c = cuda_of(be);
	size_t n = tf_tensor_bytes(t);
	tf_cu_ptr p;
	tf_status st = cuda_mem_alloc(c, n, &p);
	if (st)
		return tf_err_wrap(st, "cuda: cannot allocate %zu bytes: ", n);
	if (n && !tf_cu_rec_memset(c->stream, p, 0, 1, n) &&
	    (st = TF_CU(tf_cu->MemsetD8Async(p, 0, n, c->stream)))) {
		cuda_mem_free(c, p);
		return st;
	}
	t->data = (void *)(uintptr_t)p;
	return TF_OK;
}

static void cuda_release(struct tf_be *be, struct tf_tensor *t)
{
	cuda_mem_free(cuda_of(be), cuda_ptr(t));
	t->data = NULL;
}

static tf_status cuda_upload(struct tf_be *be, struct tf_tensor *t, const void *src)
{
	size_t n = tf_tensor_bytes(t);
	if (n && (!t->data || !src))
		return tf_err(TF_ERR_ARG, "upload: no tensor or no source");
	struct cuda_be *c = cuda_of(be);
	if (n && c->g.mode == CUDA_EAGER && pinned(c, src, n)) {
		if (tf_cu_rec_copy(c->stream, 'H', cuda_ptr(t), (uint64_t)(uintptr_t)src, n))
			return TF_OK;
		return TF_CU(tf_cu->MemcpyHtoDAsync(cuda_ptr(t), src, n, c->stream));
	}
	return cuda_put(c, cuda_ptr(t), src, n);
}

static tf_status cuda_download(struct tf_be *be, const struct tf_tensor *t, void *dst)
{
	struct cuda_be *c = cuda_of(be);
	size_t n = tf_tensor_bytes(t);
	if (n && (!t->data || !dst))
		return tf_err(TF_ERR_ARG, "download: no tensor or no destination");
	tf_status st = wait_idle(c);
	tf_cu_ptr src = cuda_ptr(t);
	if (!st && n && pinned(c, dst, n)) {
		if (!tf_cu_rec_copy(c->stream, 'D', (uint64_t)(uintptr_t)dst, src, n) &&
		    !(st = TF_CU(tf_cu->MemcpyDtoHAsync(dst, src, n, c->stream))))
			st = TF_CU(tf_cu->StreamSynchronize(c->stream));
		return st;
	}
	unsigned char *d = dst;
	const size_t room = (size_t)CUDA_STAGE_CHUNKS * CUDA_STAGE_CHUNK;
	while (!st && n) {
		size_t m = n < room ? n : room;
		if (!tf_cu_rec_copy(c->stream, 'D', (uint64_t)(uintptr_t)c->stage, src, m) &&
		    !(st = TF_CU(tf_cu->MemcpyDtoHAsync(c->stage, src, m, c->stream))) &&
		    !(st = TF_CU(tf_cu->StreamSynchronize(c->stream))))
			memcpy(d, c->stage, m);
		src += m;
		d += m;
		n -= m;
	}
	return st;
}

static tf_status cuda_sync(struct tf_be *be)
{
	return wait_idle(cuda_of(be));
}

/* ---- what the op files share ---- */

tf_cu_stream cuda_stream(struct tf_be *be)
{
	return cuda_of(be)->stream;
}

int cuda_sms(struct tf_be *be)
{
	return cuda_of(be)->dev.sms;
}

int cuda_recording(struct tf_be *be)
{
	return cuda_of(be)->g.mode != CUDA_EAGER;
}

/* Kernel handles are process-wide (one module); the lock keeps a handle
 * and its generation together. */
static pthread_mutex_t fn_mu = PTHREAD_MUTEX_INITIALIZER;

tf_status cuda_launch(struct tf_be *be, struct cuda_fn *fn, unsigned gx, unsigned gy,
		      unsigned block, unsigned shmem, void **params)
{
	if (!gx || !gy)
		return TF_OK; /* nothing to do: the driver would refuse the grid */
	unsigned gen = tf_cu_module_generation();
	tf_status st = TF_OK;
	pthread_mutex_lock(&fn_mu);
	if (!fn->f || fn->generation != gen) {
		tf_cu_func f;
		if (!(st = tf_cu_kernel(fn->name, &f))) {
			fn->f = f;
			fn->generation = gen;
		}
	}
	tf_cu_func f = fn->f;
	pthread_mutex_unlock(&fn_mu);
	if (st)
		return st;
	tf_cu_stream s = cuda_stream(be);
	if (tf_cu_rec_kernel(s, f, gx, gy, 1, block, 1, 1, shmem, params, NULL, 0))
		return TF_OK; /* recorded by a dry pass (cuda/rec.h) */
	st = TF_CU(tf_cu->LaunchKernel(f, gx, gy, 1, block, 1, 1, shmem, s, params, NULL));
	if (st)
		return tf_err_wrap(st, "kernel %s (grid %ux%u, block %u, %u B shared): ", fn->name, gx, gy,
				   block, shmem);
	return TF_OK;
}

tf_status cuda_scratch(struct tf_be *be, size_t n, tf_cu_ptr *p)
{
	tf_status st = cuda_mem_alloc(cuda_of(be), n, p);
	if (st)
		return tf_err_wrap(st, "cuda: %zu bytes of scratch: ", n);
	return TF_OK;
}

void cuda_scratch_release(struct tf_be *be, tf_cu_ptr p)
{
	cuda_mem_free(cuda_of(be), p);
}

tf_cu_ptr cuda_mix_counters(struct tf_be *be)
{
	return cuda_of(be)->mix_count;
}

/* hc_mix's counters, zeroed (on the legacy stream, so waited for). */
static tf_status mix_counters_open(struct cuda_be *c)
{
	size_t n = CUDA_MIX_COUNTERS * sizeof(uint32_t);
	tf_status st = TF_CU(tf_cu->MemAlloc(&c->mix_count, n));
	if (!st && !(st = TF_CU(tf_cu->MemsetD8(c->mix_count, 0, n))))
		st = TF_CU(tf_cu->CtxSynchronize());
	return st;
}

tf_status cuda_exl3_ws(struct cuda_be *c, uint32_t n_max, const struct tf_cu_exl3_ws **ws)
{
	*ws = &c->ws;
	if (c->ws.n_max >= n_max)
		return TF_OK;
	if (c->g.mode != CUDA_EAGER) /* grows in the eager run that follows */
		return tf_err(TF_ERR_UNSUPPORTED, "cuda: the EXL3 workspace grows inside a graphed call");
	/* Launches queued on the old one must end first; the new one is
	 * zeroed on the legacy stream, which ours does not wait for. */
	uint32_t want = n_max > 2 * c->ws.n_max ? n_max : 2 * c->ws.n_max;
	want = (want + 127) / 128 * 128;
	tf_status st = wait_idle(c);
	if (st)
		return st;
	tf_cu_exl3_ws_release(&c->ws);
	if ((st = tf_cu_exl3_ws_init(&c->ws, want)) || (st = TF_CU(tf_cu->CtxSynchronize())))
		return tf_err_wrap(st, "cuda: the EXL3 workspace for %u columns: ", want);
	return TF_OK;
}

/* ---- the backend ---- */

static void cuda_free(struct tf_be *be);

static const struct tf_ops cuda_ops = {
	.name = "cuda",
	.device = 1,
	.alloc = cuda_alloc,
	.release = cuda_release,
	.upload = cuda_upload,
	.download = cuda_download,
	.host_alloc = cuda_host_alloc,
	.host_free = cuda_host_free,
	.sync = cuda_sync,
	.convert = cuda_convert,
	.fill_random = cuda_fill_random,
	.linear = cuda_linear,
	.linear_experts = cuda_linear_experts,
	.exl3_matmul = cuda_exl3_matmul,
	.exl3_matmul_experts = cuda_exl3_matmul_experts,
	.embed = cuda_embed,
	.rmsnorm = cuda_rmsnorm,
	.rope = cuda_rope,
	.attention = cuda_attention,
	.compressor = cuda_compressor,
	.index_score = cuda_index_score,
	.index_topk = cuda_index_topk,
	.candidate_blocks = cuda_candidate_blocks,
	.moe_route = cuda_moe_route,
	.swiglu = cuda_swiglu,
	.moe_combine = cuda_moe_combine,
	.hc_mix = cuda_hc_mix,
	.hc_collapse = cuda_hc_collapse,
	.hc_post = cuda_hc_post,
	.engram_gate = cuda_engram_gate,
	.rows_copy = cuda_rows_copy,
	.cache_write = cuda_cache_write,
	.cache_read = cuda_cache_read,
	.page_rows = cuda_page_rows,
	.attn_keys = cuda_attn_keys,
	.moe_group = cuda_moe_group,
	.stream_mean = cuda_stream_mean,
	.sample = cuda_sample,
	.graph = cuda_graph,
	.free = cuda_free,
};

const struct tf_ops *tf_cuda_ops(void)
{
	return &cuda_ops;
}

/* The arena over VMM where the device has it (unless $TF_CUDA_ARENA is
 * "plain"), else over cuMemAlloc chunks. */
static tf_status arena_open(struct cuda_be *c)
{
	struct tf_arena_backend ab;
	const char *kind = getenv("TF_CUDA_ARENA");
	tf_status st = TF_ERR_UNSUPPORTED;
	if (c->dev.vmm && !(kind && !strcmp(kind, "plain"))) {
		st = tf_arena_backend_vmm(&c->dev, 0, &ab);
		if (st)
			tf_log(TF_LOG_DEBUG, "cuda: no VMM arena (%s): plain chunks", tf_errmsg(st));
	}
	if (st && (st = tf_arena_backend_plain(&c->dev, &ab)))
		return st;
	/* chunks of 16 small blocks at least: a chunk's unused tail stays small */
	struct tf_arena_opts o = {.small_max = CUDA_SMALL_MAX, .chunk_min = 16 * CUDA_SMALL_MAX};
	if ((st = tf_arena_new(&ab, &o, &c->arena)) && ab.close)
		ab.close(ab.ctx);
	return st;
}

/* cuBLAS unless $TF_CUDA_BLAS is "0"; without it the dense linear and the
 * EXL3 prefill take tf's own kernels. */
static void blas_open(struct cuda_be *c)
{
	const char *v = getenv("TF_CUDA_BLAS");
	if (v && !strcmp(v, "0"))
		return;
	tf_status st = tf_cu_blas_new(&c->blas);
	if (st)
		tf_log(TF_LOG_INFO, "cuda: no cuBLAS (%s): tf's own kernels instead", tf_errmsg(st));
}

/* Pinned staging and its events. */
static tf_status stage_open(struct cuda_be *c)
{
	void *p = NULL;
	tf_status st = TF_CU(tf_cu->MemAllocHost(&p, (size_t)CUDA_STAGE_CHUNKS * CUDA_STAGE_CHUNK));
	if (st)
		return st;
	c->stage = p;
	for (int i = 0; i < CUDA_STAGE_CHUNKS && !st; i++)
		st = TF_CU(tf_cu->EventCreate(&c->ev[i], TF_CU_EVENT_DISABLE_TIMING));
	return st;
}

/* Everything of c that was made, in reverse (with its context current). */
static void impl_free(struct cuda_be *c, bool stream_made)
{
	if (c->dev.ctx) {
		tf_cu_device_use(&c->dev);
		if (stream_made && c->arena)
			wait_idle(c);
		cuda_graphs_close(c); /* its graphs and input region; the recorder */
		while (c->nhost) /* pinned buffers a caller did not free */
			tf_cu->MemFreeHost(c->host[--c->nhost].p);
		cuda_exl3_release(c);
		late_reap(c, true); /* the weights' frees (nothing uses them now) */
		spare_drop(c);
		tf_hmap_release(&c->blocks);
		free(c->spare);
		free(c->late);
		tf_cu_exl3_ws_release(&c->ws);
		if (c->mix_count)
			tf_cu->MemFree(c->mix_count);
		tf_cu_blas_free(c->blas);
		for (int i = 0; i < CUDA_STAGE_CHUNKS; i++)
			if (c->ev[i])
				tf_cu->EventDestroy(c->ev[i]);
		if (c->stage)
			tf_cu->MemFreeHost(c->stage);
		if (stream_made)
			tf_cu->StreamDestroy(c->stream);
		tf_arena_free(c->arena);
		tf_cu_device_close(&c->dev);
	}
	free(c);
}

static void cuda_free(struct tf_be *be)
{
	impl_free(be->impl, true);
	free(be);
}

tf_status tf_cuda_be_set_invariant(struct tf_be *be, int on)
{
	if (!be || !be->ops->device)
		return tf_err(TF_ERR_UNSUPPORTED, "batch-invariant: the %s backend is not CUDA",
			      be ? be->ops->name : "(none)");
	cuda_of(be)->invariant = on != 0;
	return TF_OK;
}

bool tf_cuda_be_invariant(struct tf_be *be)
{
	return be && be->ops->device && cuda_of(be)->invariant;
}

tf_status tf_cuda_be_memory(struct tf_be *be, uint64_t *free_bytes, uint64_t *total_bytes)
{
	*free_bytes = *total_bytes = 0;
	if (!be || !be->ops->device)
		return tf_err(TF_ERR_UNSUPPORTED, "memory: not a CUDA backend");
	size_t f = 0, t = 0;
	tf_status st = TF_CU(tf_cu->MemGetInfo(&f, &t));
	*free_bytes = f;
	*total_bytes = t;
	return st;
}

tf_status tf_cuda_be_new(int device, struct tf_be **out)
{
	*out = NULL;
	if (!TF_CUDA || !tf_cu_kernels_built())
		return tf_err(TF_ERR_UNAVAILABLE,
			      "cuda backend: this build of tf has no CUDA kernels (built with CUDA=0)");
	struct tf_be *be = calloc(1, sizeof *be);
	struct cuda_be *c = calloc(1, sizeof *c);
	bool stream_made = false;
	tf_status st = TF_OK;
	if (!be || !c) {
		st = tf_err(TF_ERR_NOMEM, "cuda backend: out of memory");
		goto out;
	}
	tf_hmap_init(&c->blocks, TF_HMAP_U64);
	tf_hmap_init(&c->experts, TF_HMAP_U64);
	if ((st = tf_cu_device_open(device, &c->dev)) || (st = tf_cu_module_load()))
		goto out;
	if ((st = TF_CU(tf_cu->StreamCreate(&c->stream, TF_CU_STREAM_NON_BLOCKING))))
		goto out;
	stream_made = true;
	if ((st = arena_open(c)) || (st = stage_open(c)) || (st = cuda_graphs_open(c)) ||
	    (st = mix_counters_open(c)))
		goto out;
	blas_open(c);
	be->ops = &cuda_ops;
	be->impl = c;
	*out = be;
	tf_log(TF_LOG_DEBUG, "cuda backend: device %d (%s), %d SMs, %s", device, c->dev.name,
	       c->dev.sms, c->blas ? tf_cu_blas_path(c->blas) : "no cuBLAS");
out:
	if (st) {
		st = tf_err_wrap(st, "cuda backend on device %d: ", device);
		if (c)
			impl_free(c, stream_made);
		free(be);
	}
	return st;
}

tf_status tf_cuda_be_stream(struct tf_be *be, void **stream)
{
	*stream = NULL;
	if (!be || be->ops != &cuda_ops)
		return tf_err(TF_ERR_UNSUPPORTED, "stream: the %s backend is not CUDA",
			      be ? be->ops->name : "(none)");
	*stream = cuda_of(be)->stream;
	return TF_OK;
}

tf_status tf_cuda_be_use(struct tf_be *be)
{
	if (!be || be->ops != &cuda_ops)
		return TF_OK; /* the CPU backend: nothing to make current */
	return tf_cu_device_use(&cuda_of(be)->dev);
}
