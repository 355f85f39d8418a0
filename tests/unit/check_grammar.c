/* check_grammar.c: the grammar layer: regexes and a set of JSON schemas,
 * each with outputs that must be accepted byte by byte and outputs that
 * must be rejected; refusals naming the keyword; masks equal to a brute
 * force over the vocabulary (every allowed token keeps the output
 * completable, every other one does not); random walks over masks end in
 * documents that parse. */
#include <check.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/rng.h"
#include "base/status.h"
#include "grammar/grammar.h"

/* A vocabulary: the 256 bytes, some JSON pieces, some words, and two ids
 * without bytes (special tokens). */
static const char *const pieces[] = {
	"{\"", "\":", "\": ", "\",", "\", \"", "\"}", "}", "{", "[", "]", "[\"", "\"]", ", ", ",",
	"true", "false", "null", "name", "age", "\"name\"", "\"age\"", "12", "123", "0.", ".5",
	"abc", " the", "hello", "world", "é", "日本", "-", "e+", "\\n", "\\\"", "2024-", "-01",
	"T12:", "00Z", "  ", "\n", "\n  ", "ab\"", "\"a", NULL,
};
#define NPIECES 44
#define VOCAB (256 + NPIECES + 2)

static const uint8_t *piece_bytes(void *ctx, uint32_t id, size_t *len)
{
	static uint8_t bytes[256];
	if (id < 256) {
		bytes[id] = (uint8_t)id;
		*len = 1;
		return &bytes[id];
	}
	if (id - 256 < NPIECES) {
		*len = strlen(pieces[id - 256]);
		return (const uint8_t *)pieces[id - 256];
	}
	return NULL;
}

static struct tf_gvocab *vocab(void)
{
	ck_assert_ptr_null(pieces[NPIECES]);
	struct tf_gvocab *v;
	ck_assert_int_eq(tf_gvocab_new(VOCAB, piece_bytes, NULL, &v), TF_OK);
	return v;
}

static bool accepts(struct tf_grammar *g, const char *s)
{
	int32_t st = tf_grammar_start(g);
	for (size_t i = 0; s[i]; i++)
		if ((st = tf_grammar_next(g, st, (const uint8_t *)s + i, 1)) < 0)
			return false;
	return tf_grammar_accepting(g, st);
}

static struct tf_grammar *regex(struct tf_gvocab *v, const char *re)
{
	struct tf_grammar *g = NULL;
	tf_status st = tf_grammar_regex(v, re, strlen(re), &g);
	ck_assert_msg(st == TF_OK, "regex %s: %s", re, tf_errmsg(st));
	return g;
}

static struct tf_grammar *schema(struct tf_gvocab *v, const char *text)
{
	json_error_t je;
	json_t *s = json_loads(text, JSON_DECODE_ANY, &je);
	ck_assert_msg(s != NULL, "schema text: %s", je.text);
	struct tf_grammar *g = NULL;
	tf_status st = tf_grammar_schema(v, s, &g);
	ck_assert_msg(st == TF_OK, "schema %s: %s", text, tf_errmsg(st));
	json_decref(s);
	return g;
}

/* The mask of state equals the brute force: token allowed iff its bytes
 * lead to a live state. */
static void check_mask(struct tf_grammar *g, int32_t state)
{
	uint32_t count = 0, brute = 0;
	const uint64_t *m = tf_grammar_mask(g, state, &count);
	ck_assert_ptr_nonnull(m);
	for (uint32_t id = 0; id < VOCAB; id++) {
		bool ok = tf_grammar_next_token(g, state, id) >= 0;
		bool bit = m[id >> 6] >> (id & 63) & 1;
		ck_assert_msg(ok == bit, "state %d id %u: mask %d, bytes %d", state, id, bit, ok);
		brute += ok;
	}
	ck_assert_uint_eq(count, brute);
}

