/* serve.c: tf-bench serve: a load generator against a running server, like
 * `vllm bench serve` (libcore/serve/loadgen.h does the work): N streaming
 * requests at a concurrency and/or a Poisson request rate; TTFT, TPOT, ITL
 * and E2EL (mean, p50, p90, p99), throughput, failures, and with --verify
 * the replies that differ from the first (lost or duplicated tokens). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/cli.h"
#include "base/file.h"
#include "base/rng.h"
#include "bench/bench.h"
#include "serve/loadgen.h"

static char **read_prompts(const char *file, size_t *n)
{
	char *data;
	size_t len;
	tf_status st = tf_file_read_all(file, 1u << 30, &data, &len);
	if (st)
		tf_die_status(st, "cannot read prompts from '%s'", file);
	char **v = NULL;
	*n = 0;
	for (char *save = NULL, *line = strtok_r(data, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
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

int bench_serve(void)
{
	struct tf_loadgen_config c = {
		.host = bench.host,
		.port = (uint16_t)bench.port,
		.path = bench.path,
		.model = bench.model,
		.api_key = bench.api_key,
		.prompt = bench.prompt,
		.requests = (uint32_t)bench.requests,
		.concurrency = (uint32_t)bench.concurrency,
		.rate = bench.rate,
		.max_tokens = (uint32_t)bench.max_tokens,
		.ignore_eos = bench.ignore_eos,
		.temperature = bench.temperature,
		.hold_s = bench.hold,
		.timeout_s = bench.timeout,
		.verify = bench.verify,
		.seed = (uint64_t)bench.seed,
	};
	char **prompts = NULL;
	size_t np = 0;
	if (bench.prompt_file)
		prompts = read_prompts(bench.prompt_file, &np);
	else if (bench.random_words)
		prompts = random_prompts(np = (size_t)bench.requests, (size_t)bench.random_words, c.seed);
	c.prompts = (const char **)prompts;
	c.nprompts = np;
	struct tf_loadgen_result r;
	tf_status st = tf_loadgen_run(&c, &r);
	if (st)
		tf_die_status(st, "cannot load the server");
	struct tf_buf out = TF_BUF_INIT;
	tf_loadgen_report(&c, &r, bench.json, &out);
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
