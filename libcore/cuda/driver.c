/* driver.c: loading the CUDA driver with dlopen, error names, the check
 * function behind TF_CU, device attributes by name, and device contexts. */
#include "cuda/driver.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "cuda/module.h"

/* One entry point: where it goes in struct tf_cu_api and its symbol names,
 * tried in order (a newer versioned name first). */
struct sym {
	size_t off;
	const char *names[2];
	bool optional;
};

#define REQ(field, name) {offsetof(struct tf_cu_api, field), {name, NULL}, false}
#define REQ2(field, a, b) {offsetof(struct tf_cu_api, field), {a, b}, false}
#define OPT(field, name) {offsetof(struct tf_cu_api, field), {name, NULL}, true}

static const struct sym syms[] = {
	REQ(Init, "cuInit"),
	REQ(DriverGetVersion, "cuDriverGetVersion"),
	REQ(GetErrorName, "cuGetErrorName"),
	REQ(GetErrorString, "cuGetErrorString"),
	REQ(DeviceGet, "cuDeviceGet"),
	REQ(DeviceGetCount, "cuDeviceGetCount"),
	REQ(DeviceGetName, "cuDeviceGetName"),
	REQ(DeviceGetAttribute, "cuDeviceGetAttribute"),
	REQ(DeviceTotalMem, "cuDeviceTotalMem_v2"),
	REQ(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
	REQ(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"),
	REQ(CtxSetCurrent, "cuCtxSetCurrent"),
	REQ(CtxSynchronize, "cuCtxSynchronize"),
	REQ(MemGetInfo, "cuMemGetInfo_v2"),
	REQ(MemAlloc, "cuMemAlloc_v2"),
	REQ(MemFree, "cuMemFree_v2"),
	REQ(MemAllocHost, "cuMemAllocHost_v2"),
	REQ(MemFreeHost, "cuMemFreeHost"),
	REQ(MemcpyHtoD, "cuMemcpyHtoD_v2"),
	REQ(MemcpyDtoH, "cuMemcpyDtoH_v2"),
	REQ(MemcpyDtoD, "cuMemcpyDtoD_v2"),
	REQ(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"),
	REQ(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"),
	REQ(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"),
	REQ(MemsetD8, "cuMemsetD8_v2"),
	REQ(MemsetD8Async, "cuMemsetD8Async"),
	REQ(MemsetD32Async, "cuMemsetD32Async"),
	REQ(StreamCreate, "cuStreamCreate"),
	REQ(StreamDestroy, "cuStreamDestroy_v2"),
	REQ(StreamSynchronize, "cuStreamSynchronize"),
	REQ(StreamBeginCapture, "cuStreamBeginCapture_v2"),
	REQ(StreamEndCapture, "cuStreamEndCapture"),
	REQ(StreamIsCapturing, "cuStreamIsCapturing"),
	REQ(EventCreate, "cuEventCreate"),
	REQ(EventDestroy, "cuEventDestroy_v2"),
	REQ(EventRecord, "cuEventRecord"),
	REQ(EventSynchronize, "cuEventSynchronize"),
	REQ2(EventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime"),
	REQ(ModuleLoadData, "cuModuleLoadData"),
	REQ(ModuleUnload, "cuModuleUnload"),
	REQ(ModuleGetFunction, "cuModuleGetFunction"),
	REQ(FuncSetAttribute, "cuFuncSetAttribute"),
	REQ(FuncGetAttribute, "cuFuncGetAttribute"),
	REQ(LaunchKernel, "cuLaunchKernel"),
	REQ(GraphInstantiate, "cuGraphInstantiateWithFlags"),
	REQ(GraphUpload, "cuGraphUpload"),
	REQ(GraphLaunch, "cuGraphLaunch"),
	REQ(GraphDestroy, "cuGraphDestroy"),
	REQ(GraphExecDestroy, "cuGraphExecDestroy"),
	REQ(MemAddressReserve, "cuMemAddressReserve"),
	REQ(MemAddressFree, "cuMemAddressFree"),
	REQ(MemCreate, "cuMemCreate"),
	REQ(MemRelease, "cuMemRelease"),
	REQ(MemMap, "cuMemMap"),
	REQ(MemUnmap, "cuMemUnmap"),
	REQ(MemSetAccess, "cuMemSetAccess"),
	REQ(MemGetAllocationGranularity, "cuMemGetAllocationGranularity"),
	OPT(FuncGetName, "cuFuncGetName"),
	OPT(LaunchKernelEx, "cuLaunchKernelEx"),
	OPT(OccupancyMaxActiveClusters, "cuOccupancyMaxActiveClusters"),
	OPT(EventQuery, "cuEventQuery"),
	OPT(FuncGetParamInfo, "cuFuncGetParamInfo"),
};

/* Our own names and texts, for a driver that cannot answer (missing, or
 * shutting down) and for codes it does not know. */
static const struct {
	int code;
	const char *name, *text;
} errors[] = {
	{0, "CUDA_SUCCESS", "no error"},
	{1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
	{2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
	{3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
	{4, "CUDA_ERROR_DEINITIALIZED",
	 "driver shutting down (the CUDA driver is shutting down: the process is exiting)"},
	{34, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
	{35, "CUDA_ERROR_INSUFFICIENT_DRIVER", "the installed NVIDIA driver is older than the CUDA runtime"},
	{36, "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER", "operation not supported by this driver version"},
	{46, "CUDA_ERROR_DEVICE_UNAVAILABLE", "CUDA-capable device(s) busy or unavailable"},
	{100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
	{101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
	{200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
	{201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
	{209, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
	{214, "CUDA_ERROR_ECC_UNCORRECTABLE", "uncorrectable ECC error encountered"},
	{218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
	{222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "the provided PTX was compiled with an unsupported toolchain"},
	{400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
	{401, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
	{500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
	{600, "CUDA_ERROR_NOT_READY", "device not ready"},
	{700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
	{701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
	{702, "CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"},
	{709, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
	{710, "CUDA_ERROR_ASSERT", "device-side assert triggered"},
	{715, "CUDA_ERROR_ILLEGAL_INSTRUCTION", "an illegal instruction was encountered"},
	{716, "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"},
	{719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
	{720, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", "too many blocks in cooperative launch"},
	{800, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
	{801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
	{802, "CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized"},
	{803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "system has unsupported display driver / cuda driver combination"},
	{900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing"},
	{901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "operation failed due to a previous error during capture"},
	{906, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT", "operation would make the legacy stream depend on a capturing blocking stream"},
	{908, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", "attempt to terminate a thread-local capture sequence from another thread"},
	{909, "CUDA_ERROR_TIMEOUT", "wait operation timed out"},
	{999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static const struct {
	const char *name;
	int value;
} attrs[] = {
	{"MAX_THREADS_PER_BLOCK", TF_CU_ATTR_MAX_THREADS_PER_BLOCK},
	{"MAX_SHARED_MEMORY_PER_BLOCK", TF_CU_ATTR_MAX_SHARED_MEMORY_PER_BLOCK},
	{"WARP_SIZE", TF_CU_ATTR_WARP_SIZE},
	{"CLOCK_RATE", TF_CU_ATTR_CLOCK_RATE},
	{"MULTIPROCESSOR_COUNT", TF_CU_ATTR_MULTIPROCESSOR_COUNT},
	{"INTEGRATED", TF_CU_ATTR_INTEGRATED},
	{"CONCURRENT_KERNELS", TF_CU_ATTR_CONCURRENT_KERNELS},
	{"ECC_ENABLED", TF_CU_ATTR_ECC_ENABLED},
	{"PCI_BUS_ID", TF_CU_ATTR_PCI_BUS_ID},
	{"PCI_DEVICE_ID", TF_CU_ATTR_PCI_DEVICE_ID},
	{"MEMORY_CLOCK_RATE", TF_CU_ATTR_MEMORY_CLOCK_RATE},
	{"GLOBAL_MEMORY_BUS_WIDTH", TF_CU_ATTR_GLOBAL_MEMORY_BUS_WIDTH},
	{"L2_CACHE_SIZE", TF_CU_ATTR_L2_CACHE_SIZE},
	{"MAX_THREADS_PER_MULTIPROCESSOR", TF_CU_ATTR_MAX_THREADS_PER_MULTIPROCESSOR},
	{"ASYNC_ENGINE_COUNT", TF_CU_ATTR_ASYNC_ENGINE_COUNT},
	{"UNIFIED_ADDRESSING", TF_CU_ATTR_UNIFIED_ADDRESSING},
	{"PCI_DOMAIN_ID", TF_CU_ATTR_PCI_DOMAIN_ID},
	{"COMPUTE_CAPABILITY_MAJOR", TF_CU_ATTR_COMPUTE_CAPABILITY_MAJOR},
	{"COMPUTE_CAPABILITY_MINOR", TF_CU_ATTR_COMPUTE_CAPABILITY_MINOR},
	{"MAX_SHARED_MEMORY_PER_MULTIPROCESSOR", TF_CU_ATTR_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR},
	{"MAX_REGISTERS_PER_MULTIPROCESSOR", TF_CU_ATTR_MAX_REGISTERS_PER_MULTIPROCESSOR},
	{"MANAGED_MEMORY", TF_CU_ATTR_MANAGED_MEMORY},
	{"COOPERATIVE_LAUNCH", TF_CU_ATTR_COOPERATIVE_LAUNCH},
	{"MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", TF_CU_ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN},
	{"HOST_REGISTER_SUPPORTED", TF_CU_ATTR_HOST_REGISTER_SUPPORTED},
	{"VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED", TF_CU_ATTR_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED},
	{"MAX_BLOCKS_PER_MULTIPROCESSOR", TF_CU_ATTR_MAX_BLOCKS_PER_MULTIPROCESSOR},
	{"MAX_PERSISTING_L2_CACHE_SIZE", TF_CU_ATTR_MAX_PERSISTING_L2_CACHE_SIZE},
	{"GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED", TF_CU_ATTR_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED},
	{"MEMORY_POOLS_SUPPORTED", TF_CU_ATTR_MEMORY_POOLS_SUPPORTED},
	{"GPU_DIRECT_RDMA_SUPPORTED", TF_CU_ATTR_GPU_DIRECT_RDMA_SUPPORTED},
	{"CLUSTER_LAUNCH", TF_CU_ATTR_CLUSTER_LAUNCH},
	{"DMA_BUF_SUPPORTED", TF_CU_ATTR_DMA_BUF_SUPPORTED},
	{"MEM_SYNC_DOMAIN_COUNT", TF_CU_ATTR_MEM_SYNC_DOMAIN_COUNT},
	{"MULTICAST_SUPPORTED", TF_CU_ATTR_MULTICAST_SUPPORTED},
};

static struct tf_cu_driver the_driver;
/* Devices open (each holds a retain of its primary context). */
static int open_devices;
static const struct tf_cu_api null_api;
const struct tf_cu_api *tf_cu = &null_api;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static tf_status init_st;
static char init_msg[512];

const char *tf_cu_error_name_builtin(int res)
{
	for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
		if (errors[i].code == res)
			return errors[i].name;
	return NULL;
}

static const char *builtin_text(int res)
{
	for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
		if (errors[i].code == res)
			return errors[i].text;
	return NULL;
}

const char *tf_cu_error_name(int res)
{
	const char *s = NULL;
	/* A driver in teardown cannot name its own error: never ask it. */
	if (res != TF_CU_ERROR_DEINITIALIZED && tf_cu->GetErrorName &&
	    tf_cu->GetErrorName(res, &s) == TF_CU_SUCCESS && s)
		return s;
	s = tf_cu_error_name_builtin(res);
	return s ? s : "CUDA_ERROR_UNKNOWN_CODE";
}

const char *tf_cu_error_text(int res)
{
	const char *s = NULL;
	if (res != TF_CU_ERROR_DEINITIALIZED && tf_cu->GetErrorString &&
	    tf_cu->GetErrorString(res, &s) == TF_CU_SUCCESS && s)
		return s;
	s = builtin_text(res);
	return s ? s : "";
}

tf_status tf_cu_check(int res, const char *what, const char *file, int line)
{
	if (res == TF_CU_SUCCESS)
		return TF_OK;
	const char *base = strrchr(file, '/');
	base = base ? base + 1 : file;
	tf_status st;
	switch (res) {
	case TF_CU_ERROR_OUT_OF_MEMORY: st = TF_ERR_NOMEM; break;
	case TF_CU_ERROR_NOT_FOUND: st = TF_ERR_NOTFOUND; break;
	case TF_CU_ERROR_NOT_SUPPORTED: st = TF_ERR_UNSUPPORTED; break;
	case TF_CU_ERROR_DEINITIALIZED:
	case TF_CU_ERROR_NO_DEVICE:
	case TF_CU_ERROR_INVALID_DEVICE:
	case TF_CU_ERROR_STUB_LIBRARY:
	case TF_CU_ERROR_INSUFFICIENT_DRIVER: st = TF_ERR_UNAVAILABLE; break;
	default: st = TF_ERR_INTERNAL; break;
	}
	const char *text = tf_cu_error_text(res);
	return tf_err(st, "%s at %s:%d: %s (%d)%s%s", what, base, line, tf_cu_error_name(res),
	              res, *text ? ": " : "", text);
}

static void *find(void *dl, const struct sym *s, const char **which)
{
	for (int k = 0; k < 2 && s->names[k]; k++) {
		void *p = dlsym(dl, s->names[k]);
		if (p) {
			*which = s->names[k];
			return p;
		}
	}
	return NULL;
}

tf_status tf_cu_load(const char *path, struct tf_cu_driver *d)
{
	tf_status st = TF_OK;
	memset(d, 0, sizeof(*d));
	if (!path || !*path) {
		path = getenv("TF_CUDA_LIBRARY");
		if (!path || !*path)
			path = "libcuda.so.1";
	}
	snprintf(d->path, sizeof(d->path), "%s", path);
	d->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!d->dl)
		return tf_err(TF_ERR_UNAVAILABLE,
		              "cannot load the CUDA driver '%s': %s (no NVIDIA driver on this machine?)",
		              path, dlerror());
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		const char *which = NULL;
		void *p = find(d->dl, &syms[i], &which);
		if (!p && !syms[i].optional) {
			st = tf_err(TF_ERR_UNAVAILABLE,
			            "the CUDA driver '%s' lacks %s (driver too old?)", path,
			            syms[i].names[0]);
			goto out;
		}
		/* A data pointer to a function pointer: the POSIX dlsym idiom. */
		memcpy((char *)&d->api + syms[i].off, &p, sizeof(p));
	}
	int res = d->api.Init(0);
	if (res != TF_CU_SUCCESS) {
		const char *name = tf_cu_error_name_builtin(res);
		const char *s = NULL;
		if (res != TF_CU_ERROR_DEINITIALIZED && d->api.GetErrorName(res, &s) == 0 && s)
			name = s;
		st = tf_err(TF_ERR_UNAVAILABLE, "no usable CUDA device: cuInit: %s (%d)%s",
		            name ? name : "CUDA_ERROR_UNKNOWN_CODE", res,
		            res == TF_CU_ERROR_NO_DEVICE ? ": no CUDA-capable device is detected" : "");
		goto out;
	}
	res = d->api.DriverGetVersion(&d->version);
	if (res != TF_CU_SUCCESS) {
		st = tf_err(TF_ERR_UNAVAILABLE, "cuDriverGetVersion failed (%d)", res);
		goto out;
	}
	tf_log(TF_LOG_DEBUG, "cuda: loaded '%s', driver API %d.%d", path, d->version / 1000,
	       d->version % 1000 / 10);
out:
	if (st)
		tf_cu_unload(d);
	return st;
}

void tf_cu_unload(struct tf_cu_driver *d)
{
	if (d->dl)
		dlclose(d->dl);
	memset(d, 0, sizeof(*d));
}

static void init_once(void)
{
	init_st = tf_cu_load(NULL, &the_driver);
	if (init_st) {
		snprintf(init_msg, sizeof(init_msg), "%s", tf_errmsg(init_st));
		return;
	}
	tf_cu = &the_driver.api;
}

tf_status tf_cu_init(void)
{
	pthread_once(&once, init_once);
	if (init_st)
		return tf_err(init_st, "%s", init_msg);
	return TF_OK;
}

const struct tf_cu_driver *tf_cu_driver_get(void)
{
	return the_driver.dl ? &the_driver : NULL;
}

int tf_cu_attr_by_name(const char *name)
{
	if (!strncmp(name, "CU_DEVICE_ATTRIBUTE_", 20))
		name += 20;
	for (size_t i = 0; i < sizeof(attrs) / sizeof(attrs[0]); i++)
		if (!strcmp(attrs[i].name, name))
			return attrs[i].value;
	return -1;
}

const char *tf_cu_attr_name(int attr)
{
	for (size_t i = 0; i < sizeof(attrs) / sizeof(attrs[0]); i++)
		if (attrs[i].value == attr)
			return attrs[i].name;
	return NULL;
}

bool tf_cu_attr_at(size_t i, const char **name, int *value)
{
	if (i >= sizeof(attrs) / sizeof(attrs[0]))
		return false;
	*name = attrs[i].name;
	*value = attrs[i].value;
	return true;
}

tf_status tf_cu_device_attr(const struct tf_cu_device *dev, enum tf_cu_attr a, int *v)
{
	tf_status st = TF_CU(tf_cu->DeviceGetAttribute(v, (int)a, dev->dev));
	if (st)
		return tf_err_wrap(st, "attribute %s: ", tf_cu_attr_name((int)a) ? tf_cu_attr_name((int)a) : "?");
	return TF_OK;
}

tf_status tf_cu_device_open(int ordinal, struct tf_cu_device *dev)
{
	memset(dev, 0, sizeof(*dev));
	dev->ordinal = ordinal;
	tf_status st = tf_cu_init();
	if (st)
		return st;
	int n = 0;
	if ((st = TF_CU(tf_cu->DeviceGetCount(&n))))
		return st;
	if (ordinal < 0 || ordinal >= n)
		return tf_err(TF_ERR_UNAVAILABLE, "no CUDA device %d (this machine has %d)", ordinal, n);
	if ((st = TF_CU(tf_cu->DeviceGet(&dev->dev, ordinal))))
		return st;
	if ((st = TF_CU(tf_cu->DevicePrimaryCtxRetain(&dev->ctx, dev->dev))))
		return st;
	__atomic_add_fetch(&open_devices, 1, __ATOMIC_SEQ_CST);
	int v = 0;
	if ((st = TF_CU(tf_cu->CtxSetCurrent(dev->ctx))))
		goto out;
	if ((st = TF_CU(tf_cu->DeviceGetName(dev->name, (int)sizeof(dev->name), dev->dev))))
		goto out;
	if ((st = TF_CU(tf_cu->DeviceTotalMem(&dev->total_mem, dev->dev))))
		goto out;
	if ((st = tf_cu_device_attr(dev, TF_CU_ATTR_COMPUTE_CAPABILITY_MAJOR, &dev->cc_major)) ||
	    (st = tf_cu_device_attr(dev, TF_CU_ATTR_COMPUTE_CAPABILITY_MINOR, &dev->cc_minor)) ||
	    (st = tf_cu_device_attr(dev, TF_CU_ATTR_MULTIPROCESSOR_COUNT, &dev->sms)) ||
	    (st = tf_cu_device_attr(dev, TF_CU_ATTR_L2_CACHE_SIZE, &dev->l2_bytes)))
		goto out;
	if ((st = tf_cu_device_attr(dev, TF_CU_ATTR_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, &v)))
		goto out;
	dev->vmm = v != 0;
	if ((st = tf_cu_device_attr(dev, TF_CU_ATTR_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, &v)))
		goto out;
	dev->rdma_vmm = v != 0;
	tf_log(TF_LOG_DEBUG, "cuda: device %d: %s, sm_%d%d, %d SMs, %zu MiB", ordinal, dev->name,
	       dev->cc_major, dev->cc_minor, dev->sms, dev->total_mem >> 20);
out:
	if (st)
		tf_cu_device_close(dev);
	return st;
}

tf_status tf_cu_device_use(const struct tf_cu_device *dev)
{
	return TF_CU(tf_cu->CtxSetCurrent(dev->ctx));
}

void tf_cu_device_close(struct tf_cu_device *dev)
{
	if (dev->ctx && tf_cu->DevicePrimaryCtxRelease) {
		tf_cu->DevicePrimaryCtxRelease(dev->dev);
		/* the last release destroys the primary context, and the kernel
		 * module loaded into it */
		if (__atomic_sub_fetch(&open_devices, 1, __ATOMIC_SEQ_CST) == 0)
			tf_cu_module_forget();
	}
	dev->ctx = NULL;
}

const char *tf_cu_func_name(tf_cu_func f)
{
	const char *s = NULL;
	if (tf_cu->FuncGetName && tf_cu->FuncGetName(&s, f) == TF_CU_SUCCESS && s)
		return s;
	return "?";
}
