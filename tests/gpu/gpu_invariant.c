/* gpu_invariant.c: concurrent == solo on the GPU. The CUDA model on its
 * batch-invariant path (model.h batch_invariant, ops.h
 * tf_cuda_be_set_invariant) must give a sequence the same logits, to the
 * bit, whatever else shares its forward calls; the default path is
 * measured beside it (how many logits differ), not bounded.
 *
 * Per preset (tiny, small: every CSA2 mode, Engram, DSpark), on a
 * synthetic pack (tf_synth_write, EXL3 at 2, 3 and 4 bits, mixed
 * codebooks), one model a path, and a probe prompt of 150 tokens:
 *   solo     the probe prefilled alone in one call, then 16 decode steps
 *            alone, greedy on its own picks: the logits of every row;
 *   batched  the probe again on a fresh sequence, prefilled in one call
 *            with 15 other prompts (3 to 300 tokens) before and after it,
 *            then decoded among the 15, which decode their own tokens, two
 *            of them 4 rows a call (verify rows, as drafts make): the
 *            probe's rows must equal solo's, bit for bit;
 *   chunked  the probe prefilled alone in pieces of 37 rows, then decoded
 *            alone: its rows against solo's (reported, and bounded on the
 *            invariant path: a prompt's pieces depend on the other
 *            requests in the engine's rounds);
 *   sampled  4 probes decoded at temperature 0.9 with their own seeds,
 *            alone and among 12 others through tf_model_forward_sample
 *            (device sampling): the tokens must be equal.
 * Exit 0 when every bound held, 1 otherwise, 77 without a GPU. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "compute/model.h"
#include "compute/ops.h"
#include "compute/sample.h"
#include "model/config.h"
#include "model/synth.h"
#include "gpu_util.h"

enum { PROBE = 150, OTHERS = 15, STEPS = 16, CHUNK = 37, SAMPLED = 4, SAMPLE_OTHERS = 12 };

static char tmpdir[64];

static void drop_tmpdir(void)
{
	char cmd[100];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	if (*tmpdir && system(cmd))
		fprintf(stderr, "gpu_invariant: cannot remove '%s'\n", tmpdir);
}

static void make_pack(const char *preset, char *pack, size_t size)
{
	struct tf_config c;
	GPU_OK(tf_config_preset(&c, preset));
	snprintf(pack, size, "%s/%s", tmpdir, preset);
	struct tf_synth_opts so = {.config = &c, .seed = 1, .bits = {2, 3, 4}, .nbits = 3,
				   .codebooks = TF_SYNTH_MIXED, .shard_bytes = 64u << 20,
				   .index = true};
	struct tf_synth_stats ss;
	GPU_OK(tf_synth_write(&so, pack, &ss));
}

static struct tf_model *open_model(const char *pack, bool invariant)
{
	struct tf_model_opts o = {.backend = TF_MODEL_CUDA, .slots = 40, .max_positions = 1024,
				  .batch_invariant = invariant};
	struct tf_model *m;
	tf_status st = tf_model_open(pack, &o, &m);
	if (st == TF_ERR_UNAVAILABLE) {
		fprintf(stderr, "skip: %s\n", tf_errmsg(st));
		exit(77);
	}
	GPU_OK(st);
	return m;
}

/* Rows of a call being built: (seq, pos, id), and where the probe's go. */
struct call {
	int n;
	int32_t ids[8192];
	int64_t pos[8192];
	int sq[8192];
};

static void add(struct call *c, int seq, int64_t p0, const int32_t *ids, int n)
{
	for (int i = 0; i < n; i++) {
		c->ids[c->n] = ids[i];
		c->pos[c->n] = p0 + i;
		c->sq[c->n++] = seq;
	}
}

/* Logits equal to the bit: the count of differing values. */
static int64_t differ(const float *a, const float *b, int64_t n)
{
	int64_t d = 0;
	for (int64_t i = 0; i < n; i++)
		d += memcmp(&a[i], &b[i], sizeof(float)) != 0;
	return d;
}

/* The probe alone: prefill in pieces of `chunk` rows, then STEPS greedy
 * steps; logits [PROBE + STEPS][V] into lg. */
static void solo(struct tf_model *m, const int32_t *probe, int chunk, float *lg)
{
	const int64_t V = tf_model_config(m)->vocab;
	int seq;
	GPU_OK(tf_model_seq_new(m, &seq));
	static struct call c;
	for (int p = 0; p < PROBE; p += chunk) {
		int n = PROBE - p < chunk ? PROBE - p : chunk;
		c.n = 0;
		add(&c, seq, p, probe + p, n);
		GPU_OK(tf_model_forward(m, c.n, c.ids, c.pos, c.sq, lg + (size_t)p * V));
	}
	for (int s = 0; s < STEPS; s++) {
		int32_t id = gpu_argmax(lg + (size_t)(PROBE + s - 1) * V, V);
		c.n = 0;
		add(&c, seq, PROBE + s, &id, 1);
		GPU_OK(tf_model_forward(m, 1, c.ids, c.pos, c.sq, lg + (size_t)(PROBE + s) * V));
	}
	tf_model_seq_free(m, seq);
}

