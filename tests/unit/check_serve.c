/* check_serve.c: unit tests of libcore/serve without HTTP: request
 * validation and normalisation, the </think> reader over every split,
 * UTF-8 repair and JSON quoting against jansson, the reasoning memory, the
 * Responses store (bounds, copies, threads), and whole generations over the stub engine (stop strings, SSE shapes). */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "engine/engine.h"
#include "engine/planner.h"
#include "engine/stub.h"
#include "serve/family.h"
#include "serve/gen.h"
#include "serve/logprobs.h"
#include "serve/request.h"
#include "serve/rstore.h"

static tf_status parse(enum tf_api api, const char *body, struct tf_req *r)
{
	return tf_req_parse(api, body, strlen(body), 258, r);
}

START_TEST(request_refusals)
{
	static const struct {
		enum tf_api api;
		const char *body, *msg, *param;
	} cases[] = {
		{TF_API_CHAT, "[1]", "the request body must be a JSON object", NULL},
		{TF_API_CHAT, "{\"messages\": [", "the request body is not valid JSON", NULL},
		{TF_API_CHAT, "{\"messages\": []}", "messages must be a non-empty list", NULL},
		{TF_API_CHAT, "{\"messages\": [{}]}", "messages[0] must be an object with a string role", NULL},
		{TF_API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"temperature\":\"hot\"}",
		 "temperature must be a finite number or null", NULL},
		{TF_API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"max_tokens\":1.5}",
		 "max_tokens must be an integer or null", NULL},
		{TF_API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"max_tokens\":0}",
		 "max_tokens must be between 1 and", NULL},
		{TF_API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"chat_template_kwargs\":[]}",
		 "chat_template_kwargs must be a JSON object or null", NULL},
		{TF_API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"n\":2}", "n must be 1", NULL},
		{TF_API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"stop\":[1]}", "stop must be a string", NULL},
		{TF_API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"top_p\":0}", "top_p must be in (0, 1]", NULL},
		{TF_API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"stream\":1}", "stream must be true", NULL},
		{TF_API_COMPLETIONS, "{\"prompt\":[1,258]}", "token id 258 is outside the vocabulary (0 to 257)",
		 "prompt"},
		{TF_API_COMPLETIONS, "{\"prompt\":5}", "prompt must be a string or a non-empty list", NULL},
		{TF_API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"logprobs\":1}",
		 "logprobs must be true, false or null", NULL},
		{TF_API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"logprobs\":true,\"top_logprobs\":21}",
		 "top_logprobs must be between 0 and 20", NULL},
		{TF_API_CHAT, "{\"messages\":[{\"role\":\"user\"}],\"top_logprobs\":2}",
		 "top_logprobs needs logprobs set to true", NULL},
		{TF_API_COMPLETIONS, "{\"prompt\":\"x\",\"logprobs\":-1}", "logprobs must be between 0 and 20",
		 NULL},
		{TF_API_COMPLETIONS, "{\"prompt\":\"x\",\"logprobs\":true}",
		 "logprobs must be an integer or null", NULL},
		{TF_API_MESSAGES, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
		 "max_tokens: Field required", NULL},
		{TF_API_MESSAGES, "{\"max_tokens\":5,\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}",
		 "messages[0].role must be \"user\" or \"assistant\"", NULL},
		{TF_API_MESSAGES,
		 "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"document\"}]}]}",
		 "content type 'document' is not served here", NULL},
		{TF_API_MESSAGES,
		 "{\"max_tokens\":5,\"thinking\":{\"type\":\"on\"},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
		 "thinking must be", NULL},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct tf_req r;
		tf_status st = parse(cases[i].api, cases[i].body, &r);
		ck_assert_msg(st == TF_ERR_FORMAT, "case %zu accepted", i);
		ck_assert_msg(strstr(tf_errmsg(st), cases[i].msg), "case %zu: '%s'", i, tf_errmsg(st));
		if (cases[i].param)
			ck_assert_str_eq(r.param, cases[i].param);
		else
			ck_assert_ptr_null(r.param);
		tf_req_release(&r);
	}
}
END_TEST

