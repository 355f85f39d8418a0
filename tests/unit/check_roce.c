/* check_roce.c: the RoCE transport without hardware: the guard (stripes,
 * refusals, the write cap), the slot refusal at boot, chunk plans and the
 * port choice on synthetic address lists. The set-up, the posting rules
 * and the wires are in check_roce_wire.c. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fabric/roce.h"

static struct tf_roce_post post_of(size_t slot, int n_hca, int s, size_t padded)
{
	size_t len = tf_roce_region_bytes(slot);
	return (struct tf_roce_post){slot, len, slot, len, n_hca, s, padded};
}

START_TEST(guard_stripes_tile_the_slot)
{
	/* Every padded size of a 64 KiB slot over one and two HCAs, both slots:
	 * the stripes are contiguous, tile [0, padded) in order, differ by at
	 * most one pack (the first HCAs take the remainder), stay inside the
	 * send slot here and the receive slot there, and each flag is its own
	 * line of the flag area. */
	size_t slot = 65536;
	for (int n = 1; n <= 2; n++)
		for (int s = 0; s < 2; s++)
			for (size_t padded = 16; padded <= slot; padded += 16) {
				struct tf_roce_post p = post_of(slot, n, s, padded);
				struct tf_roce_stripe st[2];
				enum tf_roce_refusal why;
				ck_assert_int_eq(tf_roce_stripes(&p, st, &why), 0);
				ck_assert_int_eq(why, TF_ROCE_POST_OK);
				size_t at = 0, src0 = TF_ROCE_DATA + (size_t)s * slot;
				size_t dst0 = TF_ROCE_DATA + 2 * slot + (size_t)s * slot;
				for (int h = 0; h < n; h++) {
					ck_assert_uint_eq(st[h].src_off, src0 + at);
					ck_assert_uint_eq(st[h].dst_off, dst0 + at);
					ck_assert_uint_eq(st[h].len % 16, 0);
					ck_assert_uint_eq(st[h].flag_off, TF_ROCE_FLAGS + (size_t)(2 * s + h) * 128);
					ck_assert(st[h].dst_off + st[h].len <= dst0 + slot);
					at += st[h].len;
				}
				ck_assert_uint_eq(at, padded);
				if (n == 2) {
					ck_assert(st[0].len >= st[1].len);
					ck_assert(st[0].len - st[1].len <= 16);
				}
			}
	/* 16 bytes over two HCAs: the second sends its flag only. */
	struct tf_roce_post p = post_of(slot, 2, 1, 16);
	struct tf_roce_stripe st[2];
	ck_assert_int_eq(tf_roce_stripes(&p, st, NULL), 0);
	ck_assert_uint_eq(st[0].len, 16);
	ck_assert_uint_eq(st[1].len, 0);
	/* A full slot of the largest size stays inside the region. */
	p = post_of(TF_ROCE_MAX_WRITE, 2, 1, TF_ROCE_MAX_WRITE);
	ck_assert_int_eq(tf_roce_stripes(&p, st, NULL), 0);
	ck_assert_uint_eq(st[1].dst_off + st[1].len, tf_roce_region_bytes(TF_ROCE_MAX_WRITE));
}
END_TEST

static void refused(struct tf_roce_post p, enum tf_roce_refusal want, const char *what)
{
	struct tf_roce_stripe st[2];
	memset(st, 0x5a, sizeof st);
	enum tf_roce_refusal why;
	tf_status rc = tf_roce_stripes(&p, st, &why);
	ck_assert_msg(rc != 0, "%s: not refused", what);
	ck_assert_msg(why == want, "%s: refused as %s, want %s", what, tf_roce_refusal_name(why),
		      tf_roce_refusal_name(want));
	ck_assert_msg(!strncmp(tf_errmsg(rc), tf_roce_refusal_name(want), strlen(tf_roce_refusal_name(want))),
		      "%s: message '%s'", what, tf_errmsg(rc));
	/* Nothing was handed out. */
	unsigned char *b = (unsigned char *)st;
	for (size_t i = 0; i < sizeof st; i++)
		ck_assert_uint_eq(b[i], 0x5a);
}