/* The probe among OTHERS: its prompt in one call between theirs, then
 * decode steps beside theirs (others 3 and 9 four rows a call). */
static void batched(struct tf_model *m, struct tf_rng *r, const int32_t *probe, float *lg)
{
	const int64_t V = tf_model_config(m)->vocab;
	int seq, oseq[OTHERS], olen[OTHERS], onext[OTHERS];
	static int32_t oids[OTHERS][300];
	static struct call c;
	GPU_OK(tf_model_seq_new(m, &seq));
	c.n = 0;
	int at = -1;
	for (int o = 0; o < OTHERS; o++) {
		GPU_OK(tf_model_seq_new(m, &oseq[o]));
		olen[o] = 3 + (int)(tf_rng_u64(r) % 298);
		for (int i = 0; i < olen[o]; i++)
			oids[o][i] = (int32_t)(tf_rng_u64(r) % (uint64_t)V);
		add(&c, oseq[o], 0, oids[o], olen[o]);
		if (o == 6) {
			at = c.n;
			add(&c, seq, 0, probe, PROBE);
		}
	}
	float *out = malloc(sizeof(float) * (size_t)V * (size_t)c.n);
	if (!out)
		exit(71);
	GPU_OK(tf_model_forward(m, c.n, c.ids, c.pos, c.sq, out));
	memcpy(lg, out + (size_t)at * V, sizeof(float) * (size_t)PROBE * V);
	for (int o = 0; o < OTHERS; o++) {
		int last = 0; /* the other's last row in the call */
		for (int i = 0; i < c.n; i++)
			if (c.sq[i] == oseq[o])
				last = i;
		onext[o] = gpu_argmax(out + (size_t)last * V, V);
	}
	int64_t olenp[OTHERS];
	for (int o = 0; o < OTHERS; o++)
		olenp[o] = olen[o];
	for (int s = 0; s < STEPS; s++) {
		int32_t id = gpu_argmax(lg + (size_t)(PROBE + s - 1) * V, V);
		c.n = 0;
		int first[OTHERS];
		for (int o = 0; o < OTHERS; o++) {
			if (o == 8) {
				at = c.n;
				add(&c, seq, PROBE + s, &id, 1);
			}
			first[o] = c.n;
			int32_t run[4] = {onext[o], (onext[o] + 1) % (int32_t)V, (onext[o] + 2) % (int32_t)V,
					  (onext[o] + 3) % (int32_t)V};
			int k = o == 3 || o == 9 ? 4 : 1;
			add(&c, oseq[o], olenp[o], run, k);
		}
		GPU_OK(tf_model_forward(m, c.n, c.ids, c.pos, c.sq, out));
		memcpy(lg + (size_t)(PROBE + s) * V, out + (size_t)at * V, sizeof(float) * (size_t)V);
		for (int o = 0; o < OTHERS; o++) {
			onext[o] = gpu_argmax(out + (size_t)first[o] * V, V);
			/* keep one row of the verify runs: roll the rest back */
			if (o == 3 || o == 9)
				GPU_OK(tf_model_seq_rollback(m, oseq[o], olenp[o] + 1));
			olenp[o]++;
		}
	}
	for (int o = 0; o < OTHERS; o++)
		tf_model_seq_free(m, oseq[o]);
	tf_model_seq_free(m, seq);
	free(out);
}

/* SAMPLED probes at temperature 0.9, alone (one at a time) or among
 * SAMPLE_OTHERS others in every call: their tokens [SAMPLED][STEPS]. */
