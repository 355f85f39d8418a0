/* check_dsml.c: the DSML reply reader: every record of the reference's
 * goldens (tests/data/dsv41/dsml.jsonl) whole and streamed at the recorded
 * cuts, one test per rule of dsv41-text-facts.md §3, the OpenAI and
 * Anthropic shapes, and random splits (streamed == whole). */
#include <check.h>

#include "fixtures.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "base/json.h"
#include "base/rng.h"
#include "text/dsml.h"
#include "text/pyjson.h"

#define M "<｜DSML｜"
#define MC "</｜DSML｜"

static bool is_id(const char *id)
{
	if (strlen(id) != 29 || strncmp(id, "call_", 5))
		return false;
	for (int i = 5; i < 29; i++)
		if (!strchr("0123456789abcdef", id[i]))
			return false;
	return true;
}

/* calls as [[name, arguments], ...] */
static json_t *calls_json(const struct tf_dsml_call *calls, size_t n)
{
	json_t *list = json_array();
	for (size_t i = 0; i < n; i++) {
		struct tf_buf b = TF_BUF_INIT;
		ck_assert_int_eq(tf_dsml_call_arguments(&calls[i], &b), TF_OK);
		ck_assert(is_id(calls[i].id));
		json_array_append_new(list, json_pack("[s, s#]", calls[i].name, b.data, (int)b.len));
		tf_buf_release(&b);
	}
	return list;
}

static json_t *delta_json(const struct tf_dsml_delta *d)
{
	switch (d->kind) {
	case TF_DSML_REASONING: return json_pack("[s, s#]", "r", d->text, (int)d->len);
	case TF_DSML_CONTENT: return json_pack("[s, s#]", "c", d->text, (int)d->len);
	case TF_DSML_CALL: ck_assert(is_id(d->id)); return json_pack("[s, I, s]", "open", (json_int_t)d->index, d->name);
	case TF_DSML_ARGS: return json_pack("[s, I, s#]", "args", (json_int_t)d->index, d->text, (int)d->len);
	}
	return NULL;
}

static json_t *deltas_json(const struct tf_dsml_delta *d, size_t n)
{
	json_t *list = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(list, delta_json(&d[i]));
	return list;
}

static char *show(const json_t *v)
{
	return json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
}

static bool same(const json_t *want, const json_t *got, const char *what, size_t record, size_t *bad)
{
	if (json_equal((json_t *)want, (json_t *)got))
		return true;
	if ((*bad)++ < 3) {
		char *w = show(want), *g = show(got);
		fprintf(stderr, "dsml record %zu: %s differ\n  want %.400s\n  got  %.400s\n", record, what, w, g);
		free(w);
		free(g);
	}
	return false;
}

START_TEST(dsml_goldens)
{
	struct jsonl j;
	jsonl_open(&j, "dsv41/dsml.jsonl");
	size_t records = 0, bad = 0, feeds = 0, with_calls = 0;
	for (json_t *rec; (rec = jsonl_next(&j));) {
		size_t r = records++;
		const json_t *jt = json_object_get(rec, "text");
		const char *t = json_string_value(jt);
		size_t tn = json_string_length(jt);
		bool thinking = json_is_true(json_object_get(rec, "thinking"));
		struct tf_dsml_tools *tools = tf_dsml_tools_new(json_object_get(rec, "tools"));
		ck_assert_ptr_nonnull(tools);
		/* whole */
		struct tf_dsml_reply reply;
		ck_assert_int_eq(tf_dsml_parse(t, tn, thinking, tools, &reply), TF_OK);
		const json_t *wp = json_object_get(rec, "parse");
		json_t *got = json_pack("{s:s#, s:s#, s:o}", "reasoning", reply.reasoning.data ? reply.reasoning.data : "",
					(int)reply.reasoning.len, "content", reply.content.data ? reply.content.data : "",
					(int)reply.content.len, "calls", calls_json(reply.calls, reply.ncalls));
		bool ok = same(wp, got, "whole parses", r, &bad);
		with_calls += reply.ncalls > 0;
		json_decref(got);
		tf_dsml_reply_release(&reply);
		/* streamed at the recorded cuts */
		struct tf_dsml_stream *s = tf_dsml_stream_new(thinking, tools);
		const json_t *cuts = json_object_get(rec, "cuts"), *deltas = json_object_get(rec, "deltas");
		ck_assert_uint_eq(json_array_size(deltas), json_array_size(cuts) + 1);
		size_t at = 0;
		for (size_t k = 0; ok && k < json_array_size(deltas); k++) {
			const struct tf_dsml_delta *d;
			size_t nd;
			if (k < json_array_size(cuts)) {
				size_t cut = (size_t)json_integer_value(json_array_get(cuts, k));
				ck_assert_int_eq(tf_dsml_stream_push(s, t + at, cut - at, &d, &nd), TF_OK);
				at = cut;
			} else {
				ck_assert_int_eq(tf_dsml_stream_finish(s, t + at, tn - at, &d, &nd), TF_OK);
				json_t *last = deltas_json(d, nd);
				ok = same(json_array_get(deltas, k), last, "finish deltas", r, &bad);
				json_decref(last);
				feeds++;
				break;
			}
			feeds++;
			json_t *g = deltas_json(d, nd);
			char label[64];
			snprintf(label, sizeof label, "deltas of feed %zu", k);
			ok = same(json_array_get(deltas, k), g, label, r, &bad);
			json_decref(g);
		}
		if (ok) {
			size_t nc;
			const struct tf_dsml_call *c = tf_dsml_stream_calls(s, &nc);
			json_t *sc = calls_json(c, nc);
			same(json_object_get(rec, "stream_calls"), sc, "stream calls", r, &bad);
			json_decref(sc);
		}
		tf_dsml_stream_free(s);
		tf_dsml_tools_free(tools);
		json_decref(rec);
	}
	jsonl_close(&j);
	fprintf(stderr, "dsml goldens: %zu/%zu replies equal (%zu with calls, %zu stream feeds)\n", records - bad,
		records, with_calls, feeds);
	ck_assert_uint_ge(records, 200);
	ck_assert_uint_eq(bad, 0);
}
END_TEST


