/* check_seqw.c: unit tests of libcore/base/seqw: rooms of many sizes with
 * gaps, across many windows, give exactly the expected file (direct and
 * plain, on the temporary folder's file system and on /dev/shm), with a
 * header written last and an unaligned end; misuse is refused. */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"
#include "base/rng.h"
#include "base/seqw.h"

/* Write a file of random rooms (with random zero gaps, some longer than
 * the window) after a header of head bytes written last, ending at an
 * unaligned end, and compare it with the same bytes built in memory. */
static void write_and_compare(const char *dir, bool direct, uint64_t seed)
{
	char path[256];
	snprintf(path, sizeof path, "%s/seqw-%d-%llu.bin", dir, (int)direct, (unsigned long long)seed);
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ck_assert_int_ge(fd, 0);
	const size_t cap = 64 << 10, head = 8192, total = 3 << 20;
	uint8_t *want = calloc(1, total + 4 * cap);
	ck_assert_ptr_nonnull(want);
	struct tf_seqw s;
	ck_assert_int_eq(tf_seqw_init(&s, fd, path, head, cap, direct), TF_OK);
	ck_assert_uint_eq(tf_seqw_max_room(&s), cap - TF_SEQW_ALIGN);
	struct tf_rng r;
	tf_rng_seed(&r, seed);
	uint64_t pos = head;
	while (pos < total - 2 * cap) {
		uint64_t gap = tf_rng_below(&r, 8) == 0 ? tf_rng_below(&r, 3 * cap) :
							   tf_rng_below(&r, 5000);
		size_t len = (size_t)tf_rng_below(&r, tf_seqw_max_room(&s) + 1);
		pos += gap;
		void *p;
		ck_assert_int_eq(tf_seqw_room(&s, pos, len, &p), TF_OK);
		for (size_t i = 0; i < len; i++)
			((uint8_t *)p)[i] = want[pos + i] = (uint8_t)(tf_rng_u64(&r) | 1);
		pos += len;
	}
	/* behind the end, and too long, are refused */
	void *p;
	if (pos > head)
		ck_assert_int_eq(tf_seqw_room(&s, pos - 1, 1, &p), TF_ERR_ARG);
	ck_assert_int_eq(tf_seqw_room(&s, pos, cap, &p), TF_ERR_ARG);
	uint8_t *h = aligned_alloc(TF_SEQW_ALIGN, head);
	ck_assert_ptr_nonnull(h);
	for (size_t i = 0; i < head; i++)
		h[i] = want[i] = (uint8_t)(i * 13 + 1);
	ck_assert_int_eq(tf_seqw_pwrite(&s, h, head, 0), TF_OK);
	uint64_t end = pos + 1234; /* zeros, then an unaligned end */
	ck_assert_int_eq(tf_seqw_finish(&s, end), TF_OK);
	tf_seqw_release(&s);
	tf_seqw_release(&s); /* safe twice */
	struct stat sb;
	ck_assert_int_eq(fstat(fd, &sb), 0);
	ck_assert_uint_eq((uint64_t)sb.st_size, end);
	uint8_t *got = malloc(end);
	ck_assert_ptr_nonnull(got);
	ck_assert_int_eq(tf_file_pread(fd, got, end, 0), TF_OK);
	ck_assert(!memcmp(got, want, end));
	close(fd);
	unlink(path);
	free(got);
	free(h);
	free(want);
}

START_TEST(rooms_tmp)
{
	char dir[] = "/tmp/tf-seqw-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	for (uint64_t seed = 1; seed <= 3; seed++) {
		write_and_compare(dir, true, seed);
		write_and_compare(dir, false, seed);
	}
	ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* tmpfs takes O_DIRECT on newer kernels only: either way the bytes hold. */
START_TEST(rooms_shm)
{
	char dir[] = "/dev/shm/tf-seqw-XXXXXX";
	if (!mkdtemp(dir))
		return; /* no /dev/shm here */
	write_and_compare(dir, true, 7);
	ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

START_TEST(bad_init)
{
	struct tf_seqw s;
	ck_assert_int_eq(tf_seqw_init(&s, -1, "x", 100, 8192, false), TF_ERR_ARG);
	ck_assert_int_eq(tf_seqw_init(&s, -1, "x", 0, 4096, false), TF_ERR_ARG);
	ck_assert_int_eq(tf_seqw_init(&s, -1, "x", 0, 10000, false), TF_ERR_ARG);
	tf_seqw_release(&s);
}
END_TEST

Suite *suite_seqw(void)
{
	Suite *s = suite_create("seqw");
	TCase *t = tcase_create("seqw");
	tcase_add_test(t, rooms_tmp);
	tcase_add_test(t, rooms_shm);
	tcase_add_test(t, bad_init);
	suite_add_tcase(s, t);
	return s;
}
