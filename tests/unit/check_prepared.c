/* check_prepared.c: unit tests of libcore/model/prepared: image write/read/
 * verify round trips, damage (flipped byte, truncation, another version,
 * key or rank) detected, keys, paths, and tar export/import. */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"
#include "model/prepared.h"

static char tmpdir[64];

static void setup(void)
{
	strcpy(tmpdir, "/tmp/tf-prep-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void teardown(void)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	ck_assert_int_eq(system(cmd), 0);
}

static const uint8_t key1[32] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17};

/* Write an image with a few entries (one spanning several 4 KiB blocks,
 * one empty) to path. */
static void write_image(const char *path, const uint8_t *key, uint32_t rank, uint32_t world)
{
	struct tf_prep_writer w;
	ck_assert_int_eq(tf_prep_writer_init(&w, path, key, rank, world), TF_OK);
	uint64_t s1[2] = {3, 5}, s2[1] = {5000}, s3[1] = {0}, s4[3] = {2, 3, 4};
	ck_assert_int_eq(tf_prep_writer_add(&w, "L0.attn.wq_a.suh", TF_PREP_F16, 2, s1), TF_OK);
	ck_assert_int_eq(tf_prep_writer_add(&w, "L0.attn.wq_a.trellis", TF_PREP_I16, 1, s2), TF_OK);
	ck_assert_int_eq(tf_prep_writer_add(&w, "empty", TF_PREP_F32, 1, s3), TF_OK);
	ck_assert_int_eq(tf_prep_writer_add(&w, "L0.attn_norm", TF_PREP_F32, 3, s4), TF_OK);
	ck_assert_int_eq(tf_prep_writer_add(&w, "empty", TF_PREP_F32, 1, s3), TF_ERR_ARG);
	ck_assert_int_eq(tf_prep_writer_begin(&w), TF_OK);
	uint8_t a[30];
	for (int i = 0; i < 30; i++)
		a[i] = (uint8_t)i;
	ck_assert_int_eq(tf_prep_writer_put(&w, "L0.attn.wq_a.suh", a, 30), TF_OK);
	ck_assert_int_eq(tf_prep_writer_put(&w, "L0.attn.wq_a.suh", a, 1), TF_ERR_ARG);
	uint16_t t[5000];
	for (int i = 0; i < 5000; i++)
		t[i] = (uint16_t)(i * 7);
	ck_assert_int_eq(tf_prep_writer_put(&w, "L0.attn.wq_a.trellis", t, 6000), TF_OK);
	ck_assert_int_eq(tf_prep_writer_put(&w, "L0.attn.wq_a.trellis", (char *)t + 6000, 4000), TF_OK);
	float f[24];
	for (int i = 0; i < 24; i++)
		f[i] = (float)i * 0.5f;
	ck_assert_int_eq(tf_prep_writer_put(&w, "L0.attn_norm", f, sizeof f), TF_OK);
	ck_assert_int_eq(tf_prep_writer_commit(&w), TF_OK);
}

static char *path_in(const char *name)
{
	return tf_path_join(tmpdir, name);
}

START_TEST(round_trip)
{
	char *p = path_in("L0.bin");
	write_image(p, key1, 1, 2);
	struct stat sb;
	ck_assert_int_eq(stat(p, &sb), 0);
	ck_assert_int_eq(sb.st_size % 4096, 0);
	ck_assert(!tf_file_exists(p) || access(p, R_OK) == 0);
	struct tf_prep_image im;
	struct tf_prep_expect ex = {key1, 1, 2};
	ck_assert_int_eq(tf_prep_open(&im, p, &ex), TF_OK);
	ck_assert_uint_eq(im.n, 4);
	const struct tf_prep_entry *e = tf_prep_find(&im, "L0.attn.wq_a.trellis");
	ck_assert_ptr_nonnull(e);
	ck_assert_uint_eq(e->offset % 4096, 0);
	ck_assert_uint_eq(e->length, 10000);
	ck_assert_int_eq(e->dtype, TF_PREP_I16);
	uint16_t v[3];
	ck_assert_int_eq(tf_prep_read(&im, e, 2 * 4999 - 2, v, 6), TF_ERR_RANGE);
	ck_assert_int_eq(tf_prep_read(&im, e, 2 * 4997, v, 6), TF_OK);
	ck_assert_uint_eq(v[2], (uint16_t)(4999 * 7));
	e = tf_prep_find(&im, "L0.attn_norm");
	ck_assert_uint_eq(e->ndim, 3);
	ck_assert_uint_eq(e->shape[2], 4);
	float f;
	ck_assert_int_eq(tf_prep_read(&im, e, 4 * 23, &f, 4), TF_OK);
	ck_assert(f == 11.5f);
	ck_assert_ptr_null(tf_prep_find(&im, "nope"));
	ck_assert_int_eq(tf_prep_verify(&im), TF_OK);
	tf_prep_close(&im);
	/* no temporary left behind */
	char cmd[160];
	snprintf(cmd, sizeof cmd, "test $(ls '%s' | wc -l) -eq 1", tmpdir);
	ck_assert_int_eq(system(cmd), 0);
	free(p);
}
END_TEST

