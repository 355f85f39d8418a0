/* tf-bench: measure tf: its kernels (on the GPU, or the CPU reference), a
 * running server (serve: a load generator like `vllm bench serve`), and, as
 * they land, decode steps. One option table for the program; each mode is
 * a row of the table below, its code in bin/bench/. */
#include <stdio.h>
#include <string.h>

#include "base/cli.h"
#include "bench/bench.h"
#include "cuda/exl3_gemv.h"

struct bench_opts bench;

static const struct tf_opt opts[] = {
	{"backend", 0, TF_OPT_CHOICE, &bench.backend, "NAME", NULL, "cuda",
	 "kernels, decode: time the GPU (cuda) or the CPU reference (cpu)",
	 0, 0, "cuda|cpu"},
	{"pack", 0, TF_OPT_STR, &bench.pack, "DIR", NULL, NULL, "decode: the pack to load", 0, 0,
	 NULL},
	{"preset", 0, TF_OPT_STR, &bench.preset, "NAME", NULL, NULL,
	 "decode: a synthetic pack of this preset (tiny|small|release) in a temporary folder "
	 "(on a GPU its headers only: the weights are generated in device memory)", 0, 0,
	 NULL},
	{"layers", 0, TF_OPT_INT, &bench.layers, "N", NULL, "0",
	 "decode: keep the preset's first N backbone layers (0: all)", 0, 64, NULL},
	{"prepared", 0, TF_OPT_STR, &bench.prepared, "DIR", NULL, NULL,
	 "decode: load each rank from tf-prepare's folder DIR of the --pack", 0, 0, NULL},
	{"world", 'w', TF_OPT_INT, &bench.world, "W", NULL, "1",
	 "decode: tensor-parallel ranks, on threads of this process (1, 2, 4 or 8)", 1, 8, NULL},
	{"devices", 0, TF_OPT_STR, &bench.devices, "LIST", NULL, NULL,
	 "decode: with --backend cuda, rank r's GPU from a comma-separated list, one a rank "
	 "(e.g. 0,1; default: every rank on --device)", 0, 0, NULL},
	{"collective-us", 0, TF_OPT_DOUBLE, &bench.collective_us, "US", NULL, "0",
	 "decode: with --backend cuda at --world > 1, one collective's latency (tf-tp-test "
	 "bench's), which the step's floor adds for each of its collectives", 0, 1e6, NULL},
	{"ctx", 0, TF_OPT_INT, &bench.ctx, "N", NULL, "64",
	 "decode: prompt tokens prefilled per sequence before decoding", 1, 1 << 20, NULL},
	{"draft", 0, TF_OPT_FLAG, &bench.draft, NULL, NULL, NULL,
	 "decode: then decode with DSpark drafts verified by the model: acceptance rate and tokens/s",
	 0, 0, NULL},
	{"shapes", 's', TF_OPT_STR, &bench.shapes, "LIST", NULL, "dsv41",
	 "kernels: weight shapes KxN, comma-separated, or dsv41 (the release's expert, attention "
	 "and head shapes)", 0, 0, NULL},
	{"bits", 'b', TF_OPT_STR, &bench.bits, "LIST", NULL, "2,3,4,6", "kernels: bits per weight (1..8)",
	 0, 0, NULL},
	{"rows", 'r', TF_OPT_STR, &bench.rows, "LIST", NULL, "1,4,16", "kernels: rows of x; decode: sequences decoded together", 0, 0, NULL},
	{"codebook", 'c', TF_OPT_STR, &bench.codebook, "LIST", NULL, "mul1",
	 "kernels: codebooks: 3inst, mcg, mul1 or all", 0, 0, NULL},
	{"iters", 'n', TF_OPT_INT, &bench.iters, "N", NULL, "25", "cuda: timed graph replays per case", 3,
	 100000, NULL},
	{"blocks-per-sm", 0, TF_OPT_INT, &bench.blocks_per_sm, "N", "TF_CUDA_EXL3_BLOCKS_PER_SM", "4",
	 "cuda: EXL3 GEMV blocks aimed at per multiprocessor", 1, 64, NULL},
	{"variant", 0, TF_OPT_STR, &bench.variant, "LIST", "TF_CUDA_EXL3_VARIANT", "tuned",
	 "kernels, decode: the EXL3 kernels' alternatives to their tuned path on the GPU (no-v10, "
	 "no-v7, no-cluster, no-spread, pdl-all, pdl-none), comma-separated", 0, 0, NULL},
	{"batch-invariant", 0, TF_OPT_FLAG, &bench.invariant, NULL, "TF_BATCH_INVARIANT", NULL,
	 "kernels, decode: the GPU's batch-invariant path (a row's result does not depend on the "
	 "rows beside it)",
	 0, 0, NULL},
	{"experts", 0, TF_OPT_INT, &bench.experts, "N", NULL, "0",
	 "cuda: also time N experts of each shape in one launch (rows up to 4)", 0, 256, NULL},
	{"ops", 0, TF_OPT_FLAG, &bench.ops, NULL, NULL, NULL,
	 "kernels: time every op of the CUDA backend at the release's decode and prefill shapes",
	 0, 0, NULL},
	{"no-cublas", 0, TF_OPT_FLAG, &bench.no_cublas, NULL, NULL, NULL,
	 "cuda: leave out the bf16 cuBLAS comparison", 0, 0, NULL},
	{"threads", 'j', TF_OPT_INT, &bench.threads, "N", "TF_THREADS", "1",
	 "cpu: worker threads (0: one per CPU)", 0, 4096, NULL},
	{"seconds", 't', TF_OPT_DOUBLE, &bench.seconds, "S", NULL, "0.5",
	 "cpu: time spent on each measurement", 0.01, 600, NULL},
	TF_OPT_DEVICE(&bench.device),
	{"host", 'H', TF_OPT_STR, &bench.host, "ADDR", "TF_HOST", "127.0.0.1",
	 "serve: server address (numeric IPv4)", 0, 0, NULL},
	{"port", 'p', TF_OPT_INT, &bench.port, "PORT", "TF_PORT", "8080", "serve: server port", 1, 65535,
	 NULL},
	{"path", 0, TF_OPT_STR, &bench.path, "ROUTE", NULL, "/v1/chat/completions",
	 "serve: route (/v1/chat/completions or /v1/completions)", 0, 0, NULL},
	{"model", 'm', TF_OPT_STR, &bench.model, "NAME", NULL, "tf", "serve: model name sent", 0, 0, NULL},
	{"api-key", 'k', TF_OPT_STR, &bench.api_key, "KEY", "TF_API_KEY", NULL,
	 "serve: API key sent as Bearer", 0, 0, NULL},
	{"prompt", 0, TF_OPT_STR, &bench.prompt, "TEXT", NULL, "Tell me a story @long",
	 "serve: the prompt of every request", 0, 0, NULL},
	{"prompt-file", 0, TF_OPT_STR, &bench.prompt_file, "FILE", NULL, NULL,
	 "serve: prompts, one a line, cycled", 0, 0, NULL},
	{"random-words", 0, TF_OPT_INT, &bench.random_words, "N", NULL, "0",
	 "serve: random prompts of N words each (seeded)", 0, 1 << 20, NULL},
	{"requests", 0, TF_OPT_INT, &bench.requests, "N", NULL, "100", "serve: requests to send", 1,
	 1 << 24, NULL},
	{"concurrency", 0, TF_OPT_INT, &bench.concurrency, "N", NULL, "8",
	 "serve: requests in flight at most (0: no limit)", 0, 1 << 20, NULL},
	{"rate", 0, TF_OPT_DOUBLE, &bench.rate, "R", NULL, "0",
	 "serve: requests per second, Poisson (0: as fast as the concurrency allows)", 0, 1e6, NULL},
	{"max-tokens", 0, TF_OPT_INT, &bench.max_tokens, "N", NULL, "64", "serve: max_tokens of each request",
	 1, 1 << 24, NULL},
	{"ignore-eos", 0, TF_OPT_FLAG, &bench.ignore_eos, NULL, NULL, NULL,
	 "serve: ask for exactly max_tokens", 0, 0, NULL},
	{"temperature", 0, TF_OPT_DOUBLE, &bench.temperature, "T", NULL, "0",
	 "serve: temperature sent (negative: none)", -1, 100, NULL},
	{"hold", 0, TF_OPT_DOUBLE, &bench.hold, "S", NULL, "0",
	 "serve: close each stream after S seconds (idle-stream tests)", 0, 86400, NULL},
	{"timeout", 0, TF_OPT_DOUBLE, &bench.timeout, "S", NULL, "600",
	 "serve: a request past S seconds fails (0: none)", 0, 86400, NULL},
	{"verify", 0, TF_OPT_FLAG, &bench.verify, NULL, NULL, NULL,
	 "serve: every reply must equal the first (deterministic replies)", 0, 0, NULL},
	{"seed", 0, TF_OPT_INT, &bench.seed, "N", NULL, "1", "serve: seed of arrivals and random prompts",
	 0, INT64_MAX, NULL},
	{"schemas", 0, TF_OPT_STR, &bench.schemas, "FILE", NULL, NULL,
	 "grammar: a JSON list of {\"name\", \"schema\"} (tests/data/grammar/schemas.json)", 0, 0, NULL},
	{"tokenizer", 0, TF_OPT_STR, &bench.tokenizer, "FILE", NULL, NULL,
	 "grammar: a tokenizer.json whose plain-text tokens are the vocabulary (default: synthetic)",
	 0, 0, NULL},
	{"vocab", 0, TF_OPT_INT, &bench.vocab, "N", NULL, "129280",
	 "grammar: ids of the synthetic vocabulary (byte-level BPE shaped)", 512, 1 << 24, NULL},
	{"steps", 0, TF_OPT_INT, &bench.steps, "N", NULL, "64", "grammar: tokens drawn per walk", 1,
	 1 << 20, NULL},
	{"walks", 0, TF_OPT_INT, &bench.walks, "N", NULL, "4", "grammar: seeded random walks per schema",
	 1, 1 << 20, NULL},
	TF_OPT_JSON(&bench.json),
};

