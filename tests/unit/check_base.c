/* check_base.c: unit tests of libcore/base. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/digest.h"
#include "base/f16.h"
#include "base/file.h"
#include "base/hmap.h"
#include "base/json.h"
#include "base/num.h"
#include "base/rng.h"
#include "base/status.h"
#include "base/thread.h"

START_TEST(status_detail)
{
	tf_err_clear();
	ck_assert_str_eq(tf_errmsg(TF_ERR_FORMAT), "bad data");
	tf_status st = tf_err(TF_ERR_FORMAT, "'%s': bad magic", "x.bin");
	ck_assert_int_eq(st, TF_ERR_FORMAT);
	ck_assert_str_eq(tf_errmsg(st), "'x.bin': bad magic");
	tf_err_wrap(st, "layer %d: ", 3);
	ck_assert_str_eq(tf_errmsg(st), "layer 3: 'x.bin': bad magic");
	errno = ENOENT;
	tf_err_errno(TF_ERR_IO, "cannot open '%s'", "y");
	ck_assert_str_eq(tf_errmsg(TF_ERR_IO), "cannot open 'y': No such file or directory");
	ck_assert_int_eq(tf_status_exit(TF_ERR_FORMAT), 65);
	ck_assert_int_eq(tf_status_exit(TF_ERR_NOTFOUND), 66);
	ck_assert_int_eq(tf_status_exit(TF_ERR_UNAVAILABLE), 69);
	ck_assert_int_eq(tf_status_exit(TF_ERR_INTERNAL), 70);
	ck_assert_int_eq(tf_status_exit(TF_ERR_IO), 74);
	ck_assert_int_eq(tf_status_exit(TF_OK), 0);
}
END_TEST

START_TEST(buf_grow)
{
	struct tf_buf b = TF_BUF_INIT;
	for (int i = 0; i < 1000; i++)
		ck_assert_int_eq(tf_buf_printf(&b, "%d,", i), TF_OK);
	ck_assert(!strncmp(b.data, "0,1,2,", 6));
	ck_assert_int_eq(b.data[b.len], 0);
	size_t n;
	char *d = tf_buf_detach(&b, &n);
	ck_assert_uint_eq(n, strlen(d));
	ck_assert_ptr_null(b.data);
	free(d);
	d = tf_buf_detach(&b, &n); /* empty buffer detaches as "" */
	ck_assert_str_eq(d, "");
	free(d);
}
END_TEST

START_TEST(num_strict)
{
	int64_t v;
	uint64_t u;
	double d;
	ck_assert_int_eq(tf_parse_i64("42", 0, 100, false, &v), TF_OK);
	ck_assert_int_eq(v, 42);
	ck_assert_int_ne(tf_parse_i64("42x", 0, 100, false, &v), TF_OK);
	ck_assert_int_ne(tf_parse_i64("", 0, 100, false, &v), TF_OK);
	ck_assert_int_ne(tf_parse_i64(" 4", 0, 100, false, &v), TF_OK);
	ck_assert_int_ne(tf_parse_i64("101", 0, 100, false, &v), TF_OK);
	ck_assert_int_ne(tf_parse_i64("99999999999999999999", INT64_MIN, INT64_MAX, false, &v), TF_OK);
	ck_assert_int_eq(tf_parse_i64("4K", 0, 1 << 20, true, &v), TF_OK);
	ck_assert_int_eq(v, 4096);
	ck_assert_int_ne(tf_parse_i64("4K", 0, 1 << 20, false, &v), TF_OK);
	ck_assert_int_eq(tf_parse_u64("2G", UINT64_MAX, true, &u), TF_OK);
	ck_assert_uint_eq(u, 2ULL << 30);
	ck_assert_int_ne(tf_parse_u64("-1", UINT64_MAX, true, &u), TF_OK);
	ck_assert_int_ne(tf_parse_u64("20000000000T", UINT64_MAX, true, &u), TF_OK);
	ck_assert_int_eq(tf_parse_double("0.5", 0, 1, &d), TF_OK);
	ck_assert_int_ne(tf_parse_double("nan", 0, 1, &d), TF_OK);
	ck_assert_int_ne(tf_parse_double("1e999", -1e300, 1e300, &d), TF_OK);
	int64_t list[16];
	int n;
	ck_assert_int_eq(tf_parse_i64_list("1,3-5,9", 0, 10, list, 16, &n), TF_OK);
	ck_assert_int_eq(n, 5);
	ck_assert_int_eq(list[3], 5);
	ck_assert_int_ne(tf_parse_i64_list("5-3", 0, 10, list, 16, &n), TF_OK);
	ck_assert_int_ne(tf_parse_i64_list("0-20", 0, 30, list, 16, &n), TF_OK);
}
END_TEST

/* The map must keep a tenth of its slots empty at every step of an endless
 * insert/remove workload (tombstones are rebuilt away). */
