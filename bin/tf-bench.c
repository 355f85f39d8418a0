/* tf-bench: measure tf. One program, one subcommand per mode; each mode is
 * a row of the table at the bottom with its own run function.
 *
 * serve: a load generator against a running server, like `vllm bench
 * serve` (libcore/serve/loadgen.h): N streaming requests at a concurrency
 * and/or a Poisson request rate; TTFT, TPOT, ITL and E2EL (mean, p50, p90,
 * p99), throughput, failures, and with --verify the replies that differ
 * from the first (lost or duplicated tokens). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/cli.h"
#include "base/file.h"
#include "base/rng.h"
#include "serve/loadgen.h"

static const char *opt_host, *opt_path, *opt_model, *opt_key, *opt_prompt, *opt_prompt_file;
static int64_t opt_port, opt_requests, opt_concurrency, opt_max_tokens, opt_random_words, opt_seed;
static double opt_rate, opt_temperature, opt_hold, opt_timeout;
static bool opt_ignore_eos, opt_verify, opt_json;

static const struct tf_opt opts[] = {
	{"host", 'H', TF_OPT_STR, &opt_host, "ADDR", "TF_HOST", "127.0.0.1", "serve: server address (numeric IPv4)", 0, 0, NULL},
	{"port", 'p', TF_OPT_INT, &opt_port, "PORT", "TF_PORT", "8080", "serve: server port", 1, 65535, NULL},
	{"path", 0, TF_OPT_STR, &opt_path, "ROUTE", NULL, "/v1/chat/completions", "serve: route (/v1/chat/completions or /v1/completions)", 0, 0, NULL},
	{"model", 'm', TF_OPT_STR, &opt_model, "NAME", NULL, "tf", "serve: model name sent", 0, 0, NULL},
	{"api-key", 'k', TF_OPT_STR, &opt_key, "KEY", "TF_API_KEY", NULL, "serve: API key sent as Bearer", 0, 0, NULL},
	{"prompt", 0, TF_OPT_STR, &opt_prompt, "TEXT", NULL, "Tell me a story @long", "serve: the prompt of every request", 0, 0, NULL},
	{"prompt-file", 0, TF_OPT_STR, &opt_prompt_file, "FILE", NULL, NULL, "serve: prompts, one a line, cycled", 0, 0, NULL},
	{"random-words", 0, TF_OPT_INT, &opt_random_words, "N", NULL, "0", "serve: random prompts of N words each (seeded)", 0, 1 << 20, NULL},
	{"requests", 'n', TF_OPT_INT, &opt_requests, "N", NULL, "100", "serve: requests to send", 1, 1 << 24, NULL},
	{"concurrency", 0, TF_OPT_INT, &opt_concurrency, "N", NULL, "8", "serve: requests in flight at most (0: no limit)", 0, 1 << 20, NULL},
	{"rate", 'r', TF_OPT_DOUBLE, &opt_rate, "R", NULL, "0", "serve: requests per second, Poisson (0: as fast as the concurrency allows)", 0, 1e6, NULL},
	{"max-tokens", 0, TF_OPT_INT, &opt_max_tokens, "N", NULL, "64", "serve: max_tokens of each request", 1, 1 << 24, NULL},
	{"ignore-eos", 0, TF_OPT_FLAG, &opt_ignore_eos, NULL, NULL, NULL, "serve: ask for exactly max_tokens", 0, 0, NULL},
	{"temperature", 0, TF_OPT_DOUBLE, &opt_temperature, "T", NULL, "0", "serve: temperature sent (negative: none)", -1, 100, NULL},
	{"hold", 0, TF_OPT_DOUBLE, &opt_hold, "S", NULL, "0", "serve: close each stream after S seconds (idle-stream tests)", 0, 86400, NULL},
	{"timeout", 0, TF_OPT_DOUBLE, &opt_timeout, "S", NULL, "600", "serve: a request past S seconds fails (0: none)", 0, 86400, NULL},
	{"verify", 0, TF_OPT_FLAG, &opt_verify, NULL, NULL, NULL, "serve: every reply must equal the first (deterministic replies)", 0, 0, NULL},
	{"seed", 's', TF_OPT_INT, &opt_seed, "N", NULL, "1", "serve: seed of arrivals and random prompts", 0, INT64_MAX, NULL},
	TF_OPT_JSON(&opt_json),
};

static const struct tf_cli cli = {
	.name = "tf-bench",
	.usage = "serve [OPTION]...",
	.summary = "Measure tf: serve drives a running server like vllm bench serve.",
	.commands = "serve",
	.opts = opts,
	.nopts = TF_NOPTS(opts),
};

static char **read_prompts(const char *file, size_t *n)
{
	char *data;
	size_t len;
	tf_status st = tf_file_read_all(file, 1u << 30, &data, &len);
	if (st)
		tf_die_status(st, "cannot read prompts from '%s'", file);
	char **v = NULL;
	*n = 0;
	for (char *line = strtok(data, "\n"); line; line = strtok(NULL, "\n")) {
		if (tf_realloc_array(&v, *n + 1, sizeof(*v)) || !(v[*n] = tf_strdup(line)))
			tf_die(71, "out of memory");
		(*n)++;
	}
	free(data);
	if (*n == 0)
		tf_die(65, "'%s' holds no prompts", file);
	return v;
}

static char **random_prompts(size_t count, size_t words, uint64_t seed)
{
	static const char *const dict[] = {"the", "model", "serves", "tokens", "over", "many",
					   "lanes", "while", "a", "round", "plans", "pieces"};
	struct tf_rng rng;
	tf_rng_seed(&rng, seed);
	char **v = tf_calloc(count, sizeof(*v));
	for (size_t i = 0; v && i < count; i++) {
		struct tf_buf b = TF_BUF_INIT;
		for (size_t w = 0; w < words; w++)
			tf_buf_printf(&b, w ? " %s" : "%s", dict[tf_rng_below(&rng, 12)]);
		v[i] = tf_buf_detach(&b, NULL);
	}
	if (!v)
		tf_die(71, "out of memory");
	return v;
}

static int cmd_serve(int argc, char **argv)
{
	if (argc > 0)
		tf_usage_error("serve takes no operands ('%s')", argv[0]);
	struct tf_loadgen_config c = {
		.host = opt_host,
		.port = (uint16_t)opt_port,
		.path = opt_path,
		.model = opt_model,
		.api_key = opt_key,
		.prompt = opt_prompt,
		.requests = (uint32_t)opt_requests,
		.concurrency = (uint32_t)opt_concurrency,
		.rate = opt_rate,
		.max_tokens = (uint32_t)opt_max_tokens,
		.ignore_eos = opt_ignore_eos,
		.temperature = opt_temperature,
		.hold_s = opt_hold,
		.timeout_s = opt_timeout,
		.verify = opt_verify,
		.seed = (uint64_t)opt_seed,
	};
	char **prompts = NULL;
	size_t np = 0;
	if (opt_prompt_file)
		prompts = read_prompts(opt_prompt_file, &np);
	else if (opt_random_words)
		prompts = random_prompts(np = (size_t)opt_requests, (size_t)opt_random_words, c.seed);
	c.prompts = (const char **)prompts;
	c.nprompts = np;
	struct tf_loadgen_result r;
	tf_status st = tf_loadgen_run(&c, &r);
	if (st)
		tf_die_status(st, "cannot load the server");
	struct tf_buf out = TF_BUF_INIT;
	tf_loadgen_report(&c, &r, opt_json, &out);
	fwrite(out.data, 1, out.len, stdout);
	tf_buf_release(&out);
	for (size_t i = 0; i < np; i++)
		free(prompts[i]);
	free(prompts);
	if (r.failed)
		tf_warn("%u of %u requests failed; the first: %s", r.failed, c.requests, r.first_error);
	if (r.mismatched)
		tf_warn("%u replies differ from the first", r.mismatched);
	return r.failed || r.mismatched ? 1 : 0;
}

/* The modes. Add a row (and a function) per new mode. */
static const struct {
	const char *name;
	int (*run)(int argc, char **argv);
} modes[] = {
	{"serve", cmd_serve},
};

int main(int argc, char **argv)
{
	int first = tf_cli_parse(&cli, argc, argv);
	if (first >= argc)
		tf_usage_error("missing the mode (serve)");
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
		if (!strcmp(argv[first], modes[i].name))
			return modes[i].run(argc - first - 1, argv + first + 1);
	tf_usage_error("unknown mode '%s' (serve)", argv[first]);
}