START_TEST(guard_refusals)
{
	size_t slot = 65536;
	refused(post_of(slot, 2, 0, slot + 16), TF_ROCE_OUT_OF_REGION, "past the slot");
	refused(post_of(slot, 1, 1, slot + 16), TF_ROCE_OUT_OF_REGION, "past the slot, one HCA");
	refused(post_of(slot, 2, 2, 16), TF_ROCE_BAD_POST, "a third slot");
	refused(post_of(slot, 2, -1, 16), TF_ROCE_BAD_POST, "slot -1");
	refused(post_of(slot, 2, 0, 24), TF_ROCE_BAD_POST, "unpadded");
	refused(post_of(slot, 2, 0, 8), TF_ROCE_BAD_POST, "unpadded, short");
	refused(post_of(slot, 2, 0, 0), TF_ROCE_BAD_POST, "empty");
	refused(post_of(slot, 0, 0, 16), TF_ROCE_BAD_POST, "no HCA");
	refused(post_of(slot, 3, 0, 16), TF_ROCE_BAD_POST, "three HCAs");
	/* A short region: here, there, and one too short for the flags. */
	struct tf_roce_post p = post_of(slot, 2, 1, slot);
	p.region_len = TF_ROCE_DATA + slot; /* send slot 1 is cut */
	refused(p, TF_ROCE_OUT_OF_REGION, "short region here");
	p = post_of(slot, 2, 1, slot);
	p.peer_region_len -= 16;
	refused(p, TF_ROCE_OUT_OF_REGION, "short region there");
	p = post_of(slot, 2, 0, 16);
	p.peer_region_len = TF_ROCE_FLAGS + 100;
	refused(p, TF_ROCE_OUT_OF_REGION, "no room for the flags there");
	/* A peer with a smaller slot: a post that fits here but not there. */
	p = post_of(slot, 2, 0, slot);
	p.peer_slot_bytes = slot / 2;
	p.peer_region_len = tf_roce_region_bytes(slot / 2);
	refused(p, TF_ROCE_OUT_OF_REGION, "past the peer's slot");
	/* Offsets near SIZE_MAX do not wrap. */
	p = post_of(slot, 2, 1, slot);
	p.slot_bytes = p.peer_slot_bytes = (size_t)-1 / 2;
	refused(p, TF_ROCE_OUT_OF_REGION, "huge slot, small region");
}
END_TEST

START_TEST(guard_write_cap)
{
	/* In a 10 MiB slot (a layout boot would refuse), a 9.57 MB post and a
	 * 1 MiB + 16 post are WriteTooLarge, over one HCA or two; 1 MiB goes. */
	size_t slot = 10u << 20;
	for (int n = 1; n <= 2; n++) {
		refused(post_of(slot, n, 0, 9570000 / 16 * 16), TF_ROCE_WRITE_TOO_LARGE, "9.57 MB");
		refused(post_of(slot, n, 1, TF_ROCE_MAX_WRITE + 16), TF_ROCE_WRITE_TOO_LARGE, "1 MiB + 16");
		struct tf_roce_post p = post_of(slot, n, 1, TF_ROCE_MAX_WRITE);
		struct tf_roce_stripe st[2];
		ck_assert_int_eq(tf_roce_stripes(&p, st, NULL), 0);
	}
	/* The cap is checked before the slot bounds. */
	refused(post_of(4096, 2, 0, TF_ROCE_MAX_WRITE + 16), TF_ROCE_WRITE_TOO_LARGE, "cap before slot");
}
END_TEST

START_TEST(boot_refuses_large_slots)
{
	ck_assert_int_eq(tf_roce_slot_check(1024), 0);
	ck_assert_int_eq(tf_roce_slot_check(4), 0);
	ck_assert_int_eq(tf_roce_slot_check(1023), 0);
	static const uint32_t bad[] = {1025, 1028, 2048, 16384};
	for (size_t i = 0; i < 4; i++) {
		tf_status rc = tf_roce_slot_check(bad[i]);
		ck_assert_int_eq(rc, TF_ERR_CONFIG);
		char want[64];
		snprintf(want, sizeof want, "TF_TP_MAILBOX_MAX_KB=%u", bad[i]);
		ck_assert_msg(strstr(tf_errmsg(rc), want), "%s", tf_errmsg(rc));
		ck_assert(strstr(tf_errmsg(rc), "never clamped"));
	}
	ck_assert_uint_eq(tf_roce_slot_bytes(1), 4096);
	ck_assert_uint_eq(tf_roce_slot_bytes(256), 262144);
	ck_assert_uint_eq(tf_roce_slot_bytes(5), 8192);
	ck_assert_uint_eq(tf_roce_region_bytes(4096), 8192 + 4 * 4096);
}
END_TEST

