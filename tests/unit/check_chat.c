/* check_chat.c: the DeepSeek-V4.1 chat encoding: every record of the
 * reference's template goldens (tests/data/dsv41/template.jsonl), the
 * worked example of dsv41-text-facts.md §2, and one test per rule. */
#include <check.h>

#include "fixtures.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "base/json.h"
#include "text/chat.h"
#include "text/pyjson.h"

#define DSML "｜DSML｜"

/* Render a request given as JSON text with the built-in defaults. */
static tf_status render(const char *req_text, struct tf_chat_prompt *p)
{
	json_t *req;
	ck_assert_int_eq(tf_json_parse(req_text, strlen(req_text), "request", &req), TF_OK);
	tf_chat_prompt_init(p);
	tf_status st = tf_chat_render_request(req, NULL, p);
	json_decref(req);
	return st;
}

static void expect_text(const char *req_text, const char *want)
{
	struct tf_chat_prompt p;
	tf_status st = render(req_text, &p);
	ck_assert_msg(st == TF_OK, "refused: %s", tf_errmsg(st));
	ck_assert_str_eq(p.text.data, want);
	tf_chat_prompt_release(&p);
}

static void expect_error(const char *req_text, const char *want)
{
	struct tf_chat_prompt p;
	tf_status st = render(req_text, &p);
	ck_assert_int_eq(st, TF_ERR_FORMAT);
	ck_assert_str_eq(tf_errmsg(st), want);
	ck_assert_uint_eq(p.text.len, 0);
	tf_chat_prompt_release(&p);
}

/* Each golden record as a request: its own fields are request-level
 * extensions (thinking, budget, drop_thinking, generation, image_text,
 * response_format as the schema); a record with effort_field sends that as
 * reasoning_effort over default_thinking and must resolve to the record's
 * thinking and budget. */
START_TEST(template_goldens)
{
	struct jsonl j;
	jsonl_open(&j, "dsv41/template.jsonl");
	size_t records = 0, refusals = 0, efforts = 0, bad = 0;
	for (json_t *rec; (rec = jsonl_next(&j));) {
		records++;
		json_t *req = json_deep_copy(rec);
		json_object_del(req, "expected");
		json_object_del(req, "error");
		json_object_del(req, "jinja");
		struct tf_chat_settings defaults;
		tf_chat_settings_init(&defaults);
		const json_t *field = json_object_get(rec, "effort_field");
		if (field) {
			json_object_del(req, "thinking");
			json_object_del(req, "budget");
			json_object_del(req, "default_thinking");
			json_object_del(req, "effort_field");
			json_object_set(req, "reasoning_effort", (json_t *)field);
			defaults.thinking = json_is_true(json_object_get(rec, "default_thinking"));
			efforts++;
		}
		struct tf_chat_prompt p;
		tf_chat_prompt_init(&p);
		tf_status st = tf_chat_render_request(req, &defaults, &p);
		const json_t *want = json_object_get(rec, "expected");
		const json_t *err = json_object_get(rec, "error");
		bool ok;
		if (json_is_string(want)) {
			ok = !st && p.text.len == json_string_length(want) &&
			     !memcmp(p.text.data, json_string_value(want), p.text.len);
			if (field)
				ok = ok && p.thinking == json_is_true(json_object_get(rec, "thinking"));
			const json_t *jinja = json_object_get(rec, "jinja");
			if (json_is_string(jinja))
				ok = ok && json_equal((json_t *)jinja, (json_t *)want);
		} else {
			refusals++;
			const char *e = json_string_value(err);
			const char *prefix = "ValueError: ";
			if (e && !strncmp(e, prefix, strlen(prefix)))
				e += strlen(prefix);
			ok = st == TF_ERR_FORMAT && (!e || !strcmp(tf_errmsg(st), e));
		}
		if (!ok && bad++ < 3) {
			size_t k = 0;
			if (!st && json_is_string(want))
				while (k < p.text.len && k < json_string_length(want) &&
				       p.text.data[k] == json_string_value(want)[k])
					k++;
			fprintf(stderr, "template record %zu differs at byte %zu (%s)\n  want: %.200s\n  got:  %.200s\n",
				records - 1, k, st ? tf_errmsg(st) : "rendered",
				json_is_string(want) ? json_string_value(want) + k : json_string_value(err),
				p.text.data ? p.text.data + k : "");
		}
		tf_chat_prompt_release(&p);
		json_decref(req);
		json_decref(rec);
	}
	jsonl_close(&j);
	fprintf(stderr, "template goldens: %zu/%zu equal (%zu refusals, %zu reasoning_effort values)\n",
		records - bad, records, refusals, efforts);
	ck_assert_uint_ge(records, 200);
	ck_assert_uint_eq(bad, 0);
}
END_TEST