static void patch(const char *path, uint64_t off, uint8_t x)
{
	int fd = open(path, O_RDWR);
	uint8_t b;
	ck_assert_int_eq(pread(fd, &b, 1, (off_t)off), 1);
	b ^= x;
	ck_assert_int_eq(pwrite(fd, &b, 1, (off_t)off), 1);
	close(fd);
}

START_TEST(damage)
{
	char *p = path_in("top.bin");
	struct tf_prep_image im;
	struct tf_prep_expect ex = {key1, 0, 1};
	tf_status st;

	/* a flipped payload byte: opens, and verify names the entry */
	write_image(p, key1, 0, 1);
	ck_assert_int_eq(tf_prep_open(&im, p, &ex), TF_OK);
	uint64_t off = tf_prep_find(&im, "L0.attn.wq_a.trellis")->offset + 777;
	tf_prep_close(&im);
	patch(p, off, 0x10);
	ck_assert_int_eq(tf_prep_open(&im, p, &ex), TF_OK);
	st = tf_prep_verify(&im);
	ck_assert_int_eq(st, TF_ERR_FORMAT);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(st), "entry 'L0.attn.wq_a.trellis'"));
	ck_assert_ptr_nonnull(strstr(tf_errmsg(st), "top.bin"));
	tf_prep_close(&im);

	/* every header byte matters */
	for (uint64_t o = 0; o < 400; o += 7) {
		write_image(p, key1, 0, 1);
		patch(p, o, 0x01);
		st = tf_prep_open(&im, p, &ex);
		ck_assert_msg(st != TF_OK, "flipped header byte %llu not detected", (unsigned long long)o);
	}

	/* truncated */
	write_image(p, key1, 0, 1);
	ck_assert_int_eq(truncate(p, 4096 * 2), 0);
	st = tf_prep_open(&im, p, &ex);
	ck_assert_int_eq(st, TF_ERR_FORMAT);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(st), "truncated"));
	ck_assert_int_eq(truncate(p, 50), 0);
	ck_assert_int_eq(tf_prep_open(&im, p, &ex), TF_ERR_FORMAT);

	/* another version */
	write_image(p, key1, 0, 1);
	patch(p, 8, 0x03);
	ck_assert_int_eq(tf_prep_open(&im, p, &ex), TF_ERR_VERSION);

	/* another key, another rank */
	uint8_t key2[32] = {9};
	write_image(p, key2, 0, 1);
	st = tf_prep_open(&im, p, &ex);
	ck_assert_int_eq(st, TF_ERR_MISMATCH);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(st), "key differs"));
	write_image(p, key1, 1, 2);
	ck_assert_int_eq(tf_prep_open(&im, p, &ex), TF_ERR_MISMATCH);
	ck_assert_int_eq(tf_prep_open(&im, p, NULL), TF_OK); /* listing expects nothing */
	tf_prep_close(&im);

	/* not an image; missing */
	ck_assert_int_eq(tf_file_write_atomic(p, "hello, world, this is not an image at all........"
						 "...............................", 80), TF_OK);
	ck_assert_int_eq(tf_prep_open(&im, p, &ex), TF_ERR_FORMAT);
	unlink(p);
	ck_assert_int_eq(tf_prep_open(&im, p, &ex), TF_ERR_NOTFOUND);
	free(p);
}
END_TEST

