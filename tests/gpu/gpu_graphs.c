/* gpu_graphs.c: decode steps replayed from CUDA graphs (ops->graph,
 * compute/cuda_graph.c) give the logits of the same steps run eagerly, bit
 * for bit, and are replayed, not silently run eagerly.
 *
 * Two CUDA backends hold the tiny preset's random dense weights
 * (tests/unit/forward_model.h) and a KV cache each: one with graphs off
 * (the reference, eager), one with graphs on. Both run the same trials:
 * open two sequences, prefill each with a prompt of P random tokens (a
 * prefill call is never graphed), then STEPS decode steps of both batched
 * (R = 2, the eager side's greedy picks fed to both), then close them.
 * Every call's logits must be equal bit for bit (memcmp). The tiny model's
 * compressed layers (ratios 1 and 2) change a step's work at every new
 * position, so graphs repeat across trials at the same positions:
 *   1. P = 40: every step is new: captured, no hit.
 *   2. P = 40, other tokens: every step replays (STEPS hits, no capture):
 *      other inputs through the same graphs.
 *   3. P = 40 while a 4 KiB tensor is held on the graphed backend: the
 *      step's blocks move, so its kernels' addresses differ: no hit (a
 *      stale replay would write and read the wrong blocks), captures.
 *   4. P = 40 with it released: the blocks are back: STEPS hits again.
 *   5. P = 1: positions 1 .. STEPS, where attn_keys's pos0 (a kernel
 *      scalar) differs from every step before: no hit at the first two.
 * Kernel counts per step are the same on both sides (a replayed step
 * counts what its dry pass recorded) and are printed. Exit 77 without a
 * GPU; 1 on any difference, or when the graphed side never captured or
 * replayed (a silent fall back to eager fails). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/forward_model.h"
#include "compute/kv.h"
#include "gpu_clone.h"
#include "gpu_util.h"

enum { STEPS = 3, PMAX = 48 };

struct side {
	struct tf_be *be;
	struct tf_fwd_layer layers[TF_CONFIG_MAX_LAYERS];
	struct tf_fwd_weights w;
	struct tf_kv *kv;
	struct tf_fwd *f;
};

static void side_open(struct side *s, int graphs, const struct model *m)
{
	const struct tf_config *c = &m->c;
	GPU_OK(tf_cuda_be_new(0, &s->be));
	GPU_OK(tf_cuda_be_set_graphs(s->be, graphs));
	clone_weights(s->be, c, &m->w, m->layers, s->layers, &s->w);
	struct tf_kv_config kc;
	tf_fwd_kv_config(c, 16, 4, 1024, &kc);
	GPU_OK(tf_kv_new(s->be, &kc, &s->kv));
	GPU_OK(tf_fwd_new(s->be, c, &s->w, s->kv, engram_rows, NULL, &s->f));
}

/* The first element where a and b differ in bits, or -1. */
static int64_t differ(const float *a, const float *b, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		if (memcmp(&a[i], &b[i], sizeof a[i]))
			return i;
	return -1;
}

static void counters(struct tf_be *be, struct tf_be_counters *c)
{
	GPU_OK(tf_cuda_be_counters(be, c));
}

/* Per decode step of a trial: the graphed side's hits and captures. */
struct trial {
	uint64_t hits[STEPS], captures[STEPS];
	uint64_t kernels_ref, kernels_graph; /* over the trial's decode steps */
};

