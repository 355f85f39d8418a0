/* cuda_graph.c: graphed calls on the CUDA backend (ops->graph): a call's
 * work is recorded dry, then replayed from a CUDA graph that holds exactly
 * that work, or captured once into one and launched, or run eagerly.
 *
 * A call (struct tf_be_work) runs as:
 * 1. A wait for the stream (instant after the previous call's download):
 *    no graph still reads the input region, no late free is pending.
 * 2. The dry pass: w->run with the backend in CUDA_DRY. Ops check their
 *    arguments and allocate as they would, but the stream's recorder
 *    (cuda/rec.h) folds every kernel (function, grid, block, shared memory,
 *    each parameter's bytes), cuBLAS call, copy and memset into a
 *    fingerprint instead of queuing it, and uploads copy their bytes into
 *    the next slot of a pinned input region (in order, 16-byte aligned),
 *    recorded as a copy from that slot. So the fingerprint covers every
 *    device address a graph would bake in (tensors, scratch: the arena
 *    hands the same addresses to the same requests from the same state,
 *    and the fingerprint is what says whether it did) and every per-step
 *    scalar passed to a kernel (positions, lengths, key counts).
 * 3. The key "<w->key>/<fingerprint>" in the graph cache (cuda/graph.h,
 *    whose own fingerprint is the input region's generation):
 *    - hit: launch the graph. It copies its inputs from the slots the dry
 *      pass just filled and writes the addresses the dry pass allocated,
 *      which stay live for the caller's download;
 *    - miss: undo the dry pass, run w again inside a stream capture
 *      (CUDA_CAPTURE: the same slots, the copies from them captured) and
 *      compare its fingerprint with the dry pass's: equal, the graph is
 *      instantiated, stored and launched; different, the capture is
 *      declined (TF_ERR_MISMATCH) and graph.c runs w eagerly this once.
 * 4. A dry pass that fails (an op that must wait for the device or change
 *    the backend's lasting state: the EXL3 workspace or an experts' image
 *    being made, download, sync, sample; the input region too small; a
 *    kernel whose parameter sizes the driver cannot give) is undone and w
 *    runs eagerly; a region too small grows for the next call.
 * After GRAPH_STREAK graphed calls in a row without a hit, the next
 * GRAPH_SKIP run eagerly without a dry pass: work whose fingerprint changes
 * every call gains nothing, and a capture costs more than an eager run.
 *
 * Capture mode is relaxed (cuStreamBeginCapture_v2 mode 2): the capturing
 * thread stays allowed the calls that thread-local and global modes forbid
 * it, because the arena may map memory (cuMemCreate and cuMemMap, or
 * cuMemAlloc) for a block of the pass while capturing; that touches no
 * stream. Other threads are unaffected in every mode but global. Nothing
 * in a pass waits: the ops refuse to (above), no event is recorded, queried
 * or waited for, and blocks freed in a pass that are chunks of their own
 * (larger than CUDA_SMALL_MAX) wait in the late list with no event: dropped
 * when the pass is undone (nothing queued uses them), else at the next
 * wait for the stream, after the graph ran. Small blocks go back to the
 * arena at once, as in eager work: what reuses them is ordered after the
 * work that used them, in the graph as on the stream.
 *
 * $TF_CUDA_GRAPHS=0 (read at tf_cuda_be_new) or tf_cuda_be_set_graphs(be, 0)
 * runs every call eagerly; so does a driver without cuFuncGetParamInfo
 * (before CUDA 12.4).
 *
 * Ranks in step (tf_cuda_be_set_agree: tensor-parallel ranks whose calls
 * hold collectives on the stream, NCCL or the mailbox). A collective in
 * the work is recorded by its dry pass (cuda/rec.h's foreign items) and
 * queued by the capture, so a graph holds it; a replay on one rank must
 * meet a replay, a capture or an eager run of the same call on every
 * other, and every rank's cache must stay in step. Keys cannot say so
 * alone: they name rank-local addresses, so one rank may hit where
 * another misses, and a dry pass may fail on one rank only. So every
 * graphed call is voted (the hook: an AND over ranks, on the host):
 *   1. each rank runs its dry pass unless graphs are off for it (a rank
 *      with graphs off votes no throughout);
 *   2. vote "I hit": all yes, every rank launches its graph (one vote a
 *      replayed step);
 *   3. else vote "my dry pass ran": any no, every rank undoes its pass
 *      and runs eagerly;
 *   4. else every rank that hit forgets that graph (tf_graph_forget) and
 *      all take the graph cache's miss path together, whose votes (room,
 *      captured, declined) are the same hook's.
 * The streak and skip counts then move alike on every rank (every outcome
 * is voted), so the calls they run eagerly without a vote are the same
 * calls everywhere; so are the input region's growth and the cache's
 * failure. A vote that fails (a peer's comm is gone) fails the call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "compute/cuda_be.h"

#define GRAPH_STREAK 4
#define GRAPH_SKIP 32
#define IN_FIRST ((size_t)4 << 20)
#define IN_MAX ((size_t)1 << 30)
#define IN_ALIGN 16
/* Free device memory below which no graph is captured (graph.c's room). */
#define GRAPH_FLOOR ((size_t)256 << 20)

