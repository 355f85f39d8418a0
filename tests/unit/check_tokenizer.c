/* check_tokenizer.c: unit tests of libcore/text/tokenizer (loading,
 * refusals, added tokens, BPE, saving, the V4.1 derivation, threads) and of
 * the built-in DeepSeek splitter against the PCRE2 regexes on every code
 * point. The small tokenizer is tests/data/mini_tokenizer.json: the shared
 * fixture's vocab, merges and added tokens with the DeepSeek pre-tokenizer
 * and decoder. Ids against Hugging Face are checked by
 * tests/cli/t1000-tokenize-conformance.sh. */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/file.h"
#include "base/json.h"
#include "text/detok.h"
#include "text/tok_impl.h"
#include "text/tokenizer.h"
#include "text/ucd.h"

static char *data_path(const char *name)
{
	const char *dir = getenv("TF_TEST_DATA");
	return tf_path_join(dir ? dir : "tests/data", name);
}

static struct tf_tok *mini(void)
{
	char *p = data_path("mini_tokenizer.json");
	struct tf_tok *tok;
	tf_status st = tf_tok_load(p, &tok);
	ck_assert_msg(!st, "load: %s", tf_errmsg(st));
	free(p);
	return tok;
}

/* The mini file's JSON, for tests that edit it. */
static json_t *mini_json(void)
{
	char *p = data_path("mini_tokenizer.json");
	json_t *j;
	ck_assert_int_eq(tf_json_load(p, 1 << 20, &j), 0);
	free(p);
	return j;
}

static tf_status load_json(json_t *j, struct tf_tok **tok)
{
	char *s = json_dumps(j, 0);
	tf_status st = tf_tok_load_mem(s, strlen(s), "test.json", tok);
	free(s);
	return st;
}

/* Encode a C string, returning the ids as "a b c". */
static char *enc(const struct tf_tok *tok, const char *text, size_t n)
{
	struct tf_ids ids = TF_IDS_INIT;
	struct tf_buf b = TF_BUF_INIT;
	tf_status st = tf_tok_encode(tok, text, n, &ids);
	ck_assert_msg(!st, "encode: %s", tf_errmsg(st));
	for (size_t i = 0; i < ids.n; i++)
		tf_buf_printf(&b, "%s%u", i ? " " : "", ids.v[i]);
	tf_ids_release(&ids);
	tf_buf_puts(&b, "");
	return tf_buf_detach(&b, NULL);
}

#define ENC_EQ(tok, text, want)                                                  \
	do {                                                                     \
		char *got_ = enc(tok, text, strlen(text));                       \
		ck_assert_msg(!strcmp(got_, want), "'%s': got '%s', want '%s'", \
			      text, got_, want);                                 \
		free(got_);                                                      \
	} while (0)

START_TEST(load_and_lookups)
{
	struct tf_tok *tok = mini();
	size_t v, m, a;
	tf_tok_counts(tok, &v, &m, &a);
	ck_assert_uint_eq(v, 266);
	ck_assert_uint_eq(m, 10);
	ck_assert_uint_eq(a, 11);
	ck_assert_uint_eq(tf_tok_vocab_size(tok), 1011);
	ck_assert_int_eq(tf_tok_id_of(tok, "<｜begin▁of▁sentence｜>"), 1000);
	ck_assert_int_eq(tf_tok_id_of(tok, "｜DSML｜"), 1009);
	ck_assert_int_eq(tf_tok_id_of(tok, "Ġthe"), 264);
	ck_assert_int_eq(tf_tok_id_of(tok, "nope"), -1);
	size_t len;
	ck_assert_str_eq(tf_tok_piece(tok, 264, &len), "Ġthe");
	ck_assert_uint_eq(len, strlen("Ġthe"));
	ck_assert_ptr_null(tf_tok_piece(tok, 500, NULL));
	ck_assert_ptr_null(tf_tok_piece(tok, 5000, NULL));
	const uint8_t *b = tf_tok_bytes(tok, 264, &len);
	ck_assert_uint_eq(len, 4);
	ck_assert_int_eq(memcmp(b, " the", 4), 0);
	ck_assert_int_eq(tf_tok_added_flags(tok, 1000), TF_TOK_SPECIAL);
	ck_assert_int_eq(tf_tok_added_flags(tok, 1004), TF_TOK_NORMALIZED);
	ck_assert_int_eq(tf_tok_added_flags(tok, 264), -1);
	tf_tok_free(tok);
}
END_TEST

