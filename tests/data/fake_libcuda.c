/* fake_libcuda.c: a stand-in for libcuda.so.1, built by tests/unit/check_cuda.c
 * into a shared library and loaded through TF_CUDA_LIBRARY. Device memory
 * is host memory; the entry points tf resolves exist (unless FAKE_OMIT names
 * one, built with -DFAKE_OMIT_<name>), and cuInit fails with
 * CUDA_ERROR_NO_DEVICE when built with -DFAKE_NO_DEVICE. cuGetErrorName
 * aborts for code 4: a driver being torn down must never be asked. With
 * -DFAKE_PARAM_INFO it has cuFuncGetParamInfo (so graphs are on), every
 * kernel taking one 8-byte parameter. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef unsigned long long dptr;

int cuInit(unsigned flags)
{
	(void)flags;
#ifdef FAKE_NO_DEVICE
	return 100;
#else
	return 0;
#endif
}
int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
int cuGetErrorName(int res, const char **s)
{
	switch (res) {
	case 0: *s = "CUDA_SUCCESS"; return 0;
	case 2: *s = "CUDA_ERROR_OUT_OF_MEMORY"; return 0;
	case 4: abort();
	case 700: *s = "CUDA_ERROR_ILLEGAL_ADDRESS"; return 0;
	case 4242: *s = "FAKE_ERROR_FROM_DRIVER"; return 0;
	default: *s = NULL; return 1;
	}
}
int cuGetErrorString(int res, const char **s)
{
	switch (res) {
	case 2: *s = "fake out of memory"; return 0;
	case 4: abort();
	case 4242: *s = "a code only the fake knows"; return 0;
	default: *s = NULL; return 1;
	}
}
int cuDeviceGetCount(int *n) { *n = 1; return 0; }
int cuDeviceGet(int *d, int o) { if (o != 0) return 101; *d = 0; return 0; }
int cuDeviceGetName(char *name, int len, int dev) { (void)dev; strncpy(name, "Fake GPU", (size_t)len); return 0; }
int cuDeviceGetAttribute(int *v, int attr, int dev)
{
	(void)dev;
	switch (attr) {
	case 16: *v = 4; return 0;         /* multiprocessors */
	case 38: *v = 1 << 20; return 0;   /* L2 */
	case 75: *v = 9; return 0;
	case 76: *v = 0; return 0;
	case 102: *v = 1; return 0;        /* VMM */
	case 110: *v = 0; return 0;        /* RDMA with VMM: off, so reading 126 shows */
	case 126: *v = 4; return 0;        /* sync domains: must not be read as 110 */
	default: *v = 0; return 0;
	}
}
int cuDeviceTotalMem_v2(size_t *b, int dev) { (void)dev; *b = (size_t)1 << 30; return 0; }
int cuDevicePrimaryCtxRetain(void **ctx, int dev) { (void)dev; *ctx = (void *)0x1; return 0; }
int cuDevicePrimaryCtxRelease_v2(int dev) { (void)dev; return 0; }
int cuCtxSetCurrent(void *ctx) { (void)ctx; return 0; }
int cuCtxSynchronize(void) { return 0; }
int cuMemGetInfo_v2(size_t *f, size_t *t) { *f = (size_t)1 << 29; *t = (size_t)1 << 30; return 0; }
#ifndef FAKE_OMIT_cuMemAlloc_v2
int cuMemAlloc_v2(dptr *p, size_t n)
{
	void *q = NULL;
	if (n > ((size_t)1 << 32) || posix_memalign(&q, 512, n ? n : 1))
		return 2;
	*p = (dptr)(uintptr_t)q;
	return 0;
}
#endif
int cuMemFree_v2(dptr p) { free((void *)(uintptr_t)p); return 0; }
int cuMemAllocHost_v2(void **p, size_t n) { *p = malloc(n); return *p ? 0 : 2; }
int cuMemFreeHost(void *p) { free(p); return 0; }
int cuMemcpyHtoD_v2(dptr d, const void *s, size_t n) { memcpy((void *)(uintptr_t)d, s, n); return 0; }
int cuMemcpyDtoH_v2(void *d, dptr s, size_t n) { memcpy(d, (void *)(uintptr_t)s, n); return 0; }
int cuMemcpyDtoD_v2(dptr d, dptr s, size_t n) { memmove((void *)(uintptr_t)d, (void *)(uintptr_t)s, n); return 0; }
int cuMemcpyHtoDAsync_v2(dptr d, const void *s, size_t n, void *st) { (void)st; return cuMemcpyHtoD_v2(d, s, n); }
int cuMemcpyDtoHAsync_v2(void *d, dptr s, size_t n, void *st) { (void)st; return cuMemcpyDtoH_v2(d, s, n); }
int cuMemcpyDtoDAsync_v2(dptr d, dptr s, size_t n, void *st) { (void)st; return cuMemcpyDtoD_v2(d, s, n); }
int cuMemsetD8_v2(dptr p, unsigned char v, size_t n) { memset((void *)(uintptr_t)p, v, n); return 0; }
int cuMemsetD8Async(dptr p, unsigned char v, size_t n, void *st) { (void)st; return cuMemsetD8_v2(p, v, n); }
int cuMemsetD32Async(dptr p, unsigned v, size_t n, void *st)
{
	(void)st;
	for (size_t i = 0; i < n; i++)
		((unsigned *)(uintptr_t)p)[i] = v;
	return 0;
}