/* The graphed call in progress. */
struct cuda_pass {
	struct cuda_be *c;
	const struct tf_be_work *w;
	uint64_t fp;                /* the dry pass's fingerprint */
	struct tf_cu_counts before; /* the recorder's counts before the call */
	int passes;                 /* runs of w so far, the dry one included */
	bool matched;               /* the capture's fingerprint was the dry pass's */
};

/* ---- the input region ---- */

/* A region of at least want bytes (the stream is idle: no graph reads the
 * old one, and the graphs that point into it are dropped by the cache at
 * its next call, the generation having changed). */
static tf_status region_grow(struct cuda_be *c, size_t want)
{
	size_t cap = c->g.in_cap ? 2 * c->g.in_cap : IN_FIRST;
	while (cap < want && cap < IN_MAX)
		cap *= 2;
	if (cap < want || cap > IN_MAX)
		return tf_err(TF_ERR_NOMEM, "cuda graphs: %zu bytes of inputs, past the region's "
			      "largest (%zu)", want, IN_MAX);
	void *p = NULL;
	tf_status st = TF_CU(tf_cu->MemAllocHost(&p, cap));
	if (st)
		return tf_err_wrap(st, "cuda graphs: an input region of %zu bytes: ", cap);
	if (c->g.in)
		tf_cu->MemFreeHost(c->g.in);
	c->g.in = p;
	c->g.in_cap = cap;
	c->g.in_gen++;
	return TF_OK;
}

tf_status cuda_graph_put(struct cuda_be *c, tf_cu_ptr dst, const void *src, size_t n)
{
	if (!n)
		return TF_OK;
	size_t at = (c->g.in_fill + IN_ALIGN - 1) / IN_ALIGN * IN_ALIGN;
	if (at > c->g.in_cap || n > c->g.in_cap - at) {
		c->g.in_want = at + n;
		return tf_err(TF_ERR_NOMEM, "cuda graphs: the input region of %zu bytes is full",
			      c->g.in_cap);
	}
	unsigned char *slot = c->g.in + at;
	memcpy(slot, src, n);
	c->g.in_fill = at + n;
	if (tf_cu_rec_copy(c->stream, 'H', dst, (uint64_t)(uintptr_t)slot, n))
		return TF_OK; /* dry: the graph's copy will read the slot */
	return TF_CU(tf_cu->MemcpyHtoDAsync(dst, slot, n, c->stream));
}

/* ---- the graph cache's backend ---- */

/* Capture body (graph_body) on stream, relaxed (above). A body that fails,
 * or whose work is not its dry pass's, declines. */
