/* driver.h: the CUDA driver API, loaded at run time with dlopen.
 *
 * libcore never links libcuda and never includes <cuda.h>: this header
 * declares the few driver types, enum values and entry points tf uses, with
 * the values of the CUDA 13 headers (a unit test compares them with cuda.h
 * where one is installed). tf_cu_load opens libcuda.so.1 (or
 * $TF_CUDA_LIBRARY), resolves every required entry point by its exact
 * versioned name (cuMemAlloc_v2, cuEventElapsedTime_v2, ...) and fails
 * naming the first missing one; optional entry points (cuFuncGetName, 12.3+)
 * may be absent and are left NULL. Without a driver or a device every entry
 * point returns TF_ERR_UNAVAILABLE with a message saying so (programs exit
 * 69), never a crash.
 *
 * Every driver call goes through TF_CU(call): a failure becomes a tf_status
 * whose detail names the call, the file and line, and the driver's error
 * name and text ("cuMemAlloc_v2(&p, n) at arena.c:120: CUDA_ERROR_OUT_OF_MEMORY
 * (2): out of memory"). */
#ifndef TF_CUDA_DRIVER_H
#define TF_CUDA_DRIVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/* Driver handles: opaque pointers (the tags are the driver's own, so they
 * stay compatible with cuda.h if a kernel launcher ever includes it). */
typedef struct CUctx_st *tf_cu_ctx;
typedef struct CUstream_st *tf_cu_stream;
typedef struct CUevent_st *tf_cu_event;
typedef struct CUmod_st *tf_cu_module;
typedef struct CUfunc_st *tf_cu_func;
typedef struct CUgraph_st *tf_cu_graph;
typedef struct CUgraphExec_st *tf_cu_graph_exec;
typedef uint64_t tf_cu_ptr;        /* CUdeviceptr */
typedef uint64_t tf_cu_mem_handle; /* CUmemGenericAllocationHandle */

/* CUresult values tf tests for by value. */
enum {
	TF_CU_SUCCESS = 0,
	TF_CU_ERROR_INVALID_VALUE = 1,
	TF_CU_ERROR_OUT_OF_MEMORY = 2,
	TF_CU_ERROR_NOT_INITIALIZED = 3,
	TF_CU_ERROR_DEINITIALIZED = 4, /* the driver is shutting down: the process is exiting */
	TF_CU_ERROR_STUB_LIBRARY = 34,
	TF_CU_ERROR_INSUFFICIENT_DRIVER = 35,
	TF_CU_ERROR_NO_DEVICE = 100,
	TF_CU_ERROR_INVALID_DEVICE = 101,
	TF_CU_ERROR_NO_BINARY_FOR_GPU = 209,
	TF_CU_ERROR_NOT_FOUND = 500,
	TF_CU_ERROR_NOT_READY = 600,
	TF_CU_ERROR_NOT_SUPPORTED = 801,
	TF_CU_ERROR_UNKNOWN = 999,
};

/* CUdevice_attribute values tf reads (CUDA 13 cuda.h). 110 is the
 * GPUDirect-RDMA-with-VMM flag; 126 is the memory sync domain count (an
 * older port mixed them up: tests/unit/check_cuda.c pins both). */