/* The offsets, defined as the reference finds them: history_len is where
 * the renders with and without the generation prompt part; the rewind
 * point is where the render first changes when the latest user message's
 * text is replaced by a probe. Checked on every golden conversation. */
START_TEST(offsets_by_probe)
{
	struct jsonl j;
	jsonl_open(&j, "dsv41/template.jsonl");
	size_t checked = 0, probed = 0;
	for (json_t *req; (req = jsonl_next(&j));) {
		if (!json_is_string(json_object_get(req, "expected"))) {
			json_decref(req);
			continue;
		}
		struct tf_chat_prompt with, without, probe;
		tf_chat_prompt_init(&with);
		tf_chat_prompt_init(&without);
		tf_chat_prompt_init(&probe);
		json_object_set_new(req, "generation", json_true());
		ck_assert_int_eq(tf_chat_render_request(req, NULL, &with), TF_OK);
		json_object_set_new(req, "generation", json_false());
		ck_assert_int_eq(tf_chat_render_request(req, NULL, &without), TF_OK);
		ck_assert_uint_eq(without.history_len, without.text.len);
		ck_assert_uint_eq(with.history_len, without.text.len);
		ck_assert(!memcmp(with.text.data, without.text.data, without.text.len));
		json_object_set_new(req, "generation", json_true());
		json_t *msgs = json_object_get(req, "messages");
		json_t *last = NULL;
		for (size_t i = 0; i < json_array_size(msgs); i++) {
			const char *role = json_string_value(json_object_get(json_array_get(msgs, i), "role"));
			if (role && !strcmp(role, "user"))
				last = json_array_get(msgs, i);
		}
		if (last) {
			json_object_set_new(last, "content", json_string("\x01probe"));
			ck_assert_int_eq(tf_chat_render_request(req, NULL, &probe), TF_OK);
			size_t k = 0;
			while (k < with.text.len && k < probe.text.len && with.text.data[k] == probe.text.data[k])
				k++;
			ck_assert_msg(k == with.rewind, "record %zu: the render changes at %zu, rewind %zu", checked, k,
				      with.rewind);
			ck_assert_uint_eq(probe.rewind, k);
			probed++;
		} else {
			ck_assert_uint_eq(with.rewind, with.history_len);
		}
		checked++;
		tf_chat_prompt_release(&with);
		tf_chat_prompt_release(&without);
		tf_chat_prompt_release(&probe);
		json_decref(req);
	}
	jsonl_close(&j);
	ck_assert_uint_ge(checked, 200);
	ck_assert_uint_ge(probed, 200);
}
END_TEST

