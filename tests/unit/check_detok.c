/* check_detok.c: unit tests of libcore/text/detok: from_utf8_lossy
 * semantics (one U+FFFD per maximal invalid subpart, as Rust's
 * String::from_utf8_lossy), whole decode, and the streaming detokenizer,
 * which must equal the whole decode for every way of splitting the input. */
#include <check.h>

#include "fixtures.h"
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/file.h"
#include "base/rng.h"
#include "text/detok.h"
#include "text/tokenizer.h"

#define R "\xEF\xBF\xBD" /* U+FFFD */

static const struct {
	const char *in;
	size_t n;
	const char *out;
	size_t on; /* length of out when it holds a NUL, else 0 */
} lossy_cases[] = {
	{"abc", 3, "abc", 0},
	{"\xF0\x9F\x98\x80", 4, "\xF0\x9F\x98\x80", 0},
	{"\xE0\x80\x41", 3, R R "A", 0},        /* E0 needs A0-BF next */
	{"\xED\xA0\x80", 3, R R R, 0},          /* a surrogate */
	{"\xF0\x9F\x98", 3, R, 0},              /* truncated at the end: one */
	{"\xF0\x9F\x98 ", 4, R " ", 0},         /* truncated before a space: one */
	{"\xF4\x90\x80\x80", 4, R R R R, 0},    /* past U+10FFFF */
	{"\xC0\xAF", 2, R R, 0},                /* overlong */
	{"\xC1\xBF", 2, R R, 0},
	{"\xF5\x80", 2, R R, 0},
	{"\x80\xBF", 2, R R, 0},
	{"\xE2\x82\x41\xE2\x82\xAC", 6, R "A\xE2\x82\xAC", 0},
	{"\xFF", 1, R, 0},
	{"a\0b", 3, "a\0b", 3},
};

START_TEST(lossy_maximal_subparts)
{
	for (size_t i = 0; i < sizeof lossy_cases / sizeof lossy_cases[0]; i++) {
		struct tf_buf b = TF_BUF_INIT;
		tf_status st;
		size_t used = tf_utf8_lossy(lossy_cases[i].in, lossy_cases[i].n, true, &b, &st);
		ck_assert_int_eq(st, 0);
		ck_assert_uint_eq(used, lossy_cases[i].n);
		size_t want = lossy_cases[i].on ? lossy_cases[i].on : strlen(lossy_cases[i].out);
		ck_assert_msg(b.len == want && !memcmp(b.data, lossy_cases[i].out, want),
			      "case %zu: got %zu bytes", i, b.len);
		ck_assert_int_eq(tf_utf8_valid(lossy_cases[i].in, lossy_cases[i].n),
				 !memcmp(lossy_cases[i].in, lossy_cases[i].out, lossy_cases[i].n) &&
					 want == lossy_cases[i].n);
		tf_buf_release(&b);
	}
}
END_TEST

/* Random bytes that are often parts of UTF-8. */
static size_t random_bytes(struct tf_rng *r, uint8_t *s, size_t max)
{
	static const uint8_t pool[] = {'a', ' ', 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC2,
				       0xDF, 0xE0, 0xE1, 0xED, 0xEF, 0xF0, 0xF3, 0xF4, 0xF5, 0xFF};
	size_t n = tf_rng_below(r, max + 1);
	for (size_t i = 0; i < n; i++)
		s[i] = pool[tf_rng_below(r, sizeof pool)];
	return n;
}

