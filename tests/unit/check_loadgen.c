/* check_loadgen.c: unit tests of the load generator's quick event reader
 * (tf_loadgen_scan) against jansson: the same token text and the same
 * verdict on every frame it takes, and a refusal (nothing taken) on every
 * frame that needs the full parser. */
#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "serve/loadgen.h"

/* What the full parser reads from a frame: delta content, then delta
 * reasoning_content, then text; a token when any is non-empty. */
static bool reference(const char *d, struct tf_buf *text, bool *token)
{
	json_error_t e;
	json_t *v = json_loads(d, 0, &e);
	if (!v)
		return false;
	const json_t *ch = json_array_get(json_object_get(v, "choices"), 0);
	const json_t *delta = json_object_get(ch, "delta");
	const char *keys[] = {"content", "reasoning_content"};
	*token = false;
	for (int k = 0; k < 2; k++) {
		const json_t *s = json_object_get(delta, keys[k]);
		if (json_is_string(s) && json_string_length(s)) {
			*token = true;
			tf_buf_append(text, json_string_value(s), json_string_length(s));
		}
	}
	const json_t *t = json_object_get(ch, "text");
	if (json_is_string(t) && json_string_length(t)) {
		*token = true;
		tf_buf_append(text, json_string_value(t), json_string_length(t));
	}
	json_decref(v);
	return true;
}

#define HEAD "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":17,\"model\":\"m\","

START_TEST(scan_takes_what_jansson_reads)
{
	static const char *const frames[] = {
		HEAD "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"P\"},\"finish_reason\":null}]}",
		HEAD "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"},\"finish_reason\":null}]}",
		HEAD "\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"hm\",\"reasoning\":\"hm\"},"
		     "\"finish_reason\":null}]}",
		HEAD "\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}],"
		     "\"tx\":{\"prompt\":3,\"x\":[1,2.5e3,-0.1,true,false,null,{\"a\":[]}]}}",
		HEAD "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"},\"finish_reason\":null}]}",
		"{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" ok\","
		"\"finish_reason\":null}]}",
		HEAD "\"choices\":[]}",
		HEAD "\"choices\":[{\"delta\":{\"content\":\"a\\\"b\\\\c\\/d\\n\\t\\r\\b\\f\"}},{\"delta\":{}}]}",
		HEAD "\"choices\":[{\"delta\":{\"content\":\"\\u00e9\\u4e2d\\ud83d\\ude00 \xc3\xa9\"}}]}",
		" { \"choices\" : [ { \"delta\" : { \"content\" : \"spaced\" } } ] } ",
	};
	for (size_t i = 0; i < sizeof(frames) / sizeof(*frames); i++) {
		struct tf_buf a = TF_BUF_INIT, b = TF_BUF_INIT;
		bool ta = true, tb = false;
		tf_buf_puts(&a, "kept:");
		tf_buf_puts(&b, "kept:");
		ck_assert_msg(tf_loadgen_scan(frames[i], strlen(frames[i]), &a, &ta), "frame %zu refused", i);
		ck_assert(reference(frames[i], &b, &tb));
		ck_assert_msg(ta == tb, "frame %zu: token %d, jansson %d", i, ta, tb);
		ck_assert_uint_eq(a.len, b.len);
		ck_assert_msg(!memcmp(a.data, b.data, a.len), "frame %zu: '%s' against '%s'", i, a.data, b.data);
		tf_buf_release(&a);
		tf_buf_release(&b);
	}
}
END_TEST

START_TEST(scan_refuses_what_needs_the_full_parser)
{
	static const char *const frames[] = {
		HEAD "\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}",
		/* the tf block's draft counts */
		HEAD "\"choices\":[{\"delta\":{}}],\"tf\":{\"drafted\":3,\"accepted\":1}}",
		"{\"error\":{\"message\":\"server restarting\",\"type\":\"server_error\"}}",
		HEAD "\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0}]}}]}",
		HEAD "\"choices\":[{\"delta\":{\"content\":\"a\",\"reasoning_content\":\"b\"}}]}",
		HEAD "\"choices\":[{\"delta\":{\"content\":\"\\ud83d\"}}]}",
		HEAD "\"choices\":[{\"delta\":{\"content\":\"\\u0000\"}}]}",
		HEAD "\"choices\":[{\"delta\":{\"content\":\"\\x\"}}]}",
		HEAD "\"choices\":[{\"delta\":{\"content\":\"bad \xc3\"}}]}",
		HEAD "\"choices\":[{\"delta\":{\"content\":\"ctl \x01\"}}]}",
		HEAD "\"choices\":[{\"delta\":{\"content\":\"cut",
		HEAD "\"choices\":[{\"delta\":{\"content\":\"x\"}}]} trailing",
		HEAD "\"choices\":[{\"delta\":{\"content\":\"x\"}}],\"n\":tru}",
		"[1,2]",
		"",
	};
	for (size_t i = 0; i < sizeof(frames) / sizeof(*frames); i++) {
		struct tf_buf a = TF_BUF_INIT;
		bool t = true;
		tf_buf_puts(&a, "kept");
		ck_assert_msg(!tf_loadgen_scan(frames[i], strlen(frames[i]), &a, &t), "frame %zu taken", i);
		ck_assert(!t);
		ck_assert_str_eq(a.data, "kept");
		tf_buf_release(&a);
	}
}
END_TEST

Suite *suite_loadgen(void)
{
	Suite *s = suite_create("loadgen");
	TCase *tc = tcase_create("scan");
	tcase_add_test(tc, scan_takes_what_jansson_reads);
	tcase_add_test(tc, scan_refuses_what_needs_the_full_parser);
	suite_add_tcase(s, tc);
	return s;
}
