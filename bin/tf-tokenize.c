/* tf-tokenize: text to token ids and back with a tokenizer.json, token
 * counts, the tokenizer with the V4.1 markers added, an encode/decode
 * benchmark, chat requests rendered to DeepSeek-V4.1 prompts, and model
 * replies parsed into reasoning, content and tool calls.
 *
 * Subcommands live in one table (name, function, help); a new one is a
 * function and a row. Documents: the whole input is one document; with
 * --lines each line is one; with --jsonl each line is a JSON object whose
 * "text" is one. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/cli.h"
#include "base/file.h"
#include "base/json.h"
#include "base/num.h"
#include "base/progress.h"
#include "base/thread.h"
#include "text/chat.h"
#include "text/detok.h"
#include "text/dsml.h"
#include "text/pyjson.h"
#include "text/tokenizer.h"

#define MAX_INPUT (1ull << 34)

static const char *opt_tokenizer;
static bool opt_json, opt_lines, opt_jsonl, opt_v41, opt_ids, opt_stream, opt_consistent;
static int64_t opt_threads;
static double opt_seconds;
static const char *opt_tools, *opt_mode;
static uint64_t opt_chunk;

static const struct tf_opt opts[] = {
	{"tokenizer", 't', TF_OPT_STR, &opt_tokenizer, "FILE", "TF_TOKENIZER", NULL,
	 "the tokenizer.json to use (required)", 0, 0, NULL},
	{"v41-markers", 0, TF_OPT_FLAG, &opt_v41, NULL, NULL, NULL,
	 "add the DeepSeek-V4.1 markers the tokenizer lacks (as tf_tok_add_v41_markers)", 0, 0,
	 NULL},
	{"lines", 'l', TF_OPT_FLAG, &opt_lines, NULL, NULL, NULL,
	 "one document per input line (decode: a newline after each)", 0, 0, NULL},
	{"jsonl", 0, TF_OPT_FLAG, &opt_jsonl, NULL, NULL, NULL,
	 "encode/count: documents are JSON lines {\"text\": ...}; decode: write them", 0, 0, NULL},
	TF_OPT_JSON(&opt_json),
	TF_OPT_THREADS(&opt_threads),
	{"seconds", 0, TF_OPT_DOUBLE, &opt_seconds, "S", NULL, "1",
	 "bench: measure each figure for at least S seconds", 0.01, 3600, NULL},
	{"ids", 0, TF_OPT_FLAG, &opt_ids, NULL, NULL, NULL,
	 "render: write the prompt's token ids (needs -t) instead of its text", 0, 0, NULL},
	{"tools", 0, TF_OPT_STR, &opt_tools, "FILE", NULL, NULL,
	 "parse: the offered tools (a JSON list, or a request with \"tools\")", 0, 0, NULL},
	{"mode", 0, TF_OPT_CHOICE, &opt_mode, "MODE", NULL, "thinking",
	 "parse: the reply began in reasoning (thinking) or not (chat)", 0, 0, "thinking|chat"},
	{"stream", 0, TF_OPT_FLAG, &opt_stream, NULL, NULL, NULL,
	 "parse: read the reply in chunks and write each chunk's deltas", 0, 0, NULL},
	{"chunk", 0, TF_OPT_SIZE, &opt_chunk, "N", NULL, "16",
	 "parse --stream: bytes per chunk", 0, 1 << 30, NULL},
	{"consistent", 0, TF_OPT_FLAG, &opt_consistent, NULL, NULL, NULL,
	 "parse --stream: stream exactly what the whole parse gives, for any chunks", 0, 0, NULL},
};

struct doc {
	const char *text;
	size_t len;
	char *owned; /* text decoded from JSON, or NULL */
	struct tf_ids ids;
};

struct job {
	struct tf_tok *tok;
	const char *path;
	char *input;
	size_t input_len;
	struct doc *docs;
	size_t ndocs;
	struct tf_pool *pool;
	struct tf_buf out;
};