/* ---- rules ---- */

static const char *TOOLS =
	"[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\","
	" \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}, \"unit\": {\"enum\":"
	" [\"c\", \"f\"]}, \"detail\": {\"type\": [\"boolean\", \"null\"]}, \"when\": {\"anyOf\": [{\"type\": \"string\"},"
	" {\"type\": \"null\"}]}, \"n\": {\"oneOf\": [{\"type\": \"integer\"}, {\"type\": \"boolean\"}]},"
	" \"k\": {\"const\": 3}, \"x\": {\"type\": \"number\"}}}}},"
	" {\"type\": \"function\", \"function\": {\"name\": \"Search\", \"parameters\": {\"properties\": {\"q\":"
	" {\"type\": \"string\"}, \"tags\": {\"type\": \"array\"}, \"filters\": {\"type\": \"object\"}}}}},"
	" {\"name\": \"web::open\", \"parameters\": {\"properties\": {\"url\": {\"type\": \"string\"}}}}]";

struct parsed {
	char *reasoning, *content, *calls; /* calls: [[name, args], ...] compact */
};

static struct parsed parse_with(const char *text, bool thinking, const char *tools_json)
{
	json_t *tj = tools_json ? json_loads(tools_json, 0, NULL) : NULL;
	struct tf_dsml_tools *tools = tf_dsml_tools_new(tj);
	struct tf_dsml_reply r;
	ck_assert_int_eq(tf_dsml_parse(text, strlen(text), thinking, tools, &r), TF_OK);
	json_t *calls = calls_json(r.calls, r.ncalls);
	struct parsed p = {strdup(r.reasoning.data ? r.reasoning.data : ""), strdup(r.content.data ? r.content.data : ""),
			   show(calls)};
	json_decref(calls);
	tf_dsml_reply_release(&r);
	tf_dsml_tools_free(tools);
	json_decref(tj);
	return p;
}

static void expect_parse(const char *text, bool thinking, const char *tools, const char *reasoning,
			 const char *content, const char *calls)
{
	struct parsed p = parse_with(text, thinking, tools);
	ck_assert_str_eq(p.reasoning, reasoning);
	ck_assert_str_eq(p.content, content);
	ck_assert_str_eq(p.calls, calls);
	free(p.reasoning);
	free(p.content);
	free(p.calls);
}

static void expect_value(const char *key, bool string, const char *raw, const char *want_args)
{
	char text[1024];
	snprintf(text, sizeof text, M " calls>\n" M " invoke name=\"get_weather\">\n" M " parameter name=\"%s\" string=\"%s\">%s"
		 MC " parameter>\n" MC " invoke>\n" MC " calls>", key, string ? "true" : "false", raw);
	char calls[1024];
	json_t *w = json_pack("[[s, s]]", "get_weather", want_args);
	char *ws = show(w);
	snprintf(calls, sizeof calls, "%s", ws);
	free(ws);
	json_decref(w);
	expect_parse(text, false, TOOLS, "", "", calls);
}

START_TEST(rule_split_reasoning)
{
	/* reasoning up to </think>; content after, minus one blank line before the block */
	expect_parse("plan</think>Sure.\n\n" M " calls>\n" M " invoke name=\"get_weather\">\n" M
		     " parameter name=\"city\" string=\"true\">Paris" MC " parameter>\n" MC " invoke>\n" MC " calls>",
		     true, TOOLS, "plan", "Sure.", "[[\"get_weather\",\"{\\\"city\\\":\\\"Paris\\\"}\"]]");
	/* a block inside unclosed reasoning ends it there (minus one \n\n) */
	expect_parse("plan\n\n\n" M " calls>\n" M " invoke name=\"get_weather\">\n" MC " calls>", true, TOOLS, "plan\n",
		     "", "[[\"get_weather\",\"{}\"]]");
	/* ... or minus all trailing newlines when there is no blank line */
	expect_parse("plan\n" M "calls>" M "invoke name=\"get_weather\">", true, TOOLS, "plan", "\n",
		     "[[\"get_weather\",\"{}\"]]");
	/* chat mode: no reasoning, </think> is content */
	expect_parse("a</think>b", false, NULL, "", "a</think>b", "[]");
	/* thinking without an end: all reasoning */
	expect_parse("still thinking", true, TOOLS, "still thinking", "", "[]");
}
END_TEST

