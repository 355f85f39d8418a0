/* decode.c: tf-bench decode: the model's prefill and decode throughput on
 * the CPU backend (compute/group.h: --world ranks on threads, each with
 * --threads workers; loaded from the pack or from tf-prepare's --prepared
 * folder) or on one GPU (--backend cuda, --device), for a pack or a
 * synthetic pack of a preset (--layers: its first N layers). On the CPU a
 * preset's pack is written to a temporary folder; on a GPU only its
 * headers are (a sparse pack), and the weights are generated in device
 * memory (model.h: synthetic), so a release-shaped rank needs no disk and
 * no upload. One sequence is prefilled with --ctx tokens (one call,
 * timed: prefill tokens/s); for each --rows value B it is forked into B
 * (full cache pages shared), then the B are decoded together, one row per
 * sequence per call, the next token drawn greedily on the backend, for
 * about --seconds (decode tokens/s = B x steps / wall time). On a GPU each
 * row also prints the step's byte floor (floor.c) over the copy bandwidth
 * measured in the same run, and the ratio of the measured step to it.
 *
 * With --draft (packs with DSpark blocks), greedy speculative decoding
 * follows on the same sequences: each step drafts a block per sequence
 * (tf_model_group_draft, greedy), verifies [anchor, drafts] in one call,
 * keeps the drafts up to the first that differs from the model's argmax
 * plus the model's own next token, and rolls the rest back: the acceptance
 * rate (accepted / drafted), tokens per step, tokens/s, and the wall time
 * of one draft call (all B sequences). The drafted run starts from the
 * same forks as the plain one, and its tokens must equal plain greedy
 * decoding's (compared position by position; a difference exits 1); the
 * rate measures the drafter, not the model.
 *
 * Row b of a case starts from the same fork and token in every case, so
 * it must draw the tokens it drew among fewer rows: the rows' tokens are
 * compared with the earlier cases' (solo_checked, solo_differ); with
 * --batch-invariant a difference exits 1, without it the count shows how
 * batch-variant the default path is.
 *
 * With TF_PHASES set, the phase totals of the model's calls (phases.h)
 * follow the table, summed over the layers by kind. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/cli.h"
#include "base/progress.h"
#include "bench/bench.h"
#include "compute/group.h"
#include "compute/model.h"
#include "compute/ops.h"
#include "compute/sample.h"
#include "model/config.h"
#include "model/synth.h"

/* Sequences decoded together at most. */
#define SEQS_MAX 256

static int argmax(const float *v, uint32_t n)
{
	uint32_t b = 0;
	for (uint32_t i = 1; i < n; i++)
		if (v[i] > v[b])
			b = i;
	return (int)b;
}

/* Copy bandwidth of be in GB/s (bytes read plus bytes written a second):
 * rows_copy of 1 GiB, once to warm up, then timed over 5 copies. The
 * anchor of the step floors on a device. */
static double copy_gbs(struct tf_be *be)
{
	struct tf_tensor x, y;
	tf_status st;
	const int64_t rows = 65536, cols = 16384, reps = 5;
	if ((st = tf_be_tensor(be, &x, TF_DT_U8, 2, rows, cols)) ||
	    (st = tf_be_tensor(be, &y, TF_DT_U8, 2, rows, cols)))
		tf_die_status(st, "decode: copy bandwidth");
	double t0 = 0;
	for (int i = 0; i <= reps && !st; i++) {
		if (i == 1 && !(st = be->ops->sync(be)))
			t0 = tf_now();
		if (!st)
			st = be->ops->rows_copy(be, &x, NULL, &y, NULL);
	}
	if (st || (st = be->ops->sync(be)))
		tf_die_status(st, "decode: copy bandwidth");
	double t = tf_now() - t0;
	be->ops->release(be, &x);
	be->ops->release(be, &y);
	return 2.0 * (double)rows * (double)cols * (double)reps / t / 1e9;
}

/* The next token of each of R rows (greedy): drawn on the backend at one
 * rank, from the gathered logits otherwise. */