/* §2's worked example, byte for byte. */
START_TEST(worked_example)
{
	const char *req =
		"{\"messages\": ["
		"{\"role\": \"system\", \"content\": \"You are helpful.\"},"
		"{\"role\": \"user\", \"content\": \"Weather in Paris?\"},"
		"{\"role\": \"assistant\", \"reasoning_content\": \"Need weather.\", \"content\": null,"
		" \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\","
		" \"arguments\": \"{\\\"city\\\":\\\"Paris\\\"}\"}}]},"
		"{\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"18C sunny\"}],"
		"\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\":"
		" \"Get weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\":"
		" \"string\"}}}}}], \"reasoning_effort\": \"high\"}";
	const char *want =
		TF_CHAT_BOS TF_CHAT_SYSTEM
		"Reasoning Effort: 75 (range 1-100, the higher the value, the more thorough the reasoning)\n\n"
		"You are helpful.\n\n"
		"## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke "
		"tools by writing a \"<" DSML " calls>\" block like the following:\n\n<" DSML " calls>\n<" DSML
		" invoke name=\"$TOOL_NAME\">\n<" DSML " parameter name=\"$PARAMETER_NAME\" string=\"true|false\">"
		"$PARAMETER_VALUE</" DSML " parameter>\n...\n</" DSML " invoke>\n<" DSML
		" invoke name=\"$TOOL_NAME2\">\n...\n</" DSML " invoke>\n</" DSML " calls>\n\n"
		"String parameters should be specified as is and set `string=\"true\"`. For all other types "
		"(numbers, booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
		"If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside "
		"<think>...</think> BEFORE any tool calls or final response.\n\n"
		"Otherwise, output directly after </think> with tool calls or final response.\n\n"
		"### Available Tool Schemas\n\n"
		"{\"name\": \"get_weather\", \"description\": \"Get weather\", \"parameters\": {\"type\": \"object\","
		" \"properties\": {\"city\": {\"type\": \"string\"}}}}\n\n"
		"You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n"
		TF_CHAT_USER "Weather in Paris?" TF_CHAT_ASSISTANT "<think>Need weather.</think>\n\n<" DSML
		" calls>\n<" DSML " invoke name=\"get_weather\">\n<" DSML " parameter name=\"city\" string=\"true\">"
		"Paris</" DSML " parameter>\n</" DSML " invoke>\n</" DSML " calls>" TF_CHAT_EOS
		TF_CHAT_USER "<tool_result>18C sunny</tool_result>" TF_CHAT_ASSISTANT "<think>";
	struct tf_chat_prompt p;
	ck_assert_int_eq(render(req, &p), TF_OK);
	ck_assert_str_eq(p.text.data, want);
	/* history: all but the suffix; rewind: the latest user message's text */
	ck_assert_uint_eq(p.history_len, p.text.len - strlen(TF_CHAT_ASSISTANT "<think>"));
	ck_assert(!strncmp(p.text.data + p.rewind, "Weather in Paris?" TF_CHAT_ASSISTANT, 17 + strlen(TF_CHAT_ASSISTANT)));
	ck_assert(p.thinking);
	tf_chat_prompt_release(&p);
}
END_TEST

/* Chat mode: no effort line, no System marker without a system message,
 * assistant turns without </think>, every suffix </think>. */
START_TEST(rule_chat_mode)
{
	expect_text("{\"thinking\": false, \"messages\": [{\"role\": \"user\", \"content\": \"a\"},"
		    "{\"role\": \"assistant\", \"content\": \"b\", \"reasoning_content\": \"r\"},"
		    "{\"role\": \"user\", \"content\": \"c\"}]}",
		    TF_CHAT_BOS TF_CHAT_USER "a" TF_CHAT_ASSISTANT "</think>b" TF_CHAT_EOS TF_CHAT_USER "c"
		    TF_CHAT_ASSISTANT "</think>");
}
END_TEST

/* Thinking: the System marker and effort line lead even without a system
 * message; reasoning before the last user turn is dropped. */
START_TEST(rule_thinking_drop)
{
	expect_text("{\"reasoning_effort\": 33, \"messages\": [{\"role\": \"user\", \"content\": \"a\"},"
		    "{\"role\": \"assistant\", \"content\": \"b\", \"reasoning_content\": \"r1\"},"
		    "{\"role\": \"user\", \"content\": \"c\"},"
		    "{\"role\": \"assistant\", \"content\": \"d\", \"reasoning\": \"r2\"}]}",
		    TF_CHAT_BOS TF_CHAT_SYSTEM "Reasoning Effort: 33 (range 1-100, the higher the value, the more "
		    "thorough the reasoning)\n\n" TF_CHAT_USER "a" TF_CHAT_ASSISTANT "</think>b" TF_CHAT_EOS
		    TF_CHAT_USER "c" TF_CHAT_ASSISTANT "<think>r2</think>d" TF_CHAT_EOS);
	/* drop_thinking false keeps it */
	expect_text("{\"drop_thinking\": false, \"budget\": 9, \"messages\": [{\"role\": \"user\", \"content\": \"a\"},"
		    "{\"role\": \"assistant\", \"content\": \"b\", \"reasoning_content\": \"r1\"},"
		    "{\"role\": \"user\", \"content\": \"c\"}]}",
		    TF_CHAT_BOS TF_CHAT_SYSTEM "Reasoning Effort: 9 (range 1-100, the higher the value, the more "
		    "thorough the reasoning)\n\n" TF_CHAT_USER "a" TF_CHAT_ASSISTANT "<think>r1</think>b" TF_CHAT_EOS
		    TF_CHAT_USER "c" TF_CHAT_ASSISTANT "<think>");
}
END_TEST

