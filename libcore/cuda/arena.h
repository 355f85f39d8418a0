/* arena.h: a device memory arena, and the device buffer type it backs.
 *
 * The arena sub-allocates device memory from a few large chunks that it gets
 * from a backend: plain cuMemAlloc chunks, or physical memory mapped in order
 * into one reserved virtual address range (VMM). Every address it returns is
 * 512-byte aligned.
 * - Small requests (at most small_max, 4 MiB by default) are rounded up to
 *   512 bytes and packed into shared chunks of at least chunk_min (64 MiB);
 *   a freed small block goes to the free list of its rounded size and is
 *   handed out again to the next request of that size. Small blocks are not
 *   returned to the backend before tf_arena_free.
 * - Large requests get a chunk of their own, rounded up to the backend's
 *   granularity and given back to the backend when freed.
 * - A limit caps the bytes taken from the backend; past it an allocation
 *   fails with TF_ERR_NOMEM and is counted in stats.refused (callers may
 *   fall back to cuMemAlloc: see tf_cu_buf_alloc).
 * The maps (live blocks, free lists) are base hash maps, whose tombstones
 * are rebuilt away, so endless alloc/free does not degrade them.
 * Thread safe: one mutex per arena.
 *
 * The backend interface exists so that tests run the arena over host memory
 * on a machine without a GPU; tf_arena_backend_plain/_vmm are the real ones. */
#ifndef TF_CUDA_ARENA_H
#define TF_CUDA_ARENA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "cuda/driver.h"

#define TF_ARENA_ALIGN 512

/* Where chunks come from. map returns size bytes (a multiple of
 * granularity) at an address aligned to at least TF_ARENA_ALIGN; unmap gives
 * them back; close releases the backend itself (may be NULL). */
struct tf_arena_backend {
	void *ctx;
	size_t granularity; /* a power of two ≥ TF_ARENA_ALIGN */
	const char *name;   /* "plain", "vmm", "host" */
	tf_status (*map)(void *ctx, size_t size, uint64_t *addr);
	void (*unmap)(void *ctx, uint64_t addr, size_t size);
	void (*close)(void *ctx);
};

struct tf_arena_opts {
	size_t limit;     /* most bytes taken from the backend; 0: no limit */
	size_t small_max; /* largest packed request; 0: 4 MiB */
	size_t chunk_min; /* smallest shared chunk; 0: 64 MiB */
};

struct tf_arena_stats {
	size_t mapped;      /* bytes held from the backend now */
	size_t mapped_peak;
	size_t in_use;      /* bytes handed out and not freed (rounded sizes) */
	size_t in_use_peak;
	size_t cached;      /* bytes on small free lists */
	size_t limit;
	uint64_t allocs, frees;
	uint64_t reused;    /* small allocations served from a free list */
	uint64_t refused;   /* allocations refused (limit or backend failure) */
	size_t chunks;      /* shared chunks */
	size_t large;       /* live large allocations */
	size_t live;        /* live allocations of any size */
	size_t map_tombs;   /* tombstones in the live map now (for tests) */
	size_t map_cap;     /* capacity of the live map now */
};

struct tf_arena;

/* A new arena over be (copied; the arena closes it in tf_arena_free).
 * opts may be NULL. On error be is not closed. */
tf_status tf_arena_new(const struct tf_arena_backend *be, const struct tf_arena_opts *opts,
                       struct tf_arena **out);
/* Give every chunk back and close the backend; live blocks die with it.
 * NULL is a no-op. */
void tf_arena_free(struct tf_arena *a);

/* n bytes (n may be 0: one 512-byte block) at *addr. TF_ERR_NOMEM past the
 * limit or when the backend fails (the detail says which). */
tf_status tf_arena_alloc(struct tf_arena *a, size_t n, uint64_t *addr);
/* Free a block returned by tf_arena_alloc. TF_ERR_NOTFOUND (and nothing
 * changes) for an address the arena did not hand out: a foreign pointer,
 * the caller frees it as it was allocated. */
tf_status tf_arena_dealloc(struct tf_arena *a, uint64_t addr);
/* True when addr is a live block of this arena. */
bool tf_arena_owns(struct tf_arena *a, uint64_t addr);
void tf_arena_stats(struct tf_arena *a, struct tf_arena_stats *s);

/* Driver backends for the current context's device dev. plain: cuMemAlloc
 * chunks, granularity 2 MiB. vmm: reserves va_bytes (0: 2 × the device's
 * memory) of address space once and maps pinned device memory into it
 * (recommended granularity, at least 2 MiB; the RDMA flag set when the
 * device supports GPUDirect RDMA with VMM); freed ranges of address space
 * are reused. TF_ERR_UNSUPPORTED when the device lacks VMM. */
tf_status tf_arena_backend_plain(const struct tf_cu_device *dev, struct tf_arena_backend *be);
tf_status tf_arena_backend_vmm(const struct tf_cu_device *dev, size_t va_bytes,
                               struct tf_arena_backend *be);

/* A device buffer: memory from the installed arena, from cuMemAlloc, or
 * borrowed (a view of memory someone else owns, such as a carve-out). */
struct tf_cu_buf {
	tf_cu_ptr ptr;
	size_t size;
	bool borrowed;
};

/* Make a the allocation hook of tf_cu_buf_alloc (NULL: none). The arena
 * must outlive every buffer allocated from it. Not thread safe against
 * concurrent tf_cu_buf calls. */
void tf_cu_mem_install(struct tf_arena *a);
struct tf_arena *tf_cu_mem_installed(void);
/* n bytes: from the installed arena, else (none installed, or the arena
 * refused) from cuMemAlloc. */
tf_status tf_cu_buf_alloc(struct tf_cu_buf *b, size_t n);
/* A view of n bytes at p that tf_cu_buf_release leaves alone. */
void tf_cu_buf_borrow(struct tf_cu_buf *b, tf_cu_ptr p, size_t n);
/* Free b: borrowed spans touch nothing; arena blocks go back to the arena;
 * any other pointer (allocated before the hook, or by the fallback) goes to
 * cuMemFree as before. b is zeroed. */
tf_status tf_cu_buf_release(struct tf_cu_buf *b);

#endif