START_TEST(encode_basics)
{
	struct tf_tok *tok = mini();
	ENC_EQ(tok, "", "");
	/* merges by rank: "Ġthe" (264) from Ġ t h e; "er" (256) */
	ENC_EQ(tok, " the theater", "264 264 97 116 256");
	/* digits in threes, spaces: "12345" -> "123" "45"; no merges */
	ENC_EQ(tok, "12345", "49 50 51 52 53");
	/* ｜DSML｜ has no angle brackets: "<" + marker + " calls>" */
	ENC_EQ(tok, "<｜DSML｜ calls>", "60 1009 32 99 97 108 108 115 62");
	ENC_EQ(tok, "<｜User｜>the<｜end▁of▁sentence｜>", "1005 263 1001");
	/* an unfinished marker is text: ｜ is bytes EF BD 9C (ids 0-255 of
	 * this vocab are the byte values), then U s er */
	ENC_EQ(tok, "<｜User", "60 239 189 156 85 115 256");
	tf_tok_free(tok);
}
END_TEST

START_TEST(added_two_passes)
{
	struct tf_tok *tok = mini();
	/* non-normalized tokens are matched first, on the whole text, then
	 * normalized ones in the gaps: "abc" is a + [bc], though [ab] starts
	 * earlier. */
	ck_assert_int_eq(tf_tok_add_token(tok, "bc", 2000, TF_TOK_SPECIAL), 0);
	ck_assert_int_eq(tf_tok_add_token(tok, "ab", 2001, TF_TOK_NORMALIZED), 0);
	ENC_EQ(tok, "abc", "97 2000");
	ENC_EQ(tok, "abxab", "2001 120 2001");
	/* leftmost-longest within a pass */
	ck_assert_int_eq(tf_tok_add_token(tok, "<x>", 2002, TF_TOK_SPECIAL), 0);
	ck_assert_int_eq(tf_tok_add_token(tok, "<x>y", 2003, TF_TOK_SPECIAL), 0);
	ENC_EQ(tok, "<x>y<x>", "2003 2002");
	/* re-adding the same token is a no-op; a taken id or name is refused */
	ck_assert_int_eq(tf_tok_add_token(tok, "bc", 2000, TF_TOK_SPECIAL), 0);
	ck_assert_int_eq(tf_tok_add_token(tok, "bc", 2004, TF_TOK_SPECIAL), TF_ERR_ARG);
	ck_assert_int_eq(tf_tok_add_token(tok, "zz", 2000, 0), TF_ERR_ARG);
	ck_assert_int_eq(tf_tok_add_token(tok, "zz", 97, 0), TF_ERR_ARG);
	tf_tok_free(tok);
}
END_TEST

START_TEST(invalid_utf8)
{
	struct tf_tok *tok = mini();
	/* each maximal invalid subpart becomes U+FFFD before encoding */
	char *a = enc(tok, "a\xE0\x80z\xF0\x9F", 6);
	char *b = enc(tok, "a\xEF\xBF\xBD\xEF\xBF\xBDz\xEF\xBF\xBD", 11);
	ck_assert_str_eq(a, b);
	free(a);
	free(b);
	tf_tok_free(tok);
}
END_TEST