/* Tools turn drop_thinking off: past reasoning stays. */
START_TEST(rule_tools_keep_reasoning)
{
	struct tf_chat_prompt p;
	ck_assert_int_eq(render("{\"tools\": [{\"name\": \"f\"}], \"messages\": [{\"role\": \"user\", \"content\": \"a\"},"
				"{\"role\": \"assistant\", \"content\": \"b\", \"reasoning_content\": \"r1\"},"
				"{\"role\": \"user\", \"content\": \"c\"}]}", &p),
			 TF_OK);
	ck_assert_ptr_nonnull(strstr(p.text.data, TF_CHAT_ASSISTANT "<think>r1</think>b" TF_CHAT_EOS));
	/* an empty system message was inserted to carry the tools */
	ck_assert(!strncmp(p.text.data, TF_CHAT_BOS TF_CHAT_SYSTEM "Reasoning Effort: 75", 60));
	ck_assert_ptr_nonnull(strstr(p.text.data, "thorough the reasoning)\n\n\n\n## Tools\n\n"));
	ck_assert_ptr_nonnull(strstr(p.text.data, "\n\n### Available Tool Schemas\n\n{\"name\": \"f\"}\n\nYou MUST"));
	tf_chat_prompt_release(&p);
	/* tool_choice none offers nothing */
	expect_text("{\"thinking\": false, \"tool_choice\": \"none\", \"tools\": [{\"name\": \"f\"}],"
		    "\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}",
		    TF_CHAT_BOS TF_CHAT_USER "a" TF_CHAT_ASSISTANT "</think>");
}
END_TEST

/* Consecutive user and tool messages merge into one turn; results sort by
 * their call's position in the latest calling turn (unknown ids rank 0). */