static tf_status cap(void *ctx, void *stream, tf_graph_body_fn body, void *arg, void **exec)
{
	struct cuda_be *c = ctx;
	tf_cu_stream s = stream;
	tf_cu_graph gr = NULL;
	tf_cu_graph_exec e = NULL;
	*exec = NULL;
	tf_status st = TF_CU(tf_cu->StreamBeginCapture(s, TF_CU_STREAM_CAPTURE_MODE_RELAXED));
	if (st)
		return st;
	c->g.capturing = true;
	tf_status bst = body(arg, stream);
	c->g.capturing = false;
	/* End the capture whatever the body did, or the stream stays in it. */
	st = TF_CU(tf_cu->StreamEndCapture(s, &gr));
	if (bst) {
		char why[160];
		snprintf(why, sizeof why, "%s", tf_errmsg(bst));
		st = tf_err(TF_ERR_MISMATCH, "cuda graphs: the call failed while captured (%s)", why);
		goto out;
	}
	if (st)
		goto out;
	if (!c->g.cur || !c->g.cur->matched) {
		st = tf_err(TF_ERR_MISMATCH, "cuda graphs: the captured work is not its dry pass's");
		goto out;
	}
	if ((st = TF_CU(tf_cu->GraphInstantiate(&e, gr, 0))))
		goto out;
	if ((st = TF_CU(tf_cu->GraphUpload(e, s)))) {
		tf_cu->GraphExecDestroy(e);
		goto out;
	}
	*exec = e;
out:
	if (gr)
		tf_cu->GraphDestroy(gr);
	return st;
}

static tf_status launch(void *ctx, void *exec, void *stream)
{
	struct cuda_be *c = ctx;
	c->g.st.graph_launches++;
	return TF_CU(tf_cu->GraphLaunch(exec, stream));
}

static void destroy(void *ctx, void *exec)
{
	(void)ctx;
	if (exec)
		tf_cu->GraphExecDestroy(exec);
}

static bool room(void *ctx)
{
	(void)ctx;
	size_t fr = 0, total = 0;
	return tf_cu->MemGetInfo(&fr, &total) == TF_CU_SUCCESS && fr >= GRAPH_FLOOR;
}

/* The cache's body: run w again, after undoing the pass before (whose work
 * never ran: a dry pass, or a declined capture), in capture mode while
 * captured, else eagerly. The counts start over from the call's start. */
static tf_status graph_body(void *arg, void *stream)
{
	struct cuda_pass *p = arg;
	struct cuda_be *c = p->c;
	(void)stream;
	if (p->passes++) {
		p->w->undo(p->w->arg);
		cuda_late_drop(c);
		cuda_spare_reset(c);
	}
	c->g.rec.n = p->before;
	if (!c->g.capturing)
		return p->w->run(p->w->arg);
	c->g.mode = CUDA_CAPTURE;
	c->g.in_fill = 0;
	tf_cu_rec_begin(&c->g.rec, false);
	tf_status st = p->w->run(p->w->arg);
	p->matched = !st && !c->g.rec.unknown && c->g.rec.fp == p->fp;
	tf_cu_rec_end(&c->g.rec);
	c->g.mode = CUDA_EAGER;
	return st;
}

/* ---- graphed calls ---- */

static void missed(struct cuda_graphs *g)
{
	if (++g->streak >= GRAPH_STREAK) {
		g->streak = 0;
		g->skip = GRAPH_SKIP;
	}
}

static tf_status eager(struct cuda_graphs *g, const struct tf_be_work *w)
{
	g->st.graph_eager++;
	return w->run(w->arg);
}

/* The dry pass of w: TF_OK with its fingerprint, or why it cannot be
 * graphed (undone then). */
static tf_status dry(struct cuda_be *c, const struct tf_be_work *w, struct cuda_pass *p)
{
	struct cuda_graphs *g = &c->g;
	g->mode = CUDA_DRY;
	g->in_fill = 0;
	g->in_want = 0;
	cuda_spare_mark(c);
	tf_cu_rec_begin(&g->rec, true);
	tf_status st = w->run(w->arg);
	bool unknown = g->rec.unknown;
	p->fp = g->rec.fp;
	tf_cu_rec_end(&g->rec);
	g->mode = CUDA_EAGER;
	if (!st && unknown)
		st = tf_err(TF_ERR_UNSUPPORTED, "cuda graphs: a kernel's parameter sizes are unknown");
	if (st) {
		w->undo(w->arg);
		cuda_late_drop(c);
		cuda_spare_reset(c);
		g->rec.n = p->before;
	}
	return st;
}

/* Undo a dry pass that succeeded (its work never ran). */
static void undo_dry(struct cuda_be *c, const struct tf_be_work *w, const struct cuda_pass *p)
{
	w->undo(w->arg);
	cuda_late_drop(c);
	cuda_spare_reset(c);
	c->g.rec.n = p->before;
}

