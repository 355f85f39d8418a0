/* tf-pack-synth: write a synthetic DeepSeek-V4.1 EXL3 pack. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "base/num.h"
#include "base/progress.h"
#include "model/config.h"
#include "model/synth.h"

static struct {
	const char *preset, *config, *bits, *codebook, *tokenizer, *out;
	int64_t seed, layers;
	uint64_t shard_size;
	bool sparse, no_index, json, chain;
} o;

static const struct tf_opt opts[] = {
	{"preset", 'p', TF_OPT_CHOICE, &o.preset, "NAME", NULL, "tiny",
	 "config preset", 0, 0, "tiny|small|release"},
	{"config", 'c', TF_OPT_STR, &o.config, "FILE", NULL, NULL,
	 "take the config from this config.json instead of a preset", 0, 0, NULL},
	{"bits", 'b', TF_OPT_STR, &o.bits, "LIST", NULL, NULL,
	 "bits per weight to draw from, e.g. 2,3,4, or q28 for the real release mix "
	 "(default: q28 for release, else 2,3,4)", 0, 0, NULL},
	{"codebook", 0, TF_OPT_CHOICE, &o.codebook, "NAME", NULL, "mixed",
	 "EXL3 codebook of the groups", 0, 0, "3inst|mcg|mul1|mixed"},
	{"seed", 's', TF_OPT_INT, &o.seed, "N", NULL, "1", "random seed", 0, INT64_MAX, NULL},
	{"layers", 0, TF_OPT_INT, &o.layers, "N", NULL, "0",
	 "keep the config's first N backbone layers (0: all)", 0, 64, NULL},
	{"sparse", 0, TF_OPT_FLAG, &o.sparse, NULL, NULL, NULL,
	 "write real headers and leave tensor data as holes", 0, 0, NULL},
	{"chain", 0, TF_OPT_FLAG, &o.chain, NULL, NULL, NULL,
	 "weights whose DSpark drafts are right: every branch writes zero, so the greedy next "
	 "token follows the token's residue mod the Markov rank, and the drafts follow it too "
	 "(for measuring speculative decoding)", 0, 0, NULL},
	{"shard-size", 0, TF_OPT_SIZE, &o.shard_size, "SIZE", NULL, "4G",
	 "start a new shard past this many bytes", 0, 0, NULL},
	{"no-index", 0, TF_OPT_FLAG, &o.no_index, NULL, NULL, NULL,
	 "do not write model.safetensors.index.json", 0, 0, NULL},
	{"tokenizer", 't', TF_OPT_STR, &o.tokenizer, "FILE", NULL, NULL,
	 "use this tokenizer.json (V4.1 markers added) instead of a synthetic one", 0, 0, NULL},
	{"output", 'o', TF_OPT_STR, &o.out, "DIR", NULL, NULL, "the pack folder to write", 0, 0,
	 NULL},
	TF_OPT_JSON(&o.json),
};

static const struct tf_cli cli = {
	"tf-pack-synth", "[OPTION]... -o DIR",
	"Write a complete, valid synthetic DeepSeek-V4.1 EXL3 pack (seeded, deterministic).",
	NULL, opts, TF_NOPTS(opts),
};

int main(int argc, char **argv)
{
	int first = tf_cli_parse(&cli, argc, argv);
	if (first < argc)
		tf_usage_error("unexpected operand '%s'", argv[first]);
	if (!o.out)
		tf_usage_error("no output folder: give -o DIR");
	if (o.chain && o.sparse)
		tf_usage_error("--chain writes weights: not with --sparse");

	struct tf_config c;
	tf_status st = o.config ? tf_config_load(&c, o.config) : tf_config_preset(&c, o.preset);
	if (!st && o.layers)
		st = tf_config_first_layers(&c, (uint32_t)o.layers);
	if (st)
		tf_die_status(st, "cannot use config '%s'", o.config ? o.config : o.preset);

	struct tf_synth_opts so = {
		.config = &c, .seed = (uint64_t)o.seed, .sparse = o.sparse,
		.shard_bytes = o.shard_size ? o.shard_size : 1, .index = !o.no_index,
		.tokenizer = o.tokenizer,
	};
	const char *bits = o.bits ? o.bits : (!o.config && !strcmp(o.preset, "release")) ? "q28" : "2,3,4";
	if (!strcmp(bits, "q28")) {
		so.q28 = true;
	} else {
		int64_t b[8];
		int n;
		if ((st = tf_parse_i64_list(bits, 1, 8, b, 8, &n)))
			tf_usage_error("--bits: %s", tf_errmsg(st));
		for (int i = 0; i < n; i++)
			so.bits[i] = (uint32_t)b[i];
		so.nbits = n;
	}
	static const char *const cbs[] = {"3inst", "mcg", "mul1", "mixed"};
	for (int i = 0; i < 4; i++)
		if (!strcmp(o.codebook, cbs[i]))
			so.codebooks = (enum tf_synth_codebooks)i;

	struct tf_progress prog;
	tf_progress_init(&prog, "tf-pack-synth", 0, "B");
	so.progress = &prog;
	struct tf_synth_stats s;
	double t0 = tf_now();
	st = tf_synth_write(&so, o.out, &s);
	tf_progress_end(&prog);
	if (st)
		tf_die_status(st, "cannot write pack '%s'", o.out);
	int32_t chain[256];
	int rank = 0;
	if (o.chain && (st = tf_synth_chain(o.out, chain, 256, &rank)))
		tf_die_status(st, "cannot make '%s' a chain pack", o.out);
	if (o.chain && tf_cli_chatty()) {
		fprintf(stderr, "tf-pack-synth: chain of %d states:", rank);
		for (int k = 0; k < rank; k++)
			fprintf(stderr, " %d", chain[k]);
		fputc('\n', stderr);
	}
	double secs = tf_now() - t0;
	double mbps = secs > 0 ? (double)s.data_bytes / secs / 1e6 : 0;
	if (o.json)
		printf("{\"pack\":\"%s\",\"tensors\":%llu,\"shards\":%llu,\"bytes\":%llu,"
		       "\"written\":%llu,\"seconds\":%.3f,\"mb_per_s\":%.1f}\n", o.out,
		       (unsigned long long)s.tensors, (unsigned long long)s.shards,
		       (unsigned long long)s.bytes, (unsigned long long)s.data_bytes, secs, mbps);
	else if (tf_cli_chatty())
		fprintf(stderr, "tf-pack-synth: wrote '%s': %llu tensors in %llu shards, %.1f MB of "
			"tensor data%s, %.2f s (%.0f MB/s)\n", o.out, (unsigned long long)s.tensors,
			(unsigned long long)s.shards, (double)s.bytes / 1e6,
			o.sparse ? " (sparse)" : "", secs, mbps);
	return 0;
}