START_TEST(keys_and_paths)
{
	uint8_t h[32] = {7}, k[32], k2[32];
	struct tf_prep_key kk;
	ck_assert_int_eq(tf_prep_key_begin(&kk, "conv 1"), TF_OK);
	ck_assert_int_eq(tf_prep_key_shard(&kk, "a.safetensors", 100, h), TF_OK);
	ck_assert_int_eq(tf_prep_key_finish(&kk, 0, 2, "", k), TF_OK);
	struct { const char *conv, *shard; uint64_t size; uint8_t h0; uint32_t rank, world; const char *opt; } v[] = {
		{"conv 2", "a.safetensors", 100, 7, 0, 2, ""},
		{"conv 1", "b.safetensors", 100, 7, 0, 2, ""},
		{"conv 1", "a.safetensors", 101, 7, 0, 2, ""},
		{"conv 1", "a.safetensors", 100, 8, 0, 2, ""},
		{"conv 1", "a.safetensors", 100, 7, 1, 2, ""},
		{"conv 1", "a.safetensors", 100, 7, 0, 1, ""},
		{"conv 1", "a.safetensors", 100, 7, 0, 2, "x"},
		{"conv 1", "a.safetensors", 100, 7, 0, 2, ""}, /* the same: equal */
	};
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		uint8_t hh[32] = {v[i].h0};
		ck_assert_int_eq(tf_prep_key_begin(&kk, v[i].conv), TF_OK);
		ck_assert_int_eq(tf_prep_key_shard(&kk, v[i].shard, v[i].size, hh), TF_OK);
		ck_assert_int_eq(tf_prep_key_finish(&kk, v[i].rank, v[i].world, v[i].opt, k2), TF_OK);
		ck_assert_int_eq(!memcmp(k, k2, 32), i == 7);
	}
	char *d = tf_prep_rank_dir("/srv/p", k, 1, 4);
	ck_assert_uint_eq(strlen(d), strlen("/srv/p/") + 32 + strlen("/rank1of4"));
	uint32_t r, w;
	ck_assert_int_eq(tf_prep_check_relpath(d + 7, &r, &w), TF_ERR_FORMAT); /* no file */
	char rel[128], name[16];
	tf_prep_file_name(12, name, sizeof name);
	ck_assert_str_eq(name, "L12.bin");
	snprintf(rel, sizeof rel, "%s/%s", d + 7, name);
	ck_assert_int_eq(tf_prep_check_relpath(rel, &r, &w), TF_OK);
	ck_assert_uint_eq(r, 1);
	ck_assert_uint_eq(w, 4);
	tf_prep_file_name(TF_PREP_TOP, name, sizeof name);
	snprintf(rel, sizeof rel, "%s/%s", d + 7, name);
	ck_assert_int_eq(tf_prep_check_relpath(rel, &r, &w), TF_OK);
	free(d);
	static const char *bad[] = {
		"../x", "/etc/passwd", "0123456789abcdef0123456789abcdef/rank0of1/../../x.bin",
		"0123456789abcdef0123456789abcdef/rank1of1/L0.bin",
		"0123456789abcdef0123456789abcdef/rank0of1/L01.bin",
		"0123456789abcdef0123456789abcdef/rank0of1/L0.bin.tmp",
		"0123456789ABCDEF0123456789abcdef/rank0of1/L0.bin",
		"0123456789abcdef0123456789abcdef/rank0of0/top.bin",
		"0123456789abcdef0123456789abcde/rank0of1/top.bin",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(tf_prep_check_relpath(bad[i], &r, &w) == TF_ERR_FORMAT, "%s", bad[i]);
	ck_assert_int_eq(tf_prep_check_relpath("0123456789abcdef0123456789abcdef/rank3of4/L7.bin", &r, &w),
			 TF_OK);
	ck_assert_int_eq(tf_prep_check_relpath("0123456789abcdef0123456789abcdef/rank1of2/engram-l14-r1of2.bin",
					       &r, &w), TF_OK);
	ck_assert_int_eq(tf_prep_check_relpath("0123456789abcdef0123456789abcdef/rank1of2/engram-l14-r0of2.bin",
					       &r, &w), TF_ERR_FORMAT);
	ck_assert_int_eq(tf_prep_check_relpath("0123456789abcdef0123456789abcdef/rank1of2/engram-l14.bin",
					       &r, &w), TF_ERR_FORMAT);
}
END_TEST

