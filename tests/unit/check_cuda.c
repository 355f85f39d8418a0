/* check_cuda.c: unit tests of libcore/cuda/driver and module without a GPU:
 * a fake libcuda (tests/data/fake_libcuda.c, built here into a shared
 * library) loaded through TF_CUDA_LIBRARY; the pinned enum values, checked
 * against cuda.h where one is installed. */
#include <check.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/status.h"
#include "cuda/arena.h"
#include "cuda/driver.h"
#include "cuda/exl3_gemm.h"
#include "cuda/exl3_gemv.h"
#include "cuda/module.h"

static char tmpdir[256];

/* Build tests/data/fake_libcuda.c with extra flags into a library; returns
 * its path (static storage, one per flags string). */
static const char *fake_lib(const char *flags)
{
	static char path[512];
	const char *data = getenv("TF_TEST_DATA");
	if (!data)
		data = "tests/data";
	if (!*tmpdir) {
		snprintf(tmpdir, sizeof(tmpdir), "/tmp/tf-fakecuda.XXXXXX");
		ck_assert_ptr_nonnull(mkdtemp(tmpdir));
	}
	snprintf(path, sizeof(path), "%s/libcuda-%zu.so", tmpdir, strlen(flags));
	char cmd[2048];
	const char *cc = getenv("CC");
	snprintf(cmd, sizeof(cmd), "%s -shared -fPIC -O0 -o '%s' '%s/fake_libcuda.c' %s",
	         cc && *cc ? cc : "cc", path, data, flags);
	ck_assert_msg(system(cmd) == 0, "cannot build the fake driver: %s", cmd);
	return path;
}

static void cleanup(void)
{
	if (*tmpdir) {
		char cmd[512];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
		if (system(cmd) != 0)
			fprintf(stderr, "cannot remove %s\n", tmpdir);
	}
}

START_TEST(load_missing_library)
{
	struct tf_cu_driver d;
	tf_status st = tf_cu_load("/nonexistent/libcuda.so.1", &d);
	ck_assert_int_eq(st, TF_ERR_UNAVAILABLE);
	ck_assert_int_eq(tf_status_exit(st), 69);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(st), "cannot load the CUDA driver '/nonexistent/libcuda.so.1'"));
	ck_assert_ptr_null(d.dl);
	/* The process-wide loader says the same through the variable. */
	setenv("TF_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
	st = tf_cu_init();
	ck_assert_int_eq(st, TF_ERR_UNAVAILABLE);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(st), "/nonexistent/libcuda.so.1"));
	ck_assert_int_eq(tf_cu_init(), TF_ERR_UNAVAILABLE); /* remembered */
	ck_assert_ptr_null(tf_cu->MemAlloc);
}
END_TEST

START_TEST(load_fake)
{
	const char *lib = fake_lib("");
	struct tf_cu_driver d;
	tf_status st = tf_cu_load(lib, &d);
	ck_assert_msg(st == TF_OK, "%s", tf_errmsg(st));
	ck_assert_int_eq(d.version, 13000);
	ck_assert_ptr_nonnull(d.api.MemAlloc);
	ck_assert_ptr_nonnull(d.api.EventElapsedTime);
	ck_assert_ptr_null(d.api.FuncGetName); /* optional, absent from the fake */
	tf_cu_unload(&d);
	ck_assert_ptr_null(d.dl);
	cleanup();
}
END_TEST

START_TEST(load_missing_symbol)
{
	const char *lib = fake_lib("-DFAKE_OMIT_cuMemAlloc_v2");
	struct tf_cu_driver d;
	tf_status st = tf_cu_load(lib, &d);
	ck_assert_int_eq(st, TF_ERR_UNAVAILABLE);
	ck_assert_msg(strstr(tf_errmsg(st), "lacks cuMemAlloc_v2"), "%s", tf_errmsg(st));
	ck_assert_ptr_null(d.dl);
	cleanup();
}
END_TEST

START_TEST(load_no_device)
{
	const char *lib = fake_lib("-DFAKE_NO_DEVICE");
	setenv("TF_CUDA_LIBRARY", lib, 1);
	struct tf_cu_device dev;
	tf_status st = tf_cu_device_open(0, &dev);
	ck_assert_int_eq(st, TF_ERR_UNAVAILABLE);
	ck_assert_int_eq(tf_status_exit(st), 69);
	ck_assert_msg(strstr(tf_errmsg(st), "no usable CUDA device: cuInit: CUDA_ERROR_NO_DEVICE (100)"),
	              "%s", tf_errmsg(st));
	cleanup();
}
END_TEST