static void step(struct tf_model_group *m, int R, const int32_t *ids, const int64_t *pos,
		 const int *sq, float *lg, int32_t *next)
{
	tf_status st;
	if (tf_model_group_world(m) == 1) {
		struct tf_sample_params *greedy = calloc((size_t)R, sizeof *greedy);
		int64_t *draw = malloc(sizeof *draw * (size_t)R);
		if (!greedy || !draw)
			tf_die(71, "out of memory");
		for (int r = 0; r < R; r++)
			draw[r] = pos[r] + 1;
		if ((st = tf_model_forward_sample(tf_model_group_rank(m, 0), R, ids, pos, sq, greedy,
						  draw, next)))
			tf_die_status(st, "forward");
		free(greedy);
		free(draw);
		return;
	}
	uint32_t V = tf_model_group_config(m)->vocab;
	if ((st = tf_model_group_forward(m, R, ids, pos, sq, lg)))
		tf_die_status(st, "forward");
	for (int r = 0; r < R; r++)
		next[r] = argmax(lg + (size_t)r * V, V);
}

struct spec_figures {
	double accept, tokens_per_step, tps, draft_ms;
	int64_t drafted, accepted, steps;
	int64_t checked, differ; /* tokens compared with plain decoding's, and how many differ */
};

/* Greedy speculative decoding of B sequences from their next tokens for
 * about --seconds (at most max_steps steps). Sequence b's tokens in order
 * go to got[b * max_steps ..], at most max_steps of them (ngot[b]). */
static void run_spec(struct tf_model_group *m, int B, const int *seq, int32_t *next,
		     int64_t max_steps, struct spec_figures *out, int32_t *got, int64_t *ngot)
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
			for (int j = 0; j <= a && ngot[b] < max_steps; j++) /* the kept drafts, then g */
				got[(int64_t)b * max_steps + ngot[b]++] = j < a ? draft[b * K + j] : g;
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
				     1e3 * tdraft / (double)steps, drafted, accepted, steps, 0, 0};
	free(draft);
	free(ids);
	free(pos);
	free(sq);
	free(lg);
}

/* What the device did over the decode steps (a CUDA backend's counters). */
struct device_figures {
	double kernels, hits; /* a step: kernels (and cuBLAS calls) queued, graph hits */
	int64_t captures, eager, declined; /* over the steps: graphs captured, steps run
					    * eagerly, captures declined */
	double collectives;   /* a step: rank 0's collectives */
};

/* Each row's tokens as first decoded (in the first case that had the
 * row, among fewer rows), [SEQS_MAX][max_steps]: a later case's row b
 * must draw the same tokens (batch invariance), counted in checked and
 * differ. */
struct solo_tokens {
	int32_t *tok;
	int64_t n[SEQS_MAX];
	int64_t checked, differ;
};

/* Prefill a new sequence of ctx tokens (*seq): tokens/s, and the token
 * drawn at its end. */
static double prefill(struct tf_model_group *m, int64_t ctx, int *seq, int32_t *first)
{
	uint32_t V = tf_model_group_config(m)->vocab;
	int32_t *ids = malloc(sizeof(int32_t) * (size_t)ctx), *next = malloc(sizeof(int32_t) * (size_t)ctx);
	int64_t *pos = malloc(sizeof(int64_t) * (size_t)ctx);
	int *sq = malloc(sizeof(int) * (size_t)ctx);
	float *lg = tf_model_group_world(m) > 1 ? malloc(sizeof(float) * V * (size_t)ctx) : NULL;
	if (!ids || !pos || !sq || !next || (tf_model_group_world(m) > 1 && !lg))
		tf_die(71, "out of memory");
	tf_status st;
	if ((st = tf_model_group_seq_new(m, seq)))
		tf_die_status(st, "sequence");
	for (int64_t p = 0; p < ctx; p++) {
		ids[p] = (int32_t)((p * 131 + 5) % V);
		pos[p] = p;
		sq[p] = *seq;
	}
	double t0 = tf_now();
	step(m, (int)ctx, ids, pos, sq, lg, next);
	double tps = (double)ctx / (tf_now() - t0);
	*first = next[ctx - 1];
	free(ids);
	free(pos);
	free(sq);
	free(lg);
	free(next);
	return tps;
}

/* Fork the prefilled sequence p0 (next token `first`) into B, then decode
 * (and decode with drafts when spec is not NULL); the figures. The drafted
 * run starts again from fresh forks of p0 with the same next tokens, so
 * its tokens are compared with the plain run's, position by position
 * (spec->checked, spec->differ). */