enum tf_cu_attr {
	TF_CU_ATTR_MAX_THREADS_PER_BLOCK = 1,
	TF_CU_ATTR_MAX_SHARED_MEMORY_PER_BLOCK = 8,
	TF_CU_ATTR_WARP_SIZE = 10,
	TF_CU_ATTR_CLOCK_RATE = 13,
	TF_CU_ATTR_MULTIPROCESSOR_COUNT = 16,
	TF_CU_ATTR_INTEGRATED = 18,
	TF_CU_ATTR_CONCURRENT_KERNELS = 31,
	TF_CU_ATTR_ECC_ENABLED = 32,
	TF_CU_ATTR_PCI_BUS_ID = 33,
	TF_CU_ATTR_PCI_DEVICE_ID = 34,
	TF_CU_ATTR_MEMORY_CLOCK_RATE = 36,
	TF_CU_ATTR_GLOBAL_MEMORY_BUS_WIDTH = 37,
	TF_CU_ATTR_L2_CACHE_SIZE = 38,
	TF_CU_ATTR_MAX_THREADS_PER_MULTIPROCESSOR = 39,
	TF_CU_ATTR_ASYNC_ENGINE_COUNT = 40,
	TF_CU_ATTR_UNIFIED_ADDRESSING = 41,
	TF_CU_ATTR_PCI_DOMAIN_ID = 50,
	TF_CU_ATTR_COMPUTE_CAPABILITY_MAJOR = 75,
	TF_CU_ATTR_COMPUTE_CAPABILITY_MINOR = 76,
	TF_CU_ATTR_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81,
	TF_CU_ATTR_MAX_REGISTERS_PER_MULTIPROCESSOR = 82,
	TF_CU_ATTR_MANAGED_MEMORY = 83,
	TF_CU_ATTR_COOPERATIVE_LAUNCH = 95,
	TF_CU_ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
	TF_CU_ATTR_HOST_REGISTER_SUPPORTED = 99,
	TF_CU_ATTR_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102,
	TF_CU_ATTR_MAX_BLOCKS_PER_MULTIPROCESSOR = 106,
	TF_CU_ATTR_MAX_PERSISTING_L2_CACHE_SIZE = 108,
	TF_CU_ATTR_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED = 110,
	TF_CU_ATTR_MEMORY_POOLS_SUPPORTED = 115,
	TF_CU_ATTR_GPU_DIRECT_RDMA_SUPPORTED = 116,
	TF_CU_ATTR_CLUSTER_LAUNCH = 120,
	TF_CU_ATTR_DMA_BUF_SUPPORTED = 124,
	TF_CU_ATTR_MEM_SYNC_DOMAIN_COUNT = 126,
	TF_CU_ATTR_MULTICAST_SUPPORTED = 132,
};

/* Other driver enum values used with the entry points below. */
enum {
	TF_CU_STREAM_NON_BLOCKING = 1,
	TF_CU_EVENT_DEFAULT = 0,
	TF_CU_EVENT_DISABLE_TIMING = 2,
	TF_CU_STREAM_CAPTURE_MODE_GLOBAL = 0,
	TF_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
	TF_CU_STREAM_CAPTURE_MODE_RELAXED = 2,
	TF_CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1,
	TF_CU_FUNC_ATTRIBUTE_NUM_REGS = 4,
	TF_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
	TF_CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14,
	TF_CU_MEM_ALLOCATION_TYPE_PINNED = 1,
	TF_CU_MEM_LOCATION_TYPE_DEVICE = 1,
	TF_CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3,
	TF_CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0,
	TF_CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1,
};

/* CUmemLocation, CUmemAllocationProp and CUmemAccessDesc, same layout. */
struct tf_cu_mem_location {
	int type; /* TF_CU_MEM_LOCATION_TYPE_DEVICE */
	int id;   /* device ordinal */
};
struct tf_cu_mem_prop {
	int type;                 /* TF_CU_MEM_ALLOCATION_TYPE_PINNED */
	int requested_handle_types;
	struct tf_cu_mem_location location;
	void *win32_meta;
	unsigned char compression_type;
	unsigned char gpu_direct_rdma_capable;
	unsigned short usage;
	unsigned char reserved[4];
};
struct tf_cu_mem_access {
	struct tf_cu_mem_location location;
	int flags; /* TF_CU_MEM_ACCESS_FLAGS_PROT_READWRITE */
};

/* The entry points, named without their "cu" prefix and version suffix;
 * the comment gives the exact symbol resolved. All return a CUresult. */
/* cuLaunchKernelEx's CUlaunchAttribute (72 bytes: an id, padding, a
 * 64-byte value union) and CUlaunchConfig, field for field. */
#define TF_CU_LAUNCH_ATTR_CLUSTER_DIMENSION 4
#define TF_CU_LAUNCH_ATTR_PROGRAMMATIC_STREAM_SERIALIZATION 6
struct tf_cu_launch_attr {
	int id;
	int pad;
	union {
		char bytes[64];
		int i;
		struct {
			unsigned x, y, z;
		} cluster; /* blocks a cluster spans, per grid dimension */
	} value;
};
struct tf_cu_launch_config {
	unsigned gx, gy, gz, bx, by, bz, shmem;
	tf_cu_stream s;
	struct tf_cu_launch_attr *attrs;
	unsigned nattrs;
};