START_TEST(rule_block_names)
{
	const char *names[] = {M " calls>", M "calls>", M " tool_calls>", M "tool_calls>", M "\tfunction_calls>",
			       M "function_calls>"};
	for (size_t i = 0; i < 6; i++) {
		char text[512];
		snprintf(text, sizeof text, "hi\n\n%s\n" M " invoke name=\"get_weather\">\n" MC " invoke>\n" MC " calls>",
			 names[i]);
		expect_parse(text, false, TOOLS, "", "hi", "[[\"get_weather\",\"{}\"]]");
	}
	/* not a block: two spaces, another name, attributes */
	const char *not[] = {M "  calls>", M " call>", M " calls=\"x\">", "<｜DSML calls>"};
	for (size_t i = 0; i < 4; i++) {
		char text[512];
		snprintf(text, sizeof text, "hi\n\n%s\n" M " invoke name=\"get_weather\">\n", not[i]);
		expect_parse(text, false, TOOLS, "", text, "[]");
	}
}
END_TEST

START_TEST(rule_tag_whitespace)
{
	/* optional one space after the mark, any whitespace between attributes and before '>' */
	expect_parse(M " calls>" M "\tinvoke\n name=\"get_weather\"  \n>" M "parameter\t\tname=\"city\"\nstring=\"true\" >"
		     "Oslo" MC "parameter>" MC "\u3000invoke>",
		     false, TOOLS, "", "", "[[\"get_weather\",\"{\\\"city\\\":\\\"Oslo\\\"}\"]]");
	/* no whitespace before name= is not a header */
	expect_parse(M " calls>" M " invokename=\"get_weather\">", false, TOOLS, "", M " calls>" M " invokename=\"get_weather\">",
		     "[]");
}
END_TEST

START_TEST(rule_unclosed)
{
	/* an invoke ends at the next invoke or the block end; an open block is read to the end */
	expect_parse(M " calls>\n" M " invoke name=\"get_weather\">\n" M " parameter name=\"city\" string=\"true\">A" MC
		     " parameter>\n" M " invoke name=\"search\">\n" M " parameter name=\"q\" string=\"true\">b" MC " parameter>",
		     false, TOOLS, "", "",
		     "[[\"get_weather\",\"{\\\"city\\\":\\\"A\\\"}\"],[\"Search\",\"{\\\"q\\\":\\\"b\\\"}\"]]");
	/* a parameter without its closing tag is not read */
	expect_parse(M " calls>\n" M " invoke name=\"get_weather\">\n" M " parameter name=\"city\" string=\"true\">A",
		     false, TOOLS, "", "", "[[\"get_weather\",\"{}\"]]");
	/* duplicate parameters: the first is kept */
	expect_parse(M " calls>" M " invoke name=\"get_weather\">" M " parameter name=\"city\" string=\"true\">A" MC
		     " parameter>" M " parameter name=\"city\" string=\"true\">B" MC " parameter>",
		     false, TOOLS, "", "", "[[\"get_weather\",\"{\\\"city\\\":\\\"A\\\"}\"]]");
}
END_TEST

START_TEST(rule_values)
{
	expect_value("city", true, " Paris \n", "{\"city\":\" Paris \\n\"}");   /* raw string, kept */
	expect_value("q", true, "é\"\\", "{\"q\":\"é\\\"\\\\\"}");                  /* unknown key of another tool: raw */
	expect_value("days", true, "3", "{\"days\":3}");                           /* schema excludes strings */
	expect_value("days", true, "3.0", "{\"days\":3}");                         /* integral float, integer only */
	expect_value("days", false, "3.0", "{\"days\":3.0}");                      /* valid JSON is taken as it is */
	expect_value("x", false, "3.0", "{\"x\":3.0}");                            /* a number stays a float */
	expect_value("days", false, "three", "{\"days\":\"three\"}");              /* nothing fits: raw */
	expect_value("detail", false, "True", "{\"detail\":true}");                /* Python literals */
	expect_value("detail", true, "null", "{\"detail\":null}");
	expect_value("when", true, "null", "{\"when\":\"null\"}");                 /* string allowed: raw text */
	expect_value("when", false, "null", "{\"when\":null}");
	expect_value("when", true, "soon", "{\"when\":\"soon\"}");
	expect_value("n", true, "7", "{\"n\":7}");                                 /* oneOf */
	expect_value("unit", false, "c", "{\"unit\":\"c\"}");                      /* enum of strings */
	expect_value("k", true, "3", "{\"k\":3}");                                 /* const */
	expect_value("other", false, "[1, {\"a\": [2", "{\"other\":[1,{\"a\":[2]}]}"); /* auto-close */
	expect_value("other", false, "[1]]", "{\"other\":\"[1]]\"}");              /* not only short: raw */
	expect_value("other", false, "{\"s\": \"[\"", "{\"other\":{\"s\":\"[\"}}"); /* brackets in strings */
	expect_value("days", true, "\"4\"", "{\"days\":4}");                       /* JSON inside a JSON string */
	expect_value("days", false, "\"4\"", "{\"days\":\"4\"}");                  /* valid JSON as it is */
	expect_value("other", false, " {\"a\": 1} ", "{\"other\":{\"a\":1}}");
}
END_TEST