static const char *const refusals[][3] = {
	/* JSON path (key chain), replacement value, expected words */
	{"model.type", "\"Unigram\"", "Unigram"},
	{"model.dropout", "0.1", "dropout"},
	{"model.byte_fallback", "true", "byte_fallback"},
	{"model.continuing_subword_prefix", "\"##\"", "continuing_subword_prefix"},
	{"normalizer", "{\"type\":\"NFC\"}", "NFC"},
	{"decoder", "{\"type\":\"Metaspace\"}", "Metaspace"},
	{"pre_tokenizer", "null", "pre_tokenizer"},
	{"pre_tokenizer", "{\"type\":\"Whitespace\"}", "Whitespace"},
	{"pre_tokenizer",
	 "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\w+\"},"
	 "\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
	 "\"use_regex\":false}]}",
	 "\\w"},
	{"pre_tokenizer",
	 "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},"
	 "\"behavior\":\"Removed\",\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
	 "\"use_regex\":false}]}",
	 "Removed"},
	{"pre_tokenizer", "{\"type\":\"ByteLevel\",\"add_prefix_space\":true}", "add_prefix_space"},
	{"pre_tokenizer",
	 "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"^a\"},"
	 "\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
	 "\"use_regex\":false}]}",
	 "anchor"},
	{"added_tokens", "[{\"id\":5000,\"content\":\"x\",\"single_word\":true}]", "single_word"},
	{"added_tokens", "[{\"id\":5000,\"content\":\"x\",\"lstrip\":true}]", "lstrip"},
};

START_TEST(refuses_unimplemented)
{
	for (size_t i = 0; i < sizeof refusals / sizeof refusals[0]; i++) {
		json_t *j = mini_json(), *v = json_loads(refusals[i][1], JSON_DECODE_ANY, NULL);
		ck_assert_ptr_nonnull(v);
		const char *key = refusals[i][0];
		json_t *obj = j;
		if (!strncmp(key, "model.", 6)) {
			obj = json_object_get(j, "model");
			key += 6;
		}
		json_object_set_new(obj, key, v);
		struct tf_tok *tok = NULL;
		tf_status st = load_json(j, &tok);
		ck_assert_msg(st == TF_ERR_UNSUPPORTED, "%s: status %d (%s)", refusals[i][0], st,
			      tf_errmsg(st));
		ck_assert_msg(strstr(tf_errmsg(st), refusals[i][2]), "%s: '%s' lacks '%s'",
			      refusals[i][0], tf_errmsg(st), refusals[i][2]);
		ck_assert_ptr_null(tok);
		json_decref(j);
	}
}
END_TEST

START_TEST(refuses_bad_data)
{
	static const char *const bad[] = {
		"[]",
		"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a b\"]}}",
		"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a b\"]}}",
		"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":0},\"merges\":[]}}",
		"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-1},\"merges\":[]}}",
		"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a\"]}}",
		"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[7]}}",
		"{\"model\":{\"type\":\"BPE\",\"vocab\":[],\"merges\":[]}}",
		"{\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]},\"added_tokens\":[{\"id\":1}]}",
		"{\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]},\"added_tokens\":"
		"[{\"id\":1,\"content\":\"x\"},{\"id\":1,\"content\":\"y\"}]}",
		"{\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]},\"added_tokens\":"
		"[{\"id\":1,\"content\":\"\"}]}",
		"{\"model\":{",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct tf_tok *tok = NULL;
		tf_status st = tf_tok_load_mem(bad[i], strlen(bad[i]), "bad.json", &tok);
		ck_assert_msg(st == TF_ERR_FORMAT, "case %zu: status %d (%s)", i, st, tf_errmsg(st));
		ck_assert_ptr_null(tok);
	}
}
END_TEST