START_TEST(hmap_churn)
{
	struct tf_hmap m;
	tf_hmap_init(&m, TF_HMAP_U64);
	struct tf_rng r;
	tf_rng_seed(&r, 7);
	enum { K = 512 };
	uintptr_t shadow[K] = {0};
	for (int step = 0; step < 20000; step++) {
		uint64_t k = tf_rng_below(&r, K);
		if (tf_rng_below(&r, 2)) {
			ck_assert_int_eq(tf_hmap_put(&m, k * 0x10001, (uintptr_t)step + 1), TF_OK);
			shadow[k] = (uintptr_t)step + 1;
		} else {
			uintptr_t old = 0;
			bool had = tf_hmap_del(&m, k * 0x10001, &old);
			ck_assert_int_eq(had, shadow[k] != 0);
			if (had)
				ck_assert_uint_eq(old, shadow[k]);
			shadow[k] = 0;
		}
		ck_assert_uint_ge(tf_hmap_free_slots(&m) * 10, m.cap);
	}
	size_t live = 0;
	for (int k = 0; k < K; k++) {
		uintptr_t v = 0;
		ck_assert_int_eq(tf_hmap_get(&m, (uint64_t)k * 0x10001, &v), shadow[k] != 0);
		if (shadow[k]) {
			ck_assert_uint_eq(v, shadow[k]);
			live++;
		}
	}
	ck_assert_uint_eq(live, m.live);
	ck_assert_uint_gt(m.rebuilds, 0);
	tf_hmap_release(&m);
}
END_TEST

START_TEST(hmap_strings)
{
	struct tf_hmap m;
	tf_hmap_init(&m, TF_HMAP_STR);
	static const char text[] = "alpha beta gamma alphabet";
	ck_assert_int_eq(tf_hmap_put_str(&m, text, 5, 1), TF_OK);      /* alpha */
	ck_assert_int_eq(tf_hmap_put_str(&m, text + 6, 4, 2), TF_OK);  /* beta */
	ck_assert_int_eq(tf_hmap_put_str(&m, text + 17, 8, 3), TF_OK); /* alphabet */
	uintptr_t v;
	ck_assert(tf_hmap_get_str(&m, "alpha", 5, &v) && v == 1);
	ck_assert(tf_hmap_get_str(&m, "alphabet", 8, &v) && v == 3);
	ck_assert(!tf_hmap_get_str(&m, "alph", 4, &v));
	ck_assert(tf_hmap_del_str(&m, "beta", 4, &v) && v == 2);
	ck_assert(!tf_hmap_get_str(&m, "beta", 4, &v));
	size_t i = 0, n = 0;
	const struct tf_hmap_slot *s;
	while (tf_hmap_next(&m, &i, &s))
		n++;
	ck_assert_uint_eq(n, 2);
	tf_hmap_release(&m);
}
END_TEST

START_TEST(digest_vectors)
{
	uint8_t d[64];
	char hex[129];
	ck_assert_int_eq(tf_sha256("abc", 3, d), TF_OK);
	tf_hex(d, 32, hex);
	ck_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	ck_assert_int_eq(tf_blake2b("abc", 3, d), TF_OK);
	tf_hex(d, 64, hex);
	ck_assert_str_eq(hex, "ba80a53f981c4d0d6a2797b69f12f6e94c212f14685ac4b74b12bb6fdbffa2d1"
			      "7d87c5392aab792dc252d5de4533cc9518d38aa8dbf1925ab92386edd4009923");
	struct tf_digest s;
	ck_assert_int_eq(tf_digest_init(&s, TF_DIGEST_SHA256), TF_OK);
	tf_digest_update(&s, "a", 1);
	tf_digest_update(&s, "bc", 2);
	ck_assert_int_eq(tf_digest_final(&s, d), TF_OK);
	tf_hex(d, 32, hex);
	ck_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}
END_TEST

START_TEST(half_rounding)
{
	ck_assert_uint_eq(tf_f32_to_f16(1.0f), 0x3c00);
	ck_assert_uint_eq(tf_f32_to_f16(-2.0f), 0xc000);
	ck_assert_uint_eq(tf_f32_to_f16(65504.0f), 0x7bff);
	ck_assert_uint_eq(tf_f32_to_f16(65520.0f), 0x7c00);
	ck_assert_uint_eq(tf_f32_to_f16(5.9604644775390625e-8f), 0x0001);
	ck_assert_uint_eq(tf_f32_to_f16(1.0f + 1.0f / 2048), 0x3c00); /* tie to even */
	ck_assert_uint_eq(tf_f32_to_f16(1.0f + 3.0f / 2048), 0x3c02);
	ck_assert_uint_eq(tf_f32_to_bf16(1.0f), 0x3f80);
	ck_assert_uint_eq(tf_f32_to_bf16(tf_bits_f32(0x3f808000u)), 0x3f80); /* tie to even */
	ck_assert_uint_eq(tf_f32_to_bf16(tf_bits_f32(0x3f818000u)), 0x3f82);
	/* every finite half round-trips through float */
	for (uint32_t h = 0; h < 0x10000; h++) {
		if ((h & 0x7c00) == 0x7c00)
			continue;
		ck_assert_uint_eq(tf_f32_to_f16(tf_f16_to_f32((uint16_t)h)), h);
	}
}
END_TEST