START_TEST(rule_names)
{
	const char *fmt = M " calls>" M " invoke name=\"%s\">" MC " invoke>";
	struct {
		const char *name, *want;
	} cases[] = {{"get_weather", "get_weather"}, {"GET_WEATHER", "get_weather"}, {"search", "Search"},
		     {"ns::get_weather", "get_weather"}, {"a::b::Search", "Search"}, {"web::open", "web::open"},
		     {"WEB::OPEN", "web::open"}};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char text[256], want[256];
		snprintf(text, sizeof text, fmt, cases[i].name);
		snprintf(want, sizeof want, "[[\"%s\",\"{}\"]]", cases[i].want);
		expect_parse(text, false, TOOLS, "", "", want);
	}
	/* an unoffered tool: no usable call, the whole rest is content */
	char text[256];
	snprintf(text, sizeof text, "x\n\n" M " calls>" M " invoke name=\"%s\">" MC " invoke>", "delete_all");
	expect_parse(text, false, TOOLS, "", text, "[]");
	/* no tools offered: calls are never read */
	snprintf(text, sizeof text, fmt, "get_weather");
	expect_parse(text, false, NULL, "", text, "[]");
	/* a nameless invoke is never a call */
	snprintf(text, sizeof text, fmt, "");
	expect_parse(text, false, TOOLS, "", text, "[]");
}
END_TEST

START_TEST(rule_malformed_stays_text)
{
	const char *texts[] = {
		"<｜DSML｜ calls=\"find_user\">\n<｜DSML｜ parameter name=\"email\" string=\"true\">a</｜DSML｜ parameter>",
		"<invoke name=\"get_weather\"><city>Oslo</parameter>",
		M " calls>" M " invoke name=\"get_weather" M " parameter",
		"\xff\xfe" M " calls>\x80",
		"",
	};
	for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
		struct parsed p = parse_with(texts[i], false, TOOLS);
		ck_assert_str_eq(p.content, texts[i]);
		ck_assert_str_eq(p.calls, "[]");
		free(p.reasoning);
		free(p.content);
		free(p.calls);
	}
}
END_TEST

/* Stream a text in the given chunks; returns the deltas as JSON. */
static json_t *stream_chunks_with(const char *text, const size_t *cuts, size_t ncuts, bool thinking,
				  const struct tf_dsml_tools *tools, bool consistent, json_t **calls)
{
	struct tf_dsml_stream *s = tf_dsml_stream_new(thinking, tools);
	tf_dsml_stream_consistent(s, consistent);
	json_t *all = json_array();
	size_t at = 0, n = strlen(text);
	const struct tf_dsml_delta *d;
	size_t nd;
	for (size_t k = 0; k < ncuts; k++) {
		ck_assert_int_eq(tf_dsml_stream_push(s, text + at, cuts[k] - at, &d, &nd), TF_OK);
		json_array_append_new(all, deltas_json(d, nd));
		at = cuts[k];
	}
	ck_assert_int_eq(tf_dsml_stream_finish(s, text + at, n - at, &d, &nd), TF_OK);
	json_array_append_new(all, deltas_json(d, nd));
	ck_assert_int_eq(tf_dsml_stream_push(s, "x", 1, &d, &nd), TF_ERR_ARG);
	size_t nc;
	const struct tf_dsml_call *c = tf_dsml_stream_calls(s, &nc);
	*calls = calls_json(c, nc);
	tf_dsml_stream_free(s);
	return all;
}

static json_t *stream_chunks(const char *text, const size_t *cuts, size_t ncuts, bool thinking,
			     const struct tf_dsml_tools *tools, json_t **calls)
{
	return stream_chunks_with(text, cuts, ncuts, thinking, tools, false, calls);
}