/* ---- input ---- */

static void read_input(struct job *j)
{
	tf_status st = tf_file_read_all(j->path, MAX_INPUT, &j->input, &j->input_len);
	if (st)
		tf_die_status(st, "cannot read '%s'", j->path);
}

static void add_doc(struct job *j, const char *text, size_t len, char *owned)
{
	if (tf_realloc_array(&j->docs, j->ndocs + 1, sizeof *j->docs))
		tf_die(71, "out of memory");
	j->docs[j->ndocs++] = (struct doc){text, len, owned, TF_IDS_INIT};
}

/* Split the input into documents by the --lines/--jsonl rules. */
static void split_docs(struct job *j)
{
	if (!opt_lines && !opt_jsonl) {
		add_doc(j, j->input, j->input_len, NULL);
		return;
	}
	size_t at = 0, line = 0;
	while (at < j->input_len) {
		const char *s = j->input + at, *nl = memchr(s, '\n', j->input_len - at);
		size_t len = nl ? (size_t)(nl - s) : j->input_len - at;
		at += len + (nl != NULL);
		line++;
		if (!opt_jsonl) {
			add_doc(j, s, len, NULL);
			continue;
		}
		json_t *o;
		const char *text;
		tf_status st = tf_json_parse(s, len, "input", &o);
		if (st)
			tf_die(65, "line %zu: %s", line, tf_errmsg(st));
		const json_t *t = json_object_get(o, "text");
		if (!json_is_string(t)) {
			json_decref(o);
			tf_die(65, "line %zu: no \"text\" string", line);
		}
		text = json_string_value(t);
		char *copy = malloc(json_string_length(t) + 1);
		if (!copy)
			tf_die(71, "out of memory");
		memcpy(copy, text, json_string_length(t) + 1);
		add_doc(j, copy, json_string_length(t), copy);
		json_decref(o);
	}
}

static void free_docs(struct job *j)
{
	for (size_t i = 0; i < j->ndocs; i++) {
		free(j->docs[i].owned);
		tf_ids_release(&j->docs[i].ids);
	}
	free(j->docs);
}

/* ---- output ---- */

static void flush_out(struct job *j, bool all)
{
	if (!all && j->out.len < (1u << 20))
		return;
	if (j->out.len && fwrite(j->out.data, 1, j->out.len, stdout) != j->out.len)
		tf_die(74, "cannot write: %s", strerror(errno));
	tf_buf_reset(&j->out);
}

static void put_ids(struct tf_buf *b, const struct tf_ids *ids, bool json)
{
	char num[16];
	if (json)
		tf_buf_putc(b, '[');
	for (size_t i = 0; i < ids->n; i++) {
		int n = snprintf(num, sizeof num, "%s%u", i ? (json ? "," : " ") : "", ids->v[i]);
		tf_buf_append(b, num, (size_t)n);
	}
	if (json)
		tf_buf_putc(b, ']');
	tf_buf_putc(b, '\n');
}

/* ---- encode ---- */

static void encode_range(void *ctx, size_t begin, size_t end, int worker)
{
	struct job *j = ctx;
	for (size_t i = begin; i < end; i++) {
		struct doc *d = &j->docs[i];
		d->ids.n = 0;
		tf_status st = tf_tok_encode(j->tok, d->text, d->len, &d->ids);
		if (st)
			tf_die_status(st, "cannot encode document %zu", i + 1);
	}
}

static void encode_all(struct job *j)
{
	tf_pool_for(j->pool, j->ndocs, 1, encode_range, j);
}

static int cmd_encode(struct job *j)
{
	read_input(j);
	split_docs(j);
	encode_all(j);
	for (size_t i = 0; i < j->ndocs; i++) {
		put_ids(&j->out, &j->docs[i].ids, opt_json);
		flush_out(j, false);
	}
	flush_out(j, true);
	return 0;
}