START_TEST(device_fake)
{
	setenv("TF_CUDA_LIBRARY", fake_lib(""), 1);
	struct tf_cu_device dev;
	tf_status st = tf_cu_device_open(0, &dev);
	ck_assert_msg(st == TF_OK, "%s", tf_errmsg(st));
	ck_assert_str_eq(dev.name, "Fake GPU");
	ck_assert_int_eq(dev.cc_major, 9);
	ck_assert_int_eq(dev.sms, 4);
	ck_assert(dev.vmm);
	/* The fake answers 0 for 110 and 4 for 126: reading the wrong one
	 * would turn RDMA with VMM on. */
	ck_assert(!dev.rdma_vmm);
	int v = -1;
	ck_assert_int_eq(tf_cu_device_attr(&dev, TF_CU_ATTR_MEM_SYNC_DOMAIN_COUNT, &v), TF_OK);
	ck_assert_int_eq(v, 4);
	ck_assert_str_eq(tf_cu_func_name(NULL), "?"); /* no cuFuncGetName */
	ck_assert_ptr_nonnull(tf_cu_driver_get());
	tf_cu_device_close(&dev);

	st = tf_cu_device_open(1, &dev);
	ck_assert_int_eq(st, TF_ERR_UNAVAILABLE);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(st), "no CUDA device 1"));
	cleanup();
}
END_TEST

START_TEST(error_names)
{
	/* Without a driver: our table. */
	ck_assert_str_eq(tf_cu_error_name(2), "CUDA_ERROR_OUT_OF_MEMORY");
	ck_assert_str_eq(tf_cu_error_name(700), "CUDA_ERROR_ILLEGAL_ADDRESS");
	ck_assert_str_eq(tf_cu_error_name(4242), "CUDA_ERROR_UNKNOWN_CODE");
	ck_assert_ptr_nonnull(strstr(tf_cu_error_text(4), "the process is exiting"));

	setenv("TF_CUDA_LIBRARY", fake_lib(""), 1);
	ck_assert_int_eq(tf_cu_init(), TF_OK);
	/* From the driver when it knows the code. */
	ck_assert_str_eq(tf_cu_error_name(4242), "FAKE_ERROR_FROM_DRIVER");
	ck_assert_str_eq(tf_cu_error_text(2), "fake out of memory");
	/* Ours when it does not. */
	ck_assert_str_eq(tf_cu_error_name(716), "CUDA_ERROR_MISALIGNED_ADDRESS");
	ck_assert_str_eq(tf_cu_error_name(123456), "CUDA_ERROR_UNKNOWN_CODE");
	/* Code 4 never reaches the driver (the fake aborts if asked). */
	ck_assert_str_eq(tf_cu_error_name(4), "CUDA_ERROR_DEINITIALIZED");
	ck_assert_ptr_nonnull(strstr(tf_cu_error_text(4), "shutting down"));
	cleanup();
}
END_TEST

static int returns(int v)
{
	return v;
}

START_TEST(check_macro)
{
	ck_assert_int_eq(TF_CU(returns(0)), TF_OK);
	int line = __LINE__ + 1;
	tf_status st = TF_CU(returns(2));
	ck_assert_int_eq(st, TF_ERR_NOMEM);
	char want[128];
	snprintf(want, sizeof(want), "returns(2) at check_cuda.c:%d: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory", line);
	ck_assert_str_eq(tf_errmsg(st), want);
	st = TF_CU(returns(4));
	ck_assert_int_eq(st, TF_ERR_UNAVAILABLE);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(st), "the process is exiting"));
	ck_assert_int_eq(TF_CU(returns(500)), TF_ERR_NOTFOUND);
	ck_assert_int_eq(TF_CU(returns(100)), TF_ERR_UNAVAILABLE);
	ck_assert_int_eq(TF_CU(returns(700)), TF_ERR_INTERNAL);
	ck_assert_int_eq(tf_status_exit(TF_CU(returns(700))), 70);
}
END_TEST

/* The regression that motivated the pins: 110 is GPUDirect RDMA with VMM,
 * 126 the memory sync domain count. */