START_TEST(request_normalised)
{
	struct tf_req r;
	ck_assert_int_eq(parse(TF_API_CHAT,
			       "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_completion_tokens\":7,"
			       "\"stop\":\"END\",\"seed\":-1,\"priority\":\"background\",\"stream\":true,"
			       "\"stream_options\":{\"include_usage\":true},\"temperature\":0,"
			       "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}", &r), TF_OK);
	ck_assert_int_eq(r.max_tokens, 7);
	ck_assert_uint_eq(r.nstop, 1);
	ck_assert_str_eq(r.stop[0], "END");
	ck_assert_uint_eq(r.seed, UINT64_MAX);
	ck_assert(r.background && r.stream && r.include_usage && r.has_temperature);
	ck_assert_ptr_nonnull(r.tools);
	tf_req_release(&r);
	/* Anthropic: system, thinking, tool_use and tool_result to the OpenAI shape. */
	ck_assert_int_eq(parse(TF_API_MESSAGES,
			       "{\"max_tokens\":9,\"system\":\"S\",\"stop_sequences\":[\"Q\"],"
			       "\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}],"
			       "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},"
			       "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"T\"},"
			       "{\"type\":\"text\",\"text\":\"A\"},{\"type\":\"tool_use\",\"id\":\"u1\",\"name\":\"f\","
			       "\"input\":{\"x\":1}}]},{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\","
			       "\"tool_use_id\":\"u1\",\"content\":\"R\"}]}]}", &r), TF_OK);
	char *s = json_dumps(r.chat, JSON_COMPACT | JSON_SORT_KEYS);
	ck_assert_str_eq(s,
		"{\"messages\":[{\"content\":\"S\",\"role\":\"system\"},{\"content\":\"hi\",\"role\":\"user\"},"
		"{\"content\":[{\"text\":\"A\",\"type\":\"text\"}],\"reasoning_content\":\"T\",\"role\":\"assistant\","
		"\"tool_calls\":[{\"function\":{\"arguments\":\"{\\\"x\\\":1}\",\"name\":\"f\"},\"id\":\"u1\","
		"\"type\":\"function\"}]},{\"content\":\"R\",\"role\":\"tool\",\"tool_call_id\":\"u1\"}],"
		"\"thinking\":false,\"tools\":[{\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}},"
		"\"type\":\"function\"}]}");
	free(s);
	ck_assert_int_eq(r.max_tokens, 9);
	ck_assert_str_eq(r.stop[0], "Q");
	ck_assert_ptr_nonnull(r.tools);
	tf_req_release(&r);
}
END_TEST

struct collect {
	struct tf_buf r, c;
};

static tf_status collect_fn(void *ctx, const struct tf_delta *d)
{
	struct collect *k = ctx;
	return tf_buf_append(d->kind == TF_DELTA_REASONING ? &k->r : &k->c, d->text, d->len);
}

START_TEST(think_reader_any_split)
{
	const char *text = "I think </thin and more</think>the answer </think> stays";
	size_t n = strlen(text);
	for (size_t a = 0; a <= n; a++)
		for (size_t b = a; b <= n; b += 3) {
			struct tf_reader *rd;
			struct collect k = {TF_BUF_INIT, TF_BUF_INIT};
			ck_assert_int_eq(tf_reader_think_new(true, &rd), TF_OK);
			tf_reader_think_feed(rd, text, a, false, collect_fn, &k);
			tf_reader_think_feed(rd, text + a, b - a, false, collect_fn, &k);
			tf_reader_think_feed(rd, text + b, n - b, true, collect_fn, &k);
			ck_assert_str_eq(k.r.data, "I think </thin and more");
			ck_assert_str_eq(k.c.data, "the answer </think> stays");
			tf_reader_think_free(rd);
			tf_buf_release(&k.r);
			tf_buf_release(&k.c);
		}
}
END_TEST

START_TEST(utf8_and_quote_match_jansson)
{
	static const char *const in[] = {
		"plain", "\xe6\x9d\xb1\xe4\xba\xac", "bad \xff byte", "cut \xe6\x9d", "\xed\xa0\x80 surrogate",
		"\xc0\xaf overlong", "ctl \x01\x1f \"q\" \\ \n\t\r\b\f", "\xf4\x90\x80\x80 too high",
	};
	for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
		struct tf_buf fixed = TF_BUF_INIT, q = TF_BUF_INIT;
		tf_utf8_fix(in[i], strlen(in[i]), &fixed);
		json_t *s = json_stringn(fixed.data, fixed.len);
		ck_assert_msg(s != NULL, "case %zu is still invalid UTF-8", i);
		char *want = json_dumps(s, JSON_ENCODE_ANY);
		tf_json_quote(&q, fixed.data, fixed.len);
		ck_assert_str_eq(q.data, want);
		free(want);
		json_decref(s);
		tf_buf_release(&fixed);
		tf_buf_release(&q);
	}
	ck_assert_uint_eq(tf_utf8_complete("ab\xe6\x9d", 4), 2);
	ck_assert_uint_eq(tf_utf8_complete("ab\xe6\x9d\xb1", 5), 5);
	ck_assert_uint_eq(tf_utf8_complete("a\xf0\x9f\x98", 4), 1);
	ck_assert_uint_eq(tf_utf8_complete("a\xff", 2), 2);
}
END_TEST


