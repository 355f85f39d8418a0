/* gpu_arena.c: the device arena on a real device, over both driver
 * backends (plain cuMemAlloc chunks and VMM), with kernels writing the
 * memory it hands out; the allocation hook with foreign and borrowed
 * buffers. */
#include <string.h>

#include "base/rng.h"
#include "cuda/arena.h"
#include "cuda/module.h"
#include "gpu_util.h"

static void exercise(const char *name, struct tf_arena_backend *be, const struct tf_cu_device *dev)
{
	struct tf_arena *a;
	struct tf_arena_opts o = {.limit = (size_t)2 << 30};
	GPU_OK(tf_arena_new(be, &o, &a));
	tf_cu_func fill;
	GPU_OK(tf_cu_kernel("tf_fill_u32", &fill));
	enum { N = 3000 };
	static uint64_t p[N];
	static size_t len[N];
	struct tf_rng rng;
	tf_rng_seed(&rng, 7);
	/* Allocate, write every block with a kernel (seed = index), free a
	 * third at random, allocate again, then read every block's ends. */
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; i < N; i++) {
			if (pass == 1 && p[i])
				continue;
			uint64_t r = tf_rng_u64(&rng);
			len[i] = r % 50 == 0 ? (4u << 20) + r % (8u << 20) : 4 + (r % 65536) * 4;
			GPU_OK(tf_arena_alloc(a, len[i], &p[i]));
			GPU_CHECK(p[i] % 512 == 0, "%s: block %d at 0x%llx is not 512-aligned", name, i,
			          (unsigned long long)p[i]);
			unsigned long long n = len[i] / 4;
			uint32_t seed = (uint32_t)i;
			void *pf[] = {&p[i], &n, &seed};
			GPU_OK(tf_cu_launch(fill, 64, 256, 0, NULL, pf));
		}
		if (pass == 0)
			for (int i = 0; i < N; i++)
				if (tf_rng_below(&rng, 3) == 0) {
					GPU_OK(tf_arena_dealloc(a, p[i]));
					p[i] = 0;
				}
	}
	GPU_OK(TF_CU(tf_cu->CtxSynchronize()));
	int bad = 0;
	for (int i = 0; i < N; i++) {
		uint32_t first, last;
		size_t n = len[i] / 4;
		GPU_OK(TF_CU(tf_cu->MemcpyDtoH(&first, p[i], 4)));
		GPU_OK(TF_CU(tf_cu->MemcpyDtoH(&last, p[i] + (n - 1) * 4, 4)));
		bad += first != fill_u32_host(0, (uint32_t)i) || last != fill_u32_host(n - 1, (uint32_t)i);
	}
	GPU_CHECK(bad == 0, "%s: %d blocks overlap or were not written", name, bad);
	struct tf_arena_stats s;
	tf_arena_stats(a, &s);
	printf("%s: granularity %zu, %zu live, %zu large, %zu chunks, %zu MiB mapped (peak %zu), "
	       "%llu reused, %zu MiB in use\n", name, be->granularity, s.live, s.large, s.chunks,
	       s.mapped >> 20, s.mapped_peak >> 20, (unsigned long long)s.reused, s.in_use >> 20);
	GPU_CHECK(s.reused > 0, "%s: nothing reused", name);
	/* The limit refuses, and says so. */
	uint64_t huge;
	tf_status st = tf_arena_alloc(a, (size_t)3 << 30, &huge);
	GPU_CHECK(st == TF_ERR_NOMEM, "%s: past the limit gave %d", name, st);
	for (int i = 0; i < N; i++)
		GPU_OK(tf_arena_dealloc(a, p[i]));
	tf_arena_stats(a, &s);
	GPU_CHECK(s.live == 0 && s.large == 0, "%s: %zu blocks left", name, s.live);
	size_t fr0, fr1, total;
	GPU_OK(TF_CU(tf_cu->MemGetInfo(&fr0, &total)));
	tf_arena_free(a);
	GPU_OK(TF_CU(tf_cu->MemGetInfo(&fr1, &total)));
	printf("%s: freeing the arena gave back %zu MiB\n", name, (fr1 - fr0) >> 20);
	GPU_CHECK(fr1 >= fr0 + (s.mapped >> 1), "%s: the chunks were not given back", name);
	(void)dev;
}

int main(void)
{
	struct tf_cu_device dev;
	gpu_open(&dev);
	struct tf_arena_backend be;
	GPU_OK(tf_arena_backend_plain(&dev, &be));
	exercise("plain", &be, &dev);
	if (dev.vmm) {
		GPU_OK(tf_arena_backend_vmm(&dev, (size_t)64 << 30, &be));
		exercise("vmm", &be, &dev);
	} else {
		printf("vmm: the device lacks VMM\n");
	}

	/* The hook: arena buffers, a foreign pointer from before it, and a
	 * borrowed view. */
	GPU_OK(tf_arena_backend_plain(&dev, &be));
	struct tf_arena *a;
	GPU_OK(tf_arena_new(&be, NULL, &a));
	struct tf_cu_buf foreign, mine, view;
	GPU_OK(tf_cu_buf_alloc(&foreign, 1000));
	tf_cu_mem_install(a);
	GPU_OK(tf_cu_buf_alloc(&mine, 1000));
	GPU_CHECK(tf_arena_owns(a, mine.ptr), "the hook did not allocate from the arena");
	GPU_CHECK(!tf_arena_owns(a, foreign.ptr), "foreign pointer owned");
	tf_cu_buf_borrow(&view, mine.ptr, 512);
	GPU_OK(tf_cu_buf_release(&view));
	GPU_CHECK(tf_arena_owns(a, mine.ptr), "releasing a view freed its memory");
	GPU_OK(tf_cu_buf_release(&foreign)); /* cuMemFree, as before */
	const tf_cu_ptr mp = mine.ptr;
	GPU_OK(tf_cu_buf_release(&mine));
	GPU_CHECK(!tf_arena_owns(a, mp), "arena block not freed");
	tf_cu_mem_install(NULL);
	tf_arena_free(a);
	tf_cu_module_unload();
	tf_cu_device_close(&dev);
	return gpu_result("gpu_arena");
}