/* The cache's run of the call whose dry pass p holds, and the counters. */
static tf_status cached_run(struct cuda_be *c, struct cuda_pass *p, const char *key)
{
	struct cuda_graphs *g = &c->g;
	struct tf_graph_stats b, a;
	tf_graph_stats(g->cache, &b);
	g->cur = p;
	tf_status st = tf_graph_run(g->cache, key, g->in_gen, c->stream, graph_body, p);
	g->cur = NULL;
	tf_graph_stats(g->cache, &a);
	g->st.graph_declined += a.declined - b.declined;
	if (a.hits > b.hits) {
		g->st.graph_hits++;
		g->streak = 0;
	} else {
		if (a.captures > b.captures)
			g->st.graph_captures++;
		else
			g->st.graph_eager++;
		missed(g);
	}
	return st;
}

/* The call's dry pass, once the stream is idle (the host refills the
 * input region): TF_OK with its cache key in key [192], else why it runs
 * eagerly (graphs go off when the region cannot be made; a region too
 * small for the pass is grown for the next call). */
static tf_status dry_key(struct cuda_be *c, const struct tf_be_work *w, struct cuda_pass *p,
			 char *key)
{
	struct cuda_graphs *g = &c->g;
	tf_status st, grown;
	if (!g->in && (st = region_grow(c, IN_FIRST))) {
		tf_log(TF_LOG_INFO, "%s: running without graphs", tf_errmsg(st));
		g->off = true;
		return st;
	}
	if ((st = dry(c, w, p))) {
		tf_log(TF_LOG_DEBUG, "cuda graphs: '%s' runs eagerly: %s", w->key, tf_errmsg(st));
		if (g->in_want > g->in_cap && (grown = region_grow(c, g->in_want)))
			tf_log(TF_LOG_DEBUG, "%s", tf_errmsg(grown));
		return st;
	}
	snprintf(key, 192, "%s/%016llx", w->key, (unsigned long long)p->fp);
	return TF_OK;
}

/* A graphed call of ranks in step (the votes above). */
static tf_status voted(struct cuda_be *c, const struct tf_be_work *w)
{
	struct cuda_graphs *g = &c->g;
	struct tf_graph_stats gs;
	tf_graph_stats(g->cache, &gs);
	if (gs.failed) /* voted: the same on every rank */
		return eager(g, w);
	if (g->skip > 0) {
		g->skip--;
		return eager(g, w);
	}
	struct cuda_pass p = {.c = c, .w = w, .before = g->rec.n, .passes = 1};
	char key[192];
	tf_status st = cuda_wait_idle(c);
	if (st)
		return st;
	bool ready = !g->off && !dry_key(c, w, &p, key);
	bool hit = ready && tf_graph_has(g->cache, key, g->in_gen), all_hit, all_ready;
	if ((st = g->agree(g->agree_ctx, hit, &all_hit)))
		goto fail;
	if (!all_hit) {
		if ((st = g->agree(g->agree_ctx, ready, &all_ready)))
			goto fail;
		if (!all_ready) {
			if (ready)
				undo_dry(c, w, &p);
			missed(g);
			return eager(g, w);
		}
		if (hit) /* a peer missed: capture with it */
			tf_graph_forget(g->cache, key);
	}
	return cached_run(c, &p, key);
fail:
	if (ready)
		undo_dry(c, w, &p);
	return tf_err_wrap(st, "cuda graphs: the ranks' vote: ");
}

tf_status cuda_graph(struct tf_be *be, const struct tf_be_work *w)
{
	struct cuda_be *c = cuda_of(be);
	struct cuda_graphs *g = &c->g;
	if (g->mode != CUDA_EAGER)
		return tf_err(TF_ERR_INTERNAL, "cuda graphs: a graphed call inside another");
	if (!g->cache || !w->key)
		return eager(g, w);
	if (g->agree)
		return voted(c, w);
	if (g->off)
		return eager(g, w);
	if (g->skip > 0) {
		g->skip--;
		return eager(g, w);
	}
	tf_status st = cuda_wait_idle(c);
	if (st)
		return st;
	struct cuda_pass p = {.c = c, .w = w, .before = g->rec.n, .passes = 1};
	char key[192];
	if (dry_key(c, w, &p, key)) {
		if (!g->off) /* (no region: graphs went off instead) */
			missed(g);
		return eager(g, w);
	}
	return cached_run(c, &p, key);
}