START_TEST(file_atomic)
{
	char dir[] = "/tmp/tf-check-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	char *sub = tf_path_join(dir, "a/b");
	ck_assert_int_eq(tf_file_mkdirs(sub), TF_OK);
	char *p = tf_path_join(sub, "f.txt");
	ck_assert_int_eq(tf_file_write_atomic(p, "hello", 5), TF_OK);
	char *data;
	size_t n;
	ck_assert_int_eq(tf_file_read_all(p, 100, &data, &n), TF_OK);
	ck_assert_str_eq(data, "hello");
	free(data);
	ck_assert_int_eq(tf_file_read_all(p, 3, &data, &n), TF_ERR_RANGE);
	/* an aborted write leaves the old file and no temporary */
	struct tf_atomic_file f;
	ck_assert_int_eq(tf_atomic_open(&f, p), TF_OK);
	ck_assert_int_eq(tf_file_write(f.fd, "xx", 2), TF_OK);
	tf_atomic_abort(&f);
	ck_assert_int_eq(tf_file_read_all(p, 100, &data, &n), TF_OK);
	ck_assert_str_eq(data, "hello");
	free(data);
	int fd = open(p, O_RDONLY);
	char b[8];
	ck_assert_int_eq(tf_file_pread(fd, b, 5, 0), TF_OK);
	ck_assert_int_eq(tf_file_pread(fd, b, 6, 0), TF_ERR_FORMAT);
	close(fd);
	ck_assert_int_eq(tf_file_read_all("/nonexistent/x", 10, &data, &n), TF_ERR_NOTFOUND);
	unlink(p);
	rmdir(sub);
	*strrchr(sub, '/') = 0;
	rmdir(sub);
	ck_assert_int_eq(rmdir(dir), 0);
	free(p);
	free(sub);
}
END_TEST

struct sum_ctx {
	long long part[64];
};

static void sum_fn(void *ctx, size_t b, size_t e, int w)
{
	struct sum_ctx *s = ctx;
	for (size_t i = b; i < e; i++)
		s->part[w] += (long long)i;
}

START_TEST(pool_for)
{
	struct tf_pool *p;
	ck_assert_int_eq(tf_pool_new(4, &p), TF_OK);
	for (int round = 0; round < 50; round++) {
		struct sum_ctx s = {{0}};
		tf_pool_for(p, 100000, 64, sum_fn, &s);
		long long t = 0;
		for (int i = 0; i < 64; i++)
			t += s.part[i];
		ck_assert_int_eq(t, 100000LL * 99999 / 2);
	}
	tf_pool_free(p);
	tf_pool_free(NULL);
}
END_TEST

START_TEST(json_typed)
{
	json_t *j;
	static const char text[] = "{\"a\":3,\"b\":\"x\",\"c\":2.5,\"d\":true}";
	ck_assert_int_eq(tf_json_parse(text, strlen(text), "t", &j), TF_OK);
	int64_t a = 0;
	ck_assert_int_eq(tf_json_i64(j, "t", "a", 0, 10, &a), TF_OK);
	ck_assert_int_eq(a, 3);
	ck_assert_int_eq(tf_json_i64(j, "t", "a", 4, 10, &a), TF_ERR_FORMAT);
	ck_assert_int_eq(tf_json_i64(j, "t", "c", 0, 10, &a), TF_ERR_FORMAT);
	ck_assert_int_eq(tf_json_i64(j, "t", "zz", 0, 10, &a), TF_ERR_NOTFOUND);
	const char *s;
	ck_assert_int_eq(tf_json_str(j, "t", "b", &s), TF_OK);
	ck_assert_int_eq(tf_json_str(j, "t", "a", &s), TF_ERR_FORMAT);
	json_decref(j);
	ck_assert_int_eq(tf_json_parse("{\"a\":", 5, "t", &j), TF_ERR_FORMAT);
	ck_assert_int_eq(tf_json_parse("\"\xff\"", 3, "t", &j), TF_ERR_FORMAT);
}
END_TEST

Suite *suite_base(void)
{
	Suite *s = suite_create("base");
	TCase *t = tcase_create("base");
	tcase_add_test(t, status_detail);
	tcase_add_test(t, buf_grow);
	tcase_add_test(t, num_strict);
	tcase_add_test(t, hmap_churn);
	tcase_add_test(t, hmap_strings);
	tcase_add_test(t, digest_vectors);
	tcase_add_test(t, half_rounding);
	tcase_add_test(t, file_atomic);
	tcase_add_test(t, pool_for);
	tcase_add_test(t, json_typed);
	suite_add_tcase(s, t);
	return s;
}
