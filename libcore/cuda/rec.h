/* rec.h: the work queued on a stream, counted, and recorded instead of
 * queued while the stream's recorder is dry.
 *
 * Every place in libcore that queues work on a stream it was handed asks
 * the stream's recorder first: the compute backend's kernel launches,
 * copies and memsets (compute/cuda.c), the EXL3 launches (exl3_gemv.c,
 * exl3_gemm.c) and cuBLAS (blas.c). A stream nobody attached a recorder to
 * costs one lookup. With a recorder:
 * - every item is counted (kernels, cuBLAS calls, copies, memsets);
 * - while hashing, each item's identity is folded into a fingerprint
 *   (FNV-1a 64): a kernel's function handle, grid, block, shared memory,
 *   launch attributes and every parameter's bytes (sizes from the driver's
 *   cuFuncGetParamInfo, remembered per function); a copy's kind, addresses
 *   and size; a memset's address, value and size; a cuBLAS call's arguments.
 *   That is everything a CUDA graph captured from the same work bakes in,
 *   so equal fingerprints mean the same graph;
 * - while dry, the item is recorded and not queued: the caller calls no
 *   driver function and reports success.
 * A kernel whose parameter sizes cannot be read (no cuFuncGetParamInfo, a
 * driver older than 12.4) sets `unknown`: that fingerprint proves nothing.
 *
 * Thread safety: the registry and the parameter-size memo are locked; a
 * recorder's fields are its stream owner's (one thread queues on a stream
 * at a time, as the backends require). */
#ifndef TF_CUDA_REC_H
#define TF_CUDA_REC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "cuda/driver.h"

/* Items of work queued (or recorded while dry) on a stream. */
struct tf_cu_counts {
	uint64_t kernels; /* kernel launches */
	uint64_t blas;    /* cuBLAS calls (each may run kernels of its own) */
	uint64_t copies;  /* memcpy: host to device, device to host, device to device */
	uint64_t memsets;
};

#define TF_CU_REC_MAX_PARAMS 64

struct tf_cu_rec {
	struct tf_cu_counts n;
	bool dry;        /* record, do not queue */
	bool hashing;    /* fold items into fp */
	bool unknown;    /* a kernel's parameters could not be read while hashing */
	uint64_t fp;     /* FNV-1a 64 of the items since tf_cu_rec_begin */
	uint64_t items;  /* items hashed since tf_cu_rec_begin */
	int foreign;     /* inside tf_cu_rec_foreign .. _end: items are not hashed */
	/* The byte sizes of f's parameters, in order: how many (at most max),
	 * or -1 when unknown. NULL: the driver's cuFuncGetParamInfo. Tests
	 * set their own. */
	int (*param_sizes)(tf_cu_func f, size_t *sizes, int max);
};

/* Attach r to stream s (r is borrowed until detached; one recorder a
 * stream). TF_ERR_NOMEM when the registry (64 streams) is full. */
tf_status tf_cu_rec_attach(struct tf_cu_rec *r, tf_cu_stream s);
/* Detach whatever recorder s has (none: a no-op). */
void tf_cu_rec_detach(tf_cu_stream s);
/* s's recorder, or NULL. */
struct tf_cu_rec *tf_cu_rec_of(tf_cu_stream s);

/* Start a fingerprint: fp and items reset, unknown cleared, hashing on,
 * dry as given. tf_cu_rec_end turns hashing and dry off. */
void tf_cu_rec_begin(struct tf_cu_rec *r, bool dry);
void tf_cu_rec_end(struct tf_cu_rec *r);
/* Fold n bytes into r's fingerprint (an item of the caller's own: an
 * upload's host slot, a sizes word). */
void tf_cu_rec_mix(struct tf_cu_rec *r, const void *p, size_t n);

/* The work items, on stream s: counted and hashed as above. Each returns
 * true when s's recorder is dry: the caller queues nothing and succeeds.
 * attrs: cuLaunchKernelEx's attributes as bytes (NULL, 0 for
 * cuLaunchKernel). kind for copies: 'H' host to device, 'D' device to
 * host, 'd' device to device; src/dst are addresses either side. */
bool tf_cu_rec_kernel(tf_cu_stream s, tf_cu_func f, unsigned gx, unsigned gy, unsigned gz,
                      unsigned bx, unsigned by, unsigned bz, unsigned shmem, void **params,
                      const void *attrs, size_t attr_bytes);
bool tf_cu_rec_blas(tf_cu_stream s, const void *args, size_t n);
bool tf_cu_rec_copy(tf_cu_stream s, int kind, uint64_t dst, uint64_t src, size_t n);
bool tf_cu_rec_memset(tf_cu_stream s, uint64_t p, uint32_t value, unsigned elem, size_t n);

/* Work a library queues on s without asking the recorder (a collective:
 * NCCL's kernels, the mailbox's launch): tf_cu_rec_foreign folds id (n
 * bytes naming the call: its kind, buffers and sizes) into the
 * fingerprint as one item and returns true when s's recorder is dry (the
 * caller queues nothing and succeeds). Otherwise the caller queues the
 * work and then calls tf_cu_rec_foreign_end: in between, items on s are
 * counted but not hashed (a dry pass cannot see them, so the capture that
 * is compared with it must not either). */
bool tf_cu_rec_foreign(tf_cu_stream s, const void *id, size_t n);
void tf_cu_rec_foreign_end(tf_cu_stream s);

#endif