/* Streams are distinct handles (a recorder is found by its stream). */
int cuStreamCreate(void **s, unsigned f)
{
	static uintptr_t next = 0x5000;
	(void)f;
	*s = (void *)(next += 16);
	return 0;
}

#ifdef FAKE_PARAM_INFO
/* Every kernel takes one 8-byte parameter (graphs on: the tests' kernels
 * are of that shape). */
int cuFuncGetParamInfo(void *f, size_t i, size_t *off, size_t *size);
int cuFuncGetParamInfo(void *f, size_t i, size_t *off, size_t *size)
{
	(void)f;
	if (i > 0)
		return 1;
	*off = 0, *size = 8;
	return 0;
}
#endif

/* A kernel's handle: its name's hash (never NULL). */
int cuModuleGetFunction(void **f, void *m, const char *name)
{
	uintptr_t h = 0x10;
	(void)m;
	for (; *name; name++)
		h = (h * 131 + (unsigned char)*name) | 0x10;
	*f = (void *)h;
	return 0;
}

#define STUB(name, ...) int name(__VA_ARGS__); int name(__VA_ARGS__) { return 0; }
STUB(cuStreamDestroy_v2, void *s)
STUB(cuStreamSynchronize, void *s)
STUB(cuStreamBeginCapture_v2, void *s, int m)
STUB(cuStreamEndCapture, void *s, void **g)
STUB(cuStreamIsCapturing, void *s, int *c)
STUB(cuEventCreate, void **e, unsigned f)
STUB(cuEventDestroy_v2, void *e)
STUB(cuEventRecord, void *e, void *s)
STUB(cuEventSynchronize, void *e)
STUB(cuEventElapsedTime_v2, float *ms, void *a, void *b)
STUB(cuModuleLoadData, void **m, const void *img)
STUB(cuModuleUnload, void *m)
STUB(cuFuncSetAttribute, void *f, int a, int v)
STUB(cuFuncGetAttribute, int *v, int a, void *f)
STUB(cuLaunchKernel, void *f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e,
     unsigned g, unsigned sh, void *s, void **p, void **x)
STUB(cuGraphInstantiateWithFlags, void **e, void *g, unsigned long long f)
STUB(cuGraphUpload, void *e, void *s)
STUB(cuGraphLaunch, void *e, void *s)
STUB(cuGraphDestroy, void *g)
STUB(cuGraphExecDestroy, void *e)
STUB(cuMemAddressReserve, dptr *p, size_t n, size_t al, dptr a, unsigned long long f)
STUB(cuMemAddressFree, dptr p, size_t n)
STUB(cuMemCreate, unsigned long long *h, size_t n, const void *prop, unsigned long long f)
STUB(cuMemRelease, unsigned long long h)
STUB(cuMemMap, dptr p, size_t n, size_t o, unsigned long long h, unsigned long long f)
STUB(cuMemUnmap, dptr p, size_t n)
STUB(cuMemSetAccess, dptr p, size_t n, const void *d, size_t c)
STUB(cuMemGetAllocationGranularity, size_t *g, const void *prop, int o)