static void run_case(struct tf_model_group *m, int B, int p0, int32_t first, int64_t ctx,
		     int64_t max_steps, double *decode_tps, int64_t *steps_done,
		     struct spec_figures *spec, struct device_figures *dev, struct solo_tokens *solo)
{
	uint32_t V = tf_model_group_config(m)->vocab;
	int seq[SEQS_MAX];
	int64_t n = B;
	int32_t *ids = malloc(sizeof(int32_t) * (size_t)n), *next = malloc(sizeof(int32_t) * (size_t)n);
	int64_t *pos = malloc(sizeof(int64_t) * (size_t)n);
	int *sq = malloc(sizeof(int) * (size_t)n);
	/* logits only where ranks gather them (world > 1) */
	float *lg = tf_model_group_world(m) > 1 ? malloc(sizeof(float) * V * (size_t)n) : NULL;
	if (!ids || !pos || !sq || !next || (tf_model_group_world(m) > 1 && !lg))
		tf_die(71, "out of memory");
	tf_status st;
	for (int b = 0; b < B; b++)
		if ((st = tf_model_group_seq_fork(m, p0, &seq[b])))
			tf_die_status(st, "fork of sequence %d", b);
	for (int b = 0; b < B; b++) /* each its own next token, so rows differ */
		next[b] = (int32_t)((first + 7 * b) % (int32_t)V);
	/* the plain run's tokens, [B][max_steps] */
	int32_t *plain = malloc(sizeof(int32_t) * (size_t)(B * max_steps));
	if (!plain)
		tf_die(71, "out of memory");
	int64_t steps = 0;
	struct tf_be *be = tf_model_be(tf_model_group_rank(m, 0));
	struct tf_be_counters c0 = {0}, c1 = {0};
	bool counted = !tf_cuda_be_counters(be, &c0);
	uint64_t coll0 = tf_model_collectives(tf_model_group_rank(m, 0));
	double t1 = tf_now();
	do {
		for (int b = 0; b < B; b++) {
			ids[b] = next[b];
			pos[b] = ctx + steps;
			sq[b] = seq[b];
		}
		step(m, B, ids, pos, sq, lg, next);
		for (int b = 0; b < B; b++)
			plain[(int64_t)b * max_steps + steps] = next[b];
		steps++;
	} while (steps < max_steps && tf_now() - t1 < bench.seconds);
	*decode_tps = (double)B * (double)steps / (tf_now() - t1);
	*steps_done = steps;
	*dev = (struct device_figures){0};
	double coll = (double)(tf_model_collectives(tf_model_group_rank(m, 0)) - coll0) / (double)steps;
	if (counted && !tf_cuda_be_counters(be, &c1))
		*dev = (struct device_figures){
			(double)(c1.kernels + c1.blas - c0.kernels - c0.blas) / (double)steps,
			(double)(c1.graph_hits - c0.graph_hits) / (double)steps,
			(int64_t)(c1.graph_captures - c0.graph_captures),
			(int64_t)(c1.graph_eager - c0.graph_eager),
			(int64_t)(c1.graph_declined - c0.graph_declined), 0};
	dev->collectives = coll;
	solo->checked = solo->differ = 0;
	for (int b = 0; b < B; b++) {
		int32_t *row = solo->tok + (int64_t)b * max_steps, *now = plain + (int64_t)b * max_steps;
		for (int64_t k = 0; k < steps; k++) {
			if (k < solo->n[b]) {
				solo->checked++;
				solo->differ += row[k] != now[k];
			} else {
				row[k] = now[k];
			}
		}
		solo->n[b] = steps > solo->n[b] ? steps : solo->n[b];
	}
	if (spec) {
		int32_t *got = malloc(sizeof(int32_t) * (size_t)(B * max_steps));
		int64_t *ngot = calloc((size_t)B, sizeof *ngot);
		if (!got || !ngot)
			tf_die(71, "out of memory");
		for (int b = 0; b < B; b++) {
			tf_model_group_seq_free(m, seq[b]);
			if ((st = tf_model_group_seq_fork(m, p0, &seq[b])))
				tf_die_status(st, "fork of sequence %d", b);
			next[b] = (int32_t)((first + 7 * b) % (int32_t)V);
		}
		run_spec(m, B, seq, next, max_steps, spec, got, ngot);
		for (int b = 0; b < B; b++)
			for (int64_t k = 0; k < ngot[b] && k < steps; k++) {
				spec->checked++;
				spec->differ += got[(int64_t)b * max_steps + k] != plain[(int64_t)b * max_steps + k];
			}
		free(got);
		free(ngot);
	}
	free(plain);
	for (int b = 0; b < B; b++)
		tf_model_group_seq_free(m, seq[b]);
	free(ids);
	free(pos);
	free(sq);
	free(lg);
	free(next);
}