START_TEST(chunk_plans)
{
	ck_assert_uint_eq(tf_roce_padded(0), 16);
	ck_assert_uint_eq(tf_roce_padded(1), 16);
	ck_assert_uint_eq(tf_roce_padded(17), 32);
	ck_assert_uint_eq(tf_roce_padded(32), 32);
	size_t slot = 262144;
	ck_assert_uint_eq(tf_roce_chunk_ops(300000, slot), 2);
	ck_assert_uint_eq(tf_roce_chunk_ops(slot, slot), 1);
	ck_assert_uint_eq(tf_roce_chunk_ops(4 * slot, slot), 4);
	ck_assert_uint_eq(tf_roce_chunk_ops((size_t)128 << 20, slot), 512);
	/* The parts of a shard tile it. */
	for (uint32_t len = 0; len < 5 * slot; len += 77777) {
		size_t sum = 0, ops = tf_roce_chunk_ops(5 * slot, slot);
		for (size_t c = 0; c < ops; c++) {
			size_t n = tf_roce_chunk_len(len, c, slot);
			ck_assert(n <= slot);
			if (n && c)
				ck_assert_uint_eq(tf_roce_chunk_len(len, c - 1, slot), slot);
			sum += n;
		}
		ck_assert_uint_eq(sum, len);
	}
}
END_TEST

#define IP(a, b, c, d) (((uint32_t)(a) << 24) | ((uint32_t)(b) << 16) | ((uint32_t)(c) << 8) | (uint32_t)(d))

/* Both sides' choices agree: the same number, pairs mirrored, each pair
 * in one /24. */
static void both(const uint32_t *a, int na, const uint32_t *b, int nb, int want, int n, bool shared)
{
	struct tf_roce_choice x, y;
	tf_roce_choose_ports(a, na, b, nb, want, &x);
	tf_roce_choose_ports(b, nb, a, na, want, &y);
	ck_assert_int_eq(x.n, n);
	ck_assert_int_eq(y.n, n);
	ck_assert(x.shared == shared && y.shared == shared);
	for (int i = 0; i < n; i++) {
		ck_assert_int_eq(x.mine[i], y.peer[i]);
		ck_assert_int_eq(x.peer[i], y.mine[i]);
		if (shared)
			ck_assert_uint_eq(a[x.mine[i]] >> 8, b[x.peer[i]] >> 8);
	}
}