START_TEST(stream_equals_whole_for_every_split)
{
	struct tf_rng r;
	tf_rng_seed(&r, 1234);
	uint8_t s[24];
	struct tf_buf whole = TF_BUF_INIT, part = TF_BUF_INIT;
	for (int iter = 0; iter < 4000; iter++) {
		size_t n = random_bytes(&r, s, sizeof s);
		tf_status st;
		tf_buf_reset(&whole);
		tf_utf8_lossy(s, n, true, &whole, &st);
		/* valid exactly when the lossy conversion changes nothing */
		ck_assert_int_eq(tf_utf8_valid(s, n), whole.len == n && !memcmp(whole.data, s, n));
		/* every two-way split, then byte by byte */
		for (size_t cut = 0; cut <= n + 1; cut++) {
			struct tf_detok d;
			tf_detok_init(&d, NULL);
			tf_buf_reset(&part);
			if (cut <= n) {
				ck_assert_int_eq(tf_detok_push_bytes(&d, s, cut, &part), 0);
				ck_assert_uint_le(tf_detok_pending(&d), 3);
				ck_assert(tf_utf8_valid(part.data, part.len));
				ck_assert_int_eq(tf_detok_push_bytes(&d, s + cut, n - cut, &part), 0);
			} else {
				for (size_t i = 0; i < n; i++)
					ck_assert_int_eq(tf_detok_push_bytes(&d, s + i, 1, &part), 0);
			}
			ck_assert_int_eq(tf_detok_flush(&d, &part), 0);
			ck_assert_msg(part.len == whole.len && !memcmp(part.data, whole.data, whole.len),
				      "iteration %d, cut %zu", iter, cut);
		}
	}
	tf_buf_release(&whole);
	tf_buf_release(&part);
}
END_TEST

static struct tf_tok *mini(void)
{
	struct tf_tok *tok;
	ck_assert_int_eq(tf_tok_load(data_path("mini_tokenizer.json"), &tok), 0);
	return tok;
}

START_TEST(decode_ids)
{
	struct tf_tok *tok = mini();
	/* byte tokens (ids 0-255 are the bytes here), a merge, an added
	 * token, an unknown id (skipped, as Hugging Face does) */
	uint32_t ids[] = {264, 32, 0xE4, 0xB8, 0xAD, 500, 1005, 0xE4, 0xB8};
	struct tf_buf b = TF_BUF_INIT;
	ck_assert_int_eq(tf_tok_decode(tok, ids, 9, &b), 0);
	const char *want = " the 中<｜User｜>" R;
	ck_assert_uint_eq(b.len, strlen(want));
	ck_assert_str_eq(b.data, want);
	tf_buf_reset(&b);
	ck_assert_int_eq(tf_tok_decode(tok, ids, 0, &b), 0);
	ck_assert_uint_eq(b.len, 0);
	tf_buf_release(&b);
	tf_tok_free(tok);
}
END_TEST

START_TEST(stream_ids_equal_whole)
{
	struct tf_tok *tok = mini();
	struct tf_rng r;
	tf_rng_seed(&r, 99);
	uint32_t ids[40];
	struct tf_buf whole = TF_BUF_INIT, part = TF_BUF_INIT;
	for (int iter = 0; iter < 3000; iter++) {
		size_t n = tf_rng_below(&r, 41);
		for (size_t i = 0; i < n; i++) {
			uint64_t k = tf_rng_below(&r, 10);
			ids[i] = k < 6   ? 0x80 + (uint32_t)tf_rng_below(&r, 0x80) /* high bytes */
				 : k < 8 ? (uint32_t)tf_rng_below(&r, 270)
				 : k < 9 ? 1000 + (uint32_t)tf_rng_below(&r, 11)
					 : 2000; /* unknown */
		}
		tf_buf_reset(&whole);
		ck_assert_int_eq(tf_tok_decode(tok, ids, n, &whole), 0);
		struct tf_detok d;
		tf_detok_init(&d, tok);
		tf_buf_reset(&part);
		for (size_t i = 0; i < n; i++) {
			size_t before = part.len;
			ck_assert_int_eq(tf_detok_push(&d, ids[i], &part), 0);
			ck_assert(tf_utf8_valid(part.data + before, part.len - before));
		}
		ck_assert_int_eq(tf_detok_flush(&d, &part), 0);
		ck_assert_msg(part.len == whole.len && !memcmp(part.data, whole.data, whole.len),
			      "iteration %d", iter);
	}
	tf_buf_release(&whole);
	tf_buf_release(&part);
	tf_tok_free(tok);
}
END_TEST

Suite *suite_detok(void)
{
	Suite *s = suite_create("detok");
	TCase *c = tcase_create("core");
	tcase_add_test(c, lossy_maximal_subparts);
	tcase_add_test(c, stream_equals_whole_for_every_split);
	tcase_add_test(c, decode_ids);
	tcase_add_test(c, stream_ids_equal_whole);
	suite_add_tcase(s, c);
	return s;
}