/* The phase totals (TF_PHASES) summed by kind: embed, engram, attn, moe,
 * head, out; one line each on stderr. */
static void print_phases(struct tf_model *m)
{
	char *js = tf_model_phases(m);
	if (!js)
		return;
	json_error_t e;
	json_t *j = json_loads(js, 0, &e), *ph = j ? json_object_get(j, "phases") : NULL;
	static const char *const kinds[] = {"embed", "engram", "attn", "moe", "head", "out"};
	double ms[6] = {0}, n[6] = {0}, all = 0;
	const char *key;
	json_t *v;
	json_object_foreach(ph, key, v) {
		const char *dot = strchr(key, '.'), *kind = dot ? dot + 1 : key;
		for (int k = 0; k < 6; k++)
			if (!strcmp(kind, kinds[k])) {
				ms[k] += json_number_value(json_object_get(v, "ms"));
				n[k] += json_number_value(json_object_get(v, "n"));
			}
	}
	for (int k = 0; k < 6; k++)
		all += ms[k];
	fprintf(stderr, "phases (%s, %lld calls): kind ms share\n",
		json_string_value(json_object_get(j, "mode")),
		(long long)json_integer_value(json_object_get(j, "rounds")));
	for (int k = 0; k < 6; k++)
		if (n[k])
			fprintf(stderr, "  %-7s %10.2f %5.1f%%\n", kinds[k], ms[k], all ? 100 * ms[k] / all : 0);
	json_decref(j);
	free(js);
}