START_TEST(attr_pins)
{
	ck_assert_int_eq(TF_CU_ATTR_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, 110);
	ck_assert_int_eq(TF_CU_ATTR_MEM_SYNC_DOMAIN_COUNT, 126);
	ck_assert_int_eq(TF_CU_ATTR_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 102);
	ck_assert_int_eq(TF_CU_ATTR_MULTIPROCESSOR_COUNT, 16);
	ck_assert_int_eq(tf_cu_attr_by_name("GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED"), 110);
	ck_assert_int_eq(tf_cu_attr_by_name("CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT"), 126);
	ck_assert_int_eq(tf_cu_attr_by_name("NO_SUCH_ATTRIBUTE"), -1);
	ck_assert_str_eq(tf_cu_attr_name(110), "GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED");
	ck_assert_ptr_null(tf_cu_attr_name(100000));
}
END_TEST

/* Compare our values with "NAME = VALUE" lines of an installed cuda.h. */
static int cuda_h_value(const char *text, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = strstr(text, name); p; p = strstr(p + 1, name)) {
		const char *q = p + n;
		if ((p > text && (p[-1] == '_' || (p[-1] >= 'A' && p[-1] <= 'Z'))) ||
		    *q == '_' || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9'))
			continue;
		while (*q == ' ' || *q == '\t')
			q++;
		if (*q != '=')
			continue;
		return (int)strtol(q + 1, NULL, 0);
	}
	return -1;
}

START_TEST(attr_table_matches_cuda_h)
{
	const char *home = getenv("CUDA_HOME");
	char path[512];
	snprintf(path, sizeof(path), "%s/include/cuda.h", home && *home ? home : "/usr/local/cuda");
	FILE *f = fopen(path, "r");
	/* A build with the kernels (TF_CUDA) has the toolkit, so its cuda.h
	 * must be found: without it this check would compare nothing. A CUDA=0
	 * build on a machine without the toolkit has none to compare with. */
#if TF_CUDA
	ck_assert_msg(f != NULL, "check_cuda: no %s (set CUDA_HOME): the values and struct "
		      "layouts cannot be checked", path);
#else
	if (!f) {
		fprintf(stderr, "check_cuda: no %s in a CUDA=0 build: the pinned values alone are "
			"checked\n", path);
		return;
	}
#endif
	static char text[4 << 20];
	size_t n = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[n] = 0;
	const char *name;
	int value, checked = 0;
	for (size_t i = 0; tf_cu_attr_at(i, &name, &value); i++) {
		char full[128];
		snprintf(full, sizeof(full), "CU_DEVICE_ATTRIBUTE_%s", name);
		ck_assert_msg(cuda_h_value(text, full) == value, "%s: ours %d, cuda.h %d", full, value,
		              cuda_h_value(text, full));
		checked++;
	}
	ck_assert_int_gt(checked, 30);
	static const struct {
		const char *name;
		int value;
	} more[] = {
		{"CUDA_ERROR_DEINITIALIZED", TF_CU_ERROR_DEINITIALIZED},
		{"CUDA_ERROR_NO_DEVICE", TF_CU_ERROR_NO_DEVICE},
		{"CUDA_ERROR_NOT_FOUND", TF_CU_ERROR_NOT_FOUND},
		{"CUDA_ERROR_OUT_OF_MEMORY", TF_CU_ERROR_OUT_OF_MEMORY},
		{"CU_STREAM_CAPTURE_MODE_THREAD_LOCAL", TF_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL},
		{"CU_MEM_ACCESS_FLAGS_PROT_READWRITE", TF_CU_MEM_ACCESS_FLAGS_PROT_READWRITE},
		{"CU_MEM_ALLOCATION_TYPE_PINNED", TF_CU_MEM_ALLOCATION_TYPE_PINNED},
		{"CU_MEM_LOCATION_TYPE_DEVICE", TF_CU_MEM_LOCATION_TYPE_DEVICE},
		{"CU_MEM_ALLOC_GRANULARITY_RECOMMENDED", TF_CU_MEM_ALLOC_GRANULARITY_RECOMMENDED},
		{"CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", TF_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES},
		{"CU_FUNC_ATTRIBUTE_NUM_REGS", TF_CU_FUNC_ATTRIBUTE_NUM_REGS},
	};
	for (size_t i = 0; i < sizeof(more) / sizeof(more[0]); i++)
		ck_assert_msg(cuda_h_value(text, more[i].name) == more[i].value, "%s: ours %d, cuda.h %d",
		              more[i].name, more[i].value, cuda_h_value(text, more[i].name));
	/* Every name in our error table is cuda.h's name for that code. */
	for (int code = 0; code < 1000; code++) {
		const char *nm = tf_cu_error_name_builtin(code);
		if (nm && code != TF_CU_ERROR_INSUFFICIENT_DRIVER) /* 35: gone from CUDA 13's header */
			ck_assert_msg(cuda_h_value(text, nm) == code, "%s: ours %d, cuda.h %d", nm, code,
			              cuda_h_value(text, nm));
	}
	/* The struct layouts we declare: CUmemAllocationProp is 32 bytes. */
	ck_assert_uint_eq(sizeof(struct tf_cu_mem_prop), 32);
	ck_assert_uint_eq(sizeof(struct tf_cu_mem_access), 12);
	/* CUlaunchAttribute is 72 bytes; CUlaunchConfig puts the stream at 32. */
	ck_assert_uint_eq(sizeof(struct tf_cu_launch_attr), 72);
	ck_assert_uint_eq(offsetof(struct tf_cu_launch_config, s), 32);
	ck_assert_uint_eq(offsetof(struct tf_cu_launch_config, nattrs), 48);
	ck_assert_int_eq(cuda_h_value(text, "CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION"),
	                 TF_CU_LAUNCH_ATTR_PROGRAMMATIC_STREAM_SERIALIZATION);
}
END_TEST

