/* check_dsml.c: the DSML reply reader: every record of the reference's
 * goldens (tests/data/dsv41/dsml.jsonl) whole and streamed at the recorded
 * cuts, one test per rule of dsv41-text-facts.md §3, the OpenAI and
 * Anthropic shapes, and random splits (streamed == whole). */
#include <check.h>
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

static char *data_path(const char *name)
{
	const char *dir = getenv("TF_TEST_DATA");
	static char path[4096];
	snprintf(path, sizeof path, "%s/%s", dir ? dir : "tests/data", name);
	return path;
}

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
	char *text;
	size_t n;
	ck_assert_int_eq(tf_file_read_all(data_path("dsv41/dsml.jsonl"), 1 << 26, &text, &n), TF_OK);
	size_t records = 0, bad = 0, feeds = 0, with_calls = 0;
	for (char *line = text, *nl; line < text + n; line = nl + 1) {
		nl = memchr(line, '\n', (size_t)(text + n - line));
		if (!nl)
			nl = text + n;
		if (nl == line)
			continue;
		json_t *rec;
		ck_assert_int_eq(tf_json_parse(line, (size_t)(nl - line), "record", &rec), TF_OK);
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
	free(text);
	fprintf(stderr, "dsml goldens: %zu/%zu replies equal (%zu with calls, %zu stream feeds)\n", records - bad,
		records, with_calls, feeds);
	ck_assert_uint_ge(records, 200);
	ck_assert_uint_eq(bad, 0);
}
END_TEST

Suite *suite_dsml(void)
{
	Suite *s = suite_create("dsml");
	TCase *tc = tcase_create("read");
	tcase_add_test(tc, dsml_goldens);
	suite_add_tcase(s, tc);
	return s;
}
