/* check_cuda_rec.c: the stream recorder (cuda/rec.h) without a GPU: the
 * registry, counting, dry answers, and the fingerprint's sensitivity to
 * every part of a kernel launch, copy, memset and cuBLAS call (what a
 * graph bakes in), with parameter sizes from a fake in place of
 * cuFuncGetParamInfo. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "cuda/rec.h"

/* Fake kernels: handle 1 takes (u64, i32, f32), handle 2 (u64), handle 3
 * has unknown parameters. */
static int fake_sizes(tf_cu_func f, size_t *sizes, int max)
{
	(void)max;
	if ((uintptr_t)f == 1) {
		sizes[0] = 8;
		sizes[1] = 4;
		sizes[2] = 4;
		return 3;
	}
	if ((uintptr_t)f == 2) {
		sizes[0] = 8;
		return 1;
	}
	return -1;
}

#define S1 ((tf_cu_stream)(uintptr_t)0x1000)
#define S2 ((tf_cu_stream)(uintptr_t)0x2000)
#define K1 ((tf_cu_func)(uintptr_t)1)
#define K2 ((tf_cu_func)(uintptr_t)2)
#define K3 ((tf_cu_func)(uintptr_t)3)

struct args {
	uint64_t ptr;
	int32_t n;
	float scale;
};

/* The fingerprint of one launch of K1 with a, on grid gx. */
static uint64_t fp_of(struct tf_cu_rec *r, const struct args *a, unsigned gx)
{
	void *p[] = {(void *)&a->ptr, (void *)&a->n, (void *)&a->scale};
	tf_cu_rec_begin(r, true);
	ck_assert(tf_cu_rec_kernel(S1, K1, gx, 1, 1, 256, 1, 1, 0, p, NULL, 0));
	uint64_t fp = r->fp;
	tf_cu_rec_end(r);
	return fp;
}

START_TEST(registry_and_counts)
{
	struct tf_cu_rec r = {.param_sizes = fake_sizes};
	int32_t n = 5;
	void *p[] = {&n};
	/* no recorder: nothing counted, never dry */
	ck_assert(!tf_cu_rec_kernel(S1, K2, 1, 1, 1, 32, 1, 1, 0, p, NULL, 0));
	ck_assert_ptr_null(tf_cu_rec_of(S1));
	ck_assert_int_eq(tf_cu_rec_attach(&r, S1), TF_OK);
	ck_assert_ptr_eq(tf_cu_rec_of(S1), &r);
	ck_assert_ptr_null(tf_cu_rec_of(S2));
	/* eager: counted, queued by the caller */
	uint64_t x = 0;
	void *px[] = {&x};
	ck_assert(!tf_cu_rec_kernel(S1, K2, 1, 1, 1, 32, 1, 1, 0, px, NULL, 0));
	ck_assert(!tf_cu_rec_copy(S1, 'H', 1, 2, 3));
	ck_assert(!tf_cu_rec_memset(S1, 1, 0, 1, 3));
	ck_assert(!tf_cu_rec_blas(S1, &x, sizeof x));
	ck_assert_uint_eq(r.n.kernels, 1);
	ck_assert_uint_eq(r.n.copies, 1);
	ck_assert_uint_eq(r.n.memsets, 1);
	ck_assert_uint_eq(r.n.blas, 1);
	ck_assert_uint_eq(r.items, 0); /* not hashing */
	/* dry: counted and recorded, the caller queues nothing */
	tf_cu_rec_begin(&r, true);
	ck_assert(tf_cu_rec_kernel(S1, K2, 1, 1, 1, 32, 1, 1, 0, px, NULL, 0));
	ck_assert(tf_cu_rec_copy(S1, 'H', 1, 2, 3));
	ck_assert_uint_eq(r.items, 2);
	ck_assert_uint_eq(r.n.kernels, 2);
	tf_cu_rec_end(&r);
	ck_assert(!r.dry && !r.hashing);
	/* a capture hashes but queues */
	tf_cu_rec_begin(&r, false);
	ck_assert(!tf_cu_rec_kernel(S1, K2, 1, 1, 1, 32, 1, 1, 0, px, NULL, 0));
	ck_assert_uint_eq(r.items, 1);
	tf_cu_rec_end(&r);
	/* another stream is not ours */
	ck_assert(!tf_cu_rec_kernel(S2, K2, 1, 1, 1, 32, 1, 1, 0, px, NULL, 0));
	ck_assert_uint_eq(r.n.kernels, 3);
	tf_cu_rec_detach(S1);
	ck_assert_ptr_null(tf_cu_rec_of(S1));
	tf_cu_rec_detach(S1); /* twice: a no-op */
}
END_TEST