int bench_decode(void)
{
	bool cuda = !strcmp(bench.backend, "cuda");
	if (bench.invariant && !cuda)
		tf_usage_error("--batch-invariant is the GPU's path (--backend cuda)");
	if (!!bench.pack == !!bench.preset)
		tf_usage_error("decode: give one of --pack DIR and --preset NAME");
	if (bench.world != 1 && bench.world != 2 && bench.world != 4 && bench.world != 8)
		tf_usage_error("decode: --world %lld (1, 2, 4 or 8)", (long long)bench.world);
	if (bench.devices && !cuda)
		tf_usage_error("--devices needs --backend cuda");
	if (bench.prepared && !bench.pack)
		tf_usage_error("decode: --prepared needs --pack (the folder's pack)");
	if (bench.layers && !bench.preset)
		tf_usage_error("decode: --layers cuts a --preset");
	int64_t rows[16];
	int nrows = bench_parse_list(bench.rows, "rows", 1, SEQS_MAX, rows, 16);
	char tmp[64] = "", dir[128];
	const char *pack = bench.pack;
	tf_status st;
	struct tf_config cfg;
	if (bench.preset) {
		if ((st = tf_config_preset(&cfg, bench.preset)) ||
		    (bench.layers && (st = tf_config_first_layers(&cfg, (uint32_t)bench.layers))))
			tf_die_status(st, "decode: --preset %s", bench.preset);
		const char *td = getenv("TMPDIR");
		snprintf(tmp, sizeof tmp, "%s/tf-bench-XXXXXX", td && *td && strlen(td) < 40 ? td : "/tmp");
		if (!mkdtemp(tmp))
			tf_die(73, "cannot make a temporary folder under %s", tmp);
		snprintf(dir, sizeof dir, "%s/pack", tmp);
		/* the release's widths for its shapes, small ones otherwise; on a
		 * GPU the headers only */
		bool q28 = cfg.hidden == 5120;
		struct tf_synth_opts so = {.config = &cfg, .seed = 1, .sparse = cuda, .q28 = q28,
					   .bits = {2, 3, 4}, .nbits = 3,
					   .codebooks = q28 ? TF_SYNTH_MUL1 : TF_SYNTH_MIXED,
					   .shard_bytes = 1u << 30, .index = true};
		struct tf_synth_stats ss;
		if ((st = tf_synth_write(&so, dir, &ss)))
			tf_die_status(st, "decode: writing the %s pack", bench.preset);
		pack = dir;
	}
	int64_t max_steps = 256, most = rows[0];
	for (int i = 0; i < nrows; i++)
		most = rows[i] > most ? rows[i] : most;
	/* with --draft: plain steps, then speculative steps of up to 8 tokens
	 * each plus a verify block past them */
	struct tf_progress pr;
	tf_progress_init(&pr, "weights", 0, "B");
	struct tf_model_opts mo = {.backend = cuda ? TF_MODEL_CUDA : TF_MODEL_CPU,
				   .device = (int)bench.device, .threads = (int)bench.threads,
				   .slots = (int)most + 1,
				   .max_positions = bench.ctx + max_steps * (bench.draft ? 10 : 1) + 16,
				   .synthetic = cuda && bench.preset, .synth_seed = 1, .progress = &pr,
				   .batch_invariant = bench.invariant};
	/* the prefilled sequence's pages are shared by its forks: each fork
	 * needs its own pages only past the prompt */
	int64_t ppp = (mo.max_positions + 255) / 256 + 1;
	mo.pages = ppp + most * ((mo.max_positions - bench.ctx + 255) / 256 + 2);
	mo.prepared = bench.prepared;
	int devs[8];
	if (bench.devices) {
		int64_t d[8];
		int n = bench_parse_list(bench.devices, "--devices", 0, 1023, d, 8);
		if (n != bench.world)
			tf_usage_error("--devices lists %d GPUs for %lld ranks", n, (long long)bench.world);
		for (int r = 0; r < n; r++)
			devs[r] = (int)d[r];
	}
	struct tf_model_group *m;
	if ((st = tf_model_group_open_on(pack, (int)bench.world, &mo, bench.devices ? devs : NULL,
					 &m))) {
		/* a prepared folder of another pack, rank or world is bad data */
		if (st == TF_ERR_MISMATCH)
			tf_die(65, "decode: %s", tf_errmsg(st));
		tf_die_status(st, "decode: %s", pack);
	}
	if (bench.draft && !tf_model_group_draft_block(m))
		tf_die(65, "decode: --draft: %s has no DSpark blocks", pack);
	struct tf_model *r0 = tf_model_group_rank(m, 0);
	struct bench_floor fl;
	double gbs = 0;
	if (cuda) {
		if ((st = bench_floor_init(pack, tf_model_config(r0), (int)bench.world, &fl)))
			tf_die_status(st, "decode: the floor of %s", pack);
		gbs = copy_gbs(tf_model_be(r0));
	}
	if (!bench.json) {
		if (cuda)
			printf("device %lld: copy %.0f GB/s\n", (long long)bench.device, gbs);
		printf("%-8s %5s %6s %5s %7s %12s %12s %7s%s%s\n", "model", "rows", "ctx", "world",
		       "threads", "prefill-t/s", "decode-t/s", "steps",
		       cuda ? "  step-ms floor-ms x-floor kernels graphed" : "",
		       bench.draft ? "  accept tok/step  spec-t/s draft-ms" : "");
	} else {
		printf("[");
	}
	const char *name = bench.preset ? bench.preset : "pack";
	int p0, code = 0;
	int32_t first;
	struct solo_tokens solo = {.tok = malloc(sizeof(int32_t) * SEQS_MAX * (size_t)max_steps)};
	if (!solo.tok)
		tf_die(71, "out of memory");
	double pf = prefill(m, bench.ctx, &p0, &first);
	for (int i = 0; i < nrows; i++) {
		double dc;
		int64_t steps;
		struct spec_figures sf;
		struct device_figures df;
		run_case(m, (int)rows[i], p0, first, bench.ctx, max_steps, &dc, &steps,
			 bench.draft ? &sf : NULL, &df, &solo);
		if (bench.invariant && solo.differ) {
			tf_warn("decode: --batch-invariant: %lld of %lld tokens at %lld rows differ from "
				"the same rows' among fewer rows", (long long)solo.differ,
				(long long)solo.checked, (long long)rows[i]);
			code = 1;
		}
		if (bench.draft && sf.differ) {
			tf_warn("decode: --draft: %lld of %lld tokens at %lld rows differ from plain "
				"greedy decoding's", (long long)sf.differ, (long long)sf.checked,
				(long long)rows[i]);
			code = 1;
		}
		double step_ms = 1e3 * (double)rows[i] / dc;
		/* the rank's bytes at the copy bandwidth, plus its collectives at
		 * --collective-us each */
		double floor_ms = cuda ? 1e3 * bench_floor_bytes(&fl, (int)rows[i], bench.ctx) / (gbs * 1e9) +
						 df.collectives * bench.collective_us * 1e-3
				       : 0;
		if (bench.json) {
			printf("%s{\"model\":\"%s\",\"backend\":\"%s\",\"rows\":%lld,\"ctx\":%lld,"
			       "\"world\":%lld,\"threads\":%lld,\"prefill_tps\":%.2f,\"decode_tps\":%.2f,"
			       "\"steps\":%lld,\"step_ms\":%.4f,\"batch_invariant\":%s,"
			       "\"solo_checked\":%lld,\"solo_differ\":%lld",
			       i ? "," : "", name, bench.backend, (long long)rows[i], (long long)bench.ctx,
			       (long long)bench.world, (long long)bench.threads, pf, dc, (long long)steps,
			       step_ms, bench.invariant ? "true" : "false", (long long)solo.checked,
			       (long long)solo.differ);
			printf(",\"collectives_per_step\":%.1f", df.collectives);
			if (cuda)
				printf(",\"collective_us\":%.2f", bench.collective_us);
			if (cuda)
				printf(",\"copy_gbs\":%.1f,\"floor_bytes\":%.0f,\"floor_ms\":%.4f,"
				       "\"x_floor\":%.3f,\"kernels_per_step\":%.1f,\"graph_hits_per_step\":%.3f,"
				       "\"graph_captures\":%lld,\"graph_eager\":%lld,\"graph_declined\":%lld",
				       gbs, bench_floor_bytes(&fl, (int)rows[i], bench.ctx), floor_ms,
				       step_ms / floor_ms, df.kernels, df.hits, (long long)df.captures,
				       (long long)df.eager, (long long)df.declined);
			if (bench.draft)
				printf(",\"draft_block\":%d,\"drafted\":%lld,\"accepted\":%lld,"
				       "\"accept_rate\":%.4f,\"tokens_per_step\":%.3f,\"spec_tps\":%.2f,"
				       "\"spec_steps\":%lld,\"draft_ms\":%.3f,\"spec_checked\":%lld,"
				       "\"spec_differ\":%lld",
				       tf_model_group_draft_block(m), (long long)sf.drafted,
				       (long long)sf.accepted, sf.accept, sf.tokens_per_step, sf.tps,
				       (long long)sf.steps, sf.draft_ms, (long long)sf.checked,
				       (long long)sf.differ);
			printf("}");
		} else {
			printf("%-8s %5lld %6lld %5lld %7lld %12.1f %12.1f %7lld", name,
			       (long long)rows[i], (long long)bench.ctx, (long long)bench.world,
			       (long long)bench.threads, pf, dc, (long long)steps);
			if (cuda)
				printf("  %7.3f %8.3f %7.2f %7.0f %6.2f", step_ms, floor_ms,
				       step_ms / floor_ms, df.kernels, df.hits);
			if (bench.draft)
				printf("  %6.3f %8.2f %9.1f %8.2f", sf.accept, sf.tokens_per_step, sf.tps,
				       sf.draft_ms);
			if (solo.checked)
				printf("  (%lld of %lld tokens unlike fewer rows')", (long long)solo.differ,
				       (long long)solo.checked);
			printf("\n");
		}
		fflush(stdout);
	}
	if (bench.json)
		printf("]\n");
	free(solo.tok);
	tf_model_group_seq_free(m, p0);
	print_phases(r0);
	tf_model_group_free(m);
	if (*tmp) {
		char cmd[192];
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
		if (system(cmd) != 0)
			tf_warn("could not remove %s", tmp);
	}
	return code;
}