static const struct tf_cli cli = {
	"tf-bench", "kernels [--backend cuda|cpu] [OPTION]...\n"
	"       tf-bench kernels --ops [--iters N] [--device N] [--json]\n"
	"       tf-bench decode --backend cpu --pack DIR|--preset NAME [--world W] [--prepared DIR]\n"
	"                       [--rows N] [--ctx N] [--draft] [OPTION]...\n"
	"       tf-bench serve [--port PORT] [--requests N] [--concurrency N] [OPTION]...\n"
	"       tf-bench grammar --schemas FILE [--tokenizer FILE|--vocab N] [--steps N] [--walks N]",
	"Measure tf's kernels against the machine's copy or read bandwidth (and cuBLAS on the GPU), "
	"the model's prefill and decode throughput, load a running server like vllm bench serve, "
	"or time the token masks of constrained output.",
	"kernels|decode|serve|grammar", opts, TF_NOPTS(opts),
};

static int mode_kernels(void)
{
	if (bench.ops && !strcmp(bench.backend, "cpu"))
		tf_usage_error("--ops times the cuda backend");
	if (bench.ops)
		return bench_kernels_ops();
	return strcmp(bench.backend, "cpu") ? bench_kernels_cuda() : bench_kernels_cpu();
}

enum { M_KERNELS = 1, M_DECODE = 2, M_SERVE = 4, M_GRAMMAR = 8 };