static int cmd_count(struct job *j)
{
	read_input(j);
	split_docs(j);
	encode_all(j);
	uint64_t tokens = 0, bytes = 0;
	for (size_t i = 0; i < j->ndocs; i++) {
		tokens += j->docs[i].ids.n;
		bytes += j->docs[i].len;
		if (!opt_json && (opt_lines || opt_jsonl))
			tf_buf_printf(&j->out, "%zu\n", j->docs[i].ids.n);
	}
	if (opt_json)
		tf_buf_printf(&j->out, "{\"documents\":%zu,\"tokens\":%llu,\"bytes\":%llu}\n",
			      j->ndocs, (unsigned long long)tokens, (unsigned long long)bytes);
	else if (!opt_lines && !opt_jsonl)
		tf_buf_printf(&j->out, "%llu\n", (unsigned long long)tokens);
	flush_out(j, true);
	return 0;
}

/* ---- decode ---- */

/* Parse one line of ids (space-separated, or a JSON array with --json). */
static void parse_ids(const struct job *j, const char *s, size_t len, size_t line,
		      struct tf_ids *ids)
{
	ids->n = 0;
	if (opt_json) {
		json_t *a;
		tf_status st = tf_json_parse(s, len, "input", &a);
		if (st)
			tf_die(65, "line %zu: %s", line, tf_errmsg(st));
		if (!json_is_array(a))
			tf_die(65, "line %zu: not a JSON array of ids", line);
		size_t i;
		json_t *v;
		json_array_foreach(a, i, v) {
			if (!json_is_integer(v) || json_integer_value(v) < 0 ||
			    json_integer_value(v) > UINT32_MAX)
				tf_die(65, "line %zu: item %zu is not a token id", line, i + 1);
			if (tf_ids_push(ids, (uint32_t)json_integer_value(v)))
				tf_die(71, "out of memory");
		}
		json_decref(a);
	} else {
		size_t at = 0;
		while (at < len) {
			while (at < len && (s[at] == ' ' || s[at] == '\t' || s[at] == '\r' ||
					    s[at] == '\n'))
				at++;
			if (at == len)
				break;
			uint64_t v = 0;
			size_t start = at;
			while (at < len && s[at] >= '0' && s[at] <= '9' && v <= UINT32_MAX)
				v = v * 10 + (uint64_t)(s[at++] - '0');
			if (at == start || v > UINT32_MAX ||
			    (at < len && s[at] != ' ' && s[at] != '\t' && s[at] != '\r' && s[at] != '\n'))
				tf_die(65, "line %zu: '%.*s' is not a token id", line,
				       (int)(len - start > 20 ? 20 : len - start), s + start);
			if (tf_ids_push(ids, (uint32_t)v))
				tf_die(71, "out of memory");
		}
	}
	for (size_t i = 0; i < ids->n; i++)
		if (!tf_tok_bytes(j->tok, ids->v[i], &(size_t){0}))
			tf_die(65, "line %zu: unknown token id %u", line, ids->v[i]);
}

static void put_text(struct job *j, const char *s, size_t n)
{
	if (!opt_jsonl) {
		tf_buf_append(&j->out, s, n);
		if (opt_lines)
			tf_buf_putc(&j->out, '\n');
		return;
	}
	json_t *o = json_pack("{s:s%}", "text", s, n);
	char *t = o ? json_dumps(o, JSON_COMPACT) : NULL;
	if (!t)
		tf_die(71, "out of memory");
	tf_buf_puts(&j->out, t);
	tf_buf_putc(&j->out, '\n');
	free(t);
	json_decref(o);
}