struct tf_cu_api {
	int (*Init)(unsigned flags);                                  /* cuInit */
	int (*DriverGetVersion)(int *v);                               /* cuDriverGetVersion */
	int (*GetErrorName)(int res, const char **s);                  /* cuGetErrorName */
	int (*GetErrorString)(int res, const char **s);                /* cuGetErrorString */
	int (*DeviceGet)(int *dev, int ordinal);                       /* cuDeviceGet */
	int (*DeviceGetCount)(int *n);                                 /* cuDeviceGetCount */
	int (*DeviceGetName)(char *name, int len, int dev);            /* cuDeviceGetName */
	int (*DeviceGetAttribute)(int *v, int attr, int dev);          /* cuDeviceGetAttribute */
	int (*DeviceTotalMem)(size_t *bytes, int dev);                 /* cuDeviceTotalMem_v2 */
	int (*DevicePrimaryCtxRetain)(tf_cu_ctx *ctx, int dev);        /* cuDevicePrimaryCtxRetain */
	int (*DevicePrimaryCtxRelease)(int dev);                       /* cuDevicePrimaryCtxRelease_v2 */
	int (*CtxSetCurrent)(tf_cu_ctx ctx);                           /* cuCtxSetCurrent */
	int (*CtxSynchronize)(void);                                   /* cuCtxSynchronize */
	int (*MemGetInfo)(size_t *free_b, size_t *total_b);            /* cuMemGetInfo_v2 */
	int (*MemAlloc)(tf_cu_ptr *p, size_t n);                       /* cuMemAlloc_v2 */
	int (*MemFree)(tf_cu_ptr p);                                   /* cuMemFree_v2 */
	int (*MemAllocHost)(void **p, size_t n);                       /* cuMemAllocHost_v2 */
	int (*MemFreeHost)(void *p);                                   /* cuMemFreeHost */
	int (*MemcpyHtoD)(tf_cu_ptr dst, const void *src, size_t n);   /* cuMemcpyHtoD_v2 */
	int (*MemcpyDtoH)(void *dst, tf_cu_ptr src, size_t n);         /* cuMemcpyDtoH_v2 */
	int (*MemcpyDtoD)(tf_cu_ptr dst, tf_cu_ptr src, size_t n);     /* cuMemcpyDtoD_v2 */
	int (*MemcpyHtoDAsync)(tf_cu_ptr dst, const void *src, size_t n, tf_cu_stream s); /* cuMemcpyHtoDAsync_v2 */
	int (*MemcpyDtoHAsync)(void *dst, tf_cu_ptr src, size_t n, tf_cu_stream s);       /* cuMemcpyDtoHAsync_v2 */
	int (*MemcpyDtoDAsync)(tf_cu_ptr dst, tf_cu_ptr src, size_t n, tf_cu_stream s);   /* cuMemcpyDtoDAsync_v2 */
	int (*MemsetD8)(tf_cu_ptr p, unsigned char v, size_t n);       /* cuMemsetD8_v2 */
	int (*MemsetD8Async)(tf_cu_ptr p, unsigned char v, size_t n, tf_cu_stream s); /* cuMemsetD8Async */
	int (*MemsetD32Async)(tf_cu_ptr p, unsigned v, size_t n, tf_cu_stream s);     /* cuMemsetD32Async */
	int (*StreamCreate)(tf_cu_stream *s, unsigned flags);          /* cuStreamCreate */
	int (*StreamDestroy)(tf_cu_stream s);                          /* cuStreamDestroy_v2 */
	int (*StreamSynchronize)(tf_cu_stream s);                      /* cuStreamSynchronize */
	int (*StreamBeginCapture)(tf_cu_stream s, int mode);           /* cuStreamBeginCapture_v2 */
	int (*StreamEndCapture)(tf_cu_stream s, tf_cu_graph *g);       /* cuStreamEndCapture */
	int (*StreamIsCapturing)(tf_cu_stream s, int *status);         /* cuStreamIsCapturing */
	int (*EventCreate)(tf_cu_event *e, unsigned flags);            /* cuEventCreate */
	int (*EventDestroy)(tf_cu_event e);                            /* cuEventDestroy_v2 */
	int (*EventRecord)(tf_cu_event e, tf_cu_stream s);             /* cuEventRecord */
	int (*EventSynchronize)(tf_cu_event e);                        /* cuEventSynchronize */
	int (*EventElapsedTime)(float *ms, tf_cu_event a, tf_cu_event b); /* cuEventElapsedTime_v2, else cuEventElapsedTime */
	int (*ModuleLoadData)(tf_cu_module *m, const void *image);     /* cuModuleLoadData */
	int (*ModuleUnload)(tf_cu_module m);                           /* cuModuleUnload */
	int (*ModuleGetFunction)(tf_cu_func *f, tf_cu_module m, const char *name); /* cuModuleGetFunction */
	int (*FuncSetAttribute)(tf_cu_func f, int attr, int v);        /* cuFuncSetAttribute */
	int (*FuncGetAttribute)(int *v, int attr, tf_cu_func f);       /* cuFuncGetAttribute */
	int (*LaunchKernel)(tf_cu_func f, unsigned gx, unsigned gy, unsigned gz,
	                    unsigned bx, unsigned by, unsigned bz, unsigned shmem,
	                    tf_cu_stream s, void **params, void **extra); /* cuLaunchKernel */
	int (*GraphInstantiate)(tf_cu_graph_exec *e, tf_cu_graph g, unsigned long long flags); /* cuGraphInstantiateWithFlags */
	int (*GraphUpload)(tf_cu_graph_exec e, tf_cu_stream s);        /* cuGraphUpload */
	int (*GraphLaunch)(tf_cu_graph_exec e, tf_cu_stream s);        /* cuGraphLaunch */
	int (*GraphDestroy)(tf_cu_graph g);                            /* cuGraphDestroy */
	int (*GraphExecDestroy)(tf_cu_graph_exec e);                   /* cuGraphExecDestroy */
	int (*MemAddressReserve)(tf_cu_ptr *p, size_t n, size_t align, tf_cu_ptr addr, unsigned long long flags); /* cuMemAddressReserve */
	int (*MemAddressFree)(tf_cu_ptr p, size_t n);                  /* cuMemAddressFree */
	int (*MemCreate)(tf_cu_mem_handle *h, size_t n, const struct tf_cu_mem_prop *prop, unsigned long long flags); /* cuMemCreate */
	int (*MemRelease)(tf_cu_mem_handle h);                         /* cuMemRelease */
	int (*MemMap)(tf_cu_ptr p, size_t n, size_t off, tf_cu_mem_handle h, unsigned long long flags); /* cuMemMap */
	int (*MemUnmap)(tf_cu_ptr p, size_t n);                        /* cuMemUnmap */
	int (*MemSetAccess)(tf_cu_ptr p, size_t n, const struct tf_cu_mem_access *desc, size_t count); /* cuMemSetAccess */
	int (*MemGetAllocationGranularity)(size_t *g, const struct tf_cu_mem_prop *prop, int option); /* cuMemGetAllocationGranularity */
	/* Optional: NULL when the driver lacks them. */
	int (*FuncGetName)(const char **name, tf_cu_func f);           /* cuFuncGetName (12.3+) */
	int (*LaunchKernelEx)(const struct tf_cu_launch_config *c, tf_cu_func f, void **params,
	                      void **extra);                            /* cuLaunchKernelEx (12.0+) */
	int (*OccupancyMaxActiveClusters)(int *n, tf_cu_func f,
	                                  const struct tf_cu_launch_config *c); /* cuOccupancyMaxActiveClusters (11.8+) */
	int (*EventQuery)(tf_cu_event e);                              /* cuEventQuery (every driver has
	                                                                * it; optional for the tests' fake) */
	int (*FuncGetParamInfo)(tf_cu_func f, size_t i, size_t *off,
	                        size_t *size);                         /* cuFuncGetParamInfo (12.4+): a
	                                                                * kernel parameter's offset and size */
};

