/* graph.c: the graph cache (LRU, memory floor, fingerprint, votes) and its
 * CUDA backend. */
#include "cuda/graph.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/hmap.h"
#include "base/log.h"
#include "cuda/driver.h"

struct entry {
	char *key;
	void *exec;
	uint64_t tick; /* last use */
};

struct tf_graph_cache {
	struct tf_graph_backend be;
	struct tf_graph_opts o;
	struct tf_hmap map;     /* key -> index into e */
	struct entry *e;        /* o.max slots, count used */
	size_t count;
	uint64_t tick;
	uint64_t fp;
	bool have_fp;
	struct tf_graph_stats st;
};

tf_status tf_graph_cache_new(const struct tf_graph_backend *be, const struct tf_graph_opts *opts,
                             struct tf_graph_cache **out)
{
	*out = NULL;
	if (!be || !be->capture || !be->launch || !be->destroy)
		return tf_err(TF_ERR_ARG, "graph cache: incomplete backend");
	struct tf_graph_cache *c = tf_calloc(1, sizeof(*c));
	if (!c)
		return tf_err(TF_ERR_NOMEM, "graph cache: out of memory");
	c->be = *be;
	if (opts) {
		c->o = *opts;
	} else {
		c->o.max = TF_GRAPH_MAX_DEFAULT;
		c->o.min_keep = TF_GRAPH_MIN_KEEP_DEFAULT;
	}
	if (c->o.max < 0)
		c->o.max = 0;
	if (c->o.max > 4096)
		c->o.max = 4096;
	if (c->o.min_keep < 0)
		c->o.min_keep = 0;
	if (c->o.min_keep > c->o.max)
		c->o.min_keep = c->o.max;
	c->st.max = c->o.max;
	c->st.min_keep = c->o.min_keep;
	tf_hmap_init(&c->map, TF_HMAP_STR);
	if (c->o.max > 0) {
		c->e = tf_calloc((size_t)c->o.max, sizeof(*c->e));
		tf_status st = c->e ? tf_hmap_reserve(&c->map, (size_t)c->o.max) : TF_ERR_NOMEM;
		if (st) {
			tf_hmap_release(&c->map);
			free(c->e);
			free(c);
			return tf_err(TF_ERR_NOMEM, "graph cache: out of memory");
		}
	}
	*out = c;
	return TF_OK;
}

/* Remove entry i (swap with the last one). */
static void evict(struct tf_graph_cache *c, size_t i)
{
	struct entry *e = &c->e[i];
	tf_hmap_del_str(&c->map, e->key, strlen(e->key), NULL);
	c->be.destroy(c->be.ctx, e->exec);
	free(e->key);
	if (i != c->count - 1) {
		*e = c->e[c->count - 1];
		/* Cannot fail: the key is present, put only replaces its value. */
		tf_hmap_put_str(&c->map, e->key, strlen(e->key), i);
	}
	c->count--;
	memset(&c->e[c->count], 0, sizeof(c->e[c->count]));
}

static size_t oldest(const struct tf_graph_cache *c)
{
	size_t o = 0;
	for (size_t i = 1; i < c->count; i++)
		if (c->e[i].tick < c->e[o].tick)
			o = i;
	return o;
}

static void drop_all(struct tf_graph_cache *c)
{
	c->st.dropped += c->count;
	while (c->count)
		evict(c, c->count - 1);
}

void tf_graph_cache_free(struct tf_graph_cache *c)
{
	if (!c)
		return;
	while (c->count)
		evict(c, c->count - 1);
	tf_hmap_release(&c->map);
	free(c->e);
	if (c->be.close)
		c->be.close(c->be.ctx);
	free(c);
}

static tf_status vote(struct tf_graph_cache *c, bool mine, bool *all)
{
	c->st.votes++;
	if (!c->o.agree) {
		*all = mine;
		return TF_OK;
	}
	tf_status st = c->o.agree(c->o.agree_ctx, mine, all);
	if (st)
		return tf_err_wrap(st, "graph cache vote: ");
	return TF_OK;
}

static tf_status eager(struct tf_graph_cache *c, void *stream, tf_graph_body_fn body, void *arg)
{
	c->st.eager++;
	return body(arg, stream);
}