START_TEST(fingerprint_sees_everything)
{
	struct tf_cu_rec r = {.param_sizes = fake_sizes};
	ck_assert_int_eq(tf_cu_rec_attach(&r, S1), TF_OK);
	struct args a = {0x7f0000001000ull, 12, 0.5f};
	uint64_t base = fp_of(&r, &a, 4);
	ck_assert_uint_eq(fp_of(&r, &a, 4), base); /* the same work, the same print */
	struct args b = a;
	b.ptr += 512; /* another address */
	ck_assert_uint_ne(fp_of(&r, &b, 4), base);
	b = a;
	b.n = 13; /* another scalar */
	ck_assert_uint_ne(fp_of(&r, &b, 4), base);
	b = a;
	b.scale = 0.25f;
	ck_assert_uint_ne(fp_of(&r, &b, 4), base);
	ck_assert_uint_ne(fp_of(&r, &a, 5), base); /* another grid */
	/* bytes past a parameter's size are not read: a's padding and what
	 * follows n in memory do not matter (n is 4 bytes) */
	struct {
		int32_t n, junk;
	} pad1 = {12, 1}, pad2 = {12, 2};
	uint64_t ptr = a.ptr;
	float sc = 0.5f;
	void *p1[] = {&ptr, &pad1.n, &sc}, *p2[] = {&ptr, &pad2.n, &sc};
	tf_cu_rec_begin(&r, true);
	tf_cu_rec_kernel(S1, K1, 4, 1, 1, 256, 1, 1, 0, p1, NULL, 0);
	uint64_t f1 = r.fp;
	tf_cu_rec_begin(&r, true);
	tf_cu_rec_kernel(S1, K1, 4, 1, 1, 256, 1, 1, 0, p2, NULL, 0);
	ck_assert_uint_eq(r.fp, f1);
	ck_assert_uint_eq(f1, base);
	/* shared memory, block, attributes, function */
	void *pa[] = {&a.ptr, &a.n, &a.scale};
	uint64_t v[6];
	int attr = 6;
	for (int i = 0; i < 6; i++) {
		tf_cu_rec_begin(&r, true);
		if (i == 0)
			tf_cu_rec_kernel(S1, K1, 4, 1, 1, 256, 1, 1, 1024, pa, NULL, 0);
		else if (i == 1)
			tf_cu_rec_kernel(S1, K1, 4, 1, 1, 128, 1, 1, 0, pa, NULL, 0);
		else if (i == 2)
			tf_cu_rec_kernel(S1, K1, 4, 1, 1, 256, 1, 1, 0, pa, &attr, sizeof attr);
		else if (i == 3)
			tf_cu_rec_copy(S1, 'H', 0x1000, 0x2000, 64);
		else if (i == 4)
			tf_cu_rec_copy(S1, 'H', 0x1000, 0x2010, 64); /* another input slot */
		else
			tf_cu_rec_memset(S1, 0x1000, 0, 1, 64);
		v[i] = r.fp;
	}
	for (int i = 0; i < 6; i++) {
		ck_assert_uint_ne(v[i], base);
		for (int j = 0; j < i; j++)
			ck_assert_uint_ne(v[i], v[j]);
	}
	/* order matters */
	tf_cu_rec_begin(&r, true);
	tf_cu_rec_copy(S1, 'H', 1, 2, 3);
	tf_cu_rec_memset(S1, 1, 0, 1, 3);
	uint64_t ab = r.fp;
	tf_cu_rec_begin(&r, true);
	tf_cu_rec_memset(S1, 1, 0, 1, 3);
	tf_cu_rec_copy(S1, 'H', 1, 2, 3);
	ck_assert_uint_ne(r.fp, ab);
	tf_cu_rec_end(&r);
	tf_cu_rec_detach(S1);
}
END_TEST

/* A collective queued by a library (tf_cu_rec_foreign): one item of its
 * id, dry or not; while dry the caller queues nothing; between it and
 * _end the library's own launches are counted, not hashed, so a capture
 * prints what its dry pass printed. */
