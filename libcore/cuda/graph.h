/* graph.h: a cache of executable CUDA graphs, one per caller-named key.
 *
 * tf_graph_run(cache, key, fingerprint, stream, body, arg) runs body's work
 * on stream: from the cached graph of key when there is one (a hit: one
 * graph launch, no collective), else by capturing body into a new graph and
 * launching it (a miss), else by calling body directly (eager).
 *
 * Rules, the same on every rank so that ranks never diverge:
 * - off, max 0, or a failed cache: always eager, no votes.
 * - A fingerprint different from the last one drops every graph first (the
 *   graphs bake in buffer addresses; the fingerprint covers them). Ranks
 *   must pass fingerprints that change together (derived from agreed
 *   state), as they pass the same keys in the same order.
 * - Miss: all ranks vote whether each has room (free device memory at least
 *   the floor: the backend's room()).
 *   - No room anywhere and hold: run eagerly, keep every graph.
 *   - No room anywhere and shed: evict the oldest max(1, count/4) graphs
 *     while more than min_keep remain, then run eagerly.
 *   - Room everywhere: evict least recently used graphs until fewer than
 *     max remain, capture, and vote again on "captured and stored". If any
 *     rank says no, every rank frees its executable (none leaks); then a
 *     third vote: when every "no" was a decline (the backend's capture
 *     returned TF_ERR_MISMATCH: what it captured is not what the key
 *     names), the body runs eagerly this time and graphs stay on (counted
 *     in declined); else every rank drops all its graphs and turns eager
 *     for good, and the body runs eagerly.
 * - min_keep is clamped to [0, max]; max to [0, 4096].
 * The agree hook is the vote (logical AND over ranks); NULL means one rank.
 *
 * The backend interface exists so that tests run every rule on the CPU;
 * tf_graph_backend_cuda is the real one. Not thread safe: one cache per
 * stream-owning thread. */
#ifndef TF_CUDA_GRAPH_H
#define TF_CUDA_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/* The work to run or capture: enqueue it on stream, no host sync. */
typedef tf_status (*tf_graph_body_fn)(void *arg, void *stream);
/* The vote: *all = AND over every rank of mine. Every rank calls it at the
 * same points with the same sequence of keys. */
typedef tf_status (*tf_graph_agree_fn)(void *ctx, bool mine, bool *all);

struct tf_graph_backend {
	void *ctx;
	/* Capture body's work on stream into an executable (instantiated and
	 * uploaded; the work does not run). On error nothing is left over;
	 * TF_ERR_MISMATCH declines the capture without failing (above). */
	tf_status (*capture)(void *ctx, void *stream, tf_graph_body_fn body, void *arg, void **exec);
	tf_status (*launch)(void *ctx, void *exec, void *stream);
	void (*destroy)(void *ctx, void *exec);
	/* True when there is room for another graph (free memory ≥ floor);
	 * NULL: always. */
	bool (*room)(void *ctx);
	void (*close)(void *ctx); /* may be NULL */
};

struct tf_graph_opts {
	bool off;
	int max;       /* graphs kept at most; 0: always eager */
	int min_keep;  /* graphs kept when shedding for memory */
	bool hold;     /* short of memory: keep graphs (else shed them) */
	tf_graph_agree_fn agree;
	void *agree_ctx;
};
#define TF_GRAPH_MAX_DEFAULT 48
#define TF_GRAPH_MIN_KEEP_DEFAULT 8

struct tf_graph_stats {
	uint64_t hits, misses, captures, eager, votes;
	uint64_t evicted;  /* by LRU or shedding */
	uint64_t dropped;  /* by fingerprint changes or failure */
	uint64_t shed_rounds;
	uint64_t declined; /* captures some rank declined (TF_ERR_MISMATCH) */
	size_t count;      /* graphs held now */
	int max, min_keep; /* after clamping */
	bool failed;
};

struct tf_graph_cache;

/* A cache over be (copied; closed by tf_graph_cache_free). opts may be NULL
 * (defaults: on, max 48, min_keep 8, shed). */
tf_status tf_graph_cache_new(const struct tf_graph_backend *be, const struct tf_graph_opts *opts,
                             struct tf_graph_cache **out);
/* Destroy every graph and close the backend. NULL is a no-op. */
void tf_graph_cache_free(struct tf_graph_cache *c);

/* Run body under key (a NUL-terminated name, copied) as above. Errors: the
 * body's, the backend launch's, or the vote's. */
tf_status tf_graph_run(struct tf_graph_cache *c, const char *key, uint64_t fingerprint,
                       void *stream, tf_graph_body_fn body, void *arg);
void tf_graph_stats(const struct tf_graph_cache *c, struct tf_graph_stats *s);

/* For a caller whose ranks must also agree on hits (their keys name
 * rank-local work, such as device addresses, so one rank may hit where
 * another misses): whether tf_graph_run(key, fingerprint) would hit now
 * (a fingerprint change is a miss), and forget key's graph (destroyed;
 * the next run of it misses). Then a hit is taken only when every rank
 * has one (a vote of the caller's), and a rank whose peer missed forgets
 * its graph before the run, so that every rank takes the miss path, with
 * its votes, together. */
bool tf_graph_has(const struct tf_graph_cache *c, const char *key, uint64_t fingerprint);
void tf_graph_forget(struct tf_graph_cache *c, const char *key);
/* Set the agree hook (opts.agree) of a cache, e.g. once the ranks' comm
 * exists; NULL: one rank. */
void tf_graph_set_agree(struct tf_graph_cache *c, tf_graph_agree_fn agree, void *ctx);

/* FNV-1a-64 over the little-endian bytes of n 64-bit words (buffer
 * addresses, sizes): the fingerprint of what a graph bakes in. */
uint64_t tf_graph_fingerprint(const uint64_t *words, size_t n);

/* The CUDA backend: thread-local stream capture, instantiate, upload;
 * room() is cuMemGetInfo's free bytes ≥ floor_bytes. Needs a current
 * context (tf_cu_device_open). */
tf_status tf_graph_backend_cuda(size_t floor_bytes, struct tf_graph_backend *be);

#endif