static int cmd_decode(struct job *j)
{
	struct tf_ids ids = TF_IDS_INIT;
	struct tf_buf text = TF_BUF_INIT;
	read_input(j);
	bool per_line = opt_lines || opt_json || opt_jsonl;
	size_t at = 0, line = 0;
	while (at < j->input_len || (!per_line && line == 0)) {
		const char *s = j->input + at;
		size_t len = j->input_len - at;
		if (per_line) {
			const char *nl = memchr(s, '\n', len);
			if (nl)
				len = (size_t)(nl - s);
			at += len + (nl != NULL);
		} else {
			at = j->input_len;
		}
		line++;
		parse_ids(j, s, len, line, &ids);
		tf_buf_reset(&text);
		tf_status st = tf_tok_decode(j->tok, ids.v, ids.n, &text);
		if (st)
			tf_die_status(st, "cannot decode line %zu", line);
		put_text(j, text.data ? text.data : "", text.len);
		flush_out(j, false);
	}
	flush_out(j, true);
	tf_ids_release(&ids);
	tf_buf_release(&text);
	return 0;
}

/* ---- export ---- */

static int cmd_export(struct job *j)
{
	tf_status st = tf_tok_save(j->tok, &j->out);
	if (st)
		tf_die_status(st, "cannot write the tokenizer");
	flush_out(j, true);
	return 0;
}

/* ---- bench ---- */

/* Cut a large single document into chunks of about 64 KiB at line ends, so
 * that threads have work to share. */
static void chunk_docs(struct job *j)
{
	if (opt_lines || opt_jsonl)
		return split_docs(j);
	size_t at = 0;
	while (at < j->input_len) {
		size_t len = j->input_len - at;
		if (len > 65536) {
			const char *nl = memchr(j->input + at + 65536, '\n', len - 65536);
			len = nl ? (size_t)(nl - (j->input + at)) + 1 : len;
		}
		add_doc(j, j->input + at, len, NULL);
		at += len;
	}
}

struct dec_ctx {
	struct job *j;
	struct tf_buf *bufs;
	uint64_t *bytes;
};

static void decode_range(void *ctx, size_t begin, size_t end, int worker)
{
	struct dec_ctx *c = ctx;
	for (size_t i = begin; i < end; i++) {
		struct tf_buf *b = &c->bufs[worker];
		tf_buf_reset(b);
		if (tf_tok_decode(c->j->tok, c->j->docs[i].ids.v, c->j->docs[i].ids.n, b))
			tf_die(71, "out of memory");
		c->bytes[worker] += b->len;
	}
}

/* CPU seconds of the whole process (all threads). */
static double cpu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmd_bench(struct job *j)
{
	read_input(j);
	chunk_docs(j);
	int nt = tf_pool_size(j->pool);
	uint64_t bytes = 0, tokens = 0;
	for (size_t i = 0; i < j->ndocs; i++)
		bytes += j->docs[i].len;
	/* encode: whole passes until the time is reached */
	size_t passes = 0;
	double t0 = tf_now(), c0 = cpu_now(), t;
	do {
		encode_all(j);
		passes++;
	} while ((t = tf_now() - t0) < opt_seconds);
	double enc = (double)bytes * (double)passes / t / 1e6;
	double enc_cpu = (double)bytes * (double)passes / (cpu_now() - c0) / 1e6;
	for (size_t i = 0; i < j->ndocs; i++)
		tokens += j->docs[i].ids.n;
	double tps = (double)tokens * (double)passes / t;
	/* decode */
	struct dec_ctx c = {j, tf_calloc((size_t)nt, sizeof(struct tf_buf)),
			    tf_calloc((size_t)nt, sizeof(uint64_t))};
	if (!c.bufs || !c.bytes)
		tf_die(71, "out of memory");
	size_t dpasses = 0;
	t0 = tf_now();
	c0 = cpu_now();
	do {
		tf_pool_for(j->pool, j->ndocs, 1, decode_range, &c);
		dpasses++;
	} while ((t = tf_now() - t0) < opt_seconds);
	double dcpu = cpu_now() - c0;
	uint64_t dbytes = 0;
	for (int w = 0; w < nt; w++) {
		dbytes += c.bytes[w];
		tf_buf_release(&c.bufs[w]);
	}
	double dec = (double)dbytes / t / 1e6, dec_cpu = (double)dbytes / dcpu / 1e6;
	free(c.bufs);
	free(c.bytes);
	if (opt_json)
		tf_buf_printf(&j->out,
			      "{\"threads\":%d,\"documents\":%zu,\"bytes\":%llu,\"tokens\":%llu,"
			      "\"encode_passes\":%zu,\"encode_mb_s\":%.2f,\"encode_mb_cpu_s\":%.2f,"
			      "\"encode_tokens_s\":%.0f,\"decode_passes\":%zu,\"decode_mb_s\":%.2f,"
			      "\"decode_mb_cpu_s\":%.2f}\n",
			      nt, j->ndocs, (unsigned long long)bytes, (unsigned long long)tokens,
			      passes, enc, enc_cpu, tps, dpasses, dec, dec_cpu);
	else
		tf_buf_printf(&j->out,
			      "threads %d, %zu documents, %llu bytes, %llu tokens\n"
			      "encode %.2f MB/s (%.2f MB per CPU second, %.0f tokens/s, %zu passes)\n"
			      "decode %.2f MB/s (%.2f MB per CPU second, %zu passes)\n",
			      nt, j->ndocs, (unsigned long long)bytes, (unsigned long long)tokens,
			      enc, enc_cpu, tps, passes, dec, dec_cpu, dpasses);
	flush_out(j, true);
	return 0;
}

