/* arena.c: the device memory arena (packed small blocks, own chunks for
 * large ones), its driver backends (plain and VMM), and device buffers. */
#include "cuda/arena.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/hmap.h"
#include "base/log.h"

/* A free list: the addresses of freed small blocks of one rounded size. */
struct freelist {
	uint64_t *v;
	size_t n, cap;
};

struct chunk {
	uint64_t addr;
	size_t size;
};

struct tf_arena {
	pthread_mutex_t mu;
	struct tf_arena_backend be;
	size_t limit, small_max, chunk_min;
	struct tf_hmap live;  /* address -> size << 1 | large */
	struct tf_hmap free;  /* rounded size -> struct freelist * */
	struct chunk *chunks; /* shared chunks, in order of mapping */
	size_t nchunks, chunks_cap;
	uint64_t bump;        /* next free byte of the last shared chunk */
	uint64_t bump_end;
	struct tf_arena_stats st;
};

static size_t round_up(size_t n, size_t a)
{
	return (n + a - 1) & ~(a - 1);
}

tf_status tf_arena_new(const struct tf_arena_backend *be, const struct tf_arena_opts *opts,
                       struct tf_arena **out)
{
	*out = NULL;
	if (!be || !be->map || !be->unmap || be->granularity < TF_ARENA_ALIGN ||
	    (be->granularity & (be->granularity - 1)))
		return tf_err(TF_ERR_ARG, "arena: bad backend (granularity %zu)", be ? be->granularity : 0);
	struct tf_arena *a = tf_calloc(1, sizeof(*a));
	if (!a)
		return tf_err(TF_ERR_NOMEM, "arena: out of memory");
	pthread_mutex_init(&a->mu, NULL);
	a->be = *be;
	a->limit = opts ? opts->limit : 0;
	a->small_max = opts && opts->small_max ? opts->small_max : (size_t)4 << 20;
	a->chunk_min = opts && opts->chunk_min ? opts->chunk_min : (size_t)64 << 20;
	a->small_max = round_up(a->small_max, TF_ARENA_ALIGN);
	a->chunk_min = round_up(a->chunk_min, be->granularity);
	a->st.limit = a->limit;
	tf_hmap_init(&a->live, TF_HMAP_U64);
	tf_hmap_init(&a->free, TF_HMAP_U64);
	*out = a;
	return TF_OK;
}

void tf_arena_free(struct tf_arena *a)
{
	if (!a)
		return;
	size_t i = 0;
	const struct tf_hmap_slot *s;
	while (tf_hmap_next(&a->live, &i, &s))
		if (s->val & 1)
			a->be.unmap(a->be.ctx, s->hash, s->val >> 1);
	for (size_t k = 0; k < a->nchunks; k++)
		a->be.unmap(a->be.ctx, a->chunks[k].addr, a->chunks[k].size);
	i = 0;
	while (tf_hmap_next(&a->free, &i, &s)) {
		struct freelist *fl = (struct freelist *)s->val;
		free(fl->v);
		free(fl);
	}
	tf_hmap_release(&a->live);
	tf_hmap_release(&a->free);
	free(a->chunks);
	if (a->be.close)
		a->be.close(a->be.ctx);
	pthread_mutex_destroy(&a->mu);
	free(a);
}

/* Take size bytes from the backend, within the limit. */
static tf_status take(struct tf_arena *a, size_t size, uint64_t *addr)
{
	if (a->limit && (size > a->limit || a->st.mapped > a->limit - size)) {
		a->st.refused++;
		return tf_err(TF_ERR_NOMEM, "device arena: %zu more bytes would pass the limit of %zu (%zu held)",
		              size, a->limit, a->st.mapped);
	}
	tf_status st = a->be.map(a->be.ctx, size, addr);
	if (st) {
		a->st.refused++;
		return tf_err_wrap(st, "device arena (%s): cannot map %zu bytes: ", a->be.name, size);
	}
	a->st.mapped += size;
	if (a->st.mapped > a->st.mapped_peak)
		a->st.mapped_peak = a->st.mapped;
	return TF_OK;
}

