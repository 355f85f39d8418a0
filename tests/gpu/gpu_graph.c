/* gpu_graph.c: the graph cache over the CUDA backend with real kernels: a
 * capture runs the work, a replay runs the same kernels on the current
 * contents of the buffers, a new fingerprint recaptures, a memory floor
 * above the device's memory turns misses eager. */
#include <string.h>

#include "cuda/graph.h"
#include "cuda/module.h"
#include "gpu_util.h"

struct work {
	tf_cu_func fill, copy;
	tf_cu_ptr a, b, c;   /* fill c (seed), copy a -> b */
	unsigned long long n; /* 16-byte words */
	uint32_t seed;
	unsigned grid;
	int runs;             /* host calls of the body (captures and eager runs) */
};

static tf_status body(void *arg, void *stream)
{
	struct work *w = arg;
	w->runs++;
	void *pc[] = {&w->b, &w->a, &w->n};
	tf_status st = tf_cu_launch(w->copy, w->grid, 256, 0, stream, pc);
	if (st)
		return st;
	unsigned long long n32 = w->n * 4;
	void *pf[] = {&w->c, &n32, &w->seed};
	return tf_cu_launch(w->fill, w->grid, 256, 0, stream, pf);
}

/* Check b == the fill of seed src_seed, c == the fill of seed c_seed. */
static int check(struct work *w, uint32_t src_seed, uint32_t c_seed, uint32_t *h)
{
	size_t n32 = w->n * 4;
	int bad = 0;
	if (TF_CU(tf_cu->MemcpyDtoH(h, w->b, n32 * 4)))
		return -1;
	for (size_t i = 0; i < n32; i++)
		bad += h[i] != fill_u32_host(i, src_seed);
	if (TF_CU(tf_cu->MemcpyDtoH(h, w->c, n32 * 4)))
		return -1;
	for (size_t i = 0; i < n32; i++)
		bad += h[i] != fill_u32_host(i, c_seed);
	return bad;
}

static void set_src(struct work *w, uint32_t seed)
{
	unsigned long long n32 = w->n * 4;
	void *pf[] = {&w->a, &n32, &seed};
	GPU_OK(tf_cu_launch(w->fill, w->grid, 256, 0, NULL, pf));
	GPU_OK(TF_CU(tf_cu->MemsetD8(w->b, 0, w->n * 16)));
	GPU_OK(TF_CU(tf_cu->MemsetD8(w->c, 0, w->n * 16)));
	GPU_OK(TF_CU(tf_cu->CtxSynchronize()));
}