/* A loaded driver. */
struct tf_cu_driver {
	void *dl;              /* dlopen handle */
	char path[256];        /* what was opened */
	int version;           /* cuDriverGetVersion: 1000*major + 10*minor */
	struct tf_cu_api api;
};

/* Open the driver library at path (NULL: $TF_CUDA_LIBRARY, else
 * "libcuda.so.1"), resolve the entry points into d and call cuInit(0).
 * Errors: TF_ERR_UNAVAILABLE when the library cannot be opened, lacks a
 * required entry point (named in the detail), or cuInit finds no device or
 * no working driver. On error nothing stays open. Not thread safe. */
tf_status tf_cu_load(const char *path, struct tf_cu_driver *d);
/* Close what tf_cu_load opened (safe on a zeroed or failed d). */
void tf_cu_unload(struct tf_cu_driver *d);

/* The process's driver: tf_cu_init loads it once (thread safe; later calls
 * return the first result) and makes tf_cu point at its entry points.
 * Before a successful tf_cu_init, tf_cu's members are NULL. */
tf_status tf_cu_init(void);
extern const struct tf_cu_api *tf_cu;
const struct tf_cu_driver *tf_cu_driver_get(void);

/* The driver's name for a CUresult ("CUDA_ERROR_OUT_OF_MEMORY"), else our
 * own table's, else "CUDA_ERROR_UNKNOWN_CODE". Code 4 is named from our
 * table without asking the driver (it is shutting down). Never NULL;
 * static storage. */