/* The modes an option's help names at its start ("kernels: ...", "kernels,
 * decode: ...", "kernels: ...; decode: ..."; "cuda:" is the kernels mode on
 * the GPU, "cpu:" kernels or decode on the CPU), or 0 (every mode). */
static unsigned option_modes(const char *help)
{
	static const struct {
		const char *word;
		unsigned modes;
	} words[] = {{"kernels", M_KERNELS}, {"decode", M_DECODE}, {"serve", M_SERVE},
		     {"grammar", M_GRAMMAR}, {"cuda", M_KERNELS}, {"cpu", M_KERNELS | M_DECODE}};
	unsigned all = 0;
	for (const char *seg = help; seg;) {
		const char *colon = strchr(seg, ':');
		unsigned m = 0;
		for (const char *w = seg; colon && w < colon;) {
			size_t len = strcspn(w, ",:");
			size_t k = 0;
			while (k < sizeof words / sizeof *words &&
			       (strlen(words[k].word) != len || strncmp(w, words[k].word, len)))
				k++;
			if (k == sizeof words / sizeof *words) {
				m = 0;
				break;
			}
			m |= words[k].modes;
			w += len;
			w += !strncmp(w, ", ", 2) ? 2 : 0;
		}
		if (!m)
			break;
		all |= m;
		seg = strstr(colon, "; ");
		seg = seg ? seg + 2 : NULL;
	}
	return all;
}

/* Options given on the command line that do not apply to the mode are a
 * usage error, naming the option (exit 64). */
static void check_modes(unsigned mode, const char *name)
{
	for (size_t k = 0; k < TF_NOPTS(opts); k++) {
		unsigned m = option_modes(opts[k].help);
		if (tf_cli_given(k) && m && !(m & mode))
			tf_usage_error("--%s does not apply to '%s'", opts[k].name, name);
	}
}

/* The modes. Add a row (and a file in bin/bench/) per new mode. */
static const struct {
	const char *name;
	unsigned mode;
	int (*run)(void);
} modes[] = {
	{"kernels", M_KERNELS, mode_kernels},
	{"decode", M_DECODE, bench_decode},
	{"serve", M_SERVE, bench_serve},
	{"grammar", M_GRAMMAR, bench_grammar},
};

int main(int argc, char **argv)
{
	int i = tf_cli_parse(&cli, argc, argv);
	if (i >= argc)
		tf_usage_error("missing mode (kernels, decode, serve or grammar)");
	if (i + 1 < argc)
		tf_usage_error("unexpected argument '%s'", argv[i + 1]);
	for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++)
		if (!strcmp(argv[i], modes[m].name)) {
			check_modes(modes[m].mode, modes[m].name);
			tf_status st = tf_cu_exl3_variant(bench.variant);
			if (st)
				tf_usage_error("--variant: %s", tf_errmsg(st));
			return modes[m].run();
		}
	tf_usage_error("unknown mode '%s' (kernels, decode, serve or grammar)", argv[i]);
}
