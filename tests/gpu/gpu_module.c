/* gpu_module.c: the embedded kernel module on a real device: loading,
 * lookups, the fill and copy kernels against their host twins, and the
 * copy bandwidth. */
#include <string.h>

#include "cuda/module.h"
#include "gpu_util.h"

int main(void)
{
	struct tf_cu_device dev;
	gpu_open(&dev);
	GPU_CHECK(tf_cu_kernels_built(), "this build has no kernels");
	printf("fatbin: %zu bytes\n", tf_cu_fatbin_size());
	GPU_OK(tf_cu_module_load());
	tf_cu_func fill, copy, none;
	GPU_OK(tf_cu_kernel("tf_fill_u32", &fill));
	GPU_OK(tf_cu_kernel("tf_copy_u128", &copy));
	tf_status st = tf_cu_kernel("tf_no_such_kernel", &none);
	GPU_CHECK(st == TF_ERR_NOTFOUND, "lookup of a missing kernel gave %d: %s", st, tf_errmsg(st));
	printf("missing kernel: %s\n", tf_errmsg(st));
	GPU_CHECK(!strcmp(tf_cu_func_name(copy), "tf_copy_u128") || !tf_cu->FuncGetName,
	          "cuFuncGetName says %s", tf_cu_func_name(copy));

	/* Fill an odd number of words, copy them with a tail that is not a
	 * multiple of the unroll, and check every word and the guard after. */
	const uint64_t words = (16u << 20) + 3; /* 16-byte words */
	const size_t bytes = words * 16, guard = 4096;
	tf_cu_ptr src, dst;
	GPU_OK(TF_CU(tf_cu->MemAlloc(&src, bytes)));
	GPU_OK(TF_CU(tf_cu->MemAlloc(&dst, bytes + guard)));
	GPU_OK(TF_CU(tf_cu->MemsetD8(dst, 0xA5, bytes + guard)));
	unsigned long long n32 = bytes / 4, n128 = words;
	uint32_t seed = 0x1234567u;
	void *pf[] = {&src, &n32, &seed};
	GPU_OK(tf_cu_launch(fill, (unsigned)dev.sms * 4, 256, 0, NULL, pf));
	void *pc[] = {&dst, &src, &n128};
	GPU_OK(tf_cu_launch(copy, (unsigned)dev.sms * 4, 256, 0, NULL, pc));
	GPU_OK(TF_CU(tf_cu->CtxSynchronize()));
	uint32_t *h = malloc(bytes + guard);
	GPU_CHECK(h != NULL, "out of host memory");
	GPU_OK(TF_CU(tf_cu->MemcpyDtoH(h, dst, bytes + guard)));
	uint64_t bad = 0;
	for (uint64_t i = 0; i < n32; i++)
		bad += h[i] != fill_u32_host(i, seed);
	for (size_t i = 0; i < guard / 4; i++)
		bad += h[n32 + i] != 0xA5A5A5A5u;
	GPU_CHECK(bad == 0, "%llu words differ from the host twin or the guard", (unsigned long long)bad);
	free(h);

	/* Copy bandwidth: 1 GiB each way, 20 copies, median. */
	tf_cu_ptr a, b;
	const size_t big = (size_t)1 << 30;
	GPU_OK(TF_CU(tf_cu->MemAlloc(&a, big)));
	GPU_OK(TF_CU(tf_cu->MemAlloc(&b, big)));
	unsigned long long nb = big / 16;
	void *pb[] = {&b, &a, &nb};
	tf_cu_event e0, e1;
	GPU_OK(TF_CU(tf_cu->EventCreate(&e0, 0)));
	GPU_OK(TF_CU(tf_cu->EventCreate(&e1, 0)));
	float ms[20];
	for (int i = -3; i < 20; i++) {
		GPU_OK(TF_CU(tf_cu->EventRecord(e0, NULL)));
		GPU_OK(tf_cu_launch(copy, (unsigned)dev.sms * 4, 256, 0, NULL, pb));
		GPU_OK(TF_CU(tf_cu->EventRecord(e1, NULL)));
		GPU_OK(TF_CU(tf_cu->EventSynchronize(e1)));
		if (i >= 0)
			GPU_OK(TF_CU(tf_cu->EventElapsedTime(&ms[i], e0, e1)));
	}
	for (int i = 1; i < 20; i++)
		for (int j = i; j > 0 && ms[j] < ms[j - 1]; j--) {
			float t = ms[j];
			ms[j] = ms[j - 1];
			ms[j - 1] = t;
		}
	printf("copy kernel: 1 GiB in %.3f ms (median of 20): %.0f GB/s read+write\n", ms[10],
	       2.0 * big / (ms[10] * 1e-3) / 1e9);
	tf_cu->MemFree(a);
	tf_cu->MemFree(b);
	tf_cu->MemFree(src);
	tf_cu->MemFree(dst);
	tf_cu_module_unload();
	tf_cu_device_close(&dev);
	return gpu_result("gpu_module");
}