tf_status tf_graph_run(struct tf_graph_cache *c, const char *key, uint64_t fingerprint,
                       void *stream, tf_graph_body_fn body, void *arg)
{
	if (c->o.off || c->o.max == 0 || c->st.failed)
		return eager(c, stream, body, arg);
	if (c->have_fp && fingerprint != c->fp)
		drop_all(c);
	c->fp = fingerprint;
	c->have_fp = true;

	size_t klen = strlen(key);
	uintptr_t idx;
	if (tf_hmap_get_str(&c->map, key, klen, &idx)) {
		c->st.hits++;
		c->e[idx].tick = ++c->tick;
		return c->be.launch(c->be.ctx, c->e[idx].exec, stream);
	}

	c->st.misses++;
	bool room = c->be.room ? c->be.room(c->be.ctx) : true, all;
	tf_status st = vote(c, room, &all);
	if (st)
		return st;
	if (!all) {
		if (!c->o.hold) {
			c->st.shed_rounds++;
			size_t n = c->count / 4 ? c->count / 4 : 1;
			for (; n && c->count > (size_t)c->o.min_keep; n--) {
				evict(c, oldest(c));
				c->st.evicted++;
			}
		}
		return eager(c, stream, body, arg);
	}
	while (c->count >= (size_t)c->o.max) {
		evict(c, oldest(c));
		c->st.evicted++;
	}

	void *exec = NULL;
	char *kcopy = NULL;
	tf_status cst = c->be.capture(c->be.ctx, stream, body, arg, &exec);
	if (cst == TF_ERR_MISMATCH)
		tf_log(TF_LOG_DEBUG, "graph cache: capture of '%s' declined: %s", key, tf_errmsg(cst));
	else if (cst)
		tf_log(TF_LOG_INFO, "graph cache: capture of '%s' failed: %s", key, tf_errmsg(cst));
	if (!cst && !(kcopy = tf_strdup(key)))
		cst = TF_ERR_NOMEM;
	bool ok = cst == TF_OK;
	if ((st = vote(c, ok, &all)))
		goto fail;
	bool none_failed = false;
	if (!all && (st = vote(c, ok || cst == TF_ERR_MISMATCH, &none_failed)))
		goto fail;
	if (!all && none_failed) {
		/* Declined on some rank, failed on none: nothing stored anywhere,
		 * eager this time, graphs stay on. */
		c->be.destroy(c->be.ctx, exec), exec = NULL;
		free(kcopy);
		c->st.declined++;
		return eager(c, stream, body, arg);
	}
	if (!all) {
		/* Some rank could not capture or store: everyone stops using
		 * graphs, the same way, and runs eagerly from now on. */
		tf_log(TF_LOG_WARN, "graph cache: %s capture of '%s' failed; running without graphs",
		       ok ? "a peer's" : "this rank's", key);
		c->be.destroy(c->be.ctx, exec), exec = NULL;
		free(kcopy);
		drop_all(c);
		c->st.failed = true;
		return eager(c, stream, body, arg);
	}
	/* Room was reserved in new: this put does not allocate. */
	if ((st = tf_hmap_put_str(&c->map, kcopy, klen, c->count)))
		goto fail;
	c->e[c->count++] = (struct entry){kcopy, exec, ++c->tick};
	c->st.captures++;
	return c->be.launch(c->be.ctx, exec, stream);
fail:
	if (exec)
		c->be.destroy(c->be.ctx, exec);
	free(kcopy);
	return st;
}

bool tf_graph_has(const struct tf_graph_cache *c, const char *key, uint64_t fingerprint)
{
	if (c->o.off || c->o.max == 0 || c->st.failed || (c->have_fp && fingerprint != c->fp))
		return false;
	uintptr_t idx;
	return tf_hmap_get_str(&c->map, key, strlen(key), &idx);
}

void tf_graph_forget(struct tf_graph_cache *c, const char *key)
{
	uintptr_t idx;
	if (tf_hmap_get_str(&c->map, key, strlen(key), &idx)) {
		evict(c, idx);
		c->st.evicted++;
	}
}

void tf_graph_set_agree(struct tf_graph_cache *c, tf_graph_agree_fn agree, void *ctx)
{
	c->o.agree = agree;
	c->o.agree_ctx = ctx;
}

void tf_graph_stats(const struct tf_graph_cache *c, struct tf_graph_stats *s)
{
	*s = c->st;
	s->count = c->count;
}

uint64_t tf_graph_fingerprint(const uint64_t *words, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++)
		for (int b = 0; b < 8; b++) {
			h ^= (words[i] >> (8 * b)) & 0xff;
			h *= 0x100000001b3ull;
		}
	return h;
}

/* --- the CUDA backend --- */

struct cuda_ctx {
	size_t floor;
};

static tf_status cuda_capture(void *ctx, void *stream, tf_graph_body_fn body, void *arg, void **exec)
{
	(void)ctx;
	tf_cu_stream s = stream;
	tf_cu_graph g = NULL;
	tf_cu_graph_exec e = NULL;
	*exec = NULL;
	tf_status st = TF_CU(tf_cu->StreamBeginCapture(s, TF_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
	if (st)
		return st;
	tf_status bst = body(arg, stream);
	/* End the capture whatever the body did, or the stream stays in it. */
	st = TF_CU(tf_cu->StreamEndCapture(s, &g));
	if (bst) {
		st = bst;
		goto out;
	}
	if (st)
		goto out;
	if ((st = TF_CU(tf_cu->GraphInstantiate(&e, g, 0))))
		goto out;
	if ((st = TF_CU(tf_cu->GraphUpload(e, s)))) {
		tf_cu->GraphExecDestroy(e);
		goto out;
	}
	*exec = e;
out:
	if (g)
		tf_cu->GraphDestroy(g);
	return st;
}

static tf_status cuda_launch(void *ctx, void *exec, void *stream)
{
	(void)ctx;
	return TF_CU(tf_cu->GraphLaunch(exec, stream));
}

static void cuda_destroy(void *ctx, void *exec)
{
	(void)ctx;
	if (exec)
		tf_cu->GraphExecDestroy(exec);
}

static bool cuda_room(void *ctx)
{
	struct cuda_ctx *cc = ctx;
	size_t fr = 0, total = 0;
	if (tf_cu->MemGetInfo(&fr, &total) != TF_CU_SUCCESS)
		return false;
	return fr >= cc->floor;
}

static void cuda_close(void *ctx)
{
	free(ctx);
}

tf_status tf_graph_backend_cuda(size_t floor_bytes, struct tf_graph_backend *be)
{
	tf_status st = tf_cu_init();
	if (st)
		return st;
	struct cuda_ctx *cc = tf_calloc(1, sizeof(*cc));
	if (!cc)
		return tf_err(TF_ERR_NOMEM, "graph cache: out of memory");
	cc->floor = floor_bytes;
	*be = (struct tf_graph_backend){
		.ctx = cc, .capture = cuda_capture, .launch = cuda_launch, .destroy = cuda_destroy,
		.room = cuda_room, .close = cuda_close,
	};
	return TF_OK;
}