START_TEST(regex_language)
{
	struct tf_gvocab *v = vocab();
	struct { const char *re, *yes[4], *no[4]; } cases[] = {
		{"[a-c]+x{2,3}", {"ax" "x", "cbaxxx"}, {"x", "axxxx", "dxx", ""}},
		{"\\d{3}-\\d{4}", {"555-1234"}, {"5551234", "55-1234", "555-12345"}},
		{"(foo|bar)?baz", {"baz", "foobaz", "barbaz"}, {"foo", "foobarbaz"}},
		{"^é.[^a]$", {"ééb", "éxé", "é日本"}, {"éxa", "ex", "é\nb"}},
		{"a.*?b", {"ab", "axxb", "ab€b"}, {"a", "ba"}},
		{"[\\w.-]+@x\\.(com|org)", {"a.b-c@x.com"}, {"@x.com", "a@x.net"}},
		{"(?:ab){2}(?<n>c)?", {"abab", "ababc"}, {"ab", "ababcc"}},
		{"\\u0041\\x{42}\\x43", {"ABC"}, {"abc"}},
		{"a{2,}", {"aa", "aaaaa"}, {"a"}},
		{"[]a]x|\\[", {"]x", "ax", "["}, {"x"}},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct tf_grammar *g = regex(v, cases[i].re);
		for (int k = 0; k < 4 && cases[i].yes[k]; k++)
			ck_assert_msg(accepts(g, cases[i].yes[k]), "%s must match %s", cases[i].re, cases[i].yes[k]);
		for (int k = 0; k < 4 && cases[i].no[k]; k++)
			ck_assert_msg(!accepts(g, cases[i].no[k]), "%s must not match %s", cases[i].re, cases[i].no[k]);
		tf_grammar_free(g);
	}
	tf_gvocab_free(v);
}
END_TEST

START_TEST(regex_refusals)
{
	struct tf_gvocab *v = vocab();
	struct { const char *re, *word; tf_status st; } cases[] = {
		{"(a)\\1", "\\1", TF_ERR_UNSUPPORTED},
		{"(?=a)a", "lookaround", TF_ERR_UNSUPPORTED},
		{"\\bfoo", "word boundary", TF_ERR_UNSUPPORTED},
		{"a*+", "possessive", TF_ERR_UNSUPPORTED},
		{"(?i)a", "inline flags", TF_ERR_UNSUPPORTED},
		{"a^b", "anchor", TF_ERR_UNSUPPORTED},
		{"\\p{L}", "\\p", TF_ERR_UNSUPPORTED},
		{"a{2000}", "1000", TF_ERR_UNSUPPORTED},
		{"(a", "missing closing parenthesis", TF_ERR_FORMAT},
		{"[z-a]", "offset", TF_ERR_FORMAT},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct tf_grammar *g = NULL;
		tf_status st = tf_grammar_regex(v, cases[i].re, strlen(cases[i].re), &g);
		ck_assert_msg(st == cases[i].st, "%s: %d %s", cases[i].re, st, tf_errmsg(st));
		ck_assert_msg(strstr(tf_errmsg(st), cases[i].word), "%s: %s", cases[i].re, tf_errmsg(st));
		ck_assert_ptr_null(g);
	}
	tf_gvocab_free(v);
}
END_TEST

/* The schema set: each schema with documents it must accept (in the
 * grammar's shape: schema order, bounded whitespace) and documents it must
 * reject. */
