/* decode.c: tf-bench decode: the model's prefill and decode throughput on
 * the CPU backend (compute/group.h: --world ranks on threads, each with
 * --threads workers; loaded from the pack or from tf-prepare's --prepared
 * folder), for a pack or a synthetic pack of a preset written to a
 * temporary folder. For each --rows value B: B
 * sequences are prefilled with --ctx tokens each (one call per sequence,
 * timed: prefill tokens/s), then decoded together, one row per sequence
 * per call, the next token the argmax of the last logits, for about
 * --seconds (decode tokens/s = B x steps / wall time).
 *
 * With --draft (packs with DSpark blocks), greedy speculative decoding
 * follows on the same sequences: each step drafts a block per sequence
 * (tf_model_group_draft, greedy), verifies [anchor, drafts] in one call,
 * keeps the drafts up to the first that differs from the model's argmax
 * plus the model's own next token, and rolls the rest back: the acceptance
 * rate (accepted / drafted), tokens per step, tokens/s, and the wall time
 * of one draft call (all B sequences). The tokens equal plain greedy
 * decoding's; the rate measures the drafter, not the model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "base/progress.h"
#include "bench/bench.h"
#include "compute/group.h"
#include "model/config.h"
#include "model/synth.h"

static int argmax(const float *v, uint32_t n)
{
	uint32_t b = 0;
	for (uint32_t i = 1; i < n; i++)
		if (v[i] > v[b])
			b = i;
	return (int)b;
}

struct spec_figures {
	double accept, tokens_per_step, tps, draft_ms;
	int64_t drafted, accepted, steps;
};

/* Greedy speculative decoding of B sequences from their next tokens for
 * about --seconds (at most max_steps steps). */
static void run_spec(struct tf_model_group *m, int B, const int *seq, int32_t *next,
		     int64_t max_steps, struct spec_figures *out)
{
	uint32_t V = tf_model_group_config(m)->vocab;
	int K = tf_model_group_draft_block(m), n = B * (K + 1);
	int32_t *draft = malloc(sizeof(int32_t) * (size_t)(B * K)), *ids = malloc(sizeof(int32_t) * (size_t)n);
	int64_t *pos = malloc(sizeof(int64_t) * (size_t)n);
	int *sq = malloc(sizeof(int) * (size_t)n);
	float *lg = malloc(sizeof(float) * V * (size_t)n);
	if (!draft || !ids || !pos || !sq || !lg)
		tf_die(71, "out of memory");
	tf_status st;
	int64_t steps = 0, drafted = 0, accepted = 0, tokens = 0;
	double t0 = tf_now(), tdraft = 0;
	do {
		double td = tf_now();
		if ((st = tf_model_group_draft(m, B, seq, next, NULL, draft, NULL)))
			tf_die_status(st, "draft");
		tdraft += tf_now() - td;
		for (int b = 0; b < B; b++) { /* verify [anchor, d_0 .. d_K-1] at P .. P + K */
			int64_t P = tf_model_group_seq_len(m, seq[b]);
			for (int j = 0; j <= K; j++) {
				ids[b * (K + 1) + j] = j ? draft[b * K + j - 1] : next[b];
				pos[b * (K + 1) + j] = P + j;
				sq[b * (K + 1) + j] = seq[b];
			}
		}
		if ((st = tf_model_group_forward(m, n, ids, pos, sq, lg)))
			tf_die_status(st, "verify");
		for (int b = 0; b < B; b++) {
			int a = 0;
			int32_t g = argmax(lg + (size_t)(b * (K + 1)) * V, V);
			while (a < K && draft[b * K + a] == g) /* the model agrees: keep and go on */
				g = argmax(lg + (size_t)(b * (K + 1) + ++a) * V, V);
			if ((st = tf_model_group_seq_rollback(m, seq[b], pos[b * (K + 1)] + a + 1)))
				tf_die_status(st, "rollback");
			next[b] = g;
			drafted += K;
			accepted += a;
			tokens += a + 1;
		}
		steps++;
	} while (steps < max_steps && tf_now() - t0 < bench.seconds);
	double t = tf_now() - t0;
	*out = (struct spec_figures){(double)accepted / (double)drafted,
				     (double)tokens / (double)(steps * B), (double)tokens / t,
				     1e3 * tdraft / (double)steps, drafted, accepted, steps};
	free(draft);
	free(ids);
	free(pos);
	free(sq);
	free(lg);
}

