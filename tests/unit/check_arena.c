/* check_arena.c: the device memory arena over a host-memory backend. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "cuda/arena.h"

/* A host backend that counts what it hands out and can be told to fail. */
struct host {
	size_t maps, unmaps, held;
	bool fail;
};

static tf_status host_map(void *ctx, size_t size, uint64_t *addr)
{
	struct host *h = ctx;
	if (h->fail)
		return tf_err(TF_ERR_NOMEM, "host backend told to fail");
	void *p = NULL;
	if (posix_memalign(&p, 4096, size))
		return tf_err(TF_ERR_NOMEM, "host backend: out of memory");
	*addr = (uint64_t)(uintptr_t)p;
	h->maps++;
	h->held += size;
	return TF_OK;
}

static void host_unmap(void *ctx, uint64_t addr, size_t size)
{
	struct host *h = ctx;
	free((void *)(uintptr_t)addr);
	h->unmaps++;
	h->held -= size;
}

static struct tf_arena *new_arena(struct host *h, size_t limit, size_t chunk_min)
{
	struct tf_arena_backend be = {
		.ctx = h, .granularity = 64 << 10, .name = "host",
		.map = host_map, .unmap = host_unmap,
	};
	struct tf_arena_opts o = {.limit = limit, .small_max = 256 << 10, .chunk_min = chunk_min};
	struct tf_arena *a = NULL;
	ck_assert_int_eq(tf_arena_new(&be, &o, &a), TF_OK);
	return a;
}

START_TEST(packing_and_alignment)
{
	struct host h = {0};
	struct tf_arena *a = new_arena(&h, 0, 1 << 20);
	uint64_t p[8];
	size_t sizes[8] = {1, 0, 511, 512, 513, 1000, 4096, 100000};
	for (int i = 0; i < 8; i++) {
		ck_assert_int_eq(tf_arena_alloc(a, sizes[i], &p[i]), TF_OK);
		ck_assert_uint_eq(p[i] % TF_ARENA_ALIGN, 0);
		memset((void *)(uintptr_t)p[i], i, sizes[i]); /* writable, no overlap */
		if (i)
			ck_assert_uint_eq(p[i], p[i - 1] + (sizes[i - 1] ? (sizes[i - 1] + 511) / 512 * 512 : 512));
	}
	for (int i = 0; i < 8; i++)
		for (size_t k = 0; k < sizes[i]; k++)
			ck_assert_int_eq(((unsigned char *)(uintptr_t)p[i])[k], i);
	struct tf_arena_stats s;
	tf_arena_stats(a, &s);
	ck_assert_uint_eq(h.maps, 1); /* all packed into one chunk */
	ck_assert_uint_eq(s.chunks, 1);
	ck_assert_uint_eq(s.live, 8);
	ck_assert_uint_eq(s.in_use, 512 * 4 + 1024 * 2 + 4096 + 100352);
	tf_arena_free(a);
	ck_assert_uint_eq(h.held, 0);
}
END_TEST

START_TEST(reuse_by_size_class)
{
	struct host h = {0};
	struct tf_arena *a = new_arena(&h, 0, 1 << 20);
	uint64_t x, y, z, w;
	ck_assert_int_eq(tf_arena_alloc(a, 3000, &x), TF_OK); /* class 3072 */
	ck_assert_int_eq(tf_arena_alloc(a, 700, &y), TF_OK);  /* class 1024 */
	ck_assert_int_eq(tf_arena_dealloc(a, x), TF_OK);
	ck_assert_int_eq(tf_arena_alloc(a, 1000, &z), TF_OK); /* other class: fresh */
	ck_assert_uint_ne(z, x);
	ck_assert_int_eq(tf_arena_alloc(a, 2600, &w), TF_OK); /* same class: reused */
	ck_assert_uint_eq(w, x);
	struct tf_arena_stats s;
	tf_arena_stats(a, &s);
	ck_assert_uint_eq(s.reused, 1);
	ck_assert_uint_eq(s.cached, 0);
	ck_assert_int_eq(tf_arena_dealloc(a, y), TF_OK);
	tf_arena_stats(a, &s);
	ck_assert_uint_eq(s.cached, 1024);
	ck_assert_int_eq(tf_arena_dealloc(a, y), TF_ERR_NOTFOUND); /* double free refused */
	tf_arena_free(a);
}
END_TEST

START_TEST(large_own_chunks)
{
	struct host h = {0};
	struct tf_arena *a = new_arena(&h, 0, 1 << 20);
	uint64_t small, big1, big2;
	ck_assert_int_eq(tf_arena_alloc(a, 100, &small), TF_OK);
	ck_assert_int_eq(tf_arena_alloc(a, (256 << 10) + 1, &big1), TF_OK);
	ck_assert_int_eq(tf_arena_alloc(a, 3 << 20, &big2), TF_OK);
	ck_assert_uint_eq(h.maps, 3);
	struct tf_arena_stats s;
	tf_arena_stats(a, &s);
	ck_assert_uint_eq(s.large, 2);
	ck_assert_uint_eq(s.mapped, (1 << 20) + (320 << 10) + (3 << 20)); /* rounded to 64 KiB */
	ck_assert_int_eq(tf_arena_dealloc(a, big1), TF_OK);
	ck_assert_uint_eq(h.unmaps, 1); /* given back at once */
	tf_arena_stats(a, &s);
	ck_assert_uint_eq(s.mapped, (1 << 20) + (3 << 20));
	ck_assert_uint_eq(s.large, 1);
	tf_arena_free(a);
	ck_assert_uint_eq(h.held, 0);
	ck_assert_uint_eq(h.maps, h.unmaps);
}
END_TEST