const char *tf_cu_error_name(int res);
/* The driver's description of a CUresult, else ours, else "". Code 4 says
 * the driver is shutting down because the process is exiting. */
const char *tf_cu_error_text(int res);
/* The name from our table only (NULL when it has none): for tests. */
const char *tf_cu_error_name_builtin(int res);

/* Turn a CUresult into a tf_status: TF_OK for success, else record
 * "what at file:line: NAME (code): text" and return TF_ERR_NOMEM for out of
 * memory, TF_ERR_NOTFOUND for not found, TF_ERR_UNAVAILABLE for no device,
 * a deinitialized driver or a missing driver, TF_ERR_UNSUPPORTED for not
 * supported, else TF_ERR_INTERNAL. */
tf_status tf_cu_check(int res, const char *what, const char *file, int line);
#define TF_CU(call) tf_cu_check((call), #call, __FILE__, __LINE__)

/* Attribute names ("MULTIPROCESSOR_COUNT", the cuda.h name without its
 * CU_DEVICE_ATTRIBUTE_ prefix) to values, for the attributes of enum
 * tf_cu_attr. -1 for an unknown name. */
int tf_cu_attr_by_name(const char *name);
/* The name of an attribute value, or NULL. */
const char *tf_cu_attr_name(int attr);
/* Iterate the table: i from 0 while it returns true. */
bool tf_cu_attr_at(size_t i, const char **name, int *value);

/* One device made current on the calling thread: its primary context. */
struct tf_cu_device {
	int ordinal;
	int dev;                 /* CUdevice */
	tf_cu_ctx ctx;           /* retained primary context */
	char name[128];
	int cc_major, cc_minor;
	int sms;                 /* multiprocessors */
	int l2_bytes;
	size_t total_mem;
	bool vmm;                /* virtual memory management */
	bool rdma_vmm;           /* GPUDirect RDMA with VMM (attribute 110) */
};

/* tf_cu_init, then retain device ordinal's primary context and make it
 * current on the calling thread. TF_ERR_UNAVAILABLE when no such device. */
tf_status tf_cu_device_open(int ordinal, struct tf_cu_device *dev);
/* Make dev's context current on the calling thread (other threads). */
tf_status tf_cu_device_use(const struct tf_cu_device *dev);
/* Release the primary context. */
void tf_cu_device_close(struct tf_cu_device *dev);
/* Read one attribute of dev. */
tf_status tf_cu_device_attr(const struct tf_cu_device *dev, enum tf_cu_attr a, int *v);

/* A kernel's name from the driver, or "?" without cuFuncGetName. */
const char *tf_cu_func_name(tf_cu_func f);

#endif