/* The OpenAI log-probability shapes, byte for byte, over the plain family
 * (ids 0-255 are bytes): a byte cut from its character shows as U+FFFD with
 * its exact bytes, alternatives of a completion that share a text keep the
 * first, text_offset counts characters and goes on across flushes. */
START_TEST(logprob_shapes)
{
	struct tf_family f;
	ck_assert_int_eq(tf_family_plain(&f), TF_OK);
	struct tf_engine_logprob h = {.logprob = -0.5f, .ntop = 3, .top_ids = {'h', 'i', 195},
				      .top_lp = {-0.5f, -1.25f, -3.0f}};
	struct tf_engine_logprob c3 = {.logprob = -2.0f, .ntop = 3, .top_ids = {195, 196, 'a'},
				       .top_lp = {-0.25f, -0.75f, -1.0f}};
	struct tf_buf out = TF_BUF_INIT;
	struct tf_lpout o;
	tf_lpout_init(&o, true, &f, 2);
	tf_lpout_add(&o, 'h', &h);
	tf_lpout_add(&o, 195, &c3);
	tf_lpout_flush(&o, &out);
	ck_assert_str_eq(out.data,
			 "{\"content\":[{\"token\":\"h\",\"logprob\":-0.5,\"bytes\":[104],\"top_logprobs\":["
			 "{\"token\":\"h\",\"logprob\":-0.5,\"bytes\":[104]},"
			 "{\"token\":\"i\",\"logprob\":-1.25,\"bytes\":[105]}]},"
			 "{\"token\":\"\xef\xbf\xbd\",\"logprob\":-2,\"bytes\":[195],\"top_logprobs\":["
			 "{\"token\":\"\xef\xbf\xbd\",\"logprob\":-0.25,\"bytes\":[195]},"
			 "{\"token\":\"\xef\xbf\xbd\",\"logprob\":-0.75,\"bytes\":[196]}]}],\"refusal\":null}");
	tf_buf_reset(&out);
	tf_lpout_flush(&o, &out); /* nothing pending */
	ck_assert_str_eq(out.data, "{\"content\":[],\"refusal\":null}");
	tf_lpout_release(&o);

	tf_lpout_init(&o, false, &f, 3);
	tf_lpout_add(&o, 195, &c3);
	tf_lpout_add(&o, 'h', &h);
	tf_buf_reset(&out);
	tf_lpout_flush(&o, &out);
	ck_assert_str_eq(out.data,
			 "{\"tokens\":[\"\xef\xbf\xbd\",\"h\"],\"token_logprobs\":[-2,-0.5],"
			 "\"top_logprobs\":[{\"\xef\xbf\xbd\":-0.25,\"a\":-1},{\"h\":-0.5,\"i\":-1.25,\"\xef\xbf\xbd\":-3}],"
			 "\"text_offset\":[0,1]}");
	struct tf_engine_logprob pi = {.logprob = -1e-9f, .ntop = 0};
	tf_lpout_add(&o, 'x', &pi);
	tf_buf_reset(&out);
	tf_lpout_flush(&o, &out);
	ck_assert_str_eq(out.data, "{\"tokens\":[\"x\"],\"token_logprobs\":[-9.99999972e-10],"
				   "\"top_logprobs\":[{}],\"text_offset\":[2]}");
	tf_lpout_release(&o);
	tf_buf_release(&out);
	tf_family_release(&f);
}
END_TEST

/* Whole generations over the stub engine with the plain family. */
static struct tf_engine *engine;
static struct tf_family fam;
static struct tf_gen_env env;