/* ---- render ---- */

/* Read a chat request (or a bare messages list) and write its prompt: the
 * text, its ids (--ids), or with --json the text, its ids when asked, the
 * history length and rewind point (bytes) and the mode. */
static int cmd_render(struct job *j)
{
	read_input(j);
	json_t *req;
	tf_status st = tf_json_parse(j->input, j->input_len, j->path, &req);
	if (st)
		tf_die_status(st, "cannot read the request");
	if (json_is_array(req)) {
		json_t *wrap = json_pack("{s:o}", "messages", req);
		if (!wrap)
			tf_die(71, "out of memory");
		req = wrap;
	}
	struct tf_chat_prompt p;
	tf_chat_prompt_init(&p);
	if ((st = tf_chat_render_request(req, NULL, &p)))
		tf_die_status(st, "cannot render '%s'", j->path);
	const char *text = p.text.data ? p.text.data : "";
	struct tf_ids ids = TF_IDS_INIT;
	if (opt_ids && (st = tf_tok_encode(j->tok, text, p.text.len, &ids)))
		tf_die_status(st, "cannot encode the prompt");
	if (opt_json) {
		tf_buf_puts(&j->out, "{");
		if (opt_ids) {
			tf_buf_puts(&j->out, "\"ids\":");
			put_ids(&j->out, &ids, true);
			j->out.data[j->out.len - 1] = ','; /* the newline put_ids wrote */
		}
		tf_buf_puts(&j->out, "\"prompt\":");
		tf_pyjson_dump_str(&j->out, text, p.text.len);
		tf_buf_printf(&j->out, ",\"history_bytes\":%zu,\"rewind_bytes\":%zu,\"thinking\":%s}\n",
			      p.history_len, p.rewind, p.thinking ? "true" : "false");
	} else if (opt_ids) {
		put_ids(&j->out, &ids, false);
	} else {
		tf_buf_append(&j->out, text, p.text.len);
	}
	flush_out(j, true);
	tf_ids_release(&ids);
	tf_chat_prompt_release(&p);
	json_decref(req);
	return 0;
}

/* ---- parse ---- */

static struct tf_dsml_tools *load_tools(void)
{
	json_t *v = NULL;
	if (opt_tools) {
		tf_status st = tf_json_load(opt_tools, 1 << 26, &v);
		if (st)
			tf_die_status(st, "cannot read tools");
		if (json_is_object(v)) {
			json_t *t = json_incref(json_object_get(v, "tools"));
			json_decref(v);
			v = t;
		}
		if (v && !json_is_array(v) && !json_is_null(v))
			tf_die(65, "'%s': not a list of tools (or a request with \"tools\")", opt_tools);
	}
	struct tf_dsml_tools *t = tf_dsml_tools_new(v);
	json_decref(v);
	if (!t)
		tf_die(71, "out of memory");
	return t;
}