START_TEST(merges_as_pairs)
{
	/* ["a", "b"] merges mean the same as "a b" and are saved as pairs */
	json_t *j = mini_json(), *pairs = json_array();
	json_t *merges = json_object_get(json_object_get(j, "model"), "merges");
	size_t i;
	json_t *m;
	json_array_foreach(merges, i, m) {
		const char *s = json_string_value(m), *sp = strchr(s, ' ');
		json_array_append_new(pairs, json_pack("[s#s]", s, (int)(sp - s), sp + 1));
	}
	json_object_set_new(json_object_get(j, "model"), "merges", pairs);
	struct tf_tok *tok, *ref = mini();
	ck_assert_int_eq(load_json(j, &tok), 0);
	char *a = enc(tok, " the theater in an", 18), *b = enc(ref, " the theater in an", 18);
	ck_assert_str_eq(a, b);
	struct tf_buf out = TF_BUF_INIT;
	ck_assert_int_eq(tf_tok_save(tok, &out), 0);
	ck_assert_ptr_nonnull(strstr(out.data, "\"th\",\n        \"e\""));
	free(a);
	free(b);
	tf_buf_release(&out);
	tf_tok_free(tok);
	tf_tok_free(ref);
	json_decref(j);
}
END_TEST

START_TEST(save_round_trip)
{
	struct tf_tok *tok = mini(), *again;
	ck_assert_int_eq(tf_tok_add_token(tok, "<extra>", 3000, TF_TOK_SPECIAL), 0);
	struct tf_buf a = TF_BUF_INIT, b = TF_BUF_INIT;
	ck_assert_int_eq(tf_tok_save(tok, &a), 0);
	ck_assert_int_eq(tf_tok_load_mem(a.data, a.len, "saved", &again), 0);
	ck_assert_int_eq(tf_tok_save(again, &b), 0);
	ck_assert_str_eq(a.data, b.data);
	const char *text = "<extra> the theater <｜User｜>12345 ｜DSML｜";
	char *x = enc(tok, text, strlen(text)), *y = enc(again, text, strlen(text));
	ck_assert_str_eq(x, y);
	ck_assert_int_eq(tf_tok_id_of(again, "<extra>"), 3000);
	free(x);
	free(y);
	tf_buf_release(&a);
	tf_buf_release(&b);
	tf_tok_free(tok);
	tf_tok_free(again);
}
END_TEST

START_TEST(v41_markers)
{
	/* the mini tokenizer has them all: a no-op */
	struct tf_tok *tok = mini();
	ck_assert_int_eq(tf_tok_add_v41_markers(tok, TF_TOK_V41_VOCAB), 0);
	size_t a;
	tf_tok_counts(tok, NULL, NULL, &a);
	ck_assert_uint_eq(a, 11);
	tf_tok_free(tok);
	/* without added tokens they go to the first unused ids, in order */
	json_t *j = mini_json();
	json_object_set_new(j, "added_tokens", json_array());
	ck_assert_int_eq(load_json(j, &tok), 0);
	ck_assert_int_eq(tf_tok_add_v41_markers(tok, TF_TOK_V41_VOCAB), 0);
	ck_assert_int_eq(tf_tok_id_of(tok, "<｜System｜>"), 266);
	ck_assert_int_eq(tf_tok_id_of(tok, "</think>"), 270);
	ck_assert_int_eq(tf_tok_id_of(tok, "<｜deepseek_image｜>"), 273);
	ck_assert_int_eq(tf_tok_added_flags(tok, 266), TF_TOK_NORMALIZED);
	ck_assert_int_eq(tf_tok_added_flags(tok, 273), TF_TOK_SPECIAL);
	ENC_EQ(tok, "<think>x</think>", "269 120 270");
	tf_tok_free(tok);
	/* no room below the limit */
	ck_assert_int_eq(load_json(j, &tok), 0);
	ck_assert_int_eq(tf_tok_add_v41_markers(tok, 268), TF_ERR_RANGE);
	tf_tok_free(tok);
	/* a marker with other flags is refused */
	json_object_set_new(j, "added_tokens",
			    json_pack("[{s:i,s:s,s:b,s:b}]", "id", 500, "content", "<think>",
				      "special", 1, "normalized", 0));
	ck_assert_int_eq(load_json(j, &tok), 0);
	ck_assert_int_eq(tf_tok_add_v41_markers(tok, TF_TOK_V41_VOCAB), TF_ERR_FORMAT);
	tf_tok_free(tok);
	json_decref(j);
}
END_TEST