START_TEST(plain_backend_on_fake)
{
	setenv("TF_CUDA_LIBRARY", fake_lib(""), 1);
	struct tf_cu_device dev;
	ck_assert_int_eq(tf_cu_device_open(0, &dev), TF_OK);
	struct tf_arena_backend be;
	ck_assert_int_eq(tf_arena_backend_plain(&dev, &be), TF_OK);
	struct tf_arena *a;
	struct tf_arena_opts o = {.chunk_min = 4 << 20};
	ck_assert_int_eq(tf_arena_new(&be, &o, &a), TF_OK);
	tf_cu_mem_install(a);
	struct tf_cu_buf b1, b2, b3;
	ck_assert_int_eq(tf_cu_buf_alloc(&b1, 1000), TF_OK);
	ck_assert_int_eq(tf_cu_buf_alloc(&b2, 5 << 20), TF_OK); /* large: own chunk */
	ck_assert_uint_eq(b1.ptr % 512, 0);
	memset((void *)(uintptr_t)b1.ptr, 0xab, 1000); /* the fake's device memory is ours */
	memset((void *)(uintptr_t)b2.ptr, 0xcd, 5 << 20);
	tf_cu_buf_borrow(&b3, b2.ptr + 4096, 512);
	ck_assert_int_eq(tf_cu_buf_release(&b3), TF_OK); /* borrowed: nothing freed */
	struct tf_arena_stats s;
	tf_arena_stats(a, &s);
	ck_assert_uint_eq(s.live, 2);
	ck_assert_int_eq(tf_cu_buf_release(&b2), TF_OK);
	ck_assert_int_eq(tf_cu_buf_release(&b1), TF_OK);
	tf_arena_stats(a, &s);
	ck_assert_uint_eq(s.live, 0);
	ck_assert_uint_eq(s.large, 0);
	/* A pointer from before the hook goes to cuMemFree as before. */
	tf_cu_mem_install(NULL);
	struct tf_cu_buf f;
	ck_assert_int_eq(tf_cu_buf_alloc(&f, 100), TF_OK);
	tf_cu_mem_install(a);
	ck_assert(!tf_arena_owns(a, f.ptr));
	ck_assert_int_eq(tf_cu_buf_release(&f), TF_OK);
	tf_cu_mem_install(NULL);
	tf_arena_free(a);
	tf_cu_device_close(&dev);
	cleanup();
}
END_TEST

