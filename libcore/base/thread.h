/* thread.h: a parallel-for over a fixed pool of worker threads.
 *
 * tf_pool_for(pool, n, fn, ctx) calls fn(ctx, begin, end, worker) on
 * disjoint chunks covering [0, n) and returns when all are done. A NULL
 * pool, or a pool of one thread, runs fn inline on the caller. One caller at
 * a time per pool (tf_pool_for is not reentrant); the pool itself may be
 * shared by threads that take turns under their own lock. */
#ifndef TF_BASE_THREAD_H
#define TF_BASE_THREAD_H

#include <stddef.h>

#include "base/status.h"

struct tf_pool;

typedef void (*tf_pool_fn)(void *ctx, size_t begin, size_t end, int worker);

/* A pool of n threads in all (the caller counts as one: n-1 are started).
 * n = 0 means the number of online CPUs. The caller frees with
 * tf_pool_free. */
tf_status tf_pool_new(int n, struct tf_pool **out);
void tf_pool_free(struct tf_pool *p);
int tf_pool_size(const struct tf_pool *p);
/* Run fn over [0, n) in chunks of at least grain items. */
void tf_pool_for(struct tf_pool *p, size_t n, size_t grain, tf_pool_fn fn, void *ctx);
/* Online CPUs (at least 1). */
int tf_cpu_count(void);

#endif