static void export(const char *src, const char *const *rels, size_t n, const char *tar, bool zstd)
{
	int fd = open(tar, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	struct tf_prep_tar t;
	ck_assert_int_eq(tf_prep_tar_begin(&t, fd, zstd), TF_OK);
	for (size_t i = 0; i < n; i++) {
		char *p = tf_path_join(src, rels[i]);
		ck_assert_int_eq(tf_prep_tar_add(&t, rels[i], p), TF_OK);
		free(p);
	}
	ck_assert_int_eq(tf_prep_tar_end(&t), TF_OK);
	close(fd);
}

START_TEST(tar_round_trip)
{
	uint8_t key[32];
	struct tf_prep_key kk;
	ck_assert_int_eq(tf_prep_key_begin(&kk, "t"), TF_OK);
	ck_assert_int_eq(tf_prep_key_finish(&kk, 1, 2, "", key), TF_OK);
	char *src = path_in("src"), *dst = path_in("dst"), *rd = tf_prep_rank_dir(src, key, 1, 2);
	ck_assert_int_eq(tf_file_mkdirs(rd), TF_OK);
	char rel[2][96], *rels[2] = {rel[0], rel[1]};
	snprintf(rel[0], 96, "%s/L0.bin", rd + strlen(src) + 1);
	snprintf(rel[1], 96, "%s/top.bin", rd + strlen(src) + 1);
	for (int i = 0; i < 2; i++) {
		char *p = tf_path_join(src, rel[i]);
		write_image(p, key, 1, 2);
		free(p);
	}
	for (int z = 0; z < 2; z++) {
		char *tar = path_in(z ? "a.tar.zst" : "a.tar"), *tar2 = path_in("b.tar");
		export(src, (const char *const *)rels, 2, tar, z);
		int fd = open(tar, O_RDONLY);
		size_t files;
		ck_assert_int_eq(tf_prep_tar_import(fd, dst, &files), TF_OK);
		close(fd);
		ck_assert_uint_eq(files, 2);
		char cmd[512];
		snprintf(cmd, sizeof cmd, "cmp -s '%s/%s' '%s/%s' && cmp -s '%s/%s' '%s/%s'", src, rel[0],
			 dst, rel[0], src, rel[1], dst, rel[1]);
		ck_assert_int_eq(system(cmd), 0);
		/* the stream is a function of the files */
		export(dst, (const char *const *)rels, 2, tar2, z);
		snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", tar, tar2);
		ck_assert_int_eq(system(cmd), 0);
		free(tar);
		free(tar2);
	}
	/* a damaged member is refused and not kept */
	char *tar = path_in("a.tar"), *bad = path_in("bad");
	struct stat sb;
	stat(tar, &sb);
	patch(tar, 512 + 4096 + 1000, 0x40); /* L0.bin's padding after its first payload */
	int fd = open(tar, O_RDONLY);
	size_t files;
	tf_status st = tf_prep_tar_import(fd, bad, &files);
	close(fd);
	ck_assert_int_ne(st, TF_OK);
	char *p = tf_path_join(bad, rel[0]);
	ck_assert(!tf_file_exists(p));
	free(p);
	/* not a tar of images */
	ck_assert_int_eq(tf_file_write_atomic(tar, "not a tar", 9), TF_OK);
	fd = open(tar, O_RDONLY);
	ck_assert_int_eq(tf_prep_tar_import(fd, bad, &files), TF_ERR_FORMAT);
	close(fd);
	free(tar);
	free(bad);
	free(src);
	free(dst);
	free(rd);
}
END_TEST

/* Entries go in file order: a put to an earlier entry after a later one
 * is refused; room/filled writes in place and gives the same file as put. */
START_TEST(writer_order)
{
	char *p = path_in("order.bin"), *q = path_in("order2.bin");
	struct tf_prep_writer w;
	uint64_t s1[1] = {3000}, s2[1] = {10};
	uint8_t a[6000];
	for (int i = 0; i < 6000; i++)
		a[i] = (uint8_t)(i * 31 + 7);
	for (int pass = 0; pass < 2; pass++) {
		ck_assert_int_eq(tf_prep_writer_init(&w, pass ? q : p, key1, 0, 1), TF_OK);
		ck_assert_int_eq(tf_prep_writer_add(&w, "a", TF_PREP_I16, 1, s1), TF_OK);
		ck_assert_int_eq(tf_prep_writer_add(&w, "b", TF_PREP_U8, 1, s2), TF_OK);
		ck_assert_int_eq(tf_prep_writer_begin(&w), TF_OK);
		ck_assert_int_eq(tf_prep_writer_put(&w, "a", a, 100), TF_OK);
		ck_assert_int_eq(tf_prep_writer_put(&w, "b", a, 10), TF_OK);
		/* "a" is behind "b" in the file now */
		ck_assert_int_eq(tf_prep_writer_put(&w, "a", a + 100, 100), TF_ERR_ARG);
		tf_prep_writer_release(&w);
		ck_assert(!tf_file_exists(pass ? q : p));
	}
	/* in place, in pieces, against one put */
	ck_assert_int_eq(tf_prep_writer_init(&w, p, key1, 0, 1), TF_OK);
	ck_assert_int_eq(tf_prep_writer_add(&w, "a", TF_PREP_I16, 1, s1), TF_OK);
	ck_assert_int_eq(tf_prep_writer_add(&w, "b", TF_PREP_U8, 1, s2), TF_OK);
	ck_assert_int_eq(tf_prep_writer_begin(&w), TF_OK);
	for (int at = 0; at < 6000; at += 1500) {
		void *room;
		ck_assert_int_eq(tf_prep_writer_room(&w, "a", 1500, &room), TF_OK);
		ck_assert_int_eq(tf_prep_writer_room(&w, "a", 1, &room), TF_ERR_ARG); /* one open */
		memcpy(room, a + at, 1500);
		ck_assert_int_eq(tf_prep_writer_filled(&w), TF_OK);
	}
	ck_assert_int_eq(tf_prep_writer_filled(&w), TF_ERR_ARG);
	ck_assert_int_eq(tf_prep_writer_put(&w, "b", a, 10), TF_OK);
	ck_assert_int_eq(tf_prep_writer_commit(&w), TF_OK);
	ck_assert_int_eq(tf_prep_writer_init(&w, q, key1, 0, 1), TF_OK);
	ck_assert_int_eq(tf_prep_writer_add(&w, "a", TF_PREP_I16, 1, s1), TF_OK);
	ck_assert_int_eq(tf_prep_writer_add(&w, "b", TF_PREP_U8, 1, s2), TF_OK);
	ck_assert_int_eq(tf_prep_writer_begin(&w), TF_OK);
	ck_assert_int_eq(tf_prep_writer_put(&w, "a", a, 6000), TF_OK);
	ck_assert_int_eq(tf_prep_writer_put(&w, "b", a, 10), TF_OK);
	ck_assert_int_eq(tf_prep_writer_commit(&w), TF_OK);
	char *d1, *d2;
	size_t n1, n2;
	ck_assert_int_eq(tf_file_read_all(p, 1 << 20, &d1, &n1), TF_OK);
	ck_assert_int_eq(tf_file_read_all(q, 1 << 20, &d2, &n2), TF_OK);
	ck_assert_uint_eq(n1, n2);
	ck_assert(!memcmp(d1, d2, n1));
	struct tf_prep_image im;
	ck_assert_int_eq(tf_prep_open(&im, p, NULL), TF_OK);
	ck_assert_int_eq(tf_prep_verify(&im), TF_OK);
	tf_prep_close(&im);
	free(d1);
	free(d2);
	free(p);
	free(q);
}
END_TEST

Suite *suite_prepared(void)
{
	Suite *s = suite_create("prepared");
	TCase *t = tcase_create("prepared");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_add_test(t, round_trip);
	tcase_add_test(t, damage);
	tcase_add_test(t, keys_and_paths);
	tcase_add_test(t, tar_round_trip);
	tcase_add_test(t, writer_order);
	suite_add_tcase(s, t);
	return s;
}