static void trial(struct side *ref, struct side *gr, int P, struct tf_rng *r, const char *what,
		  struct trial *t)
{
	const int64_t V = 512;
	static float la[PMAX * 512], lb[PMAX * 512];
	int32_t ids[PMAX];
	int64_t pos[PMAX];
	int seq[PMAX], qa[2], qb[2];
	memset(t, 0, sizeof *t);
	for (int q = 0; q < 2; q++) { /* prefill, eager on both sides */
		GPU_OK(tf_kv_open(ref->kv, &qa[q]));
		GPU_OK(tf_kv_open(gr->kv, &qb[q]));
		for (int i = 0; i < P; i++) {
			ids[i] = (int32_t)(3 + tf_rng_below(r, (uint64_t)V - 3));
			pos[i] = i;
			seq[i] = qa[q];
		}
		GPU_OK(tf_fwd_run(ref->f, P, ids, pos, seq, la));
		for (int i = 0; i < P; i++)
			seq[i] = qb[q];
		GPU_OK(tf_fwd_run(gr->f, P, ids, pos, seq, lb));
		int64_t d = differ(la, lb, (int64_t)P * V);
		GPU_CHECK(d < 0, "%s: prefill of sequence %d: logit %lld differs", what, q, (long long)d);
	}
	int32_t next[2] = {(int32_t)gpu_argmax(la + (P - 1) * V, V), 7};
	for (int s = 0; s < STEPS; s++) {
		struct tf_be_counters a0, a1, b0, b1;
		counters(ref->be, &a0);
		counters(gr->be, &b0);
		for (int q = 0; q < 2; q++) {
			ids[q] = next[q];
			pos[q] = P + s;
		}
		seq[0] = qa[0];
		seq[1] = qa[1];
		GPU_OK(tf_fwd_run(ref->f, 2, ids, pos, seq, la));
		seq[0] = qb[0];
		seq[1] = qb[1];
		GPU_OK(tf_fwd_run(gr->f, 2, ids, pos, seq, lb));
		counters(ref->be, &a1);
		counters(gr->be, &b1);
		int64_t d = differ(la, lb, 2 * V);
		GPU_CHECK(d < 0, "%s: decode step %d (position %d): logit %lld differs: %a against %a",
			  what, s, P + s, (long long)d, d < 0 ? 0.0 : (double)la[d],
			  d < 0 ? 0.0 : (double)lb[d]);
		t->hits[s] = b1.graph_hits - b0.graph_hits;
		t->captures[s] = b1.graph_captures - b0.graph_captures;
		t->kernels_ref += a1.kernels - a0.kernels;
		t->kernels_graph += b1.kernels - b0.kernels;
		GPU_CHECK(a1.graph_hits == a0.graph_hits && a1.graph_captures == a0.graph_captures,
			  "%s: the eager side used a graph", what);
		for (int q = 0; q < 2; q++)
			next[q] = (int32_t)gpu_argmax(la + q * V, V);
	}
	for (int q = 0; q < 2; q++) {
		tf_kv_close(ref->kv, qa[q]);
		tf_kv_close(gr->kv, qb[q]);
	}
	uint64_t h = 0, c = 0;
	for (int s = 0; s < STEPS; s++)
		h += t->hits[s], c += t->captures[s];
	printf("%-36s %d steps: %llu hits, %llu captures; %.1f kernels a step (eager %.1f)\n", what,
	       STEPS, (unsigned long long)h, (unsigned long long)c,
	       (double)t->kernels_graph / STEPS, (double)t->kernels_ref / STEPS);
	GPU_CHECK(t->kernels_graph == t->kernels_ref, "%s: %llu kernels graphed, %llu eager", what,
		  (unsigned long long)t->kernels_graph, (unsigned long long)t->kernels_ref);
}

static uint64_t sum(const uint64_t *v)
{
	uint64_t s = 0;
	for (int i = 0; i < STEPS; i++)
		s += v[i];
	return s;
}