START_TEST(module_build)
{
#if TF_CUDA
	ck_assert(tf_cu_kernels_built());
	ck_assert_uint_gt(tf_cu_fatbin_size(), 64);
	setenv("TF_CUDA_LIBRARY", fake_lib(""), 1);
	struct tf_cu_device dev;
	ck_assert_int_eq(tf_cu_device_open(0, &dev), TF_OK);
	ck_assert_int_eq(tf_cu_module_load(), TF_OK);
	tf_cu_func f;
	ck_assert_int_eq(tf_cu_kernel("tf_copy_u128", &f), TF_OK);
	tf_cu_module_unload();
	cleanup();
#else
	ck_assert(!tf_cu_kernels_built());
	ck_assert_uint_eq(tf_cu_fatbin_size(), 0);
	tf_cu_func f;
	tf_status st = tf_cu_kernel("tf_copy_u128", &f);
	ck_assert_int_eq(st, TF_ERR_UNAVAILABLE);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(st), "CUDA=0"));
#endif
}
END_TEST

/* How the EXL3 GEMV cuts K: every 128-block in exactly one slice, about
 * blocks_per_sm blocks per processor, one slice when N alone fills the
 * device. */
START_TEST(exl3_plan)
{
	static const uint32_t shapes[][2] = {{5120, 2304}, {2304, 5120}, {5120, 129280}, {128, 128},
	                                     {1280, 32768}, {8192, 5120}};
	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
		struct tf_exl3_geom g = {shapes[i][0], shapes[i][1], 4, TF_EXL3_CB_MUL1};
		struct tf_cu_exl3_plan p;
		tf_cu_exl3_plan(&g, 3, 132, 4, &p);
		ck_assert_uint_eq(p.grid_x, g.n / 128);
		ck_assert_uint_eq(p.rows_tmpl, 4);
		unsigned kb = g.k / 128;
		ck_assert_uint_ge(p.slices * p.chunks_per_slice, kb);
		ck_assert_uint_lt((p.slices - 1) * p.chunks_per_slice, kb); /* no empty slice */
		/* At least half the 528 blocks aimed at, unless K runs out first
		 * or the column blocks alone give every SM one (then one slice). */
		unsigned most = p.grid_x * kb, blocks = p.grid_x * p.slices;
		if (p.grid_x >= 132)
			ck_assert_uint_eq(p.slices, 1);
		else
			ck_assert_uint_ge(blocks, most < 264 ? most : 264);
		ck_assert_uint_le(blocks, p.grid_x > 528 ? p.grid_x : 528); /* one wave aimed at */
	}
	struct tf_exl3_geom g = {5120, 2304, 2, TF_EXL3_CB_3INST};
	struct tf_cu_exl3_plan p;
	tf_cu_exl3_plan(&g, 1, 132, 4, &p);
	ck_assert_uint_eq(p.chunks_per_slice, 2);
	ck_assert_uint_eq(p.slices, 20);
	ck_assert_uint_eq(p.rows_tmpl, 1);
	/* 10 column blocks, 40 chunks, 396 blocks aimed at: not 400 blocks of
	 * one chunk (a second wave of 4), but 200 of two. */
	struct tf_exl3_geom g2 = {5120, 1280, 3, TF_EXL3_CB_MUL1};
	tf_cu_exl3_plan(&g2, 1, 132, 3, &p);
	ck_assert_uint_eq(p.slices, 20);
	ck_assert_uint_eq(p.chunks_per_slice, 2);
	/* 256 column blocks on 132 SMs: K is not split. */
	struct tf_exl3_geom g3 = {1280, 32768, 4, TF_EXL3_CB_MUL1};
	tf_cu_exl3_plan(&g3, 1, 132, 4, &p);
	ck_assert_uint_eq(p.slices, 1);
	ck_assert_uint_eq(p.grid_x, 256);
	tf_cu_exl3_plan(&g, 16, 1, 1, &p); /* one processor: one slice */
	ck_assert_uint_eq(p.slices, 1);
	ck_assert_uint_eq(p.rows_tmpl, 16);
}
END_TEST