START_TEST(rule_tool_results_merge_sort)
{
	expect_text("{\"thinking\": false, \"messages\": [{\"role\": \"user\", \"content\": \"q\"},"
		    "{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": ["
		    "{\"id\": \"a\", \"function\": {\"name\": \"f\", \"arguments\": {}}},"
		    "{\"id\": \"b\", \"function\": {\"name\": \"g\", \"arguments\": \"{\\\"n\\\": 1.0}\"}}]},"
		    "{\"role\": \"tool\", \"tool_call_id\": \"b\", \"content\": \"B\"},"
		    "{\"role\": \"user\", \"content\": \"u\"},"
		    "{\"role\": \"tool\", \"tool_call_id\": \"zz\", \"content\": \"Z\"},"
		    "{\"role\": \"tool\", \"tool_call_id\": \"a\", \"content\": \"A\"}]}",
		    TF_CHAT_BOS TF_CHAT_USER "q" TF_CHAT_ASSISTANT "</think>\n\n<" DSML " calls>\n<" DSML
		    " invoke name=\"f\">\n\n</" DSML " invoke>\n<" DSML " invoke name=\"g\">\n<" DSML
		    " parameter name=\"n\" string=\"false\">1.0</" DSML " parameter>\n</" DSML " invoke>\n</" DSML
		    " calls>" TF_CHAT_EOS TF_CHAT_USER "<tool_result>Z</tool_result>\n\nu\n\n<tool_result>A</tool_result>"
		    "\n\n<tool_result>B</tool_result>" TF_CHAT_ASSISTANT "</think>");
}
END_TEST

/* Arguments: a dict, a JSON string (double-encoded too), else
 * {"arguments": raw}; string values raw, others Python json.dumps. */
START_TEST(rule_arguments)
{
	const char *head = TF_CHAT_BOS TF_CHAT_USER "q" TF_CHAT_ASSISTANT "</think>\n\n<" DSML " calls>\n<" DSML
			   " invoke name=\"ns::f\">\n";
	struct tf_buf want = TF_BUF_INIT;
	tf_buf_printf(&want, "%s<" DSML " parameter name=\"s\" string=\"true\">a \"b\"</" DSML " parameter>\n<" DSML
			     " parameter name=\"o\" string=\"false\">{\"x\": [1, 2.5, \"é\\n\"], \"y\": null}</" DSML
			     " parameter>\n</" DSML " invoke>\n</" DSML " calls>" TF_CHAT_EOS, head);
	/* arguments double-encoded: a JSON string of a JSON string of the dict */
	json_t *args = json_loads("{\"s\": \"a \\\"b\\\"\", \"o\": {\"x\": [1, 2.5, \"é\\n\"], \"y\": null}}", 0, NULL);
	ck_assert_ptr_nonnull(args);
	char *once = json_dumps(args, JSON_COMPACT);
	json_t *s1 = json_string(once);
	char *twice = json_dumps(s1, JSON_ENCODE_ANY);
	json_t *req = json_pack("{s:b, s:b, s:[{s:s, s:s}, {s:s, s:[{s:{s:s, s:s, s:s}}]}]}", "thinking", 0,
				"generation", 0, "messages", "role", "user", "content", "q", "role", "assistant",
				"tool_calls", "function", "name", "f", "namespace", "ns", "arguments", twice);
	ck_assert_ptr_nonnull(req);
	struct tf_chat_prompt p;
	tf_chat_prompt_init(&p);
	ck_assert_int_eq(tf_chat_render_request(req, NULL, &p), TF_OK);
	ck_assert_str_eq(p.text.data, want.data);
	tf_chat_prompt_release(&p);
	json_decref(req);
	json_decref(s1);
	json_decref(args);
	free(once);
	free(twice);
	tf_buf_reset(&want);
	tf_buf_printf(&want, "%s<" DSML " parameter name=\"arguments\" string=\"true\">not json</" DSML
			     " parameter>\n</" DSML " invoke>\n</" DSML " calls>" TF_CHAT_EOS, head);
	expect_text("{\"thinking\": false, \"messages\": [{\"role\": \"user\", \"content\": \"q\"},"
		    "{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"name\": \"ns::f\","
		    "\"arguments\": \"not json\"}}]}]}",
		    want.data);
	tf_buf_release(&want);
}
END_TEST

/* Tool names qualify from a namespace, whose description leads. */
START_TEST(rule_tool_namespace)
{
	struct tf_chat_prompt p;
	ck_assert_int_eq(render("{\"thinking\": false, \"tools\": [{\"type\": \"function\", \"namespace\":"
				"{\"name\": \"web\", \"description\": \"Web tools.\"}, \"function\": {\"description\":"
				"\"Search.\", \"name\": \"search\", \"parameters\": {}}}],"
				"\"messages\": [{\"role\": \"user\", \"content\": \"q\"}]}", &p),
			 TF_OK);
	ck_assert_ptr_nonnull(strstr(p.text.data, "\n\n{\"description\": \"Web tools.\\nSearch.\", \"name\":"
						  " \"web::search\", \"parameters\": {}}\n\nYou MUST"));
	ck_assert(!strncmp(p.text.data, TF_CHAT_BOS TF_CHAT_SYSTEM "\n\n## Tools", 47));
	tf_chat_prompt_release(&p);
}
END_TEST

/* response_format: the schema under ## Response Format (OpenAI forms). */
START_TEST(rule_response_format)
{
	const char *tail = "\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to "
			   "reply:\n{\"type\": \"object\"}" TF_CHAT_USER "q" TF_CHAT_ASSISTANT "</think>";
	struct tf_buf want = TF_BUF_INIT;
	tf_buf_printf(&want, TF_CHAT_BOS TF_CHAT_SYSTEM "sys%s", tail);
	expect_text("{\"thinking\": false, \"response_format\": {\"type\": \"json_object\"},"
		    "\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"q\"}]}",
		    want.data);
	tf_buf_reset(&want);
	tf_buf_printf(&want, TF_CHAT_BOS TF_CHAT_SYSTEM "%s", tail);
	expect_text("{\"thinking\": false, \"response_format\": {\"type\": \"json_schema\", \"json_schema\":"
		    "{\"name\": \"x\", \"schema\": \"{\\\"type\\\":\\\"object\\\"}\"}},"
		    "\"messages\": [{\"role\": \"user\", \"content\": \"q\"}]}",
		    want.data);
	tf_buf_release(&want);
	expect_text("{\"thinking\": false, \"response_format\": {\"type\": \"text\"},"
		    "\"messages\": [{\"role\": \"user\", \"content\": \"q\"}]}",
		    TF_CHAT_BOS TF_CHAT_USER "q" TF_CHAT_ASSISTANT "</think>");
}
END_TEST

/* Later system / developer messages act as user turns. */
START_TEST(rule_later_system)
{
	expect_text("{\"messages\": [{\"role\": \"user\", \"content\": \"a\"},"
		    "{\"role\": \"assistant\", \"content\": \"b\", \"reasoning_content\": \"r\"},"
		    "{\"role\": \"developer\", \"content\": \"d\"}]}",
		    TF_CHAT_BOS TF_CHAT_SYSTEM "Reasoning Effort: 75 (range 1-100, the higher the value, the more "
		    "thorough the reasoning)\n\n" TF_CHAT_USER "a" TF_CHAT_ASSISTANT "</think>b" TF_CHAT_EOS
		    TF_CHAT_SYSTEM "d" TF_CHAT_ASSISTANT "<think>");
}
END_TEST

/* latest_reminder: its own marker; a suffix comes before it. */
START_TEST(rule_latest_reminder)
{
	expect_text("{\"thinking\": false, \"messages\": [{\"role\": \"user\", \"content\": \"a\"},"
		    "{\"role\": \"latest_reminder\", \"content\": \"today\"}]}",
		    TF_CHAT_BOS TF_CHAT_USER "a" TF_CHAT_ASSISTANT "</think>" TF_CHAT_REMINDER "today");
}
END_TEST

/* The generation suffix: none without add_generation_prompt; the history
 * length excludes it. */
START_TEST(rule_generation_suffix)
{
	struct tf_chat_prompt p;
	ck_assert_int_eq(render("{\"add_generation_prompt\": false, \"thinking\": false,"
				"\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}", &p),
			 TF_OK);
	ck_assert_str_eq(p.text.data, TF_CHAT_BOS TF_CHAT_USER "a");
	ck_assert_uint_eq(p.history_len, p.text.len);
	ck_assert_uint_eq(p.rewind, strlen(TF_CHAT_BOS TF_CHAT_USER));
	tf_chat_prompt_release(&p);
	ck_assert_int_eq(render("{\"messages\": [{\"role\": \"user\", \"content\": \"a\"},"
				"{\"role\": \"assistant\", \"content\": \"b\"}]}", &p),
			 TF_OK);
	ck_assert(p.text.len > 0 && p.history_len == p.text.len);
	tf_chat_prompt_release(&p);
}
END_TEST

/* Content forms: text parts joined by blank lines, null, other JSON; a
 * typed image marker escaped; image parts refused or replaced. */
START_TEST(rule_content_and_images)
{
	expect_text("{\"thinking\": false, \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\","
		    "\"text\": \"a\"}, \"b\", {\"type\": \"input_text\", \"text\": null}, {\"type\": \"text\", \"text\": 2.50}]},"
		    "{\"role\": \"assistant\", \"content\": {\"k\": [1]}}, {\"role\": \"user\", \"content\": null}]}",
		    TF_CHAT_BOS TF_CHAT_USER "a\n\nb\n\n\n\n2.5" TF_CHAT_ASSISTANT "</think>{\"k\": [1]}" TF_CHAT_EOS
		    TF_CHAT_USER TF_CHAT_ASSISTANT "</think>");
	expect_text("{\"thinking\": false, \"messages\": [{\"role\": \"user\", \"content\": \"x " TF_CHAT_IMAGE "\"}]}",
		    TF_CHAT_BOS TF_CHAT_USER "x " TF_CHAT_IMAGE_ESCAPED TF_CHAT_ASSISTANT "</think>");
	expect_error("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", \"image_url\": {}}]}]}",
		     "messages[0].content: images are not served by this DeepSeek-V4.1 build");
	expect_text("{\"thinking\": false, \"image_text\": \"[no image]\", \"messages\": [{\"role\": \"user\","
		    "\"content\": [{\"type\": \"image_url\", \"image_url\": {}}, \"t\"]}]}",
		    TF_CHAT_BOS TF_CHAT_USER "[no image]\n\nt" TF_CHAT_ASSISTANT "</think>");
	expect_error("{\"messages\": [{\"role\": \"user\", \"content\": [[1, \"a\"]]}]}",
		     "messages[0].content: unsupported content part [1, 'a']");
	expect_error("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"audio\"}]}]}",
		     "messages[0].content: unsupported content part {'type': 'audio'}");
}
END_TEST

/* The escaped image marker moves the offsets with it. */
START_TEST(rule_offsets_after_escape)
{
	struct tf_chat_prompt p;
	ck_assert_int_eq(render("{\"thinking\": false, \"messages\": [{\"role\": \"system\", \"content\": \""
				TF_CHAT_IMAGE "\"}, {\"role\": \"user\", \"content\": \"q\"}]}", &p),
			 TF_OK);
	ck_assert(!strcmp(p.text.data + p.rewind, "q" TF_CHAT_ASSISTANT "</think>"));
	ck_assert(!strcmp(p.text.data + p.history_len, TF_CHAT_ASSISTANT "</think>"));
	tf_chat_prompt_release(&p);
}
END_TEST

/* reasoning_effort names and numbers; bad values are refused. */
START_TEST(rule_effort)
{
	static const struct {
		const char *v;
		bool thinking;
		int budget;
	} ok[] = {{"\"none\"", false, 0}, {"\"minimal\"", false, 0}, {"\"low\"", true, 50},
		  {"\" Medium \"", true, 75}, {"\"high\"", true, 75}, {"\"XHIGH\"", true, 100},
		  {"\"max\"", true, 100}, {"1", true, 1}, {"\"100\"", true, 100}, {"\"042\"", true, 42}};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		json_t *v = json_loads(ok[i].v, JSON_DECODE_ANY, NULL);
		bool thinking = !ok[i].thinking;
		int budget = 0;
		ck_assert_int_eq(tf_chat_effort(v, &thinking, &budget), TF_OK);
		ck_assert_int_eq(thinking, ok[i].thinking);
		if (thinking)
			ck_assert_int_eq(budget, ok[i].budget);
		json_decref(v);
	}
	const char *bad[] = {"\"huge\"", "0", "101", "-5", "50.0", "\"\"", "\"+5\"", "true", "[]"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		json_t *v = json_loads(bad[i], JSON_DECODE_ANY, NULL);
		bool thinking;
		int budget;
		tf_status st = tf_chat_effort(v, &thinking, &budget);
		ck_assert_int_eq(st, TF_ERR_FORMAT);
		ck_assert_str_eq(tf_errmsg(st), "reasoning_effort must be 1-100 or low / medium / high / max");
		json_decref(v);
	}
	/* chat_template_kwargs: its effort after the top-level one, then the switches */
	expect_text("{\"reasoning_effort\": \"low\", \"chat_template_kwargs\": {\"reasoning_effort\": 90},"
		    "\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}",
		    TF_CHAT_BOS TF_CHAT_SYSTEM "Reasoning Effort: 90 (range 1-100, the higher the value, the more "
		    "thorough the reasoning)\n\n" TF_CHAT_USER "a" TF_CHAT_ASSISTANT "<think>");
	expect_text("{\"reasoning_effort\": \"max\", \"chat_template_kwargs\": {\"enable_thinking\": false},"
		    "\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}",
		    TF_CHAT_BOS TF_CHAT_USER "a" TF_CHAT_ASSISTANT "</think>");
	/* Anthropic's thinking object */
	expect_text("{\"thinking\": {\"type\": \"disabled\"}, \"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}",
		    TF_CHAT_BOS TF_CHAT_USER "a" TF_CHAT_ASSISTANT "</think>");
	expect_error("{\"thinking\": {\"type\": \"maybe\"}, \"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}",
		     "thinking.type must be enabled, adaptive or disabled");
	expect_error("{\"chat_template_kwargs\": [], \"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}",
		     "chat_template_kwargs must be a JSON object or null");
	expect_error("{\"reasoning_effort\": \"huge\", \"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}",
		     "reasoning_effort must be 1-100 or low / medium / high / max");
}
END_TEST

