/* check_cuda_graph.c: the input slots of a graphed call (cuda_graph_put,
 * compute/cuda_graph.c) without a GPU: a dry pass over a host buffer as the
 * region, the stream's recorder dry, so no driver call is made. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compute/cuda_be.h"

#define STREAM ((tf_cu_stream)(uintptr_t)0x5000)

static void dry_be(struct cuda_be *c, size_t cap)
{
	memset(c, 0, sizeof *c);
	c->stream = STREAM;
	c->g.in = malloc(cap);
	c->g.in_cap = cap;
	c->g.mode = CUDA_DRY;
	ck_assert_int_eq(tf_cu_rec_attach(&c->g.rec, STREAM), TF_OK);
	tf_cu_rec_begin(&c->g.rec, true);
}

static void dry_end(struct cuda_be *c)
{
	tf_cu_rec_end(&c->g.rec);
	tf_cu_rec_detach(STREAM);
	free(c->g.in);
}

START_TEST(slots_in_order)
{
	static struct cuda_be c;
	dry_be(&c, 64);
	const int32_t a[3] = {1, 2, 3}, b[2] = {7, 8};
	ck_assert_int_eq(cuda_graph_put(&c, 0x1000, a, sizeof a), TF_OK);
	ck_assert_int_eq(cuda_graph_put(&c, 0x2000, b, sizeof b), TF_OK);
	ck_assert_int_eq(cuda_graph_put(&c, 0x3000, b, 0), TF_OK); /* nothing to copy */
	/* a at 0, b at the next 16-byte boundary */
	ck_assert_int_eq(memcmp(c.g.in, a, sizeof a), 0);
	ck_assert_int_eq(memcmp(c.g.in + 16, b, sizeof b), 0);
	ck_assert_uint_eq(c.g.in_fill, 24);
	ck_assert_uint_eq(c.g.rec.items, 2);
	ck_assert_uint_eq(c.g.rec.n.copies, 2);
	uint64_t fp = c.g.rec.fp;
	/* the same uploads again (another pass): the same slots, the same print */
	c.g.in_fill = 0;
	tf_cu_rec_begin(&c.g.rec, true);
	const int32_t a2[3] = {4, 5, 6}; /* other values: data, not work */
	ck_assert_int_eq(cuda_graph_put(&c, 0x1000, a2, sizeof a2), TF_OK);
	ck_assert_int_eq(cuda_graph_put(&c, 0x2000, b, sizeof b), TF_OK);
	ck_assert_uint_eq(c.g.rec.fp, fp);
	ck_assert_int_eq(memcmp(c.g.in, a2, sizeof a2), 0);
	/* another destination is other work */
	c.g.in_fill = 0;
	tf_cu_rec_begin(&c.g.rec, true);
	ck_assert_int_eq(cuda_graph_put(&c, 0x1200, a2, sizeof a2), TF_OK);
	ck_assert_int_eq(cuda_graph_put(&c, 0x2000, b, sizeof b), TF_OK);
	ck_assert_uint_ne(c.g.rec.fp, fp);
	dry_end(&c);
}
END_TEST

START_TEST(region_full)
{
	static struct cuda_be c;
	dry_be(&c, 32);
	char buf[40] = {0};
	ck_assert_int_eq(cuda_graph_put(&c, 0x1000, buf, 20), TF_OK);
	/* the next slot starts at 32: full; in_want says how much was asked */
	ck_assert_int_eq(cuda_graph_put(&c, 0x2000, buf, 8), TF_ERR_NOMEM);
	ck_assert_uint_eq(c.g.in_want, 40);
	ck_assert_uint_eq(c.g.in_fill, 20); /* unchanged */
	ck_assert_int_eq(cuda_graph_put(&c, 0x2000, buf, 40), TF_ERR_NOMEM);
	dry_end(&c);
}
END_TEST

Suite *suite_cuda_graph(void)
{
	Suite *s = suite_create("cuda_graph");
	TCase *tc = tcase_create("slots");
	tcase_add_test(tc, slots_in_order);
	tcase_add_test(tc, region_full);
	suite_add_tcase(s, tc);
	return s;
}