static void sampled(struct tf_model *m, const int32_t *probe, bool among, int32_t tok[][STEPS])
{
	const int64_t V = tf_model_config(m)->vocab;
	static struct call c;
	int n = among ? SAMPLED + SAMPLE_OTHERS : 1;
	for (int p0 = 0; p0 < SAMPLED; p0 += among ? SAMPLED : 1) {
		int seq[SAMPLED + SAMPLE_OTHERS];
		int32_t next[SAMPLED + SAMPLE_OTHERS];
		struct tf_sample_params sp[SAMPLED + SAMPLE_OTHERS];
		int64_t draw[SAMPLED + SAMPLE_OTHERS];
		c.n = 0;
		for (int j = 0; j < n; j++) {
			GPU_OK(tf_model_seq_new(m, &seq[j]));
			/* probe j's prompt is the probe shifted by j; the others
			 * the probe reversed from j */
			int32_t ids[PROBE];
			int who = among ? j : p0;
			for (int i = 0; i < PROBE; i++)
				ids[i] = who < SAMPLED ? probe[(i + who) % PROBE]
						       : probe[(PROBE - 1 - i + who) % PROBE];
			add(&c, seq[j], 0, ids, PROBE);
			sp[j] = (struct tf_sample_params){.seed = 1000 + (uint64_t)who, .temperature = 0.9};
		}
		/* the prompts' last rows are sampled as the first tokens */
		struct tf_sample_params *rsp = calloc((size_t)c.n, sizeof *rsp);
		int64_t *rdraw = calloc((size_t)c.n, sizeof *rdraw);
		int32_t *rnext = calloc((size_t)c.n, sizeof *rnext);
		for (int i = 0; i < c.n; i++) {
			rdraw[i] = c.pos[i] + 1;
			for (int j = 0; j < n; j++)
				if (c.sq[i] == seq[j])
					rsp[i] = sp[j];
		}
		GPU_OK(tf_model_forward_sample(m, c.n, c.ids, c.pos, c.sq, rsp, rdraw, rnext));
		for (int j = 0; j < n; j++)
			next[j] = rnext[(j + 1) * PROBE - 1];
		free(rsp);
		free(rdraw);
		free(rnext);
		for (int s = 0; s < STEPS; s++) {
			int32_t ids[SAMPLED + SAMPLE_OTHERS];
			int64_t pos[SAMPLED + SAMPLE_OTHERS];
			for (int j = 0; j < n; j++) {
				int who = among ? j : p0;
				if (who < SAMPLED)
					tok[who][s] = next[j];
				ids[j] = next[j];
				pos[j] = PROBE + s;
				draw[j] = PROBE + s + 1;
			}
			GPU_OK(tf_model_forward_sample(m, n, ids, pos, seq, sp, draw, next));
		}
		for (int j = 0; j < n; j++)
			tf_model_seq_free(m, seq[j]);
	}
	(void)V;
}

static void run_preset(const char *preset)
{
	char pack[128];
	make_pack(preset, pack, sizeof pack);
	for (int inv = 1; inv >= 0; inv--) {
		struct tf_model *m = open_model(pack, inv);
		const int64_t V = tf_model_config(m)->vocab, rows = PROBE + STEPS;
		struct tf_rng r;
		tf_rng_seed(&r, 7);
		int32_t probe[PROBE];
		for (int i = 0; i < PROBE; i++)
			probe[i] = (int32_t)(tf_rng_u64(&r) % (uint64_t)V);
		float *a = malloc(sizeof(float) * (size_t)(rows * V));
		float *b = malloc(sizeof(float) * (size_t)(rows * V));
		float *ch = malloc(sizeof(float) * (size_t)(rows * V));
		for (int64_t i = 0; i < rows * V; i++)
			b[i] = ch[i] = NAN; /* poisoned */
		solo(m, probe, PROBE, a);
		batched(m, &r, probe, b);
		solo(m, probe, CHUNK, ch);
		int64_t db = differ(a, b, rows * V), dc = differ(a, ch, rows * V);
		int64_t db_rows = 0, dc_rows = 0;
		for (int64_t i = 0; i < rows; i++) {
			db_rows += differ(a + i * V, b + i * V, V) > 0;
			dc_rows += differ(a + i * V, ch + i * V, V) > 0;
		}
		int32_t ts[SAMPLED][STEPS], tb[SAMPLED][STEPS];
		sampled(m, probe, false, ts);
		sampled(m, probe, true, tb);
		int tdiff = 0;
		for (int j = 0; j < SAMPLED; j++)
			for (int s = 0; s < STEPS; s++)
				tdiff += ts[j][s] != tb[j][s];
		printf("%s, %s path: batched %lld of %lld logits differ (%lld of %lld rows); chunked "
		       "%lld (%lld rows); sampled %d of %d tokens differ\n", preset,
		       inv ? "batch-invariant" : "default", (long long)db, (long long)(rows * V),
		       (long long)db_rows, (long long)rows, (long long)dc, (long long)dc_rows, tdiff,
		       SAMPLED * STEPS);
		if (inv) {
			GPU_CHECK(db == 0, "%s: the probe among others: %lld logits differ from solo", preset,
				  (long long)db);
			GPU_CHECK(dc == 0, "%s: the probe in pieces of %d: %lld logits differ from one call",
				  preset, CHUNK, (long long)dc);
			GPU_CHECK(tdiff == 0, "%s: %d sampled tokens differ alone and among others", preset,
				  tdiff);
		}
		free(a);
		free(b);
		free(ch);
		tf_model_free(m);
	}
}

int main(void)
{
	snprintf(tmpdir, sizeof tmpdir, "/tmp/tf-gpuinv-XXXXXX");
	if (!mkdtemp(tmpdir)) {
		perror("gpu_invariant: mkdtemp");
		return 71;
	}
	atexit(drop_tmpdir);
	double t0 = gpu_now();
	run_preset("tiny");
	run_preset("small");
	printf("gpu_invariant: %.1f s\n", gpu_now() - t0);
	return gpu_result("gpu_invariant");
}