/* Malformed requests are refused with the reason, never rendered. */
START_TEST(rule_refusals)
{
	expect_error("{\"messages\": []}", "messages must be a non-empty list");
	expect_error("{\"messages\": [{\"content\": \"a\"}]}", "messages[0]: an object with a role");
	expect_error("{\"messages\": [{\"role\": \"robot\", \"content\": \"a\"}]}", "messages[0]: unknown role robot");
	expect_error("{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": \"x\"}]}",
		     "messages[0].tool_calls must be a list");
	expect_error("{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [1]}]}",
		     "tool_calls entries must be objects");
	expect_error("{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {}}]}]}",
		     "a tool call has no name");
	expect_error("{\"tools\": [{\"function\": {\"description\": \"x\"}}], \"messages\": [{\"role\": \"user\"}]}",
		     "a tool has no name");
	expect_error("{\"tools\": [1], \"messages\": [{\"role\": \"user\"}]}", "tools must be a list of objects");
	expect_error("{\"budget\": 0, \"messages\": [{\"role\": \"user\"}]}",
		     "reasoning_effort must be 1-100 or low / medium / high / max");
	expect_error("{\"budget\": \"none\", \"messages\": [{\"role\": \"user\"}]}",
		     "reasoning_effort must be 1-100 or low / medium / high / max");
}
END_TEST