/* ---- the built-in splitter against PCRE2 ---- */

struct pieces {
	size_t ends[4096];
	size_t n;
	const char *base;
};

static tf_status note_piece(void *ctx, const char *s, size_t n)
{
	struct pieces *p = ctx;
	if (p->n < 4096)
		p->ends[p->n++] = (size_t)(s - p->base) + n;
	return TF_OK;
}

/* UTF-8 of c into u; returns its length. */
static size_t utf8_of(uint32_t c, char u[4])
{
	size_t n;
	if (c < 0x80) {
		u[0] = (char)c;
		n = 1;
	} else if (c < 0x800) {
		u[0] = (char)(0xC0 | c >> 6);
		u[1] = (char)(0x80 | (c & 0x3F));
		n = 2;
	} else if (c < 0x10000) {
		u[0] = (char)(0xE0 | c >> 12);
		u[1] = (char)(0x80 | (c >> 6 & 0x3F));
		u[2] = (char)(0x80 | (c & 0x3F));
		n = 3;
	} else {
		u[0] = (char)(0xF0 | c >> 18);
		u[1] = (char)(0x80 | (c >> 12 & 0x3F));
		u[2] = (char)(0x80 | (c >> 6 & 0x3F));
		u[3] = (char)(0x80 | (c & 0x3F));
		n = 4;
	}
	return n;
}

static void put_cp(struct tf_buf *b, uint32_t c)
{
	char u[4];
	tf_buf_append(b, u, utf8_of(c, u));
}

/* Both splitters on text; returns true when they cut it the same way. */
static bool same_pieces(const struct tf_tok *tok, const char *s, size_t n)
{
	static struct pieces a, b;
	a.n = b.n = 0;
	a.base = b.base = s;
	ck_assert_int_eq(tok_pretok_pieces(tok, true, s, n, note_piece, &a), 0);
	ck_assert_int_eq(tok_pretok_pieces(tok, false, s, n, note_piece, &b), 0);
	return a.n == b.n && !memcmp(a.ends, b.ends, a.n * sizeof a.ends[0]);
}

/* Each code point in contexts that reach every alternative of the regex:
 * alone, after/before letters, spaces, CR/LF, digits, punctuation, marks,
 * CJK, and doubled. 64 code points share one text per context. */
START_TEST(fast_split_every_code_point)
{
	struct tf_tok *tok = mini();
	ck_assert(tok->fast_ok);
	static const char *const ctx[][2] = {
		{"", ""},       {"a", "b"},     {" ", " "},   {"\n", "\r\n"}, {"1", "2"},
		{"(", "x"},     {" ", "!"},     {"\t", "é"},  {"中", "か"},   {"\xCC\x81", " "},
		{"  ", "\n "},  {"x ", "  y"},  {"@", "@"},   {"\u3000", "z"},
	};
	struct tf_buf b = TF_BUF_INIT;
	size_t checked = 0;
	for (uint32_t base = 0; base < 0x110000; base += 64) {
		for (size_t k = 0; k < sizeof ctx / sizeof ctx[0]; k++) {
			tf_buf_reset(&b);
			for (uint32_t c = base; c < base + 64; c++) {
				if (c >= 0xD800 && c <= 0xDFFF)
					continue;
				tf_buf_puts(&b, ctx[k][0]);
				put_cp(&b, c);
				if (k % 3 == 0)
					put_cp(&b, c);
				tf_buf_puts(&b, ctx[k][1]);
			}
			if (!b.len)
				continue;
			ck_assert_msg(same_pieces(tok, b.data, b.len),
				      "splitters differ near U+%04X, context %zu", base, k);
			checked++;
		}
	}
	ck_assert_uint_gt(checked, 200000);
	tf_buf_release(&b);
	tf_tok_free(tok);
}
END_TEST

/* The class table equals PCRE2's properties for every code point: one
 * match a code point, the group that matched says the class. */