static const struct {
	const char *schema;
	const char *yes[5], *no[5];
} schemas[] = {
	{"{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"}},"
	 "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}",
	 {"{\"name\":\"a\",\"age\":3}", "{ \"name\": \"x\\ny\", \"age\": -12 }", "{\n  \"name\": \"\",\n  \"age\": 0\n}"},
	 {"{\"age\":3,\"name\":\"a\"}", "{\"name\":\"a\"}", "{\"name\":\"a\",\"age\":3.5}", "{\"name\":1,\"age\":3}",
	  "{\"name\":\"a\",\"age\":03}"}},
	{"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"boolean\"},\"b\":{\"type\":\"null\"},"
	 "\"c\":{\"type\":\"number\"}}}",
	 {"{}", "{\"b\":null}", "{\"a\":true,\"c\":1.5e+3}", "{\"c\":-0.25}"},
	 {"{\"b\":null,\"a\":true}", "{,\"a\":true}", "{\"a\":true,}", "{\"d\":1}"}},
	{"{\"enum\":[\"red\",\"green\",3,null,{\"k\":[1]}]}",
	 {"\"red\"", "3", "null", "{\"k\":[1]}"}, {"\"blue\"", "\"Red\"", "4"}},
	{"{\"const\":\"x\\\"y\"}", {"\"x\\\"y\""}, {"\"xy\"", "\"x\"y\""}},
	{"{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"minimum\":-5,\"maximum\":120},"
	 "\"minItems\":1,\"maxItems\":3}",
	 {"[0]", "[-5, 120]", "[99,100,7]", "[ -1 ]"}, {"[]", "[121]", "[-6]", "[1,2,3,4]", "[1.0]"}},
	{"{\"type\":\"integer\",\"exclusiveMinimum\":10,\"exclusiveMaximum\":1000}",
	 {"11", "999", "500"}, {"10", "1000", "-11", "9"}},
	{"{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", {"0", "1", "0.5", "0.999"}, {"1.5", "-0.1", "2", "1e0"}},
	{"{\"type\":\"number\",\"minimum\":-3,\"exclusiveMaximum\":-1}",
	 {"-3", "-2", "-2.5", "-2.25"}, {"-1", "-0.5", "-3.5", "0"}},
	{"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", {"\"ab\"", "\"日本語\"", "\"a\\n\""},
	 {"\"a\"", "\"abcd\"", "\"\\ud83d\\ude00x\""}},
	{"{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d+$\"}", {"\"AB-12\""}, {"\"ab-12\"", "\"AB-\"", "\"xAB-1\""}},
	{"{\"type\":\"string\",\"pattern\":\"ab\"}", {"\"ab\"", "\"xxabyy\""}, {"\"a b\"", "\"\""}},
	{"{\"type\":\"string\",\"pattern\":\"^a\\\"b$\"}", {"\"a\\\"b\""}, {"\"a\"b\""}},
	{"{\"type\":\"string\",\"format\":\"date\"}", {"\"2024-01-31\"", "\"1999-12-30\""},
	 {"\"2024-02-30\"", "\"2024-13-01\"", "\"2024-1-01\""}},
	{"{\"type\":\"string\",\"format\":\"date-time\"}", {"\"2024-01-02T12:00:00Z\"", "\"2024-01-02T23:59:59.5+01:00\""},
	 {"\"2024-01-02 12:00:00Z\"", "\"2024-01-02T24:00:00Z\""}},
	{"{\"type\":\"string\",\"format\":\"uuid\"}", {"\"123e4567-e89b-12d3-a456-426614174000\""},
	 {"\"123e4567e89b12d3a456426614174000\""}},
	{"{\"type\":[\"string\",\"null\"]}", {"\"a\"", "null"}, {"1", "true"}},
	{"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\"}},"
	 "\"required\":[\"x\"]}]}", {"7", "{\"x\":\"\"}"}, {"{}", "\"7\""}},
	{"{\"$defs\":{\"p\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\"}},\"required\":[\"x\"]}},"
	 "\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/p\"}}", {"[]", "[{\"x\":1},{\"x\":2.5}]"}, {"[{\"y\":1}]", "[1]"}},
	{"{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"},\"kids\":{\"type\":\"array\","
	 "\"items\":{\"$ref\":\"#\"}}},\"required\":[\"n\"]}",
	 {"{\"n\":1}", "{\"n\":1,\"kids\":[{\"n\":2,\"kids\":[]}]}"}, {"{\"kids\":[]}"}},
	{"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}", {"{}", "{\"a\":1,\"b\":2}"},
	 {"{\"a\":\"1\"}"}},
	{"{\"type\":\"object\",\"required\":[\"id\"]}", {"{\"id\":[1,{\"a\":null}]}"}, {"{}", "{\"x\":1}"}},
	{"{}", {"1", "\"s\"", "[[{}]]", "{\"a\":[true]}"}, {"", "[1,]", "tru"}},
	{"{\"type\":\"array\",\"items\":{\"type\":\"string\",\"enum\":[\"a\",\"b\"]},\"maxItems\":0}", {"[]"}, {"[\"a\"]"}},
	{"{\"oneOf\":[{\"type\":\"boolean\"},{\"type\":\"string\",\"maxLength\":1}],\"description\":\"d\"}",
	 {"true", "\"x\""}, {"\"xy\"", "null"}},
	{"{\"type\":\"integer\",\"nullable\":true}", {"5", "null"}, {"\"5\""}},
};