/* Clusters: 2..cmax slices and three blocks an SM or more. */
START_TEST(exl3_cluster_size)
{
	ck_assert_uint_eq(tf_cu_exl3_cluster_size(360, 9, 132, 16), 9);   /* 2304x5120 */
	ck_assert_uint_eq(tf_cu_exl3_cluster_size(264, 6, 132, 16), 0);   /* two an SM */
	ck_assert_uint_eq(tf_cu_exl3_cluster_size(265, 5, 132, 16), 5);   /* past two */
	ck_assert_uint_eq(tf_cu_exl3_cluster_size(128, 16, 132, 16), 0);  /* one an SM */
	ck_assert_uint_eq(tf_cu_exl3_cluster_size(1010, 1, 132, 16), 0);  /* one slice */
	ck_assert_uint_eq(tf_cu_exl3_cluster_size(520, 13, 132, 8), 0);   /* past cmax */
	ck_assert_uint_eq(tf_cu_exl3_cluster_size(520, 13, 132, 16), 13);
	ck_assert_uint_eq(tf_cu_exl3_cluster_size(40, 2, 4, 16), 2);      /* a small GPU */
	ck_assert_uint_eq(tf_cu_exl3_cluster_size(400, 4, 0, 16), 4);     /* sms 0: 132 */
}
END_TEST

/* The spread: ceil(blocks / SMs) blocks of 19 KiB of static shared memory
 * fit an SM of 228 KiB with the dynamic shared memory asked for, one more
 * does not; nothing when the grid fills the SMs anyway. */
START_TEST(exl3_spread)
{
	const int stat = 19088;
	for (unsigned blocks = 1; blocks <= 3 * 132; blocks += 7) {
		unsigned per_sm = (blocks + 131) / 132, shm = tf_cu_exl3_spread(blocks, 132, 4, stat);
		ck_assert_uint_gt(shm, 0);
		ck_assert_uint_le(shm, 188 * 1024);
		unsigned block = stat + shm + 1024, fits = 228 * 1024 / block;
		ck_assert_uint_eq(fits, per_sm > 1 ? per_sm : 1);
		/* The four-row kernels keep 35 KiB of their own. */
		shm = tf_cu_exl3_spread(blocks, 132, 4, 35 * 1024);
		ck_assert_uint_eq(228 * 1024 / (35 * 1024 + shm + 1024), per_sm > 1 ? per_sm : 1);
	}
	ck_assert_uint_eq(tf_cu_exl3_spread(528, 132, 4, stat), 0);
	ck_assert_uint_eq(tf_cu_exl3_spread(400, 132, 3, stat), 0);
	ck_assert_uint_eq(tf_cu_exl3_spread(100, 132, 4, 0), 0);
}
END_TEST

/* The one selector of the EXL3 kernels' alternatives. */
START_TEST(exl3_variant)
{
	ck_assert_int_eq(tf_cu_exl3_variant("no-v10,no-v7,no-cluster,no-spread,pdl-all"), TF_OK);
	ck_assert_int_eq(tf_cu_exl3_variant(""), TF_OK);
	tf_status st = tf_cu_exl3_variant("no-v10,bogus");
	ck_assert_int_eq(st, TF_ERR_ARG);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(st), "'bogus'"));
	ck_assert_int_eq(tf_cu_exl3_variant("pdl-all,pdl-none"), TF_ERR_ARG);
	ck_assert_int_eq(tf_cu_exl3_variant("no-v10,,no-v7"), TF_ERR_ARG);
	ck_assert_int_eq(tf_cu_exl3_variant("experts-waves1"), TF_OK);
	ck_assert_uint_eq(tf_cu_exl3_experts_waves(), 1);
	ck_assert_int_eq(tf_cu_exl3_variant("experts-waves4,no-v7"), TF_OK);
	ck_assert_uint_eq(tf_cu_exl3_experts_waves(), 4);
	ck_assert_int_eq(tf_cu_exl3_variant("experts-waves1,experts-waves4"), TF_ERR_ARG);
	ck_assert_int_eq(tf_cu_exl3_variant("tuned"), TF_OK);
	ck_assert_uint_eq(tf_cu_exl3_experts_waves(), 2);
	setenv("TF_CUDA_EXL3_VARIANT", "no-v7", 1);
	ck_assert_int_eq(tf_cu_exl3_variant(NULL), TF_OK);
	setenv("TF_CUDA_EXL3_VARIANT", "v7", 1);
	st = tf_cu_exl3_variant(NULL);
	ck_assert_int_eq(st, TF_ERR_ARG);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(st), "TF_CUDA_EXL3_VARIANT"));
	unsetenv("TF_CUDA_EXL3_VARIANT");
	ck_assert_int_eq(tf_cu_exl3_variant("tuned"), TF_OK);
}
END_TEST