static void env_up(void)
{
	tf_family_plain(&fam);
	struct tf_stub_config sc = {.text = {NULL, fam.decode, fam.encode, fam.eos}, .zero_ok = true};
	struct tf_engine_backend be;
	struct tf_planner pl;
	ck_assert_int_eq(tf_stub_new(&sc, &be), TF_OK);
	ck_assert_int_eq(tf_planner_default(NULL, &pl), TF_OK);
	ck_assert_int_eq(tf_engine_new(&be, &pl, &engine), TF_OK);
	ck_assert_int_eq(tf_memo_new(8, &env.memo), TF_OK);
	env.engine = engine;
	env.family = &fam;
	env.model = "m";
	env.context = 4096;
	env.max_tokens = 256;
	env.temperature = 1;
	env.top_p = 1;
}

static void env_down(void)
{
	tf_engine_close(engine);
	tf_memo_free(env.memo);
	tf_family_release(&fam);
}

/* Run one request to its end; returns the stream bytes or the reply body. */
static char *run_gen(enum tf_api api, const char *body, int *status)
{
	struct tf_req r;
	struct tf_reply rep = {0};
	struct tf_gen *g;
	ck_assert_int_eq(tf_req_parse(api, body, strlen(body), fam.vocab, &r), TF_OK);
	if (tf_gen_start(&env, &r, &g, &rep)) {
		*status = rep.status;
		char *s = tf_buf_detach(&rep.body, NULL);
		tf_reply_release(&rep);
		return s;
	}
	struct tf_buf out = TF_BUF_INIT;
	bool done = false;
	while (!done)
		ck_assert_int_eq(tf_gen_pump(g, 100, &out, &done), TF_OK);
	if (!tf_gen_streaming(g)) {
		tf_gen_reply(g, &rep);
		*status = rep.status;
		tf_buf_release(&out);
		char *s = tf_buf_detach(&rep.body, NULL);
		tf_reply_release(&rep);
		tf_gen_free(g);
		return s;
	}
	*status = 200;
	tf_gen_free(g);
	return tf_buf_detach(&out, NULL);
}

static size_t restored(const char *content)
{
	char text[512];
	snprintf(text, sizeof(text), "{\"messages\":[{\"role\":\"assistant\",\"content\":\"%s\"},"
		 "{\"role\":\"assistant\",\"content\":\"x\",\"reasoning_content\":\"kept\"}]}", content);
	json_error_t e;
	json_t *chat = json_loads(text, 0, &e);
	size_t n = tf_memo_restore(env.memo, chat);
	json_decref(chat);
	return n;
}

START_TEST(memo_restores_and_bounds)
{
	env_up();
	tf_memo_free(env.memo);
	ck_assert_int_eq(tf_memo_new(2, &env.memo), TF_OK);
	int status;
	static const char *const asks[] = {"@short", "@think", "@plain"};
	for (int i = 0; i < 3; i++) {
		char body[128];
		snprintf(body, sizeof(body), "{\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]}", asks[i]);
		free(run_gen(TF_API_CHAT, body, &status));
		ck_assert_int_eq(status, 200);
	}
	ck_assert_uint_eq(restored("Short reply."), 0); /* the oldest went first */
	ck_assert_uint_eq(restored("Hello there!"), 1);
	ck_assert_uint_eq(restored("Plain answer."), 1);
	ck_assert_uint_eq(restored("never said"), 0);
	env_down();
}
END_TEST

static bool stored(struct tf_rstore *st, const char *id)
{
	json_t *v = NULL;
	tf_status rc = tf_rstore_get(st, id, &v, NULL);
	json_decref(v);
	return rc == TF_OK;
}

