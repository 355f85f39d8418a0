/* check_cuda_be.c: unit tests of the CUDA op backend (compute/cuda*.c)
 * without a GPU: that it refuses cleanly without a driver, that its table
 * fills every slot, and, over the fake libcuda of check_cuda.c (device
 * memory is host memory, kernels do nothing), its memory ops (staged
 * uploads, downloads, zeroed allocations, deferred large frees) and the
 * argument checks its ops share with the CPU twins. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/status.h"
#include "compute/cuda_be.h"
#include "compute/ops.h"
#include "model/exl3.h"

START_TEST(no_driver)
{
	setenv("TF_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
	struct tf_be *be = (struct tf_be *)&be; /* must come back NULL */
	tf_status st = tf_cuda_be_new(0, &be);
	ck_assert_int_eq(st, TF_ERR_UNAVAILABLE);
	ck_assert_int_eq(tf_status_exit(st), 69);
	ck_assert_ptr_null(be);
	ck_assert_msg(strstr(tf_errmsg(st), TF_CUDA ? "cannot load the CUDA driver" : "CUDA=0"), "%s",
	              tf_errmsg(st));
	ck_assert_int_eq(tf_cuda_be_new(3, &be), TF_ERR_UNAVAILABLE); /* again: no crash */
	ck_assert_ptr_null(be);
}
END_TEST

/* Every slot of the table is filled (function pointers from alloc to free). */
START_TEST(table_full)
{
	const struct tf_ops *ops = tf_cuda_ops();
	ck_assert_str_eq(ops->name, "cuda");
	ck_assert_int_eq(ops->device, 1);
	typedef void (*fnptr)(void);
	size_t first = offsetof(struct tf_ops, alloc), end = sizeof(struct tf_ops);
	ck_assert_uint_eq((end - first) % sizeof(fnptr), 0);
	for (size_t o = first; o < end; o += sizeof(fnptr)) {
		fnptr f;
		memcpy(&f, (const char *)ops + o, sizeof f);
		ck_assert_msg(f != NULL, "slot at byte %zu is empty", o);
	}
	ck_assert_ptr_nonnull(ops->sample);
}
END_TEST

#if TF_CUDA
static char tmpdir[256];

/* tests/data/fake_libcuda.c built into a library; its path. */
static const char *fake_lib(void)
{
	static char path[512];
	const char *data = getenv("TF_TEST_DATA");
	if (!data)
		data = "tests/data";
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/tf-fakecuda-be.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
	snprintf(path, sizeof(path), "%s/libcuda.so", tmpdir);
	char cmd[2048];
	const char *cc = getenv("CC");
	snprintf(cmd, sizeof(cmd), "%s -shared -fPIC -O0 -o '%s' '%s/fake_libcuda.c'",
	         cc && *cc ? cc : "cc", path, data);
	ck_assert_msg(system(cmd) == 0, "cannot build the fake driver: %s", cmd);
	return path;
}