/* Prefill B sequences of ctx tokens, then decode (and decode with drafts
 * when spec is not NULL); the figures. */
static void run_case(struct tf_model_group *m, int B, int64_t ctx, int64_t max_steps,
		     double *prefill_tps, double *decode_tps, int64_t *steps_done,
		     struct spec_figures *spec)
{
	uint32_t V = tf_model_group_config(m)->vocab;
	int seq[64];
	int32_t *ids = malloc(sizeof(int32_t) * (size_t)(ctx > B ? ctx : B));
	int64_t *pos = malloc(sizeof(int64_t) * (size_t)(ctx > B ? ctx : B));
	int *sq = malloc(sizeof(int) * (size_t)(ctx > B ? ctx : B));
	float *lg = malloc(sizeof(float) * V * (size_t)(ctx > B ? ctx : B));
	int32_t *next = malloc(sizeof(int32_t) * (size_t)B);
	if (!ids || !pos || !sq || !lg || !next)
		tf_die(71, "out of memory");
	tf_status st;
	double t0 = tf_now();
	for (int b = 0; b < B; b++) {
		if ((st = tf_model_group_seq_new(m, &seq[b])))
			tf_die_status(st, "sequence %d", b);
		for (int64_t p = 0; p < ctx; p++) {
			ids[p] = (int32_t)((p * 131 + (int64_t)b * 17 + 5) % V);
			pos[p] = p;
			sq[p] = seq[b];
		}
		if ((st = tf_model_group_forward(m, (int)ctx, ids, pos, sq, lg)))
			tf_die_status(st, "prefill");
		next[b] = argmax(lg + (size_t)(ctx - 1) * V, V);
	}
	double t1 = tf_now();
	*prefill_tps = (double)B * (double)ctx / (t1 - t0);
	int64_t steps = 0;
	do {
		for (int b = 0; b < B; b++) {
			ids[b] = next[b];
			pos[b] = ctx + steps;
			sq[b] = seq[b];
		}
		if ((st = tf_model_group_forward(m, B, ids, pos, sq, lg)))
			tf_die_status(st, "decode");
		for (int b = 0; b < B; b++)
			next[b] = argmax(lg + (size_t)b * V, V);
		steps++;
	} while (steps < max_steps && tf_now() - t1 < bench.seconds);
	*decode_tps = (double)B * (double)steps / (tf_now() - t1);
	*steps_done = steps;
	if (spec)
		run_spec(m, B, seq, next, max_steps, spec);
	for (int b = 0; b < B; b++)
		tf_model_group_seq_free(m, seq[b]);
	free(ids);
	free(pos);
	free(sq);
	free(lg);
	free(next);
}