static tf_status alloc_large(struct tf_arena *a, size_t n, uint64_t *addr)
{
	size_t size = round_up(n, a->be.granularity);
	tf_status st = take(a, size, addr);
	if (st)
		return st;
	if ((st = tf_hmap_put(&a->live, *addr, (uintptr_t)size << 1 | 1))) {
		a->be.unmap(a->be.ctx, *addr, size);
		a->st.mapped -= size;
		return st;
	}
	a->st.large++;
	a->st.in_use += size;
	return TF_OK;
}

static tf_status alloc_small(struct tf_arena *a, size_t n, uint64_t *addr)
{
	uintptr_t v;
	tf_status st;
	if (tf_hmap_get(&a->free, n, &v)) {
		struct freelist *fl = (struct freelist *)v;
		if (fl->n) {
			uint64_t p = fl->v[fl->n - 1];
			if ((st = tf_hmap_put(&a->live, p, (uintptr_t)n << 1)))
				return st;
			fl->n--;
			a->st.cached -= n;
			a->st.reused++;
			a->st.in_use += n;
			*addr = p;
			return TF_OK;
		}
	}
	if (a->bump_end - a->bump < n) {
		/* The tail of the old chunk is left unused: small requests are
		 * at most small_max, a sixteenth of a chunk by default. */
		size_t size = round_up(n > a->chunk_min ? n : a->chunk_min, a->be.granularity);
		if (a->nchunks == a->chunks_cap) {
			size_t cap = a->chunks_cap ? 2 * a->chunks_cap : 8;
			if (tf_realloc_array(&a->chunks, cap, sizeof(*a->chunks)))
				return tf_err(TF_ERR_NOMEM, "arena: out of memory");
			a->chunks_cap = cap;
		}
		uint64_t base;
		if ((st = take(a, size, &base)))
			return st;
		a->chunks[a->nchunks++] = (struct chunk){base, size};
		a->st.chunks = a->nchunks;
		a->bump = base;
		a->bump_end = base + size;
	}
	if ((st = tf_hmap_put(&a->live, a->bump, (uintptr_t)n << 1)))
		return st;
	*addr = a->bump;
	a->bump += n;
	a->st.in_use += n;
	return TF_OK;
}

tf_status tf_arena_alloc(struct tf_arena *a, size_t n, uint64_t *addr)
{
	*addr = 0;
	if (n > SIZE_MAX / 2)
		return tf_err(TF_ERR_NOMEM, "device arena: %zu bytes is too large", n);
	size_t r = round_up(n ? n : 1, TF_ARENA_ALIGN);
	pthread_mutex_lock(&a->mu);
	tf_status st = r <= a->small_max ? alloc_small(a, r, addr) : alloc_large(a, r, addr);
	if (!st) {
		a->st.allocs++;
		if (a->st.in_use > a->st.in_use_peak)
			a->st.in_use_peak = a->st.in_use;
	}
	pthread_mutex_unlock(&a->mu);
	return st;
}

tf_status tf_arena_dealloc(struct tf_arena *a, uint64_t addr)
{
	tf_status st = TF_OK;
	uintptr_t v;
	pthread_mutex_lock(&a->mu);
	if (!tf_hmap_get(&a->live, addr, &v)) {
		st = tf_err(TF_ERR_NOTFOUND, "device arena: 0x%llx is not an arena block",
		            (unsigned long long)addr);
		goto out;
	}
	size_t size = v >> 1;
	if (v & 1) {
		tf_hmap_del(&a->live, addr, NULL);
		a->be.unmap(a->be.ctx, addr, size);
		a->st.mapped -= size;
		a->st.large--;
	} else {
		struct freelist *fl;
		uintptr_t f;
		if (tf_hmap_get(&a->free, size, &f)) {
			fl = (struct freelist *)f;
		} else {
			if (!(fl = tf_calloc(1, sizeof(*fl)))) {
				st = tf_err(TF_ERR_NOMEM, "arena: out of memory");
				goto out;
			}
			if ((st = tf_hmap_put(&a->free, size, (uintptr_t)fl))) {
				free(fl);
				goto out;
			}
		}
		if (fl->n == fl->cap) {
			size_t cap = fl->cap ? 2 * fl->cap : 16;
			if (tf_realloc_array(&fl->v, cap, sizeof(*fl->v))) {
				st = tf_err(TF_ERR_NOMEM, "arena: out of memory");
				goto out;
			}
			fl->cap = cap;
		}
		tf_hmap_del(&a->live, addr, NULL);
		fl->v[fl->n++] = addr;
		a->st.cached += size;
	}
	a->st.in_use -= size;
	a->st.frees++;
out:
	pthread_mutex_unlock(&a->mu);
	return st;
}