static void cleanup(void)
{
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (*tmpdir && system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", tmpdir);
}

/* The backend over the fake driver: plain arena, no cuBLAS. */
static struct tf_be *fake_be(void)
{
	setenv("TF_CUDA_LIBRARY", fake_lib(), 1);
	setenv("TF_CUDA_ARENA", "plain", 1);
	setenv("TF_CUDA_BLAS", "0", 1);
	struct tf_be *be;
	tf_status st = tf_cuda_be_new(0, &be);
	ck_assert_msg(st == TF_OK, "%s", tf_errmsg(st));
	ck_assert_ptr_eq(be->ops, tf_cuda_ops());
	ck_assert_int_eq(tf_cuda_be_use(be), TF_OK);
	return be;
}

static void pattern(unsigned char *p, int64_t n, int seed)
{
	for (int64_t j = 0; j < n; j++)
		p[j] = (unsigned char)(j * 31 + seed);
}

/* Uploads of every size (packed small ones, ones past a chunk, one past
 * the whole staging) come back whole; allocations are zeroed. */
START_TEST(memory_on_fake)
{
	struct tf_be *be = fake_be();
	static const int64_t sizes[] = {1, 7, 1000, 300000, 2 << 20, (2 << 20) + 3, 5 << 20, 9 << 20};
	enum { N = sizeof(sizes) / sizeof(sizes[0]), ROUNDS = 3 };
	struct tf_tensor t[ROUNDS][N];
	for (int k = 0; k < ROUNDS; k++)
		for (int i = 0; i < N; i++) {
			ck_assert_int_eq(tf_be_tensor(be, &t[k][i], TF_DT_U8, 1, sizes[i]), TF_OK);
			unsigned char *z = malloc((size_t)sizes[i]), *zero = calloc(1, (size_t)sizes[i]);
			ck_assert_int_eq(be->ops->download(be, &t[k][i], z), TF_OK);
			ck_assert_int_eq(memcmp(z, zero, (size_t)sizes[i]), 0);
			pattern(z, sizes[i], i + 7 * k);
			ck_assert_int_eq(be->ops->upload(be, &t[k][i], z), TF_OK);
			free(z);
			free(zero);
		}
	struct tf_tensor big; /* past the 16 MiB of staging */
	ck_assert_int_eq(tf_be_tensor(be, &big, TF_DT_F32, 2, (int64_t)5 << 20, (int64_t)1), TF_OK);
	float *f = malloc(sizeof(float) * ((size_t)5 << 20)), *g = malloc(sizeof(float) * ((size_t)5 << 20));
	for (size_t j = 0; j < (size_t)5 << 20; j++)
		f[j] = (float)j * 0.25f;
	ck_assert_int_eq(be->ops->upload(be, &big, f), TF_OK);
	ck_assert_int_eq(be->ops->download(be, &big, g), TF_OK);
	ck_assert_int_eq(memcmp(f, g, sizeof(float) * ((size_t)5 << 20)), 0);
	for (int k = 0; k < ROUNDS; k++)
		for (int i = 0; i < N; i++) {
			unsigned char *z = malloc((size_t)sizes[i]), *want = malloc((size_t)sizes[i]);
			ck_assert_int_eq(be->ops->download(be, &t[k][i], z), TF_OK);
			pattern(want, sizes[i], i + 7 * k);
			ck_assert_msg(!memcmp(z, want, (size_t)sizes[i]), "upload %d of round %d", i, k);
			free(z);
			free(want);
			be->ops->release(be, &t[k][i]);
			ck_assert_ptr_null(t[k][i].data);
		}
	be->ops->release(be, &big); /* large: deferred until the sync */
	ck_assert_int_eq(be->ops->sync(be), TF_OK);
	struct tf_tensor none = {0};
	be->ops->release(be, &none); /* NULL data: nothing */
	tf_cu_ptr s;
	ck_assert_int_eq(cuda_scratch(be, 100, &s), TF_OK);
	cuda_scratch_release(be, s);
	ck_assert_int_eq(cuda_scratch(be, 8 << 20, &s), TF_OK);
	cuda_scratch_release(be, s);
	cuda_scratch_release(be, 12345); /* not ours: left alone */
	/* Large blocks come back at the same address for the same size (a
	 * graphed call's scratch must), newest first; another size does not
	 * take them. */
	tf_cu_ptr l1, l2, l3, l4;
	ck_assert_int_eq(cuda_scratch(be, (size_t)40 << 20, &l1), TF_OK);
	ck_assert_int_eq(cuda_scratch(be, (size_t)40 << 20, &l2), TF_OK);
	ck_assert(l1 != l2);
	cuda_scratch_release(be, l2);
	cuda_scratch_release(be, l1);
	ck_assert_int_eq(cuda_scratch(be, (size_t)48 << 20, &l3), TF_OK);
	ck_assert(l3 != l1 && l3 != l2);
	ck_assert_int_eq(cuda_scratch(be, (size_t)40 << 20, &l4), TF_OK);
	ck_assert(l4 == l1);
	cuda_scratch_release(be, l4);
	cuda_scratch_release(be, l3);
	free(f);
	free(g);
	tf_be_free(be);
	cleanup();
}
END_TEST

/* The ops refuse what their CPU twins refuse, naming the op. */
START_TEST(checks_on_fake)
{
	struct tf_be *be = fake_be();
	struct tf_tensor x, w, y, pos, i32;
	ck_assert_int_eq(tf_be_tensor(be, &x, TF_DT_BF16, 2, (int64_t)4, (int64_t)256), TF_OK);
	ck_assert_int_eq(tf_be_tensor(be, &w, TF_DT_F32, 2, (int64_t)8, (int64_t)128), TF_OK);
	ck_assert_int_eq(tf_be_tensor(be, &y, TF_DT_F32, 2, (int64_t)4, (int64_t)8), TF_OK);
	ck_assert_int_eq(tf_be_tensor(be, &pos, TF_DT_I32, 1, (int64_t)4), TF_OK);
	ck_assert_int_eq(tf_be_tensor(be, &i32, TF_DT_I32, 2, (int64_t)4, (int64_t)8), TF_OK);
	tf_status st = be->ops->linear(be, &x, &w, &y);
	ck_assert_int_eq(st, TF_ERR_ARG);
	ck_assert_msg(strstr(tf_errmsg(st), "linear: x has 256 columns, w 128"), "%s", tf_errmsg(st));
	ck_assert_int_eq(be->ops->linear(be, &x, &w, &i32), TF_ERR_ARG);
	ck_assert_int_eq(be->ops->convert(be, &x, &y), TF_ERR_ARG); /* 1024 vs 32 elements */
	struct tf_rope_freqs rf;
	tf_rope_freqs_plain(&rf, 64, 1e4);
	ck_assert_int_eq(be->ops->rope(be, &x, &pos, &rf, 0, &x), TF_OK); /* queued (the fake runs nothing) */
	rf.dim = 300;
	st = be->ops->rope(be, &x, &pos, &rf, 0, &x);
	ck_assert_int_eq(st, TF_ERR_ARG);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(st), "rope: rotated dims 300"));
	ck_assert_int_eq(be->ops->rmsnorm(be, &x, &w, 1e-6f, &x), TF_ERR_ARG); /* w is not [256] */
	ck_assert_int_eq(be->ops->embed(be, &x, 0, &y, &x), TF_ERR_ARG);     /* ids not i32 */
	st = be->ops->exl3_matmul(be, NULL, &x, &y);
	ck_assert_int_eq(st, TF_ERR_ARG);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(st), "exl3_matmul: the layer has no weights"));
	struct tf_exl3_layer L = {.g = {256, 128, 4, TF_EXL3_CB_MUL1}};
	uint16_t word = 0;
	L.trellis = L.suh = L.svh = &word;
	st = be->ops->exl3_matmul(be, &L, &x, &y); /* y has 8 columns, not 128 */
	ck_assert_int_eq(st, TF_ERR_ARG);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(st), "layer is 256x128"));
	st = be->ops->exl3_matmul_experts(be, &L, 1, &pos, &pos, &x, &y); /* offsets not [G+1] */
	ck_assert_int_eq(st, TF_ERR_ARG);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(st), "exl3_matmul_experts: offsets"));
	ck_assert_int_eq(be->ops->sync(be), TF_OK);
	struct tf_tensor *all[] = {&x, &w, &y, &pos, &i32};
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		be->ops->release(be, all[i]);
	tf_be_free(be);
	cleanup();
}
END_TEST
#endif

Suite *suite_cuda_be(void)
{
	Suite *s = suite_create("cuda_be");
	TCase *tc = tcase_create("backend");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, no_driver);
	tcase_add_test(tc, table_full);
#if TF_CUDA
	tcase_add_test(tc, memory_on_fake);
	tcase_add_test(tc, checks_on_fake);
#endif
	suite_add_tcase(s, tc);
	return s;
}