START_TEST(rstore_bounds_and_copies)
{
	struct tf_rstore *st;
	ck_assert_int_eq(tf_rstore_new(2, 1 << 20, &st), TF_OK);
	json_t *resp = json_pack("{s:s}", "id", "r"), *items = json_pack("[{s:s}]", "type", "message");
	ck_assert_int_eq(tf_rstore_put(st, "a", resp, items), TF_OK);
	ck_assert_int_eq(tf_rstore_put(st, "b", resp, items), TF_OK);
	ck_assert_int_eq(tf_rstore_put(st, "c", resp, items), TF_OK);
	ck_assert(!stored(st, "a")); /* the oldest went first */
	ck_assert(stored(st, "b") && stored(st, "c"));
	json_t *r2, *i2;
	ck_assert_int_eq(tf_rstore_get(st, "c", &r2, &i2), TF_OK);
	ck_assert(json_equal(r2, resp) && json_equal(i2, items) && r2 != resp);
	json_decref(r2);
	json_decref(i2);
	ck_assert_int_eq(tf_rstore_get(st, "a", &r2, NULL), TF_ERR_NOTFOUND);
	ck_assert(tf_rstore_del(st, "b"));
	ck_assert(!tf_rstore_del(st, "b"));
	size_t n, bytes;
	tf_rstore_usage(st, &n, &bytes);
	ck_assert_uint_eq(n, 1);
	ck_assert_uint_eq(bytes, strlen("c") + strlen("{\"id\":\"r\"}") + strlen("[{\"type\":\"message\"}]"));
	tf_rstore_free(st);
	/* the byte bound: each entry is 1 + 10 + 20 = 31 bytes; 70 hold two */
	ck_assert_int_eq(tf_rstore_new(100, 70, &st), TF_OK);
	ck_assert_int_eq(tf_rstore_put(st, "a", resp, items), TF_OK);
	ck_assert_int_eq(tf_rstore_put(st, "b", resp, items), TF_OK);
	ck_assert_int_eq(tf_rstore_put(st, "a", resp, items), TF_OK); /* replaced: now the newest */
	ck_assert_int_eq(tf_rstore_put(st, "c", resp, items), TF_OK);
	ck_assert(!stored(st, "b") && stored(st, "a") && stored(st, "c"));
	json_t *big = json_pack("{s:s}", "text", "0123456789012345678901234567890123456789012345678901234567890");
	ck_assert_int_eq(tf_rstore_put(st, "d", big, items), TF_ERR_RANGE);
	ck_assert(stored(st, "a") && stored(st, "c")); /* a refused entry evicts nothing */
	json_decref(big);
	tf_rstore_free(st);
	tf_rstore_free(NULL);
	json_decref(resp);
	json_decref(items);
}
END_TEST

static void *rstore_hammer(void *arg)
{
	struct tf_rstore *st = arg;
	json_t *resp = json_pack("{s:s}", "id", "r"), *items = json_array();
	char id[32];
	for (int i = 0; i < 2000; i++) {
		snprintf(id, sizeof(id), "k%d", i % 37);
		if (i % 3 == 0)
			tf_rstore_put(st, id, resp, items);
		else if (i % 3 == 1)
			stored(st, id);
		else
			tf_rstore_del(st, id);
	}
	json_decref(resp);
	json_decref(items);
	return NULL;
}

START_TEST(rstore_threads)
{
	struct tf_rstore *st;
	ck_assert_int_eq(tf_rstore_new(8, 1 << 20, &st), TF_OK);
	pthread_t t[4];
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, rstore_hammer, st), 0);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	size_t n, bytes;
	tf_rstore_usage(st, &n, &bytes);
	ck_assert_uint_le(n, 8);
	tf_rstore_free(st);
}
END_TEST

START_TEST(request_prior_goes_first)
{
	struct tf_req r;
	ck_assert_int_eq(parse(TF_API_RESPONSES, "{\"input\": \"now\", \"instructions\": \"Be brief.\", "
			       "\"previous_response_id\": \"resp_1\"}", &r), TF_OK);
	ck_assert_str_eq(r.prev_id, "resp_1");
	ck_assert(r.store && !r.has_store);
	json_t *prior = json_loads("[{\"type\":\"message\",\"role\":\"user\",\"content\":\"then\"},"
				   "{\"type\":\"message\",\"role\":\"assistant\",\"content\":"
				   "[{\"type\":\"output_text\",\"text\":\"ok\"}]}]", 0, NULL);
	ck_assert_int_eq(tf_req_prior(&r, prior), TF_OK);
	const json_t *m = json_object_get(r.chat, "messages");
	ck_assert_uint_eq(json_array_size(m), 4);
	static const char *const roles[] = {"system", "user", "assistant", "user"};
	for (size_t i = 0; i < 4; i++)
		ck_assert_str_eq(json_string_value(json_object_get(json_array_get(m, i), "role")), roles[i]);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(m, 3), "content")), "now");
	json_decref(prior);
	tf_req_release(&r);
	ck_assert_int_eq(parse(TF_API_RESPONSES, "{\"input\": \"x\", \"store\": false}", &r), TF_OK);
	ck_assert(!r.store && r.has_store);
	tf_req_release(&r);
	ck_assert_int_ne(parse(TF_API_RESPONSES, "{\"input\": \"x\", \"store\": 1}", &r), TF_OK);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(TF_ERR_FORMAT), "store"));
}
END_TEST