/* {"reasoning", "content", "tool_calls"} as one JSON line. */
static void put_reply(struct tf_buf *out, const char *r, size_t rn, const char *c, size_t cn,
		      const struct tf_dsml_call *calls, size_t ncalls)
{
	json_t *tc = tf_dsml_openai_tool_calls(calls, ncalls);
	if (!tc)
		tf_die(71, "out of memory");
	tf_buf_puts(out, "{\"reasoning\":");
	tf_pyjson_dump_str(out, r ? r : "", rn);
	tf_buf_puts(out, ",\"content\":");
	tf_pyjson_dump_str(out, c ? c : "", cn);
	tf_buf_puts(out, ",\"tool_calls\":");
	tf_pyjson_dump(out, tc, true);
	tf_buf_puts(out, "}\n");
	json_decref(tc);
}

/* Each delta as an OpenAI chunk delta, one JSON line each; reasoning and
 * content also collected for the final line. */
static void put_deltas(struct tf_buf *out, const struct tf_dsml_delta *d, size_t n, struct tf_buf *r,
		       struct tf_buf *c)
{
	for (size_t i = 0; i < n; i++) {
		json_t *v = tf_dsml_openai_delta(&d[i], TF_DSML_REASONING_CONTENT);
		if (!v)
			tf_die(71, "out of memory");
		tf_pyjson_dump(out, v, true);
		tf_buf_putc(out, '\n');
		json_decref(v);
		if (d[i].kind == TF_DSML_REASONING)
			tf_buf_append(r, d[i].text, d[i].len);
		else if (d[i].kind == TF_DSML_CONTENT)
			tf_buf_append(c, d[i].text, d[i].len);
	}
}

/* Read a model reply (end-of-sentence removed) and write what it says:
 * one JSON object, or with --stream a line per delta of each chunk and
 * then the assembled object. */
static int cmd_parse(struct job *j)
{
	read_input(j);
	struct tf_dsml_tools *tools = load_tools();
	bool thinking = strcmp(opt_mode, "chat") != 0;
	tf_status st;
	if (!opt_stream) {
		struct tf_dsml_reply r;
		if ((st = tf_dsml_parse(j->input, j->input_len, thinking, tools, &r)))
			tf_die_status(st, "cannot parse the reply");
		put_reply(&j->out, r.reasoning.data, r.reasoning.len, r.content.data, r.content.len, r.calls,
			  r.ncalls);
		tf_dsml_reply_release(&r);
	} else {
		struct tf_dsml_stream *s = tf_dsml_stream_new(thinking, tools);
		struct tf_buf rs = TF_BUF_INIT, cs = TF_BUF_INIT;
		if (!s)
			tf_die(71, "out of memory");
		tf_dsml_stream_consistent(s, opt_consistent);
		size_t at = 0;
		for (;;) {
			size_t n = j->input_len - at < opt_chunk ? j->input_len - at : (size_t)opt_chunk;
			bool last = at + n >= j->input_len;
			const struct tf_dsml_delta *d;
			size_t nd;
			st = last ? tf_dsml_stream_finish(s, j->input + at, n, &d, &nd) :
				    tf_dsml_stream_push(s, j->input + at, n, &d, &nd);
			if (st)
				tf_die_status(st, "cannot parse the reply");
			put_deltas(&j->out, d, nd, &rs, &cs);
			flush_out(j, false);
			at += n;
			if (last)
				break;
		}
		size_t nc;
		const struct tf_dsml_call *calls = tf_dsml_stream_calls(s, &nc);
		put_reply(&j->out, rs.data, rs.len, cs.data, cs.len, calls, nc);
		tf_buf_release(&rs);
		tf_buf_release(&cs);
		tf_dsml_stream_free(s);
	}
	flush_out(j, true);
	tf_dsml_tools_free(tools);
	return 0;
}