START_TEST(foreign_and_limit)
{
	struct host h = {0};
	struct tf_arena *a = new_arena(&h, 2 << 20, 1 << 20);
	int on_stack;
	ck_assert_int_eq(tf_arena_dealloc(a, (uint64_t)(uintptr_t)&on_stack), TF_ERR_NOTFOUND);
	ck_assert(!tf_arena_owns(a, (uint64_t)(uintptr_t)&on_stack));
	uint64_t p, q, r;
	ck_assert_int_eq(tf_arena_alloc(a, 100, &p), TF_OK);       /* 1 MiB chunk */
	ck_assert(tf_arena_owns(a, p));
	ck_assert(!tf_arena_owns(a, p + 512));                     /* inside, not a block */
	ck_assert_int_eq(tf_arena_alloc(a, 1 << 20, &q), TF_OK);   /* large: 1 MiB, at the limit */
	tf_status st = tf_arena_alloc(a, 1 << 20, &r);
	ck_assert_int_eq(st, TF_ERR_NOMEM);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(st), "limit"));
	ck_assert_uint_eq(r, 0);
	struct tf_arena_stats s;
	tf_arena_stats(a, &s);
	ck_assert_uint_eq(s.refused, 1);
	ck_assert_uint_eq(s.limit, 2 << 20);
	ck_assert_int_eq(tf_arena_dealloc(a, q), TF_OK);
	ck_assert_int_eq(tf_arena_alloc(a, 1 << 20, &r), TF_OK);   /* room again */
	/* A failing backend is a refusal too, with the backend's reason. */
	ck_assert_int_eq(tf_arena_dealloc(a, r), TF_OK);
	h.fail = true;
	st = tf_arena_alloc(a, 1 << 20, &q);
	ck_assert_int_eq(st, TF_ERR_NOMEM);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(st), "told to fail"));
	tf_arena_free(a);
	ck_assert_uint_eq(h.held, 0);
}
END_TEST

/* 20,000 random allocations and frees: contents stay intact, the live map's
 * tombstones stay under a tenth of it and it does not grow past the live
 * count's needs, and everything is given back at the end. */
START_TEST(random_churn)
{
	struct host h = {0};
	struct tf_arena *a = new_arena(&h, 0, 4 << 20);
	enum { SLOTS = 600, OPS = 20000 };
	static uint64_t ptr[SLOTS];
	static size_t len[SLOTS];
	memset(ptr, 0, sizeof(ptr));
	struct tf_rng rng;
	tf_rng_seed(&rng, 12345);
	size_t max_cap = 0, max_live = 0;
	for (int op = 0; op < OPS; op++) {
		size_t i = tf_rng_u64(&rng) % SLOTS;
		if (ptr[i]) {
			unsigned char *b = (unsigned char *)(uintptr_t)ptr[i];
			ck_assert_int_eq(b[0], (unsigned char)i);
			ck_assert_int_eq(b[len[i] - 1], (unsigned char)(i >> 3));
			ck_assert_int_eq(tf_arena_dealloc(a, ptr[i]), TF_OK);
			ptr[i] = 0;
		} else {
			uint64_t r = tf_rng_u64(&rng);
			len[i] = r % 16 == 0 ? (256 << 10) + r % (512 << 10) : 1 + r % 20000;
			ck_assert_int_eq(tf_arena_alloc(a, len[i], &ptr[i]), TF_OK);
			unsigned char *b = (unsigned char *)(uintptr_t)ptr[i];
			b[0] = (unsigned char)i;
			b[len[i] - 1] = (unsigned char)(i >> 3);
		}
		struct tf_arena_stats s;
		tf_arena_stats(a, &s);
		ck_assert_uint_le(s.map_tombs * 10, s.map_cap);
		if (s.map_cap > max_cap)
			max_cap = s.map_cap;
		if (s.live > max_live)
			max_live = s.live;
	}
	ck_assert_uint_le(max_cap, 4 * max_live + 16);
	struct tf_arena_stats s;
	tf_arena_stats(a, &s);
	ck_assert_uint_gt(s.reused, 1000);
	for (size_t i = 0; i < SLOTS; i++)
		if (ptr[i])
			ck_assert_int_eq(tf_arena_dealloc(a, ptr[i]), TF_OK);
	tf_arena_stats(a, &s);
	ck_assert_uint_eq(s.live, 0);
	ck_assert_uint_eq(s.in_use, 0);
	ck_assert_uint_eq(s.large, 0);
	ck_assert_uint_eq(s.allocs, s.frees);
	tf_arena_free(a);
	ck_assert_uint_eq(h.held, 0);
	ck_assert_uint_eq(h.maps, h.unmaps);
}
END_TEST

START_TEST(bad_backend)
{
	struct tf_arena *a = (struct tf_arena *)1;
	struct tf_arena_backend be = {.granularity = 1000, .map = host_map, .unmap = host_unmap};
	ck_assert_int_eq(tf_arena_new(&be, NULL, &a), TF_ERR_ARG);
	ck_assert_ptr_null(a);
	tf_arena_free(NULL);
}
END_TEST

Suite *suite_arena(void)
{
	Suite *s = suite_create("arena");
	TCase *tc = tcase_create("host");
	tcase_add_test(tc, packing_and_alignment);
	tcase_add_test(tc, reuse_by_size_class);
	tcase_add_test(tc, large_own_chunks);
	tcase_add_test(tc, foreign_and_limit);
	tcase_add_test(tc, random_churn);
	tcase_add_test(tc, bad_backend);
	suite_add_tcase(s, tc);
	return s;
}
