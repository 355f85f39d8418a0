/* cuda_be.h: the CUDA backend's state and what its core files (cuda.c,
 * cuda_dense.c, cuda_exl3.c) share beyond cuda_impl.h: the table, the
 * dense ops, cuBLAS, the EXL3 workspace, uploads of host bytes and the
 * experts' width tables. Internal to libcore/compute; the other cuda_*.c
 * files need only cuda_impl.h. */
#ifndef TF_COMPUTE_CUDA_BE_H
#define TF_COMPUTE_CUDA_BE_H

#include <stdbool.h>
#include <stddef.h>

#include "base/hmap.h"
#include "compute/cuda_impl.h"
#include "cuda/arena.h"
#include "cuda/blas.h"
#include "cuda/exl3_gemv.h"
#include "cuda/graph.h"
#include "cuda/rec.h"

/* Pinned host staging of uploads and downloads: CUDA_STAGE_CHUNKS chunks
 * of CUDA_STAGE_CHUNK bytes, used in turn. */
#define CUDA_STAGE_CHUNKS 8
#define CUDA_STAGE_CHUNK ((size_t)2 << 20)
/* Pinned host buffers handed out by host_alloc, at most this many at once. */
#define CUDA_HOST_MAX 8

/* The arena's largest packed block: larger ones are chunks of their own,
 * whose release waits for the stream (cuda.c, late frees). A graphed call
 * replays only when its scratch comes back at the same addresses, which
 * packed blocks do (a freed block is the next one of its size) and chunks
 * of their own do not: at 4 MiB a decode step of 4 rows of the release had
 * a 5 MiB block and never replayed (a new address every pass,
 * TF_CUDA_GRAPHS_TRACE); 32 MiB covers the decode steps' scratch up to 16
 * rows. */
#define CUDA_SMALL_MAX ((size_t)32 << 20)
/* Larger blocks freed are kept for the next request of the same size, up
 * to this many bytes in all, for the same reason (a decode step of 64
 * rows has blocks past 32 MiB); past it they go back as late frees. */
#define CUDA_SPARE_MAX ((size_t)1 << 30)

/* A large block released while queued work may still use it: freed once
 * the event recorded after that work has passed (NULL event: at the next
 * wait for the stream). */
struct cuda_late {
	tf_cu_ptr p;
	tf_cu_event ev;
};

/* A large block freed and kept (CUDA_SPARE_MAX): reused, on the stream
 * that used it, by the next request of n bytes. */
struct cuda_spare {
	tf_cu_ptr p;
	size_t n;
};

/* What the backend's ops do with work and uploads (cuda_graph.c): queue
 * them (eager), record them without a driver call (the dry pass of a
 * graphed call) or queue them into a stream capture. */
enum cuda_mode { CUDA_EAGER = 0, CUDA_DRY, CUDA_CAPTURE };

struct cuda_pass; /* cuda_graph.c: the graphed call in progress */

/* Graphed calls (cuda_graph.c). */
struct cuda_graphs {
	enum cuda_mode mode;
	bool off;                   /* tf_cuda_be_set_graphs(0), $TF_CUDA_GRAPHS=0 */
	bool capturing;             /* inside cuStreamBeginCapture .. End */
	bool attached;              /* rec is the stream's recorder */
	struct tf_cu_rec rec;       /* the stream's recorder (counts always) */
	struct tf_graph_cache *cache;
	/* ranks in step (tf_cuda_be_set_agree): every graphed call voted */
	tf_status (*agree)(void *ctx, bool mine, bool *all);
	void *agree_ctx;
	/* pinned host input region: a graphed call's uploads in order, each
	 * 16-byte aligned; the host refills it before every replay */
	unsigned char *in;
	size_t in_cap, in_fill, in_want;
	uint64_t in_gen;            /* the region's generation: the cache's fingerprint */
	int streak, skip;           /* misses in a row; calls left to run eagerly */
	struct cuda_pass *cur;
	struct tf_be_counters st;   /* the graph_* counters */
};