bool tf_arena_owns(struct tf_arena *a, uint64_t addr)
{
	pthread_mutex_lock(&a->mu);
	bool r = tf_hmap_get(&a->live, addr, NULL);
	pthread_mutex_unlock(&a->mu);
	return r;
}

void tf_arena_stats(struct tf_arena *a, struct tf_arena_stats *s)
{
	pthread_mutex_lock(&a->mu);
	*s = a->st;
	s->live = a->live.live;
	s->map_tombs = a->live.tombs;
	s->map_cap = a->live.cap;
	pthread_mutex_unlock(&a->mu);
}

/* --- plain backend: cuMemAlloc chunks --- */

static tf_status plain_map(void *ctx, size_t size, uint64_t *addr)
{
	(void)ctx;
	return TF_CU(tf_cu->MemAlloc(addr, size));
}

static void plain_unmap(void *ctx, uint64_t addr, size_t size)
{
	(void)ctx;
	(void)size;
	tf_status st = TF_CU(tf_cu->MemFree(addr));
	if (st)
		tf_log(TF_LOG_WARN, "device arena: %s", tf_errmsg(st));
}

tf_status tf_arena_backend_plain(const struct tf_cu_device *dev, struct tf_arena_backend *be)
{
	(void)dev;
	tf_status st = tf_cu_init();
	if (st)
		return st;
	*be = (struct tf_arena_backend){
		.ctx = NULL, .granularity = (size_t)2 << 20, .name = "plain",
		.map = plain_map, .unmap = plain_unmap, .close = NULL,
	};
	return TF_OK;
}

/* --- VMM backend: one reserved address range, physical memory mapped in --- */

struct vmm {
	struct tf_cu_mem_prop prop;
	struct tf_cu_mem_access access;
	tf_cu_ptr base;
	size_t va_size, cursor;
	struct chunk *holes; /* freed address ranges, reused first fit */
	size_t nholes, holes_cap;
};

static tf_status vmm_va(struct vmm *v, size_t size, uint64_t *addr)
{
	for (size_t i = 0; i < v->nholes; i++) {
		if (v->holes[i].size < size)
			continue;
		*addr = v->holes[i].addr;
		v->holes[i].addr += size;
		v->holes[i].size -= size;
		if (!v->holes[i].size)
			v->holes[i] = v->holes[--v->nholes];
		return TF_OK;
	}
	if (v->va_size - v->cursor < size)
		return tf_err(TF_ERR_NOMEM, "device arena: the reserved address range of %zu bytes is full",
		              v->va_size);
	*addr = v->base + v->cursor;
	v->cursor += size;
	return TF_OK;
}

static void vmm_va_back(struct vmm *v, uint64_t addr, size_t size)
{
	if (addr + size == v->base + v->cursor) {
		v->cursor -= size;
		return;
	}
	for (size_t i = 0; i < v->nholes; i++) {
		if (v->holes[i].addr + v->holes[i].size == addr) {
			v->holes[i].size += size;
			return;
		}
		if (addr + size == v->holes[i].addr) {
			v->holes[i].addr = addr;
			v->holes[i].size += size;
			return;
		}
	}
	if (v->nholes == v->holes_cap) {
		size_t cap = v->holes_cap ? 2 * v->holes_cap : 16;
		if (tf_realloc_array(&v->holes, cap, sizeof(*v->holes)))
			return; /* the range is lost to reuse, not to correctness */
		v->holes_cap = cap;
	}
	v->holes[v->nholes++] = (struct chunk){addr, size};
}

static tf_status vmm_map(void *ctx, size_t size, uint64_t *addr)
{
	struct vmm *v = ctx;
	tf_cu_mem_handle h = 0;
	uint64_t va = 0;
	tf_status st = vmm_va(v, size, &va);
	if (st)
		return st;
	if ((st = TF_CU(tf_cu->MemCreate(&h, size, &v->prop, 0))))
		goto fail;
	if ((st = TF_CU(tf_cu->MemMap(va, size, 0, h, 0)))) {
		tf_cu->MemRelease(h);
		goto fail;
	}
	/* The mapping keeps the memory; the handle is not needed past it. */
	tf_cu->MemRelease(h);
	if ((st = TF_CU(tf_cu->MemSetAccess(va, size, &v->access, 1)))) {
		tf_cu->MemUnmap(va, size);
		goto fail;
	}
	*addr = va;
	return TF_OK;
fail:
	vmm_va_back(v, va, size);
	return st;
}