START_TEST(ucd_matches_pcre2)
{
	static const unsigned bit[] = {0, TF_UCD_L, TF_UCD_M, TF_UCD_N, TF_UCD_P, TF_UCD_S};
	int err;
	PCRE2_SIZE off;
	pcre2_code *re = pcre2_compile(
		(PCRE2_SPTR) "^(?:(\\p{L})|(\\p{M})|(\\p{N})|(\\p{P})|(\\p{S})|[\\s\\S])$",
		PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err, &off, NULL);
	ck_assert_ptr_nonnull(re);
	pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
	pcre2_match_data *md = pcre2_match_data_create(8, NULL);
	for (uint32_t c = 0; c < 0x110000; c++) {
		if (c >= 0xD800 && c <= 0xDFFF)
			continue;
		char u[4];
		int rc = pcre2_match(re, (PCRE2_SPTR)u, utf8_of(c, u), 0, 0, md, NULL);
		ck_assert_int_gt(rc, 0);
		unsigned want = rc > 1 ? bit[rc - 1] : 0;
		unsigned got = tf_ucd_class(c) & (TF_UCD_L | TF_UCD_M | TF_UCD_N | TF_UCD_P | TF_UCD_S);
		ck_assert_msg(got == want, "U+%04X: table %#x, PCRE2 %#x", c, got, want);
	}
	pcre2_code_free(re);
	pcre2_match_data_free(md);
}
END_TEST

/* ---- threads ---- */

struct thread_job {
	const struct tf_tok *tok;
	char *got[16];
};

static const char *const thread_texts[16] = {
	"the theater", "  spaces \n\n and\r\nlines", "12345678901", "中文かなカナ", "<｜User｜>hi",
	"ｘ｜DSML｜ｙ", "naïve café", "😀👍🏽", "a\tb\u3000c", "\"json\": [1, 2]", "x  ", "   ",
	"thethethe", "an an an", "on the in", "er es er",
};

static void *thread_main(void *p)
{
	struct thread_job *j = p;
	for (int round = 0; round < 200; round++)
		for (int i = 0; i < 16; i++) {
			char *s = enc(j->tok, thread_texts[i], strlen(thread_texts[i]));
			if (round)
				ck_assert_str_eq(s, j->got[i]);
			free(j->got[i]);
			j->got[i] = s;
		}
	return NULL;
}

START_TEST(threads_share_a_tokenizer)
{
	struct tf_tok *tok = mini();
	struct thread_job jobs[4] = {{tok, {0}}, {tok, {0}}, {tok, {0}}, {tok, {0}}};
	pthread_t t[4];
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, thread_main, &jobs[i]), 0);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < 16; i++) {
		char *s = enc(tok, thread_texts[i], strlen(thread_texts[i]));
		for (int k = 0; k < 4; k++) {
			ck_assert_str_eq(s, jobs[k].got[i]);
			free(jobs[k].got[i]);
		}
		free(s);
	}
	tf_tok_free(tok);
}
END_TEST

Suite *suite_tokenizer(void)
{
	Suite *s = suite_create("tokenizer");
	TCase *c = tcase_create("core");
	tcase_add_test(c, load_and_lookups);
	tcase_add_test(c, encode_basics);
	tcase_add_test(c, added_two_passes);
	tcase_add_test(c, invalid_utf8);
	tcase_add_test(c, refuses_unimplemented);
	tcase_add_test(c, refuses_bad_data);
	tcase_add_test(c, merges_as_pairs);
	tcase_add_test(c, save_round_trip);
	tcase_add_test(c, v41_markers);
	tcase_add_test(c, threads_share_a_tokenizer);
	suite_add_tcase(s, c);
	/* every code point: a few seconds */
	c = tcase_create("unicode");
	tcase_set_timeout(c, 120);
	tcase_add_test(c, fast_split_every_code_point);
	tcase_add_test(c, ucd_matches_pcre2);
	suite_add_tcase(s, c);
	return s;
}