START_TEST(rule_stream_holds_back)
{
	json_t *tj = json_loads(TOOLS, 0, NULL);
	struct tf_dsml_tools *tools = tf_dsml_tools_new(tj);
	const char *text = "ab</think>cd\n\n" M " calls>\n" M " invoke name=\"get_weather\">\n" M
			   " parameter name=\"city\" string=\"true\">Oslo" MC " parameter>\n" M
			   " parameter name=\"days\" string=\"false\">2" MC " parameter>\n" MC " invoke>\n" MC " calls>";
	/* cut inside "</think>", inside "\n\n<｜DSML｜ ca", inside the invoke header, after each parameter */
	const char *at[] = {"</thi", "\n\n" M " ca", "get_wea", "get_weather\">\n", "Oslo" MC " parameter>",
			    "2" MC " param", "2" MC " parameter>\n" MC " invoke>"};
	size_t cuts[7];
	for (int i = 0; i < 7; i++)
		cuts[i] = (size_t)(strstr(text, at[i]) - text) + strlen(at[i]);
	json_t *calls;
	json_t *got = stream_chunks(text, cuts, 7, true, tools, &calls);
	char *g = show(got);
	ck_assert_str_eq(g, "[[[\"r\",\"ab\"]],[[\"c\",\"cd\"]],[],[[\"open\",0,\"get_weather\"]],"
			    "[[\"args\",0,\"{\\\"city\\\":\\\"Oslo\\\"\"]],[],[[\"args\",0,\",\\\"days\\\":2}\"]],[]]");
	char *c = show(calls);
	ck_assert_str_eq(c, "[[\"get_weather\",\"{\\\"city\\\":\\\"Oslo\\\",\\\"days\\\":2}\"]]");
	free(g);
	free(c);
	json_decref(got);
	json_decref(calls);
	tf_dsml_tools_free(tools);
	json_decref(tj);
}
END_TEST

/* A value holding what looks like an invoke header whose name is still
 * open when the invoke's end arrives (its quote comes after, and then no
 * '>'): the whole parse refuses that header at the end and keeps the
 * parameter; the consistent stream, fed a byte at a time, used to close the
 * call with its parameters held back and lose it (found by fuzz_dsml). */
START_TEST(consistent_call_waits_for_a_header_in_a_value)
{
	json_t *tj = json_loads(TOOLS, 0, NULL);
	struct tf_dsml_tools *tools = tf_dsml_tools_new(tj);
	const char *text = "ok</think>" M " calls>\n" M " invoke name=\"get_weather\">\n" M
			   " parameter name=\"city\" string=\"true\">Oslo " M " invoke name=\"x\n" MC
			   " parameter>\n" MC " invoke>\n" MC " calls> then name=\"y tail";
	struct tf_dsml_reply r;
	ck_assert_int_eq(tf_dsml_parse(text, strlen(text), true, tools, &r), TF_OK);
	ck_assert_uint_eq(r.ncalls, 1);
	json_t *whole = calls_json(r.calls, r.ncalls);
	size_t n = strlen(text), cuts[1024], nc = 0;
	for (size_t at = 1; at < n && nc < 1024; at++)
		cuts[nc++] = at;
	json_t *calls;
	json_t *all = stream_chunks_with(text, cuts, nc, true, tools, true, &calls);
	char *w = show(whole), *g = show(calls);
	ck_assert_msg(json_equal(whole, calls), "whole %s\n streamed %s", w, g);
	ck_assert_ptr_nonnull(strstr(w, "Oslo"));
	free(w);
	free(g);
	json_decref(all);
	json_decref(calls);
	json_decref(whole);
	tf_dsml_reply_release(&r);
	tf_dsml_tools_free(tools);
	json_decref(tj);
}
END_TEST