struct cuda_be {
	struct tf_cu_device dev;
	tf_cu_stream stream;
	struct tf_arena *arena;
	struct tf_cu_blas *blas;   /* NULL without cuBLAS (or $TF_CUDA_BLAS=0) */
	struct tf_cu_exl3_ws ws;   /* split-K sums, grown on demand */
	tf_cu_ptr mix_count;       /* hc_mix's counters (cuda_impl.h CUDA_MIX_COUNTERS) */
	bool invariant;            /* the batch-invariant path (tf_cuda_be_set_invariant) */
	/* staging: chunk `cur` is filled from byte `fill`; ev[i] is recorded
	 * after the last copy out of chunk i (pending[i] until waited for) */
	unsigned char *stage;
	int cur;
	size_t fill;
	tf_cu_event ev[CUDA_STAGE_CHUNKS];
	bool pending[CUDA_STAGE_CHUNKS];
	struct cuda_spare *spare;
	size_t nspare, spare_cap, spare_bytes;
	/* the spare list as a dry pass found it (cuda_spare_mark) */
	struct cuda_spare *spare_mark;
	size_t nspare_mark, spare_mark_cap;
	struct cuda_late *late;
	size_t nlate, late_cap;
	struct {
		unsigned char *p;
		size_t n;
	} host[CUDA_HOST_MAX];     /* host_alloc's pinned buffers */
	int nhost;
	struct tf_hmap blocks;     /* arena address -> bytes asked for (tensors, scratch) */
	struct tf_hmap experts;    /* experts array -> struct cuda_exl3_experts_dev * */
	struct cuda_graphs g;
};

static inline struct cuda_be *cuda_of(struct tf_be *be)
{
	return be->impl;
}

/* The backend's table (every slot filled), for tests. */
const struct tf_ops *tf_cuda_ops(void);

/* Device memory from the arena (not zeroed; a large free is deferred past
 * the work queued before it; an address the backend did not hand out is
 * left alone) and host bytes queued into it through the staging (returns
 * once src may be reused). */
tf_status cuda_mem_alloc(struct cuda_be *c, size_t n, tf_cu_ptr *p);
void cuda_mem_free(struct cuda_be *c, tf_cu_ptr p);
tf_status cuda_put(struct cuda_be *c, tf_cu_ptr dst, const void *src, size_t n);
/* Wait for the stream; then every late block and staging chunk is free. */
tf_status cuda_wait_idle(struct cuda_be *c);
/* Free the late blocks now: only when nothing queued can use them (the
 * stream is idle, or they came from a pass that queued nothing). */
void cuda_late_drop(struct cuda_be *c);
/* The spare list at the start of a dry pass, and put back as it was after
 * the pass is undone (blocks the pass added go back to the arena): the
 * pass run again (the capture) then takes the same spares in the same
 * order as the dry pass did, so its addresses match (two spares of one
 * size swapped made every 64-row step's capture decline on the H200).
 * What cannot be put back (a marked block gone) is skipped. */
void cuda_spare_mark(struct cuda_be *c);
void cuda_spare_reset(struct cuda_be *c);

/* Graphed calls (cuda_graph.c): the graph op, set-up at tf_cuda_be_new
 * ($TF_CUDA_GRAPHS; the recorder attached to the stream) and release;
 * uploads of a dry or captured pass, through the input region. */
tf_status cuda_graph(struct tf_be *be, const struct tf_be_work *w);
tf_status cuda_graphs_open(struct cuda_be *c);
void cuda_graphs_close(struct cuda_be *c);
tf_status cuda_graph_put(struct cuda_be *c, tf_cu_ptr dst, const void *src, size_t n);
/* The EXL3 workspace for layers of up to n_max columns (grown, which waits
 * for the stream once). */
tf_status cuda_exl3_ws(struct cuda_be *c, uint32_t n_max, const struct tf_cu_exl3_ws **ws);
/* Free the experts' width tables (cuda_exl3.c), at tf_be_free. */
void cuda_exl3_release(struct cuda_be *c);

/* The dense ops (cuda_dense.c). cuda_convert_to also serves other ops:
 * n values of x (dtype xdt) into y (dtype ydt) on the stream. */
tf_status cuda_convert_to(struct tf_be *be, tf_cu_ptr x, enum tf_dt xdt, tf_cu_ptr y,
			  enum tf_dt ydt, int64_t n);
tf_status cuda_convert(struct tf_be *be, const struct tf_tensor *x, struct tf_tensor *y);
tf_status cuda_linear(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *w,
		      struct tf_tensor *y);
tf_status cuda_embed(struct tf_be *be, const struct tf_tensor *table, int64_t vocab_lo,
		     const struct tf_tensor *ids, struct tf_tensor *out);
tf_status cuda_rmsnorm(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *w,
		       float eps, struct tf_tensor *y);
tf_status cuda_rope(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *pos,
		    const struct tf_rope_freqs *rf, int inverse, struct tf_tensor *y);

#endif