/* Python's float repr and json.dumps spacing. */
START_TEST(pyjson_dumps)
{
	static const struct {
		const char *in, *out;
	} cases[] = {{"1.0", "1.0"}, {"0.1", "0.1"}, {"1e-4", "0.0001"}, {"1e-5", "1e-05"}, {"1e16", "1e+16"},
		     {"1e15", "1000000000000000.0"}, {"-0.0", "-0.0"}, {"123.456e3", "123456.0"},
		     {"1.7976931348623157e308", "1.7976931348623157e+308"}, {"5e-324", "5e-324"},
		     {"{\"a\": [1, {\"b\": null}], \"c\": \"\\u0001\\t/é\"}",
		      "{\"a\": [1, {\"b\": null}], \"c\": \"\\u0001\\t/é\"}"}};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		json_t *v = tf_pyjson_loads(cases[i].in, strlen(cases[i].in));
		ck_assert_ptr_nonnull(v);
		struct tf_buf b = TF_BUF_INIT;
		ck_assert_int_eq(tf_pyjson_dump(&b, v, false), TF_OK);
		ck_assert_str_eq(b.data, cases[i].out);
		tf_buf_release(&b);
		json_decref(v);
	}
	json_t *v = tf_pyjson_loads("{\"a\": [1, 2], \"b\": \"x\"}", 23);
	struct tf_buf b = TF_BUF_INIT;
	tf_pyjson_dump(&b, v, true);
	ck_assert_str_eq(b.data, "{\"a\":[1,2],\"b\":\"x\"}");
	tf_buf_release(&b);
	json_decref(v);
}
END_TEST

Suite *suite_chat(void)
{
	Suite *s = suite_create("chat");
	TCase *tc = tcase_create("render");
	tcase_add_test(tc, template_goldens);
	tcase_add_test(tc, offsets_by_probe);
	tcase_add_test(tc, worked_example);
	tcase_add_test(tc, rule_chat_mode);
	tcase_add_test(tc, rule_thinking_drop);
	tcase_add_test(tc, rule_tools_keep_reasoning);
	tcase_add_test(tc, rule_tool_results_merge_sort);
	tcase_add_test(tc, rule_arguments);
	tcase_add_test(tc, rule_tool_namespace);
	tcase_add_test(tc, rule_response_format);
	tcase_add_test(tc, rule_later_system);
	tcase_add_test(tc, rule_latest_reminder);
	tcase_add_test(tc, rule_generation_suffix);
	tcase_add_test(tc, rule_content_and_images);
	tcase_add_test(tc, rule_offsets_after_escape);
	tcase_add_test(tc, rule_effort);
	tcase_add_test(tc, rule_refusals);
	tcase_add_test(tc, pyjson_dumps);
	suite_add_tcase(s, tc);
	return s;
}