START_TEST(graphs_replay_bit_exact)
{
	static struct model m;
	build(&m, 77);
	m.w.mtp_norm = (struct tf_tensor){0}; /* the backbone only */
	static struct side ref, gr;
	side_open(&ref, 0, &m);
	side_open(&gr, 1, &m);
	struct tf_rng r;
	tf_rng_seed(&r, 11);
	struct trial t;

	/* a later step may repeat an earlier one's work (its shapes are
	 * bucketed, forward_impl.h, and its scalars the same once the window
	 * is full): then it hits that step's graph, which the bit-exact
	 * logits vouch for; the first step of a new shape cannot */
	trial(&ref, &gr, 40, &r, "1. new steps", &t);
	GPU_CHECK(t.hits[0] == 0 && t.captures[0] == 1, "the first new step: %llu hits, %llu captures",
		  (unsigned long long)t.hits[0], (unsigned long long)t.captures[0]);
	GPU_CHECK(sum(t.hits) + sum(t.captures) == STEPS, "%llu hits and %llu captures of %d steps",
		  (unsigned long long)sum(t.hits), (unsigned long long)sum(t.captures), STEPS);

	trial(&ref, &gr, 40, &r, "2. the same steps, other tokens", &t);
	GPU_CHECK(sum(t.hits) == STEPS, "%llu hits of %d repeated steps (graphs fell back?)",
		  (unsigned long long)sum(t.hits), STEPS);
	GPU_CHECK(sum(t.captures) == 0, "%llu captures of repeated steps",
		  (unsigned long long)sum(t.captures));

	struct tf_tensor hold;
	GPU_OK(tf_be_tensor(gr.be, &hold, TF_DT_F32, 1, (int64_t)1024)); /* 4 KiB: moves blocks */
	trial(&ref, &gr, 40, &r, "3. the same steps, blocks moved", &t);
	GPU_CHECK(t.hits[0] == 0, "the first step with moved blocks hit: a stale replay");
	GPU_CHECK(t.captures[0] == 1, "no capture with moved blocks");
	gr.be->ops->release(gr.be, &hold);

	trial(&ref, &gr, 40, &r, "4. the blocks back", &t);
	GPU_CHECK(sum(t.hits) == STEPS, "%llu hits with the blocks back",
		  (unsigned long long)sum(t.hits));

	trial(&ref, &gr, 1, &r, "5. early positions (other scalars)", &t);
	GPU_CHECK(t.hits[0] == 0 && t.hits[1] == 0, "hits at positions 1, 2 (%llu, %llu)",
		  (unsigned long long)t.hits[0], (unsigned long long)t.hits[1]);

	struct tf_be_counters c;
	counters(gr.be, &c);
	printf("graphed side: %llu graph launches, %llu hits, %llu captures, %llu eager, "
	       "%llu declined, %llu cached; %llu kernels, %llu cuBLAS, %llu copies, %llu memsets\n",
	       (unsigned long long)c.graph_launches, (unsigned long long)c.graph_hits,
	       (unsigned long long)c.graph_captures, (unsigned long long)c.graph_eager,
	       (unsigned long long)c.graph_declined, (unsigned long long)c.graph_cached,
	       (unsigned long long)c.kernels, (unsigned long long)c.blas,
	       (unsigned long long)c.copies, (unsigned long long)c.memsets);
	GPU_CHECK(c.graph_launches == c.graph_hits + c.graph_captures, "launches %llu",
		  (unsigned long long)c.graph_launches);
	GPU_CHECK(c.graph_hits >= 2 * STEPS, "graphs never replayed");
	struct side *sides[2] = {&ref, &gr};
	for (int i = 0; i < 2; i++) {
		struct side *s = sides[i];
		tf_fwd_free(s->f);
		tf_kv_free(s->kv);
		tf_be_free(s->be); /* the weights die with the arena */
		for (uint32_t L = 0; L < m.c.layers; L++) {
			free(s->layers[L].w1);
			free(s->layers[L].w2);
			free(s->layers[L].w3);
		}
	}
	unbuild(&m);
	ck_assert_msg(!gpu_failures, "%d checks failed", gpu_failures);
}
END_TEST

int main(void)
{
	struct tf_be *probe;
	tf_status st = tf_cuda_be_new(0, &probe);
	if (st == TF_ERR_UNAVAILABLE) {
		fprintf(stderr, "skip: %s\n", tf_errmsg(st));
		return 77;
	}
	GPU_OK(st);
	tf_be_free(probe);
	Suite *s = suite_create("gpu_graphs");
	TCase *tc = tcase_create("graphs");
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, graphs_replay_bit_exact);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_set_fork_status(sr, CK_NOFORK);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	if (failed)
		gpu_failures++;
	return gpu_result("gpu_graphs");
}