int bench_decode(void)
{
	if (strcmp(bench.backend, "cpu"))
		tf_die(69, "decode: only --backend cpu runs decode in this version");
	if (!!bench.pack == !!bench.preset)
		tf_usage_error("decode: give one of --pack DIR and --preset NAME");
	if (bench.world != 1 && bench.world != 2 && bench.world != 4 && bench.world != 8)
		tf_usage_error("decode: --world %lld (1, 2, 4 or 8)", (long long)bench.world);
	if (bench.prepared && !bench.pack)
		tf_usage_error("decode: --prepared needs --pack (the folder's pack)");
	int64_t rows[16];
	int nrows = bench_parse_list(bench.rows, "rows", 1, 64, rows, 16);
	char tmp[64] = "", dir[128];
	const char *pack = bench.pack;
	tf_status st;
	if (bench.preset) {
		struct tf_config cfg;
		if ((st = tf_config_preset(&cfg, bench.preset)))
			tf_die_status(st, "decode");
		const char *td = getenv("TMPDIR");
		snprintf(tmp, sizeof tmp, "%s/tf-bench-XXXXXX", td && *td && strlen(td) < 40 ? td : "/tmp");
		if (!mkdtemp(tmp))
			tf_die(73, "cannot make a temporary folder under %s", tmp);
		snprintf(dir, sizeof dir, "%s/pack", tmp);
		struct tf_synth_opts so = {.config = &cfg, .seed = 1, .bits = {2, 3, 4}, .nbits = 3,
					   .codebooks = TF_SYNTH_MIXED, .shard_bytes = 1u << 30,
					   .index = true};
		struct tf_synth_stats ss;
		if ((st = tf_synth_write(&so, dir, &ss)))
			tf_die_status(st, "decode: writing the %s pack", bench.preset);
		pack = dir;
	}
	int64_t max_steps = 256;
	/* with --draft: plain steps, then speculative steps of up to 8 tokens
	 * each plus a verify block past them */
	struct tf_model_opts mo = {.threads = (int)bench.threads, .slots = 64,
				   .max_positions = bench.ctx + max_steps * (bench.draft ? 10 : 1) + 16};
	mo.pages = (int64_t)rows[0];
	for (int i = 0; i < nrows; i++)
		if (rows[i] > mo.pages)
			mo.pages = rows[i];
	mo.pages *= (mo.max_positions + 255) / 256 + 1;
	mo.prepared = bench.prepared;
	struct tf_model_group *m;
	if ((st = tf_model_group_open(pack, (int)bench.world, &mo, &m))) {
		/* a prepared folder of another pack, rank or world is bad data */
		if (st == TF_ERR_MISMATCH)
			tf_die(65, "decode: %s", tf_errmsg(st));
		tf_die_status(st, "decode: %s", pack);
	}
	if (bench.draft && !tf_model_group_draft_block(m))
		tf_die(65, "decode: --draft: %s has no DSpark blocks", pack);
	if (!bench.json)
		printf("%-8s %5s %6s %5s %7s %12s %12s %7s%s\n", "model", "rows", "ctx", "world",
		       "threads", "prefill-t/s", "decode-t/s", "steps",
		       bench.draft ? "  accept tok/step  spec-t/s draft-ms" : "");
	else
		printf("[");
	const char *name = bench.preset ? bench.preset : "pack";
	for (int i = 0; i < nrows; i++) {
		double pf, dc;
		int64_t steps;
		struct spec_figures sf;
		run_case(m, (int)rows[i], bench.ctx, max_steps, &pf, &dc, &steps,
			 bench.draft ? &sf : NULL);
		if (bench.json) {
			printf("%s{\"model\":\"%s\",\"rows\":%lld,\"ctx\":%lld,\"world\":%lld,"
			       "\"threads\":%lld,\"prefill_tps\":%.2f,\"decode_tps\":%.2f,\"steps\":%lld",
			       i ? "," : "", name, (long long)rows[i], (long long)bench.ctx,
			       (long long)bench.world, (long long)bench.threads, pf, dc, (long long)steps);
			if (bench.draft)
				printf(",\"draft_block\":%d,\"drafted\":%lld,\"accepted\":%lld,"
				       "\"accept_rate\":%.4f,\"tokens_per_step\":%.3f,\"spec_tps\":%.2f,"
				       "\"spec_steps\":%lld,\"draft_ms\":%.3f",
				       tf_model_group_draft_block(m), (long long)sf.drafted,
				       (long long)sf.accepted, sf.accept, sf.tokens_per_step, sf.tps,
				       (long long)sf.steps, sf.draft_ms);
			printf("}");
		} else {
			printf("%-8s %5lld %6lld %5lld %7lld %12.1f %12.1f %7lld", name,
			       (long long)rows[i], (long long)bench.ctx, (long long)bench.world,
			       (long long)bench.threads, pf, dc, (long long)steps);
			if (bench.draft)
				printf("  %6.3f %8.2f %9.1f %8.2f", sf.accept, sf.tokens_per_step, sf.tps,
				       sf.draft_ms);
			printf("\n");
		}
		fflush(stdout);
	}
	if (bench.json)
		printf("]\n");
	tf_model_group_free(m);
	if (*tmp) {
		char cmd[192];
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
		if (system(cmd) != 0)
			tf_warn("could not remove %s", tmp);
	}
	return 0;
}