/* The launcher's checks, on the fake driver (whose launch does nothing). */
START_TEST(exl3_gemv_args)
{
	setenv("TF_CUDA_LIBRARY", fake_lib(""), 1);
	struct tf_cu_device dev;
	ck_assert_int_eq(tf_cu_device_open(0, &dev), TF_OK);
	struct tf_cu_exl3_layer L = {.g = {512, 256, 4, TF_EXL3_CB_MUL1}, .trellis = 1, .suh = 1, .svh = 1};
	struct tf_cu_exl3_ws ws;
	ck_assert_int_eq(tf_cu_exl3_ws_init(&ws, 128), TF_OK);
	tf_status st = tf_cu_exl3_gemv(&L, 1, 17, 1, false, &ws, 4, 4, false, NULL);
	ck_assert_int_eq(st, TF_ERR_ARG);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(st), "17 rows"));
	ck_assert_int_eq(tf_cu_exl3_gemv(&L, 1, 0, 1, false, &ws, 4, 4, false, NULL), TF_ERR_ARG);
	st = tf_cu_exl3_gemv(&L, 1, 2, 1, false, &ws, 4, 4, false, NULL); /* 256 > 128 columns */
	ck_assert_int_eq(st, TF_ERR_ARG);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(st), "workspace"));
	L.g.k = 500;
	ck_assert_int_eq(tf_cu_exl3_gemv(&L, 1, 1, 1, false, &ws, 4, 4, false, NULL), TF_ERR_ARG);
	tf_cu_exl3_ws_release(&ws);
	ck_assert_int_eq(tf_cu_exl3_ws_init(&ws, 256), TF_OK);
	L.g.k = 512;
#if TF_CUDA
	ck_assert_int_eq(tf_cu_exl3_gemv(&L, 1, 5, 1, false, &ws, 4, 4, false, NULL), TF_OK);
	/* One row, with and without the dependent launch (the fake has no
	 * cuLaunchKernelEx, so both take the plain launch); split over
	 * slices, it needs the workspace. */
	ck_assert_int_eq(tf_cu_exl3_variant("pdl-all"), TF_OK);
	ck_assert_int_eq(tf_cu_exl3_gemv(&L, 1, 1, 1, false, &ws, 4, 4, false, NULL), TF_OK);
	ck_assert_int_eq(tf_cu_exl3_variant("pdl-none,no-v10"), TF_OK);
	ck_assert_int_eq(tf_cu_exl3_gemv(&L, 1, 1, 1, false, &ws, 4, 4, false, NULL), TF_OK);
	ck_assert_int_eq(tf_cu_exl3_gemv(&L, 1, 1, 1, false, NULL, 4, 4, false, NULL), TF_ERR_ARG);
	/* The batch-invariant path: split slices must meet in a cluster,
	 * which the fake cannot place (no cuOccupancyMaxActiveClusters). */
	st = tf_cu_exl3_gemv(&L, 1, 1, 1, false, NULL, 4, 4, true, NULL);
	ck_assert_int_eq(st, TF_ERR_UNSUPPORTED);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(st), "clusters of"));
	ck_assert_int_eq(tf_cu_exl3_variant("tuned"), TF_OK);
#else
	ck_assert_int_eq(tf_cu_exl3_gemv(&L, 1, 5, 1, false, &ws, 4, 4, false, NULL), TF_ERR_UNAVAILABLE);
	ck_assert_int_eq(tf_cu_exl3_gemv(&L, 1, 1, 1, false, &ws, 4, 4, false, NULL), TF_ERR_UNAVAILABLE);
#endif
	tf_cu_exl3_ws_release(&ws);
	cleanup();
}
END_TEST

/* Routing: pairs grouped by expert in row order, cut at rows_max; rows
 * without a choice (−1) get no pair; the table holds offset and width. */