START_TEST(gen_stop_strings_any_position)
{
	env_up();
	int status;
	/* The stub writes "ok</think>abc END def": every stop string cuts at its start. */
	static const struct {
		const char *stop, *content;
	} cases[] = {{"END", "abc "}, {"c E", "ab"}, {"abc", ""}, {"def", "abc END "}, {"zzz", "abc END def"},
		     {"</think>", ""}};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char body[256];
		snprintf(body, sizeof(body),
			 "{\"messages\":[{\"role\":\"user\",\"content\":\"@stop\"}],\"stop\":[\"%s\"]}",
			 cases[i].stop);
		char *s = run_gen(TF_API_CHAT, body, &status);
		ck_assert_int_eq(status, 200);
		json_error_t e;
		json_t *v = json_loads(s, 0, &e);
		const json_t *m = json_object_get(json_array_get(json_object_get(v, "choices"), 0), "message");
		const char *c = json_string_value(json_object_get(m, "content"));
		ck_assert_str_eq(c ? c : "", cases[i].content);
		json_decref(v);
		free(s);
	}
	env_down();
}
END_TEST

START_TEST(gen_stream_shapes)
{
	env_up();
	int status;
	char *s = run_gen(TF_API_CHAT,
			  "{\"messages\":[{\"role\":\"user\",\"content\":\"@think\"}],\"stream\":true,"
			  "\"stream_options\":{\"include_usage\":true}}", &status);
	/* Every frame is "data: JSON\n\n", the last [DONE]; contents add up. */
	struct tf_buf content = TF_BUF_INIT, reasoning = TF_BUF_INIT;
	int frames = 0, usage = 0;
	for (char *p = s; *p;) {
		ck_assert(!strncmp(p, "data: ", 6));
		char *end = strstr(p, "\n\n");
		ck_assert_ptr_nonnull(end);
		*end = 0;
		frames++;
		if (strcmp(p + 6, "[DONE]")) {
			json_error_t e;
			json_t *v = json_loads(p + 6, 0, &e);
			ck_assert_msg(v != NULL, "frame %d: %s", frames, e.text);
			const json_t *d = json_object_get(json_array_get(json_object_get(v, "choices"), 0), "delta");
			const char *c = json_string_value(json_object_get(d, "content"));
			const char *r = json_string_value(json_object_get(d, "reasoning_content"));
			if (c)
				tf_buf_puts(&content, c);
			if (r)
				tf_buf_puts(&reasoning, r);
			usage += json_object_get(v, "usage") != NULL;
			json_decref(v);
		} else {
			ck_assert_str_eq(end + 2, "");
		}
		p = end + 2;
	}
	ck_assert_str_eq(content.data, "Hello there!");
	ck_assert_str_eq(reasoning.data, "Let me think about the greeting.");
	ck_assert_int_eq(usage, 1);
	tf_buf_release(&content);
	tf_buf_release(&reasoning);
	free(s);
	/* The context check. */
	s = run_gen(TF_API_COMPLETIONS, "{\"prompt\":\"hello\",\"max_tokens\":4092}", &status);
	ck_assert_int_eq(status, 400);
	ck_assert_ptr_nonnull(strstr(s, "\"code\":\"context_length_exceeded\""));
	ck_assert_ptr_nonnull(strstr(s, "you requested 4097 tokens (5 in the prompt, 4092 in the completion)"));
	free(s);
	env_down();
}
END_TEST

Suite *suite_serve(void)
{
	Suite *s = suite_create("serve");
	TCase *tc = tcase_create("serve");
	tcase_add_test(tc, request_refusals);
	tcase_add_test(tc, request_normalised);
	tcase_add_test(tc, think_reader_any_split);
	tcase_add_test(tc, utf8_and_quote_match_jansson);
	tcase_add_test(tc, memo_restores_and_bounds);
	tcase_add_test(tc, rstore_bounds_and_copies);
	tcase_add_test(tc, rstore_threads);
	tcase_add_test(tc, request_prior_goes_first);
	tcase_add_test(tc, gen_stop_strings_any_position);
	tcase_add_test(tc, gen_stream_shapes);
	tcase_add_test(tc, logprob_shapes);
	suite_add_tcase(s, tc);
	return s;
}