static void vmm_unmap(void *ctx, uint64_t addr, size_t size)
{
	struct vmm *v = ctx;
	tf_status st = TF_CU(tf_cu->MemUnmap(addr, size));
	if (st) {
		tf_log(TF_LOG_WARN, "device arena: %s", tf_errmsg(st));
		return; /* still mapped: never hand the range out again */
	}
	vmm_va_back(v, addr, size);
}

static void vmm_close(void *ctx)
{
	struct vmm *v = ctx;
	if (v->base)
		tf_cu->MemAddressFree(v->base, v->va_size);
	free(v->holes);
	free(v);
}

tf_status tf_arena_backend_vmm(const struct tf_cu_device *dev, size_t va_bytes,
                               struct tf_arena_backend *be)
{
	tf_status st = tf_cu_init();
	if (st)
		return st;
	if (!dev->vmm)
		return tf_err(TF_ERR_UNSUPPORTED, "device %d (%s) lacks virtual memory management",
		              dev->ordinal, dev->name);
	struct vmm *v = tf_calloc(1, sizeof(*v));
	if (!v)
		return tf_err(TF_ERR_NOMEM, "arena: out of memory");
	v->prop.type = TF_CU_MEM_ALLOCATION_TYPE_PINNED;
	v->prop.location.type = TF_CU_MEM_LOCATION_TYPE_DEVICE;
	v->prop.location.id = dev->dev;
	v->prop.gpu_direct_rdma_capable = dev->rdma_vmm ? 1 : 0;
	v->access.location = v->prop.location;
	v->access.flags = TF_CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	size_t gran = 0;
	if ((st = TF_CU(tf_cu->MemGetAllocationGranularity(&gran, &v->prop,
	                                                   TF_CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))))
		goto out;
	if (gran < ((size_t)2 << 20))
		gran = (size_t)2 << 20;
	if (gran & (gran - 1)) {
		st = tf_err(TF_ERR_UNSUPPORTED, "VMM granularity %zu is not a power of two", gran);
		goto out;
	}
	v->va_size = round_up(va_bytes ? va_bytes : 2 * dev->total_mem, gran);
	if ((st = TF_CU(tf_cu->MemAddressReserve(&v->base, v->va_size, gran, 0, 0))))
		goto out;
	*be = (struct tf_arena_backend){
		.ctx = v, .granularity = gran, .name = "vmm",
		.map = vmm_map, .unmap = vmm_unmap, .close = vmm_close,
	};
out:
	if (st)
		vmm_close(v);
	return st;
}

/* --- device buffers and the allocation hook --- */

static struct tf_arena *hook;

void tf_cu_mem_install(struct tf_arena *a)
{
	hook = a;
}

struct tf_arena *tf_cu_mem_installed(void)
{
	return hook;
}

tf_status tf_cu_buf_alloc(struct tf_cu_buf *b, size_t n)
{
	memset(b, 0, sizeof(*b));
	if (hook && tf_arena_alloc(hook, n, &b->ptr) == TF_OK) {
		b->size = n;
		return TF_OK;
	}
	tf_status st = tf_cu_init();
	if (st)
		return st;
	if ((st = TF_CU(tf_cu->MemAlloc(&b->ptr, n ? n : 1))))
		return tf_err_wrap(st, "cannot allocate %zu bytes of device memory: ", n);
	b->size = n;
	return TF_OK;
}

void tf_cu_buf_borrow(struct tf_cu_buf *b, tf_cu_ptr p, size_t n)
{
	*b = (struct tf_cu_buf){.ptr = p, .size = n, .borrowed = true};
}

tf_status tf_cu_buf_release(struct tf_cu_buf *b)
{
	tf_status st = TF_OK;
	if (b->ptr && !b->borrowed) {
		if (!hook || tf_arena_dealloc(hook, b->ptr) != TF_OK) {
			tf_err_clear();
			st = TF_CU(tf_cu->MemFree(b->ptr));
		}
	}
	memset(b, 0, sizeof(*b));
	return st;
}