START_TEST(exl3_route)
{
	/* 4 rows, top 2; expert 1 chosen by rows 0, 1, 2, 3 (cut at 3). */
	const int32_t sel[8] = {1, 0, 1, 2, 1, -1, 2, 1};
	struct tf_cu_exl3_task tasks[8];
	int32_t xrow[8], pair_of[8];
	uint32_t npairs;
	uint32_t nt = tf_cu_exl3_route(sel, 4, 2, 3, 3, tasks, xrow, pair_of, &npairs);
	ck_assert_uint_eq(npairs, 7);
	ck_assert_uint_eq(nt, 4);
	/* expert 0: row 0; expert 1: rows 0, 1, 2, then 3; expert 2: rows 1, 3 */
	const int32_t want_tasks[4][3] = {{0, 0, 1}, {1, 1, 3}, {1, 4, 1}, {2, 5, 2}};
	for (uint32_t t = 0; t < nt; t++) {
		ck_assert_int_eq(tasks[t].expert, want_tasks[t][0]);
		ck_assert_int_eq(tasks[t].first, want_tasks[t][1]);
		ck_assert_int_eq(tasks[t].count, want_tasks[t][2]);
	}
	const int32_t want_xrow[7] = {0, 0, 1, 2, 3, 1, 3};
	for (int p = 0; p < 7; p++)
		ck_assert_int_eq(xrow[p], want_xrow[p]);
	const int32_t want_pair[8] = {1, 0, 2, 5, 3, -1, 6, 4};
	for (int i = 0; i < 8; i++)
		ck_assert_int_eq(pair_of[i], want_pair[i]);

	struct tf_exl3_geom g[2] = {{256, 128, 2, TF_EXL3_CB_MUL1}, {256, 128, 5, TF_EXL3_CB_MUL1}};
	uint64_t off[2], total;
	int ragged;
	ck_assert_int_eq(tf_exl3_experts_layout(g, 2, off, &total, &ragged), TF_OK);
	unsigned char table[2 * TF_CU_EXL3_EXPERT_BYTES];
	tf_cu_exl3_experts_table(g, off, 2, table);
	uint64_t o;
	int32_t bits;
	memcpy(&o, table + TF_CU_EXL3_EXPERT_BYTES, 8);
	memcpy(&bits, table + TF_CU_EXL3_EXPERT_BYTES + 8, 4);
	ck_assert_uint_eq(o, tf_exl3_trellis_bytes(&g[0]));
	ck_assert_int_eq(bits, 5);

	/* Argument checks that come before any launch. */
	struct tf_cu_exl3_experts E = {.k = 256, .n = 128, .count = 2, .cb = TF_EXL3_CB_MUL1};
	tf_status st = tf_cu_exl3_experts(&E, 1, 1, 2, 1, 1, 1, false, NULL, 4, 4, false, NULL);
	ck_assert_int_eq(st, TF_ERR_ARG);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(st), "rows_max 2"));
	st = tf_cu_exl3_experts(&E, 1, 1, 1, 1, 1, 1, false, NULL, 4, 4, true, NULL);
	ck_assert_int_eq(st, TF_ERR_ARG);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(st), "tasks of 4 rows"));
	struct tf_cu_exl3_layer L = {.g = {512, 256, 4, TF_EXL3_CB_MUL1}, .trellis = 1, .suh = 1, .svh = 1};
	ck_assert_uint_eq(tf_cu_exl3_gemm_scratch(&L.g, 64), 512 * 256 * 2 + 64 * 512 * 2 + 64 * 256 * 4);
	st = tf_cu_exl3_gemm(&L, 1, 64, 1, false, NULL, 1, 1000, NULL);
	ck_assert_int_eq(st, TF_ERR_ARG);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(st), "scratch"));
}
END_TEST

Suite *suite_cuda(void)
{
	Suite *s = suite_create("cuda");
	TCase *tc = tcase_create("driver");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, load_missing_library);
	tcase_add_test(tc, load_fake);
	tcase_add_test(tc, load_missing_symbol);
	tcase_add_test(tc, load_no_device);
	tcase_add_test(tc, device_fake);
	tcase_add_test(tc, error_names);
	tcase_add_test(tc, check_macro);
	tcase_add_test(tc, attr_pins);
	tcase_add_test(tc, attr_table_matches_cuda_h);
	tcase_add_test(tc, plain_backend_on_fake);
	tcase_add_test(tc, module_build);
	tcase_add_test(tc, exl3_plan);
	tcase_add_test(tc, exl3_cluster_size);
	tcase_add_test(tc, exl3_spread);
	tcase_add_test(tc, exl3_variant);
	tcase_add_test(tc, exl3_gemv_args);
	tcase_add_test(tc, exl3_route);
	suite_add_tcase(s, tc);
	return s;
}