START_TEST(schema_set)
{
	struct tf_gvocab *v = vocab();
	for (size_t i = 0; i < sizeof(schemas) / sizeof(schemas[0]); i++) {
		struct tf_grammar *g = schema(v, schemas[i].schema);
		for (int k = 0; k < 5 && schemas[i].yes[k]; k++) {
			ck_assert_msg(accepts(g, schemas[i].yes[k]), "schema %zu must accept %s", i, schemas[i].yes[k]);
			/* every prefix of an accepted document keeps masks exact */
			int32_t st = tf_grammar_start(g);
			for (size_t b = 0; schemas[i].yes[k][b] && b < 6; b++) {
				check_mask(g, st);
				st = tf_grammar_next(g, st, (const uint8_t *)schemas[i].yes[k] + b, 1);
			}
		}
		for (int k = 0; k < 5 && schemas[i].no[k]; k++)
			ck_assert_msg(!accepts(g, schemas[i].no[k]), "schema %zu must reject %s", i, schemas[i].no[k]);
		tf_grammar_free(g);
	}
	tf_gvocab_free(v);
}
END_TEST

START_TEST(schema_refusals)
{
	struct tf_gvocab *v = vocab();
	struct { const char *schema, *word; } cases[] = {
		{"{\"not\":{\"type\":\"string\"}}", "'not'"},
		{"{\"type\":\"object\",\"patternProperties\":{\"a\":{}}}", "'patternProperties'"},
		{"{\"type\":\"array\",\"uniqueItems\":true}", "'uniqueItems'"},
		{"{\"type\":\"string\",\"format\":\"hostname\"}", "'format'"},
		{"{\"allOf\":[{\"type\":\"string\"},{\"maxLength\":2}]}", "'allOf'"},
		{"{\"type\":\"number\",\"multipleOf\":2}", "'multipleOf'"},
		{"{\"type\":\"number\",\"minimum\":0.5}", "'minimum'"},
		{"{\"type\":\"object\",\"minProperties\":1}", "'minProperties'"},
		{"{\"if\":{},\"then\":{}}", "'if'"},
		{"{\"$ref\":\"http://x/y\"}", "'$ref'"},
		{"{\"type\":\"string\",\"anyOf\":[{}]}", "'type'"},
		{"{\"type\":\"array\",\"items\":[{}]}", "'items'"},
		{"{\"type\":\"string\",\"pattern\":\"(?=a)\"}", "lookaround"},
		{"{\"type\":\"array\",\"contains\":{}}", "'contains'"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_t *s = json_loads(cases[i].schema, 0, NULL);
		ck_assert_ptr_nonnull(s);
		struct tf_grammar *g = NULL;
		tf_status st = tf_grammar_schema(v, s, &g);
		ck_assert_msg(st == TF_ERR_UNSUPPORTED, "%s: %d %s", cases[i].schema, st, tf_errmsg(st));
		ck_assert_msg(strstr(tf_errmsg(st), cases[i].word), "%s: %s", cases[i].schema, tf_errmsg(st));
		ck_assert_ptr_null(g);
		json_decref(s);
	}
	/* contradictions match nothing: an error, not a grammar */
	json_t *s = json_loads("{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", 0, NULL);
	struct tf_grammar *g = NULL;
	ck_assert_int_eq(tf_grammar_schema(v, s, &g), TF_ERR_ARG);
	json_decref(s);
	tf_gvocab_free(v);
}
END_TEST

/* Random walks over masks: draw an allowed token; at an accepting state
 * stop sometimes (or when nothing else is allowed). The output must be a
 * whole match and parse as JSON. */
START_TEST(walks_parse)
{
	struct tf_gvocab *v = vocab();
	struct tf_rng rng;
	tf_rng_seed(&rng, 7);
	for (size_t i = 0; i < sizeof(schemas) / sizeof(schemas[0]); i++) {
		struct tf_grammar *g = schema(v, schemas[i].schema);
		for (int w = 0; w < 8; w++) {
			char out[8192];
			size_t n = 0;
			int32_t st = tf_grammar_start(g);
			for (int step = 0;; step++) {
				uint32_t count;
				const uint64_t *m = tf_grammar_mask(g, st, &count);
				ck_assert_ptr_nonnull(m);
				bool acc = tf_grammar_accepting(g, st);
				ck_assert_msg(count || acc, "schema %zu: a state with no token that is not whole", i);
				if (acc && (!count || tf_rng_u64(&rng) % 4 == 0 || step > 400))
					break;
				/* prefer closing tokens late so walks end */
				uint32_t pick = (uint32_t)(tf_rng_u64(&rng) % count), id = 0;
				for (;; id++)
					if ((m[id >> 6] >> (id & 63) & 1) && pick-- == 0)
						break;
				size_t len;
				const uint8_t *b = piece_bytes(NULL, id, &len);
				ck_assert_uint_lt(n + len, sizeof(out));
				memcpy(out + n, b, len);
				n += len;
				st = tf_grammar_next_token(g, st, id);
				ck_assert_int_ge(st, 0);
				if (step > 3000)
					break;
			}
			if (!tf_grammar_accepting(g, st))
				continue; /* a walk too long to finish: nothing to check */
			out[n] = 0;
			json_error_t je;
			json_t *doc = json_loadb(out, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
			ck_assert_msg(doc != NULL, "schema %zu: walk gave %s (%s)", i, out, je.text);
			json_decref(doc);
		}
		tf_grammar_free(g);
	}
	tf_gvocab_free(v);
}
END_TEST

START_TEST(json_object_and_choice)
{
	struct tf_gvocab *v = vocab();
	struct tf_grammar *g;
	ck_assert_int_eq(tf_grammar_json_object(v, &g), TF_OK);
	ck_assert(accepts(g, "{\"a\":[1,{\"b\":null}],\"c\":\"d\"}"));
	ck_assert(!accepts(g, "[1]"));
	ck_assert(!accepts(g, "{\"a\":1"));
	check_mask(g, 0);
	tf_grammar_free(g);
	const char *choices[] = {"yes", "no", "maybe so"};
	ck_assert_int_eq(tf_grammar_choice(v, choices, 3, &g), TF_OK);
	ck_assert(accepts(g, "yes") && accepts(g, "maybe so") && !accepts(g, "ye") && !accepts(g, "yesno"));
	int32_t st = tf_grammar_next(g, 0, (const uint8_t *)"no", 2);
	ck_assert(tf_grammar_final(g, st) && tf_grammar_accepting(g, st));
	uint32_t count = 1;
	ck_assert_ptr_nonnull(tf_grammar_mask(g, st, &count));
	ck_assert_uint_eq(count, 0);
	/* special ids are never allowed */
	check_mask(g, 0);
	tf_grammar_free(g);
	tf_gvocab_free(v);
}
END_TEST

/* The DSML calls block: a strict tool's parameters in schema order, string
 * properties raw, the rest JSON; forced: the block alone; auto: content
 * without "<｜" first, the block optional; refusals name the keyword. */
#define DM "<\xef\xbd\x9c" "DSML\xef\xbd\x9c"
#define DC "</\xef\xbd\x9c" "DSML\xef\xbd\x9c"
START_TEST(dsml_calls)
{
	struct tf_gvocab *v = vocab();
	json_t *ps = json_loads("{\"type\":\"object\",\"required\":[\"city\"],\"properties\":{"
				"\"city\":{\"type\":\"string\",\"maxLength\":5},"
				"\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":9}}}", 0, NULL);
	ck_assert_ptr_nonnull(ps);
	struct tf_gdsml_tool tools[] = {{"w", ps}, {"any", NULL}};
	struct tf_grammar *g;
	ck_assert_int_eq(tf_grammar_dsml(v, tools, 2, true, &g), TF_OK);
	const char *one = DM " calls>\n" DM " invoke name=\"w\">\n"
		DM " parameter name=\"city\" string=\"true\">Paris" DC " parameter>\n"
		DM " parameter name=\"days\" string=\"false\">3" DC " parameter>\n"
		DC " invoke>\n" DC " calls>";
	ck_assert(accepts(g, one));
	ck_assert(!accepts(g, "hi\n\n" DM " calls>\n")); /* forced: no content first */
	const char *no_city = DM " calls>\n" DM " invoke name=\"w\">\n"
		DM " parameter name=\"days\" string=\"false\">3" DC " parameter>\n" DC " invoke>\n" DC " calls>";
	ck_assert(!accepts(g, no_city));
	const char *long_city = DM " calls>\n" DM " invoke name=\"w\">\n"
		DM " parameter name=\"city\" string=\"true\">Parisx" DC " parameter>\n" DC " invoke>\n" DC " calls>";
	ck_assert(!accepts(g, long_city));
	const char *free_call = DM " calls>\n" DM " invoke name=\"any\">\n"
		DM " parameter name=\"q\" string=\"true\">a < b" DC " parameter>\n" DC " invoke>\n" DC " calls>";
	ck_assert(accepts(g, free_call));
	check_mask(g, 0);
	tf_grammar_free(g);
	ck_assert_int_eq(tf_grammar_dsml(v, tools, 1, false, &g), TF_OK);
	ck_assert(accepts(g, "") && accepts(g, "just text, 1 < 2"));
	ck_assert(!accepts(g, "a <\xef\xbd\x9c b"));
	struct tf_buf b = TF_BUF_INIT;
	tf_buf_printf(&b, "Checking.\n\n%s", one);
	ck_assert(accepts(g, b.data));
	tf_buf_release(&b);
	tf_grammar_free(g);
	json_t *bad = json_loads("{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\","
				 "\"pattern\":\"a+\"}}}", 0, NULL);
	struct tf_gdsml_tool t2 = {"f", bad};
	tf_status st = tf_grammar_dsml(v, &t2, 1, true, &g);
	ck_assert_int_eq(st, TF_ERR_UNSUPPORTED);
	ck_assert_msg(strstr(tf_errmsg(st), "'pattern'"), "%s", tf_errmsg(st));
	ck_assert(!tf_grammar_dsml_fits("f", bad) && tf_grammar_dsml_fits("w", ps));
	json_decref(bad);
	json_decref(ps);
	tf_gvocab_free(v);
}
END_TEST

Suite *suite_grammar(void)
{
	Suite *s = suite_create("grammar");
	TCase *tc = tcase_create("grammar");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, regex_language);
	tcase_add_test(tc, regex_refusals);
	tcase_add_test(tc, schema_set);
	tcase_add_test(tc, schema_refusals);
	tcase_add_test(tc, walks_parse);
	tcase_add_test(tc, json_object_and_choice);
	tcase_add_test(tc, dsml_calls);
	suite_add_tcase(s, tc);
	return s;
}