START_TEST(rule_shapes)
{
	json_t *tj = json_loads(TOOLS, 0, NULL);
	struct tf_dsml_tools *tools = tf_dsml_tools_new(tj);
	const char *text = "think</think>Sure.\n\n" M " calls>\n" M " invoke name=\"get_weather\">\n" M
			   " parameter name=\"city\" string=\"true\">Oslo" MC " parameter>\n" MC " invoke>\n" MC " calls>";
	struct tf_dsml_reply r;
	ck_assert_int_eq(tf_dsml_parse(text, strlen(text), true, tools, &r), TF_OK);
	json_t *oa = tf_dsml_openai_tool_calls(r.calls, r.ncalls);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(oa, 0), "id")), r.calls[0].id);
	json_object_del(json_array_get(oa, 0), "id");
	char *s = show(oa);
	ck_assert_str_eq(s, "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Oslo\\\"}\"}}]");
	free(s);
	json_decref(oa);
	json_t *an = tf_dsml_anthropic_content(&r);
	json_object_del(json_array_get(an, 2), "id");
	s = show(an);
	ck_assert_str_eq(s, "[{\"type\":\"thinking\",\"thinking\":\"think\",\"signature\":\"\"},{\"type\":\"text\",\"text\":\"Sure.\"},"
			    "{\"type\":\"tool_use\",\"name\":\"get_weather\",\"input\":{\"city\":\"Oslo\"}}]");
	free(s);
	json_decref(an);
	tf_dsml_reply_release(&r);
	/* streamed: OpenAI chunks and Anthropic events, fed a byte at a time */
	struct tf_dsml_stream *st = tf_dsml_stream_new(true, tools);
	struct tf_dsml_anthropic *a = tf_dsml_anthropic_new();
	json_t *events = json_array(), *chunks = json_array();
	for (size_t i = 0; i <= strlen(text); i++) {
		const struct tf_dsml_delta *d;
		size_t nd;
		bool fin = i == strlen(text);
		ck_assert_int_eq(fin ? tf_dsml_stream_finish(st, "", 0, &d, &nd) : tf_dsml_stream_push(st, text + i, 1, &d, &nd),
				 TF_OK);
		for (size_t k = 0; k < nd; k++) {
			json_t *c = tf_dsml_openai_delta(&d[k], TF_DSML_REASONING_CONTENT | TF_DSML_REASONING_FIELD);
			if (d[k].kind == TF_DSML_REASONING)
				ck_assert(json_equal(json_object_get(c, "reasoning"), json_object_get(c, "reasoning_content")));
			json_t *calls = json_object_get(c, "tool_calls");
			if (calls)
				json_object_del(json_array_get(calls, 0), "id");
			json_array_append_new(chunks, c);
		}
		ck_assert_int_eq(tf_dsml_anthropic_events(a, d, nd, fin, events), TF_OK);
	}
	/* the chunks: reasoning, content, the call's open chunk, argument fragments */
	struct tf_buf args = TF_BUF_INIT;
	size_t opens = 0;
	for (size_t i = 0; i < json_array_size(chunks); i++) {
		json_t *call = json_array_get(json_object_get(json_array_get(chunks, i), "tool_calls"), 0);
		if (!call)
			continue;
		json_t *f = json_object_get(call, "function");
		if (json_object_get(call, "type")) {
			opens++;
			s = show(json_array_get(chunks, i));
			ck_assert_str_eq(s, "{\"tool_calls\":[{\"index\":0,\"type\":\"function\",\"function\":{\"name\":"
					    "\"get_weather\",\"arguments\":\"\"}}]}");
			free(s);
		} else {
			ck_assert_int_eq(json_integer_value(json_object_get(call, "index")), 0);
			tf_buf_puts(&args, json_string_value(json_object_get(f, "arguments")));
		}
	}
	ck_assert_uint_eq(opens, 1);
	ck_assert_str_eq(args.data, "{\"city\":\"Oslo\"}");
	tf_buf_release(&args);
	/* the Anthropic events: thinking block 0, text block 1, tool_use block 2, each closed */
	size_t stops = 0;
	long last_index = -1;
	for (size_t i = 0; i < json_array_size(events); i++) {
		json_t *e = json_array_get(events, i);
		const char *type = json_string_value(json_object_get(e, "type"));
		long index = (long)json_integer_value(json_object_get(e, "index"));
		ck_assert(index >= last_index);
		last_index = index;
		stops += !strcmp(type, "content_block_stop");
		if (!strcmp(type, "content_block_start") && index == 2) {
			json_t *b = json_object_get(e, "content_block");
			ck_assert_str_eq(json_string_value(json_object_get(b, "type")), "tool_use");
			ck_assert_str_eq(json_string_value(json_object_get(b, "name")), "get_weather");
		}
	}
	ck_assert_uint_eq(stops, 3);
	ck_assert_int_eq(last_index, 2);
	json_decref(events);
	json_decref(chunks);
	tf_dsml_anthropic_free(a);
	tf_dsml_stream_free(st);
	tf_dsml_tools_free(tools);
	json_decref(tj);
}
END_TEST

/* ---- random splits: the stream, assembled, equals the whole parse ---- */

static void gen_value(struct tf_buf *b, struct tf_rng *r, bool *string)
{
	static const char *const strings[] = {"Paris", " spaced \n", "ünï 😀", "a</think>b", "<｜DSML｜ x", "{\"x\": ["};
	static const char *const json[] = {"3", "2.0", "[1, 2", "{\"a\": {\"b\": [true, null]}}", "\"4\"", "True",
					   "-0.5e3", "[\"]\", {"};
	*string = tf_rng_below(r, 2);
	tf_buf_puts(b, *string ? strings[tf_rng_below(r, 6)] : json[tf_rng_below(r, 8)]);
}

