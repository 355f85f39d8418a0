/* check_pack.c: safetensors validation and pack folders. */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/file.h"
#include "pack/pack.h"
#include "pack/safetensors.h"

static char dir[64];

static void setup(void)
{
	snprintf(dir, sizeof dir, "/tmp/tf-pack-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}

/* Write a raw safetensors file: header text (length prefixed) and n data bytes. */
static char *raw(const char *name, const char *header, size_t n)
{
	char *p = tf_path_join(dir, name);
	FILE *f = fopen(p, "wb");
	uint64_t len = strlen(header);
	fwrite(&len, 8, 1, f);
	fwrite(header, 1, len, f);
	for (size_t i = 0; i < n; i++)
		fputc((int)i, f);
	fclose(f);
	return p;
}

static tf_status open_raw(const char *header, size_t n)
{
	char *p = raw("x.safetensors", header, n);
	struct tf_st_file f;
	tf_status st = tf_st_open(&f, p);
	if (!st)
		tf_st_close(&f);
	free(p);
	return st;
}

START_TEST(st_valid)
{
	char *p = raw("ok.safetensors",
		      "{\"b\":{\"dtype\":\"F16\",\"shape\":[2,3],\"data_offsets\":[8,20]},"
		      "\"__metadata__\":{\"format\":\"pt\"},"
		      "\"a\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		      "\"e\":{\"dtype\":\"F4\",\"shape\":[0],\"data_offsets\":[20,20]},"
		      "\"s\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[20,21]}}", 21);
	struct tf_st_file f;
	ck_assert_int_eq(tf_st_open(&f, p), TF_OK);
	ck_assert_uint_eq(f.n, 4);
	ck_assert_str_eq(f.t[0].name, "a"); /* sorted by offset */
	const struct tf_st_tensor *b = tf_st_find(&f, "b");
	ck_assert_ptr_nonnull(b);
	ck_assert_int_eq(b->dtype, TF_DTYPE_F16);
	ck_assert_uint_eq(tf_st_numel(b), 6);
	uint8_t buf[12];
	ck_assert_int_eq(tf_st_read(&f, b, 0, buf, 12), TF_OK);
	ck_assert_uint_eq(buf[0], 8);
	ck_assert_int_eq(tf_st_read(&f, b, 4, buf, 12), TF_ERR_RANGE);
	ck_assert_ptr_nonnull(f.metadata);
	ck_assert_ptr_null(tf_st_find(&f, "zz"));
	tf_st_close(&f);
	free(p);
}
END_TEST

/* Each malformed header is refused as bad data, with a reason. */
START_TEST(st_malformed)
{
	static const struct {
		const char *header;
		size_t n;
		const char *why;
	} cases[] = {
		{"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 7, "header describes"},
		{"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 9, "header describes"},
		{"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,12]}}", 12, "want 8"},
		{"{\"a\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype"},
		{"[1,2]", 0, "not a JSON object"},
		{"{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
		 "\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]}}", 4, "duplicate"},
		{"{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
		 "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}", 6, "overlap"},
		{"{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]},"
		 "\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 4, "gap"},
		{"{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2, "misaligned"},
		{"{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,4294967296],"
		 "\"data_offsets\":[0,1]}}", 1, "overflows"},
		{"{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}", 1, "non-negative"},
		{"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,0]}}", 1, "non-negative|end before"},
		{"{\"a\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1, "data_offsets"},
		{"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}", 1, "bad header JSON"},
		{"{\"\xff\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "bad header JSON"},
		{"{\"__metadata__\":{\"k\":1}}", 0, "__metadata__"},
		{"{\"a\":3}", 0, "not an object"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		tf_status st = open_raw(cases[i].header, cases[i].n);
		ck_assert_msg(st == TF_ERR_FORMAT, "case %zu: status %d", i, st);
		const char *msg = tf_errmsg(st);
		bool found = false;
		char why[64];
		snprintf(why, sizeof why, "%s", cases[i].why);
		for (char *save, *w = strtok_r(why, "|", &save); w; w = strtok_r(NULL, "|", &save))
			found |= strstr(msg, w) != NULL;
		ck_assert_msg(found, "case %zu: '%s' lacks '%s'", i, msg, cases[i].why);
	}
}
END_TEST

START_TEST(st_truncated)
{
	char *p = tf_path_join(dir, "t.safetensors");
	ck_assert_int_eq(tf_file_write_atomic(p, "\x10\0\0", 3), TF_OK);
	struct tf_st_file f;
	ck_assert_int_eq(tf_st_open(&f, p), TF_ERR_FORMAT);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(TF_ERR_FORMAT), "truncated"));
	/* a header length past the end of the file */
	ck_assert_int_eq(tf_file_write_atomic(p, "\x40\0\0\0\0\0\0\0{}", 10), TF_OK);
	ck_assert_int_eq(tf_st_open(&f, p), TF_ERR_FORMAT);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(TF_ERR_FORMAT), "past the end"));
	/* a header length over the limit */
	ck_assert_int_eq(tf_file_write_atomic(p, "\0\0\0\0\1\0\0\0{}", 10), TF_OK);
	ck_assert_int_eq(tf_st_open(&f, p), TF_ERR_FORMAT);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(TF_ERR_FORMAT), "exceeds"));
	ck_assert_int_eq(tf_st_open(&f, "/nonexistent.safetensors"), TF_ERR_NOTFOUND);
	free(p);
}
END_TEST

START_TEST(st_writer_roundtrip)
{
	char *p = tf_path_join(dir, "w.safetensors");
	struct tf_st_writer w;
	ck_assert_int_eq(tf_st_writer_init(&w, p), TF_OK);
	uint64_t s1[] = {3}, s2[] = {2, 2}, s3[] = {5};
	ck_assert_int_eq(tf_st_writer_add(&w, "z.small", TF_DTYPE_U8, 1, s3), TF_OK);
	ck_assert_int_eq(tf_st_writer_add(&w, "a.f32", TF_DTYPE_F32, 1, s1), TF_OK);
	ck_assert_int_eq(tf_st_writer_add(&w, "m.bf16", TF_DTYPE_BF16, 2, s2), TF_OK);
	ck_assert_int_eq(tf_st_writer_add(&w, "a.f32", TF_DTYPE_F32, 1, s1), TF_ERR_ARG);
	ck_assert_int_eq(tf_st_writer_meta(&w, "format", "pt"), TF_OK);
	ck_assert_int_eq(tf_st_writer_begin(&w), TF_OK);
	/* laid out by descending alignment: F32, BF16, U8 */
	ck_assert_uint_eq(tf_st_writer_find(&w, "a.f32")->begin, 0);
	ck_assert_uint_eq(tf_st_writer_find(&w, "m.bf16")->begin, 12);
	ck_assert_uint_eq(w.data_off % 8, 0);
	float v[3] = {1, 2, 3};
	ck_assert_int_eq(tf_st_writer_put(&w, "a.f32", 0, v, 12), TF_OK);
	ck_assert_int_eq(tf_st_writer_put(&w, "a.f32", 4, v, 12), TF_ERR_RANGE);
	ck_assert_int_eq(tf_st_writer_put(&w, "z.small", 0, "hello", 5), TF_OK);
	ck_assert_int_eq(tf_st_writer_commit(&w), TF_OK);
	struct tf_st_file f;
	ck_assert_int_eq(tf_st_open(&f, p), TF_OK);
	ck_assert_uint_eq(f.n, 3);
	float back[3];
	ck_assert_int_eq(tf_st_read(&f, tf_st_find(&f, "a.f32"), 0, back, 12), TF_OK);
	ck_assert(back[2] == 3.0f);
	char hello[6] = {0};
	ck_assert_int_eq(tf_st_read(&f, tf_st_find(&f, "z.small"), 0, hello, 5), TF_OK);
	ck_assert_str_eq(hello, "hello");
	tf_st_close(&f);
	free(p);
}
END_TEST

static void write_pack_files(bool tokenizer)
{
	char *p = tf_path_join(dir, "config.json");
	ck_assert_int_eq(tf_file_write_atomic(p, "{}", 2), TF_OK);
	free(p);
	if (tokenizer) {
		p = tf_path_join(dir, "tokenizer.json");
		ck_assert_int_eq(tf_file_write_atomic(p, "{}", 2), TF_OK);
		free(p);
	}
}

static void write_index(const char *json)
{
	char *p = tf_path_join(dir, TF_PACK_INDEX);
	ck_assert_int_eq(tf_file_write_atomic(p, json, strlen(json)), TF_OK);
	free(p);
}

#define T1 "{\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},\"y\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}"
#define T2 "{\"y\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},\"z\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}"

START_TEST(pack_folder)
{
	struct tf_pack pk;
	write_pack_files(false);
	free(raw("a.safetensors", T1, 2));
	ck_assert_int_eq(tf_pack_open(&pk, dir), TF_ERR_FORMAT); /* no tokenizer.json */
	ck_assert_ptr_nonnull(strstr(tf_errmsg(TF_ERR_FORMAT), "tokenizer.json"));
	write_pack_files(true);
	ck_assert_int_eq(tf_pack_open(&pk, dir), TF_OK);
	ck_assert_uint_eq(pk.n, 2);
	tf_pack_close(&pk);
	/* without an index, a tensor in two shards is refused */
	free(raw("b.safetensors", T2, 2));
	ck_assert_int_eq(tf_pack_open(&pk, dir), TF_ERR_FORMAT);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(TF_ERR_FORMAT), "'y' is also in"));
	/* with an index, y is taken from b and skipped in a */
	write_index("{\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"b.safetensors\","
		    "\"z\":\"b.safetensors\"}}");
	ck_assert_int_eq(tf_pack_open(&pk, dir), TF_OK);
	ck_assert_uint_eq(pk.n, 3);
	ck_assert_uint_eq(tf_pack_find(&pk, "y")->shard, 1);
	uint8_t v;
	ck_assert_int_eq(tf_pack_read(&pk, tf_pack_find(&pk, "z"), 0, &v, 1), TF_OK);
	ck_assert_uint_eq(v, 1);
	tf_pack_close(&pk);
	/* the index names a missing shard */
	write_index("{\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"b.safetensors\","
		    "\"z\":\"b.safetensors\",\"w\":\"c.safetensors\"}}");
	ck_assert_int_eq(tf_pack_open(&pk, dir), TF_ERR_FORMAT);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(TF_ERR_FORMAT), "c.safetensors"));
	ck_assert_ptr_nonnull(strstr(tf_errmsg(TF_ERR_FORMAT), "does not exist"));
	/* the index places a tensor in a shard that lacks it */
	write_index("{\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"b.safetensors\","
		    "\"z\":\"b.safetensors\",\"q\":\"a.safetensors\"}}");
	ck_assert_int_eq(tf_pack_open(&pk, dir), TF_ERR_FORMAT);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(TF_ERR_FORMAT), "'q' is not in its shard"));
	/* a shard tensor the index does not list */
	write_index("{\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"b.safetensors\"}}");
	ck_assert_int_eq(tf_pack_open(&pk, dir), TF_ERR_FORMAT);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(TF_ERR_FORMAT), "not in the index"));
	/* a path in the index is refused */
	write_index("{\"weight_map\":{\"x\":\"../a.safetensors\"}}");
	ck_assert_int_eq(tf_pack_open(&pk, dir), TF_ERR_FORMAT);
	ck_assert_int_eq(tf_pack_open(&pk, "/nonexistent/pack"), TF_ERR_NOTFOUND);
}
END_TEST

Suite *suite_pack(void)
{
	Suite *s = suite_create("pack");
	TCase *t = tcase_create("pack");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_add_test(t, st_valid);
	tcase_add_test(t, st_malformed);
	tcase_add_test(t, st_truncated);
	tcase_add_test(t, st_writer_roundtrip);
	tcase_add_test(t, pack_folder);
	suite_add_tcase(s, t);
	return s;
}