/* ---- the subcommands ---- */

/* A subcommand: its function, whether it reads FILE (or stdin), how many
 * worker threads it starts by default (-j overrides; 0: one per CPU, -1:
 * none), and whether it needs the tokenizer. */
static const struct command {
	const char *name;
	int (*run)(struct job *j);
	bool input;     /* reads FILE or stdin */
	int threads;
	bool tokenizer; /* needs -t (render: with --ids) */
} commands[] = {
	{"encode", cmd_encode, true, 0, true},
	{"decode", cmd_decode, true, -1, true},
	{"count", cmd_count, true, 0, true},
	{"bench", cmd_bench, true, 1, true},
	{"export", cmd_export, false, -1, true},
	{"render", cmd_render, true, -1, false},
	{"parse", cmd_parse, true, -1, false},
};

static const struct tf_cli cli = {
	.name = "tf-tokenize",
	.usage = "encode|decode|count|bench -t TOKENIZER.json [OPTION]... [FILE|-]\n"
		 "       export -t TOKENIZER.json [--v41-markers]\n"
		 "       render [--json] [--ids -t TOKENIZER.json] [REQUEST.json|-]\n"
		 "       parse [--mode thinking|chat] [--tools FILE] [--stream [--chunk N]] [REPLY|-]",
	.summary = "Turn text into token ids and back with a Hugging Face tokenizer.json.",
	.commands = "encode|decode|count|bench|export|render|parse",
	.opts = opts,
	.nopts = TF_NOPTS(opts),
};

int main(int argc, char **argv)
{
	int first = tf_cli_parse(&cli, argc, argv);
	if (first >= argc)
		tf_usage_error("no subcommand (one of %s)", cli.commands);
	const struct command *cmd = NULL;
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		if (!strcmp(argv[first], commands[i].name))
			cmd = &commands[i];
	if (!cmd)
		tf_usage_error("unknown subcommand '%s'", argv[first]);
	int nops = argc - first - 1;
	if (nops > (cmd->input ? 1 : 0))
		tf_usage_error("too many operands for %s", cmd->name);
	bool need_tok = cmd->tokenizer || (cmd->run == cmd_render && opt_ids);
	if (need_tok && !opt_tokenizer)
		tf_usage_error("no tokenizer (-t FILE or TF_TOKENIZER)");
	if (opt_ids && cmd->run != cmd_render)
		tf_usage_error("--ids is for render");
	if ((opt_stream || opt_tools || opt_consistent) && cmd->run != cmd_parse)
		tf_usage_error("--stream, --tools and --consistent are for parse");
	if (!opt_chunk)
		tf_usage_error("--chunk must be at least 1");
	if (opt_lines && opt_jsonl)
		tf_usage_error("--lines and --jsonl exclude each other");

	struct job j = {.path = nops ? argv[first + 1] : "-"};
	tf_status st = TF_OK;
	if (need_tok && (st = tf_tok_load(opt_tokenizer, &j.tok)))
		tf_die_status(st, "cannot load tokenizer");
	if (opt_v41 && j.tok && (st = tf_tok_add_v41_markers(j.tok, TF_TOK_V41_VOCAB)))
		tf_die_status(st, "cannot add the V4.1 markers");
	if (cmd->threads >= 0) {
		bool given = opt_threads || getenv("TF_THREADS");
		if ((st = tf_pool_new(given ? (int)opt_threads : cmd->threads, &j.pool)))
			tf_die_status(st, "cannot start threads");
	}
	int rc = cmd->run(&j);
	free_docs(&j);
	free(j.input);
	tf_buf_release(&j.out);
	tf_pool_free(j.pool);
	tf_tok_free(j.tok);
	return rc;
}
