/* module.h: tf's CUDA kernels as one driver module.
 *
 * kernels/<op>.cu files are compiled by nvcc into one fatbin (sm_90a machine code
 * plus compute_90 PTX that newer chips compile at load), embedded in libcore
 * as a byte array (tools/embed.sh) and loaded with cuModuleLoadData on first
 * use, into the context current at that moment. Kernels are looked up by
 * their extern "C" names. A build with CUDA=0 (no nvcc) has no fatbin:
 * every lookup then fails with TF_ERR_UNAVAILABLE saying so. Thread safe. */
#ifndef TF_CUDA_MODULE_H
#define TF_CUDA_MODULE_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"
#include "cuda/driver.h"

/* True when this build embeds kernels (built with CUDA=1). */
bool tf_cu_kernels_built(void);
/* Bytes of the embedded fatbin (0 without one). */
size_t tf_cu_fatbin_size(void);

/* Load the module once (later calls return the first result). Needs a
 * current context (tf_cu_device_open). */
tf_status tf_cu_module_load(void);
/* The kernel called name (loading the module first). TF_ERR_NOTFOUND when
 * the module has no such kernel. */
tf_status tf_cu_kernel(const char *name, tf_cu_func *f);
/* Unload the module (before the context goes away). Function handles
 * taken before are invalid after it. */
void tf_cu_module_unload(void);
/* A number that changes each time the module is loaded: callers that keep
 * function handles compare it to know when to look them up again. */
unsigned tf_cu_module_generation(void);
/* The context the module lived in is gone (the last device closed, so the
 * primary context was destroyed): the next lookup loads it again, with a
 * new generation, into the context then current. */
void tf_cu_module_forget(void);

/* Launch f with a 1-D grid and block; the failure names the kernel. */
tf_status tf_cu_launch(tf_cu_func f, unsigned grid, unsigned block, unsigned shmem,
                       tf_cu_stream s, void **params);

#endif
