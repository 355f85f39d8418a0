/* floor.c: the bytes a decode step must read (tf-bench decode's floor),
 * from the pack's plan for rank 0 of the world and the config (at world W
 * a rank reads its slices, and the ranks read at once):
 * - weights: every backbone block's attention, shared-expert and other
 *   EXL3 parts and its natives (as the pack stores them), the head, B
 *   embedding rows, and of the routed experts the share a step of B rows
 *   touches when routing is uniform over E experts with top-k each:
 *   1 - (1 - k/E)^B of them (synthetic weights route near uniformly);
 *   the DSpark blocks' weights are not counted (a plain step does not run
 *   them) nor the Engram tables (host memory: rows arrive by upload);
 * - the KV cache, per row and backbone layer: the window rows it attends
 *   (min(ctx + 1, window)), and in compressed layers (ratio r, n = ctx / r
 *   rows) the index keys the indexer scores (n in a source layer, the
 *   candidate blocks' rows at most in a reindexing one, none when reusing)
 *   and the pool rows attention reads (min(n, index_topk)), at the cache's
 *   FP8 row sizes (kvrow.h).
 * Time at the floor = bytes / the copy bandwidth measured in the same run. */
#include <math.h>

#include "bench/bench.h"
#include "compute/kvrow.h"
#include "model/plan.h"
#include "pack/pack.h"

tf_status bench_floor_init(const char *pack_dir, const struct tf_config *c, int world,
			   struct bench_floor *f)
{
	struct tf_pack pk;
	struct tf_plan p;
	tf_status st = tf_pack_open(&pk, pack_dir);
	if (st)
		return st;
	if ((st = tf_plan_build(&p, c, &pk, 0, (uint32_t)world))) {
		tf_pack_close(&pk);
		return st;
	}
	*f = (struct bench_floor){.c = *c};
	uint64_t blocks = 0;
	for (uint32_t L = 0; L < tf_config_all_layers(c); L++) {
		const struct tf_plan_layer *l = &p.layers[L];
		uint64_t g = l->attn_bytes + l->shared_bytes + l->other_bytes;
		blocks += g + l->expert_bytes;
		if (L < c->layers) {
			f->fixed += (double)(g + l->native_bytes);
			f->experts += (double)l->expert_bytes;
		}
	}
	f->fixed += (double)(p.group_bytes - blocks); /* the head */
	tf_plan_release(&p);
	tf_pack_close(&pk);
	return TF_OK;
}

double bench_floor_bytes(const struct bench_floor *f, int B, int64_t ctx)
{
	const struct tf_config *c = &f->c;
	double E = c->experts, touched = E > 0 ? 1 - pow(1 - (double)c->topk / E, B) : 0;
	double w = f->fixed + f->experts * touched + (double)B * c->hidden * 2;
	const struct tf_rowfmt win = {TF_KV_FP8, (int)c->head_dim, (int)c->rope_dim, 0};
	const struct tf_rowfmt ik = {TF_KV_FP8, (int)c->index_dim, 0, 1};
	double wb = (double)tf_rowfmt_bytes(&win), ib = (double)tf_rowfmt_bytes(&ik), kv = 0;
	for (uint32_t L = 0; L < c->layers; L++) {
		double rows = (double)(ctx + 1 < c->window ? ctx + 1 : c->window);
		kv += rows * wb;
		uint32_t r = tf_config_ratio(c, L);
		if (!r)
			continue;
		double n = (double)(ctx / r);
		enum tf_layer_mode m = tf_config_mode(c, L);
		double cand = (double)c->candidate_blocks * c->candidate_block_size;
		if (m == TF_MODE_FULL)
			kv += n * ib;
		else if (m == TF_MODE_REINDEX)
			kv += (n < cand ? n : cand) * ib;
		kv += (n < c->index_topk ? n : c->index_topk) * wb;
	}
	return w + (double)B * kv;
}