static void gen_reply(struct tf_buf *b, struct tf_rng *r, bool thinking, bool all_spellings)
{
	static const char *const prose[] = {"Let me see.", "a\n\nb", "< not a tag", "</thin", "x\n", "中文 text",
					    "\n\n", "<｜DSML｜", "｜DSML｜ calls"};
	/* the first four: the spellings the reference holds back (dsml.h) */
	static const char *const opens[] = {M " calls>", M "calls>", M "tool_calls>", M "function_calls>",
					    M " tool_calls>", M "\tfunction_calls>", M "\u3000calls>"};
	/* the last: not offered */
	static const char *const names[] = {"get_weather", "search", "WEB::OPEN", "x::get_weather", "delete_all"};
	static const char *const keys[] = {"city", "days", "q", "tags", "detail", "when", "n", "url", "zz"};
	static const char *const sp[] = {" ", "\n", "\t", "  ", " \n "};
	tf_buf_reset(b);
	bool unclosed = false;
	if (thinking) {
		for (uint64_t i = tf_rng_below(r, 3); i-- > 0;)
			tf_buf_puts(b, prose[tf_rng_below(r, 9)]);
		if (tf_rng_below(r, 4))
			tf_buf_puts(b, "</think>");
		else
			unclosed = true;
	}
	for (uint64_t i = tf_rng_below(r, 3); i-- > 0;)
		tf_buf_puts(b, prose[tf_rng_below(r, 7)]);
	/* a lone newline before a block in unclosed reasoning is sent twice by
	   the reference's stream (dsml.h); the consistent stream holds it */
	if (unclosed && !all_spellings && b->len && b->data[b->len - 1] == '\n' &&
	    (b->len < 2 || b->data[b->len - 2] != '\n'))
		b->data[--b->len] = 0;
	if (tf_rng_below(r, 2))
		tf_buf_puts(b, "\n\n");
	tf_buf_puts(b, opens[tf_rng_below(r, all_spellings ? 7 : 4)]);
	tf_buf_puts(b, "\n");
	for (uint64_t c = 1 + tf_rng_below(r, 3); c-- > 0;) {
		tf_buf_printf(b, M "%sinvoke%sname=\"%s\"%s>\n", tf_rng_below(r, 2) ? " " : "", sp[tf_rng_below(r, 5)],
			      names[tf_rng_below(r, all_spellings ? 5 : 4)], tf_rng_below(r, 2) ? "" : " ");
		for (uint64_t p = tf_rng_below(r, 4); p-- > 0;) {
			bool string;
			struct tf_buf v = TF_BUF_INIT;
			gen_value(&v, r, &string);
			tf_buf_printf(b, M " parameter%sname=\"%s\"%sstring=\"%s\">%s" MC " parameter>\n", sp[tf_rng_below(r, 5)],
				      keys[tf_rng_below(r, 9)], sp[tf_rng_below(r, 5)], string ? "true" : "false", v.data);
			tf_buf_release(&v);
		}
		if (tf_rng_below(r, 3))
			tf_buf_puts(b, MC " invoke>\n");
	}
	if (tf_rng_below(r, 3))
		tf_buf_puts(b, MC " calls>");
}

/* Cut points: random byte offsets (the stream holds back a cut character). */
static size_t random_cuts(struct tf_rng *r, size_t n, size_t *cuts, size_t max)
{
	size_t k = 0, at = 0;
	while (k < max) {
		at += 1 + tf_rng_below(r, 1 + tf_rng_below(r, 2) * 16);
		if (at >= n)
			break;
		cuts[k++] = at;
	}
	return k;
}

/* Assemble a stream's deltas: [reasoning, content, {index: [name, args]}]. */
static json_t *assemble(const json_t *feeds)
{
	struct tf_buf rs = TF_BUF_INIT, cs = TF_BUF_INIT;
	json_t *calls = json_array();
	for (size_t f = 0; f < json_array_size(feeds); f++) {
		json_t *list = json_array_get(feeds, f);
		for (size_t i = 0; i < json_array_size(list); i++) {
			json_t *d = json_array_get(list, i);
			const char *kind = json_string_value(json_array_get(d, 0));
			if (!strcmp(kind, "r") || !strcmp(kind, "c")) {
				json_t *t = json_array_get(d, 1);
				tf_buf_append(*kind == 'r' ? &rs : &cs, json_string_value(t), json_string_length(t));
			} else if (!strcmp(kind, "open")) {
				ck_assert_uint_eq(json_integer_value(json_array_get(d, 1)), json_array_size(calls));
				json_array_append_new(calls, json_pack("[O, s]", json_array_get(d, 2), ""));
			} else {
				json_t *c = json_array_get(calls, (size_t)json_integer_value(json_array_get(d, 1)));
				ck_assert_ptr_nonnull(c);
				struct tf_buf a = TF_BUF_INIT;
				tf_buf_puts(&a, json_string_value(json_array_get(c, 1)));
				tf_buf_puts(&a, json_string_value(json_array_get(d, 2)));
				json_array_set_new(c, 1, json_string(a.data));
				tf_buf_release(&a);
			}
		}
	}
	json_t *out = json_pack("[s#, s#, o]", rs.data ? rs.data : "", (int)rs.len, cs.data ? cs.data : "", (int)cs.len, calls);
	tf_buf_release(&rs);
	tf_buf_release(&cs);
	return out;
}