/* ---- set-up and the public calls ---- */

tf_status cuda_graphs_open(struct cuda_be *c)
{
	struct cuda_graphs *g = &c->g;
	tf_status st = tf_cu_rec_attach(&g->rec, c->stream);
	if (st)
		return st;
	g->attached = true;
	const char *v = getenv("TF_CUDA_GRAPHS");
	g->off = v && !strcmp(v, "0");
	if (!tf_cu->FuncGetParamInfo) {
		tf_log(TF_LOG_INFO, "cuda: the driver has no cuFuncGetParamInfo (before CUDA 12.4): "
		       "no graphs");
		g->off = true;
	}
	struct tf_graph_backend gb = {
		.ctx = c, .capture = cap, .launch = launch, .destroy = destroy, .room = room,
	};
	struct tf_graph_opts o = {.max = TF_GRAPH_MAX_DEFAULT, .min_keep = TF_GRAPH_MIN_KEEP_DEFAULT};
	return tf_graph_cache_new(&gb, &o, &g->cache);
}

void cuda_graphs_close(struct cuda_be *c)
{
	tf_graph_cache_free(c->g.cache);
	c->g.cache = NULL;
	if (c->g.in)
		tf_cu->MemFreeHost(c->g.in);
	c->g.in = NULL;
	if (c->g.attached)
		tf_cu_rec_detach(c->stream);
	c->g.attached = false;
}

static bool is_cuda(struct tf_be *be)
{
	return be && be->ops == tf_cuda_ops();
}

tf_status tf_cuda_be_counters(struct tf_be *be, struct tf_be_counters *out)
{
	memset(out, 0, sizeof *out);
	if (!is_cuda(be))
		return tf_err(TF_ERR_UNSUPPORTED, "counters: the %s backend is not CUDA",
			      be ? be->ops->name : "(none)");
	struct cuda_graphs *g = &cuda_of(be)->g;
	*out = g->st;
	out->kernels = g->rec.n.kernels;
	out->blas = g->rec.n.blas;
	out->copies = g->rec.n.copies;
	out->memsets = g->rec.n.memsets;
	if (g->cache) {
		struct tf_graph_stats s;
		tf_graph_stats(g->cache, &s);
		out->graph_cached = s.count;
	}
	return TF_OK;
}

tf_status tf_cuda_be_set_graphs(struct tf_be *be, int on)
{
	if (!is_cuda(be))
		return tf_err(TF_ERR_UNSUPPORTED, "graphs: the %s backend is not CUDA",
			      be ? be->ops->name : "(none)");
	struct cuda_be *c = cuda_of(be);
	const char *v = getenv("TF_CUDA_GRAPHS");
	bool off = !on || (v && !strcmp(v, "0")) || !tf_cu->FuncGetParamInfo;
	if (off && !c->g.off && c->g.cache) {
		/* drop every graph: a new cache, the same backend */
		struct tf_graph_backend gb = {
			.ctx = c, .capture = cap, .launch = launch, .destroy = destroy, .room = room,
		};
		struct tf_graph_opts o = {.max = TF_GRAPH_MAX_DEFAULT,
					  .min_keep = TF_GRAPH_MIN_KEEP_DEFAULT,
					  .agree = c->g.agree, .agree_ctx = c->g.agree_ctx};
		struct tf_graph_cache *fresh = NULL;
		tf_status st = tf_graph_cache_new(&gb, &o, &fresh);
		if (st)
			return st;
		tf_graph_cache_free(c->g.cache);
		c->g.cache = fresh;
	}
	c->g.off = off;
	c->g.streak = c->g.skip = 0;
	return TF_OK;
}

tf_status tf_cuda_be_set_agree(struct tf_be *be, tf_status (*agree)(void *ctx, bool mine, bool *all),
			       void *ctx)
{
	if (!is_cuda(be))
		return tf_err(TF_ERR_UNSUPPORTED, "graphs: the %s backend is not CUDA",
			      be ? be->ops->name : "(none)");
	struct cuda_be *c = cuda_of(be);
	c->g.agree = agree, c->g.agree_ctx = ctx;
	c->g.streak = c->g.skip = 0;
	if (c->g.cache)
		tf_graph_set_agree(c->g.cache, agree, ctx);
	return TF_OK;
}