START_TEST(foreign_work)
{
	struct tf_cu_rec r = {.param_sizes = fake_sizes};
	ck_assert_int_eq(tf_cu_rec_attach(&r, S1), TF_OK);
	uint64_t id[3] = {'S', 0x1000, 64}, other[3] = {'S', 0x1000, 65}, x = 0;
	void *px[] = {&x};
	tf_cu_rec_begin(&r, true);
	ck_assert(tf_cu_rec_foreign(S1, id, sizeof id)); /* dry: queue nothing */
	ck_assert_int_eq(r.foreign, 0);
	uint64_t dry = r.fp;
	ck_assert_uint_eq(r.items, 1);
	tf_cu_rec_end(&r);
	tf_cu_rec_begin(&r, false);
	ck_assert(!tf_cu_rec_foreign(S1, id, sizeof id)); /* a capture: queue it */
	uint64_t k = r.n.kernels;
	ck_assert(!tf_cu_rec_kernel(S1, K2, 1, 1, 1, 32, 1, 1, 0, px, NULL, 0)); /* the library's */
	ck_assert(!tf_cu_rec_copy(S1, 'd', 1, 2, 3));
	tf_cu_rec_foreign_end(S1);
	ck_assert_uint_eq(r.n.kernels, k + 1);
	ck_assert_uint_eq(r.fp, dry);
	ck_assert_uint_eq(r.items, 1);
	ck_assert(!tf_cu_rec_kernel(S1, K2, 1, 1, 1, 32, 1, 1, 0, px, NULL, 0)); /* ours again */
	ck_assert_uint_ne(r.fp, dry);
	tf_cu_rec_end(&r);
	tf_cu_rec_begin(&r, true);
	tf_cu_rec_foreign(S1, other, sizeof other);
	ck_assert_uint_ne(r.fp, dry); /* another collective, another print */
	tf_cu_rec_end(&r);
	ck_assert(!tf_cu_rec_foreign(S1, id, sizeof id)); /* eager: not hashed */
	tf_cu_rec_foreign_end(S1);
	tf_cu_rec_foreign_end(S1); /* unbalanced: harmless */
	ck_assert_int_eq(r.foreign, 0);
	ck_assert(!tf_cu_rec_foreign(S2, id, sizeof id)); /* no recorder */
	tf_cu_rec_detach(S1);
}
END_TEST

START_TEST(unknown_parameters)
{
	struct tf_cu_rec r = {.param_sizes = fake_sizes};
	ck_assert_int_eq(tf_cu_rec_attach(&r, S1), TF_OK);
	uint64_t x = 1;
	void *p[] = {&x};
	tf_cu_rec_begin(&r, true);
	ck_assert(tf_cu_rec_kernel(S1, K2, 1, 1, 1, 32, 1, 1, 0, p, NULL, 0));
	ck_assert(!r.unknown);
	ck_assert(tf_cu_rec_kernel(S1, K3, 1, 1, 1, 32, 1, 1, 0, p, NULL, 0));
	ck_assert(r.unknown); /* that fingerprint proves nothing */
	tf_cu_rec_begin(&r, true);
	ck_assert(!r.unknown); /* cleared by the next begin */
	tf_cu_rec_end(&r);
	/* without a driver and without a fake: unknown, never a crash */
	r.param_sizes = NULL;
	tf_cu_rec_begin(&r, true);
	ck_assert(tf_cu_rec_kernel(S1, K2, 1, 1, 1, 32, 1, 1, 0, p, NULL, 0));
	ck_assert(r.unknown);
	tf_cu_rec_end(&r);
	tf_cu_rec_detach(S1);
}
END_TEST

START_TEST(registry_full)
{
	static struct tf_cu_rec r[65];
	int ok = 0;
	for (int i = 0; i < 65; i++)
		ok += tf_cu_rec_attach(&r[i], (tf_cu_stream)(uintptr_t)(0x10000 + 16 * i)) == TF_OK;
	ck_assert_int_eq(ok, 64);
	/* attaching again to a registered stream replaces, needs no slot */
	ck_assert_int_eq(tf_cu_rec_attach(&r[64], (tf_cu_stream)(uintptr_t)0x10000), TF_OK);
	ck_assert_ptr_eq(tf_cu_rec_of((tf_cu_stream)(uintptr_t)0x10000), &r[64]);
	for (int i = 0; i < 65; i++)
		tf_cu_rec_detach((tf_cu_stream)(uintptr_t)(0x10000 + 16 * i));
	ck_assert_ptr_null(tf_cu_rec_of((tf_cu_stream)(uintptr_t)0x10010));
}
END_TEST

Suite *suite_cuda_rec(void)
{
	Suite *s = suite_create("cuda_rec");
	TCase *tc = tcase_create("rec");
	tcase_add_test(tc, registry_and_counts);
	tcase_add_test(tc, fingerprint_sees_everything);
	tcase_add_test(tc, foreign_work);
	tcase_add_test(tc, unknown_parameters);
	tcase_add_test(tc, registry_full);
	suite_add_tcase(s, tc);
	return s;
}