START_TEST(random_splits)
{
	json_t *tj = json_loads(TOOLS, 0, NULL);
	struct tf_dsml_tools *tools = tf_dsml_tools_new(tj);
	struct tf_rng r;
	tf_rng_seed(&r, 20261129);
	struct tf_buf text = TF_BUF_INIT;
	size_t replies = 0, splits = 0, with_calls = 0, without_tools = 0;
	for (int i = 0; i < 800; i++) {
		/* the first half: reference deltas, in the cases where they equal
		   the whole parse (dsml.h); the second: the consistent stream on
		   anything, tools offered or not, usable calls or not */
		bool thinking = i & 1, consistent = i >= 400;
		bool offered = !consistent || i % 3;
		gen_reply(&text, &r, thinking, consistent);
		struct parsed p = parse_with(text.data, thinking, offered ? TOOLS : NULL);
		json_t *whole = json_pack("[s, s, o]", p.reasoning, p.content, json_loads(p.calls, 0, NULL));
		with_calls += strcmp(p.calls, "[]") != 0;
		without_tools += !offered;
		replies++;
		for (int k = 0; k < 8; k++) {
			size_t cuts[4096];
			size_t nc = k == 0 ? 0 : random_cuts(&r, text.len, cuts, 4096);
			json_t *sc;
			json_t *feeds =
				stream_chunks_with(text.data, cuts, nc, thinking, offered ? tools : NULL, consistent, &sc);
			json_t *got = assemble(feeds);
			/* the assembled calls equal the calls the stream reports */
			ck_assert(json_equal(json_array_get(got, 2), sc));
			if (!json_equal(whole, got)) {
				char *w = show(whole), *g = show(got), *t = show(json_string(text.data));
				ck_abort_msg("reply %d split %d: thinking=%d consistent=%d tools=%d\n text %s\n whole %s\n streamed %s",
					     i, k, thinking, consistent, offered, t, w, g);
			}
			splits++;
			json_decref(got);
			json_decref(feeds);
			json_decref(sc);
		}
		json_decref(whole);
		free(p.reasoning);
		free(p.content);
		free(p.calls);
	}
	fprintf(stderr, "dsml random splits: %zu replies (%zu with calls, %zu without tools), %zu splits, streamed == whole\n",
		replies, with_calls, without_tools, splits);
	tf_buf_release(&text);
	tf_dsml_tools_free(tools);
	json_decref(tj);
}
END_TEST

/* In consistent mode each golden reply streams, at its recorded cuts, at
 * single bytes and in one piece, to exactly its whole parse. */
START_TEST(consistent_goldens)
{
	struct jsonl j;
	jsonl_open(&j, "dsv41/dsml.jsonl");
	size_t records = 0;
	for (json_t *rec; (rec = jsonl_next(&j));) {
		const char *t = json_string_value(json_object_get(rec, "text"));
		bool thinking = json_is_true(json_object_get(rec, "thinking"));
		struct tf_dsml_tools *tools = tf_dsml_tools_new(json_object_get(rec, "tools"));
		const json_t *jc = json_object_get(rec, "cuts");
		size_t nc = json_array_size(jc), *cuts = calloc(strlen(t) + 1, sizeof *cuts);
		for (size_t k = 0; k < nc; k++)
			cuts[k] = (size_t)json_integer_value(json_array_get(jc, k));
		json_t *c1, *c2, *c3;
		json_t *f1 = stream_chunks_with(t, cuts, nc, thinking, tools, true, &c1);
		for (size_t k = 0; k + 1 < strlen(t); k++)
			cuts[k] = k + 1;
		json_t *f2 = stream_chunks_with(t, cuts, strlen(t) ? strlen(t) - 1 : 0, thinking, tools, true, &c2);
		json_t *f3 = stream_chunks_with(t, cuts, 0, thinking, tools, true, &c3);
		json_t *a1 = assemble(f1), *a2 = assemble(f2), *a3 = assemble(f3);
		json_decref(f1);
		json_decref(f2);
		json_decref(f3);
		const json_t *wp = json_object_get(rec, "parse");
		json_t *whole = json_pack("[O, O, O]", json_object_get(wp, "reasoning"), json_object_get(wp, "content"),
					  json_object_get(wp, "calls"));
		ck_assert_msg(json_equal(a1, whole) && json_equal(a2, whole) && json_equal(a3, whole),
			      "record %zu: the consistent stream differs from the whole parse", records);
		ck_assert(json_equal(c1, json_object_get(rec, "stream_calls")) && json_equal(c1, c3));
		json_decref(whole);
		json_decref(a1);
		json_decref(a2);
		json_decref(a3);
		json_decref(c1);
		json_decref(c2);
		json_decref(c3);
		free(cuts);
		tf_dsml_tools_free(tools);
		json_decref(rec);
		records++;
	}
	jsonl_close(&j);
	ck_assert_uint_ge(records, 200);
}
END_TEST

Suite *suite_dsml(void)
{
	Suite *s = suite_create("dsml");
	TCase *tc = tcase_create("read");
	tcase_add_test(tc, dsml_goldens);
	tcase_add_test(tc, rule_split_reasoning);
	tcase_add_test(tc, rule_block_names);
	tcase_add_test(tc, rule_tag_whitespace);
	tcase_add_test(tc, rule_unclosed);
	tcase_add_test(tc, rule_values);
	tcase_add_test(tc, rule_names);
	tcase_add_test(tc, rule_malformed_stays_text);
	tcase_add_test(tc, rule_stream_holds_back);
	tcase_add_test(tc, rule_shapes);
	tcase_add_test(tc, random_splits);
	tcase_add_test(tc, consistent_goldens);
	tcase_add_test(tc, consistent_call_waits_for_a_header_in_a_value);
	suite_add_tcase(s, tc);
	return s;
}