START_TEST(port_choice)
{
	/* Two neighbours: host A has 10.0.1.x and 10.0.2.x, B only 10.0.2.x. */
	uint32_t a[] = {IP(10, 0, 1, 5), IP(10, 0, 2, 5)}, b[] = {IP(10, 0, 2, 6), IP(10, 0, 3, 6)};
	both(a, 2, b, 2, 2, 1, true);
	struct tf_roce_choice c;
	tf_roce_choose_ports(a, 2, b, 2, 2, &c);
	ck_assert_int_eq(c.mine[0], 1);
	ck_assert_int_eq(c.peer[0], 0);
	/* Ordered by subnet, not by list order. */
	uint32_t d[] = {IP(10, 0, 9, 1), IP(10, 0, 4, 1)}, e[] = {IP(10, 0, 4, 2), IP(10, 0, 9, 2)};
	tf_roce_choose_ports(d, 2, e, 2, 2, &c);
	ck_assert_int_eq(c.n, 2);
	ck_assert_int_eq(c.mine[0], 1); /* 10.0.4 first */
	ck_assert_int_eq(c.peer[0], 0);
	ck_assert_int_eq(c.mine[1], 0);
	ck_assert_int_eq(c.peer[1], 1);
	both(d, 2, e, 2, 2, 2, true);
	both(d, 2, e, 2, 1, 1, true);
	/* A /24 no more often than both sides have it: A has it twice, B once. */
	uint32_t f[] = {IP(192, 168, 7, 1), IP(192, 168, 7, 2)}, g[] = {IP(192, 168, 7, 9)};
	both(f, 2, g, 1, 2, 1, true);
	uint32_t h[] = {IP(192, 168, 7, 8), IP(192, 168, 7, 9)};
	both(f, 2, h, 2, 2, 2, true);
	/* No shared /24: the first-N order, flagged. */
	uint32_t i1[] = {IP(10, 1, 1, 1), IP(10, 1, 2, 1)}, j1[] = {IP(10, 2, 1, 1), IP(10, 2, 2, 1), IP(10, 2, 3, 1)};
	both(i1, 2, j1, 3, 2, 2, false);
	tf_roce_choose_ports(i1, 2, j1, 3, 2, &c);
	ck_assert_int_eq(c.mine[1], 1);
	ck_assert_int_eq(c.peer[1], 1);
	both(i1, 1, j1, 3, 2, 1, false);
	/* Nothing on one side. */
	both(i1, 0, j1, 3, 2, 0, false);
	/* want is capped at 2 HCAs. */
	uint32_t k[] = {IP(1, 1, 1, 1), IP(1, 1, 2, 1), IP(1, 1, 3, 1)};
	both(k, 3, k, 3, 5, 2, true);
	/* Synthetic lists: every pair of random lists agrees with its mirror. */
	uint64_t x = 88172645463325252ull;
	for (int t = 0; t < 2000; t++) {
		uint32_t l[6], m[6];
		int nl = 0, nm = 0;
		for (int q = 0; q < 6; q++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			if (x & 1)
				l[nl++] = IP(10, 0, (x >> 8) % 4, (x >> 16) % 250 + 1);
			if (x & 2)
				m[nm++] = IP(10, 0, (x >> 24) % 4, (x >> 32) % 250 + 1);
		}
		struct tf_roce_choice p, q;
		tf_roce_choose_ports(l, nl, m, nm, 2, &p);
		tf_roce_choose_ports(m, nm, l, nl, 2, &q);
		ck_assert_int_eq(p.n, q.n);
		ck_assert(p.shared == q.shared);
		for (int z = 0; z < p.n; z++) {
			ck_assert_int_eq(p.mine[z], q.peer[z]);
			if (p.shared)
				ck_assert_uint_eq(l[p.mine[z]] >> 8, m[p.peer[z]] >> 8);
			for (int w = 0; w < z; w++)
				ck_assert_int_ne(p.mine[z], p.mine[w]);
		}
	}
}
END_TEST

START_TEST(hca_list)
{
	char names[2][64];
	int gids[2], n;
	ck_assert_int_eq(tf_roce_parse_hca("", names, gids, &n), 0);
	ck_assert_int_eq(n, 0);
	ck_assert_int_eq(tf_roce_parse_hca("mlx5_0", names, gids, &n), 0);
	ck_assert_int_eq(n, 1);
	ck_assert_str_eq(names[0], "mlx5_0");
	ck_assert_int_eq(gids[0], -1);
	ck_assert_int_eq(tf_roce_parse_hca("mlx5_0:3,mlx5_1", names, gids, &n), 0);
	ck_assert_int_eq(n, 2);
	ck_assert_int_eq(gids[0], 3);
	ck_assert_str_eq(names[1], "mlx5_1");
	static const char *const bad[] = {"a,b,c", ",", "a:", "a:x", "a:300", "a,a", ":1"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		tf_status rc = tf_roce_parse_hca(bad[i], names, gids, &n);
		ck_assert_msg(rc == TF_ERR_CONFIG, "'%s' taken", bad[i]);
		ck_assert(strstr(tf_errmsg(rc), "TF_TP_ROCE_HCA"));
	}
}
END_TEST

Suite *suite_roce(void)
{
	Suite *s = suite_create("roce");
	TCase *t = tcase_create("guard");
	tcase_add_test(t, guard_stripes_tile_the_slot);
	tcase_add_test(t, guard_refusals);
	tcase_add_test(t, guard_write_cap);
	tcase_add_test(t, boot_refuses_large_slots);
	tcase_add_test(t, chunk_plans);
	tcase_add_test(t, port_choice);
	tcase_add_test(t, hca_list);
	suite_add_tcase(s, t);
	return s;
}