int main(void)
{
	struct tf_cu_device dev;
	gpu_open(&dev);
	struct work w = {.n = (1u << 20) + 5, .seed = 11, .grid = (unsigned)dev.sms * 2};
	GPU_OK(tf_cu_kernel("tf_fill_u32", &w.fill));
	GPU_OK(tf_cu_kernel("tf_copy_u128", &w.copy));
	GPU_OK(TF_CU(tf_cu->MemAlloc(&w.a, w.n * 16)));
	GPU_OK(TF_CU(tf_cu->MemAlloc(&w.b, w.n * 16)));
	GPU_OK(TF_CU(tf_cu->MemAlloc(&w.c, w.n * 16)));
	uint32_t *h = malloc(w.n * 16);
	tf_cu_stream s;
	GPU_OK(TF_CU(tf_cu->StreamCreate(&s, TF_CU_STREAM_NON_BLOCKING)));

	struct tf_graph_backend be;
	GPU_OK(tf_graph_backend_cuda(0, &be));
	struct tf_graph_opts o = {.max = 4, .min_keep = 1};
	struct tf_graph_cache *gc;
	GPU_OK(tf_graph_cache_new(&be, &o, &gc));
	uint64_t fpw[3] = {w.a, w.b, w.c};
	uint64_t fp = tf_graph_fingerprint(fpw, 3);

	/* Miss: captured (the body runs once on the host), then launched. */
	set_src(&w, 100);
	GPU_OK(tf_graph_run(gc, "copy+fill", fp, s, body, &w));
	GPU_OK(TF_CU(tf_cu->StreamSynchronize(s)));
	GPU_CHECK(check(&w, 100, 11, h) == 0, "first run (capture) computed wrong data");
	GPU_CHECK(w.runs == 1, "body ran %d times on the host", w.runs);

	/* Hit: new source contents, same addresses; the replay copies them
	 * and the host body is not called. */
	for (int i = 0; i < 3; i++) {
		set_src(&w, 200 + i);
		GPU_OK(tf_graph_run(gc, "copy+fill", fp, s, body, &w));
		GPU_OK(TF_CU(tf_cu->StreamSynchronize(s)));
		GPU_CHECK(check(&w, 200 + i, 11, h) == 0, "replay %d computed wrong data", i);
	}
	GPU_CHECK(w.runs == 1, "replays called the body (%d)", w.runs);
	struct tf_graph_stats st;
	tf_graph_stats(gc, &st);
	GPU_CHECK(st.hits == 3 && st.captures == 1, "hits %llu captures %llu",
	          (unsigned long long)st.hits, (unsigned long long)st.captures);

	/* The seed is baked into the graph: a new seed needs a new
	 * fingerprint, which recaptures. */
	w.seed = 12;
	fpw[0] ^= 1;
	set_src(&w, 300);
	GPU_OK(tf_graph_run(gc, "copy+fill", tf_graph_fingerprint(fpw, 3), s, body, &w));
	GPU_OK(TF_CU(tf_cu->StreamSynchronize(s)));
	GPU_CHECK(check(&w, 300, 12, h) == 0, "recapture computed wrong data");
	tf_graph_stats(gc, &st);
	GPU_CHECK(st.dropped == 1 && st.captures == 2, "dropped %llu captures %llu",
	          (unsigned long long)st.dropped, (unsigned long long)st.captures);

	/* Replay timing against eager launches of the same two kernels. */
	tf_cu_event e0, e1;
	GPU_OK(TF_CU(tf_cu->EventCreate(&e0, 0)));
	GPU_OK(TF_CU(tf_cu->EventCreate(&e1, 0)));
	float t_graph = 0, t_eager = 0;
	GPU_OK(TF_CU(tf_cu->EventRecord(e0, s)));
	for (int i = 0; i < 200; i++)
		GPU_OK(tf_graph_run(gc, "copy+fill", tf_graph_fingerprint(fpw, 3), s, body, &w));
	GPU_OK(TF_CU(tf_cu->EventRecord(e1, s)));
	GPU_OK(TF_CU(tf_cu->EventSynchronize(e1)));
	GPU_OK(TF_CU(tf_cu->EventElapsedTime(&t_graph, e0, e1)));
	GPU_OK(TF_CU(tf_cu->EventRecord(e0, s)));
	for (int i = 0; i < 200; i++)
		GPU_OK(body(&w, s));
	GPU_OK(TF_CU(tf_cu->EventRecord(e1, s)));
	GPU_OK(TF_CU(tf_cu->EventSynchronize(e1)));
	GPU_OK(TF_CU(tf_cu->EventElapsedTime(&t_eager, e0, e1)));
	printf("copy+fill of %llu KiB: graph replay %.2f us, eager %.2f us per run\n",
	       w.n * 16 >> 10, t_graph * 1e3 / 200, t_eager * 1e3 / 200);
	tf_graph_cache_free(gc);

	/* A floor above the device's memory: every miss runs eagerly. */
	GPU_OK(tf_graph_backend_cuda(dev.total_mem * 2, &be));
	GPU_OK(tf_graph_cache_new(&be, &o, &gc));
	set_src(&w, 400);
	int runs = w.runs;
	GPU_OK(tf_graph_run(gc, "copy+fill", fp, s, body, &w));
	GPU_OK(TF_CU(tf_cu->StreamSynchronize(s)));
	GPU_CHECK(check(&w, 400, 12, h) == 0, "eager run computed wrong data");
	tf_graph_stats(gc, &st);
	GPU_CHECK(st.eager == 1 && st.count == 0 && w.runs == runs + 1, "floor: eager %llu count %zu",
	          (unsigned long long)st.eager, st.count);
	tf_graph_cache_free(gc);

	free(h);
	tf_cu->StreamDestroy(s);
	tf_cu->MemFree(w.a);
	tf_cu->MemFree(w.b);
	tf_cu->MemFree(w.c);
	tf_cu_module_unload();
	tf_cu_device_close(&dev);
	return gpu_result("gpu_graph");
}
