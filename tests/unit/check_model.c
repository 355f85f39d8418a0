/* check_model.c: DeepSeek-V4.1 config, tensor names, weight plans and the
 * synthetic pack writer. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/digest.h"
#include "base/file.h"
#include "model/config.h"
#include "model/names.h"
#include "model/plan.h"
#include "model/q28.h"
#include "model/synth.h"
#include "pack/pack.h"

static char dir[64];

static void setup(void)
{
	snprintf(dir, sizeof dir, "/tmp/tf-model-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}

START_TEST(release_topology)
{
	struct tf_config c;
	ck_assert_int_eq(tf_config_preset(&c, "release"), TF_OK);
	ck_assert_int_eq(tf_config_validate(&c), TF_OK);
	ck_assert_uint_eq(tf_config_all_layers(&c), 43);
	ck_assert_int_eq(tf_config_mode(&c, 0), TF_MODE_SWA);
	ck_assert_int_eq(tf_config_mode(&c, 2), TF_MODE_FULL);
	ck_assert_int_eq(tf_config_mode(&c, 20), TF_MODE_FULL);
	ck_assert_int_eq(tf_config_mode(&c, 24), TF_MODE_REINDEX);
	ck_assert_int_eq(tf_config_mode(&c, 30), TF_MODE_REUSE);
	ck_assert_int_eq(tf_config_mode(&c, 41), TF_MODE_SWA);
	ck_assert_int_eq(tf_config_kv_source(&c, 30), 20);
	ck_assert_int_eq(tf_config_index_source(&c, 30), 28);
	ck_assert_int_eq(tf_config_kv_source(&c, 13), 8);
	ck_assert_int_eq(tf_config_kv_source(&c, 1), -1);
	ck_assert_uint_eq(tf_config_experts_of(&c, 41), 128);
	ck_assert_uint_eq(tf_config_topk_of(&c, 41), 3);
	ck_assert_uint_eq(tf_config_hash_cols(&c), 24);
	/* block 2 at world 1: 3 + 8 wo_a + 1 + comp wkv, wgate, ix_wk + ix_wq_b + 3 shared */
	struct tf_group_spec g[1300];
	int n = tf_names_block_groups(&c, 2, g, 1300);
	ck_assert_int_eq(n, 3 + 8 + 1 + 3 + 1 + 3 + 384 * 3);
	ck_assert_str_eq(g[7].name, "layers.2.attn.wo_a.slice.4");
	ck_assert_uint_eq(g[7].k, 4096);
	ck_assert_uint_eq(g[11].k, 8192);
	n = tf_names_block_groups(&c, 14, g, 1300);
	ck_assert_int_eq(g[n - 384 * 3 - 1].proj, TF_PROJ_ENGRAM_WKV);
	ck_assert_uint_eq(g[n - 384 * 3 - 1].k, 6144);
	ck_assert_uint_eq(g[n - 384 * 3 - 1].n, 25600);
	ck_assert_int_eq(tf_names_block_groups(&c, 24, NULL, 0), 3 + 8 + 1 + 1 + 3 + 384 * 3);
	ck_assert_int_eq(tf_names_block_groups(&c, 41, NULL, 0), 3 + 8 + 1 + 3 + 128 * 3);
	ck_assert(tf_names_ignored("vision.blocks.3.mlp.w1.weight"));
	ck_assert(tf_names_ignored("layers.9.ffn.gate.bias_vl"));
	ck_assert(!tf_names_ignored("layers.2.attn.kv_norm.weight"));
}
END_TEST

START_TEST(presets_valid)
{
	static const char *const names[] = {"tiny", "small", "release"};
	for (int i = 0; i < 3; i++) {
		struct tf_config c, d;
		ck_assert_int_eq(tf_config_preset(&c, names[i]), TF_OK);
		ck_assert_int_eq(tf_config_validate(&c), TF_OK);
		/* every CSA2 mode and both Engram layers appear */
		bool seen[4] = {false};
		for (uint32_t l = 0; l < tf_config_all_layers(&c); l++)
			seen[tf_config_mode(&c, l)] = true;
		ck_assert(seen[0] && seen[1] && seen[2] && seen[3]);
		ck_assert_uint_eq(c.n_engram, 2);
		json_t *j = tf_config_to_json(&c);
		ck_assert_int_eq(tf_config_from_json(&d, j, names[i]), TF_OK);
		json_decref(j);
		ck_assert_mem_eq(&c, &d, sizeof c);
	}
	struct tf_config c;
	ck_assert_int_eq(tf_config_preset(&c, "huge"), TF_ERR_ARG);
}
END_TEST

static tf_status parse_text(struct tf_config *c, const char *text)
{
	json_t *j = json_loads(text, 0, NULL);
	ck_assert_ptr_nonnull(j);
	tf_status st = tf_config_from_json(c, j, "t");
	json_decref(j);
	return st;
}

START_TEST(config_parse)
{
	struct tf_config c;
	/* missing keys keep the release values; text_config wins over the top */
	ck_assert_int_eq(parse_text(&c, "{\"bos_token_id\":0,\"text_config\":{\"num_hidden_layers\":40}}"), TF_OK);
	ck_assert_uint_eq(c.hidden, 5120);
	ck_assert(c.eps == 1e-20f);
	ck_assert(c.yarn && c.rope_factor == 16);
	ck_assert_int_eq(parse_text(&c, "{\"hidden_size\":5000}"), TF_ERR_CONFIG);
	ck_assert_int_eq(parse_text(&c, "{\"hidden_size\":\"x\"}"), TF_ERR_FORMAT);
	ck_assert_int_eq(parse_text(&c, "{\"scoring_func\":\"softmax\"}"), TF_ERR_UNSUPPORTED);
	ck_assert_int_eq(parse_text(&c, "{\"compress_ratios\":[0,3]}"), TF_ERR_CONFIG);
	ck_assert_int_eq(parse_text(&c, "{\"kv_source_layer_ids\":[0]}"), TF_ERR_CONFIG);
	ck_assert_int_eq(parse_text(&c, "{\"engram_layer_ids\":[1]}"), TF_ERR_CONFIG);
	ck_assert_int_eq(parse_text(&c, "{\"rope_scaling\":null}"), TF_OK);
	ck_assert(!c.yarn && c.rope_factor == 1);
	ck_assert_int_eq(parse_text(&c, "[]"), TF_ERR_FORMAT);
}
END_TEST

static void synth(const char *preset, bool sparse, uint64_t shard, struct tf_config *c)
{
	ck_assert_int_eq(tf_config_preset(c, preset), TF_OK);
	struct tf_synth_opts o = {
		.config = c, .seed = 5, .sparse = sparse, .q28 = !strcmp(preset, "release"),
		.bits = {2, 3, 4}, .nbits = 3, .codebooks = TF_SYNTH_MIXED,
		.shard_bytes = shard, .index = true,
	};
	struct tf_synth_stats s;
	ck_assert_int_eq(tf_synth_write(&o, dir, &s), TF_OK);
}

/* The parts of every rank together are the whole group, for worlds 1, 2, 4. */
START_TEST(plan_parts_cover)
{
	struct tf_config c;
	synth("tiny", false, 4u << 20, &c);
	struct tf_pack pk;
	ck_assert_int_eq(tf_pack_open(&pk, dir), TF_OK);
	ck_assert_uint_gt(pk.nshards, 1);
	struct tf_plan whole;
	ck_assert_int_eq(tf_plan_build(&whole, &c, &pk, 0, 1), TF_OK);
	uint32_t worlds[] = {2, 4};
	for (int wi = 0; wi < 2; wi++) {
		uint32_t w = worlds[wi];
		uint64_t trellis = 0, natives = 0;
		size_t wo_a = 0;
		for (uint32_t r = 0; r < w; r++) {
			struct tf_plan p;
			ck_assert_int_eq(tf_plan_build(&p, &c, &pk, r, w), TF_OK);
			for (size_t i = 0; i < p.ngroups; i++) {
				const struct tf_plan_group *g = &p.groups[i];
				trellis += g->trellis_bytes;
				wo_a += g->spec.proj == TF_PROJ_WO_A;
				if (g->spec.split == TF_SPLIT_COL) {
					ck_assert_uint_eq(g->n1 - g->n0, g->spec.n / w);
					ck_assert_uint_eq(g->n0, g->spec.n / w * r);
					ck_assert_uint_eq((g->n1 - g->n0) % 128, 0);
				}
				if (g->spec.split == TF_SPLIT_ROW)
					ck_assert_uint_eq(g->k1 - g->k0, g->spec.k / w);
			}
			for (size_t i = 0; i < p.nnatives; i++)
				if (p.natives[i].spec.slice != TF_SLICE_WHOLE &&
				    p.natives[i].spec.slice != TF_SLICE_ENGRAM)
					natives += p.natives[i].bytes;
			tf_plan_release(&p);
		}
		/* whole groups are held by every rank: count them once per rank */
		uint64_t want = 0, whole_groups = 0;
		for (size_t i = 0; i < whole.ngroups; i++) {
			const struct tf_plan_group *g = &whole.groups[i];
			if (g->spec.split == TF_SPLIT_WHOLE && g->spec.proj != TF_PROJ_WO_A)
				whole_groups += g->trellis_bytes;
			want += g->trellis_bytes;
		}
		ck_assert_uint_eq(trellis, want + (w - 1) * whole_groups);
		ck_assert_uint_eq(wo_a, (size_t)c.o_groups * tf_config_all_layers(&c));
		uint64_t sliced = 0;
		for (size_t i = 0; i < whole.nnatives; i++)
			if (whole.natives[i].spec.slice == TF_SLICE_HEADS ||
			    whole.natives[i].spec.slice == TF_SLICE_VOCAB_ROWS)
				sliced += whole.natives[i].bytes;
		ck_assert_uint_eq(natives, sliced);
	}
	struct tf_plan p;
	ck_assert_int_eq(tf_plan_build(&p, &c, &pk, 0, 8), TF_ERR_CONFIG);
	ck_assert_int_eq(tf_plan_build(&p, &c, &pk, 0, 3), TF_ERR_CONFIG);
	ck_assert_int_eq(tf_plan_build(&p, &c, &pk, 2, 2), TF_ERR_CONFIG);
	tf_plan_release(&whole);
	tf_pack_close(&pk);
}
END_TEST

/* A release-shaped pack with the real q28 widths: each layer's TP-2 rank-0
 * expert and shared trellis bytes equal the reference table's. */
START_TEST(plan_release_q28)
{
	struct tf_config c;
	synth("release", true, 8ull << 30, &c);
	struct tf_pack pk;
	ck_assert_int_eq(tf_pack_open(&pk, dir), TF_OK);
	struct tf_plan p;
	ck_assert_int_eq(tf_plan_build(&p, &c, &pk, 0, 2), TF_OK);
	uint64_t per[64] = {0};
	for (size_t i = 0; i < p.ngroups; i++) {
		const struct tf_plan_group *g = &p.groups[i];
		if (g->spec.proj >= TF_PROJ_SHARED_W1 && g->spec.proj <= TF_PROJ_EXPERT_W3 &&
		    g->spec.proj != TF_PROJ_ENGRAM_WKV)
			per[g->spec.layer] += g->trellis_bytes;
	}
	for (uint32_t l = 0; l < 43; l++)
		ck_assert_msg(per[l] == tf_q28_rank_bytes(l), "layer %u: %llu != %llu", l,
			      (unsigned long long)per[l], (unsigned long long)tf_q28_rank_bytes(l));
	tf_plan_release(&p);
	tf_pack_close(&pk);
}
END_TEST

static void shard_digest(const char *name, char hex[65])
{
	char *p = tf_path_join(dir, name), *data;
	size_t n;
	ck_assert_int_eq(tf_file_read_all(p, 1u << 30, &data, &n), TF_OK);
	uint8_t d[32];
	tf_sha256(data, n, d);
	tf_hex(d, 32, hex);
	free(data);
	free(p);
}

START_TEST(synth_deterministic)
{
	struct tf_config c;
	char a[65], b[65];
	synth("tiny", false, 1ull << 30, &c);
	shard_digest("model-00001-of-00001.safetensors", a);
	synth("tiny", false, 1ull << 30, &c);
	shard_digest("model-00001-of-00001.safetensors", b);
	ck_assert_str_eq(a, b);
	/* a pack must plan: its natives have the right dtypes and shapes */
	struct tf_pack pk;
	ck_assert_int_eq(tf_pack_open(&pk, dir), TF_OK);
	struct tf_plan p;
	ck_assert_int_eq(tf_plan_build(&p, &c, &pk, 0, 1), TF_OK);
	ck_assert_uint_eq(p.nignored, 0);
	tf_plan_release(&p);
	tf_pack_close(&pk);
}
END_TEST

/* Half the release: layers 0-1 sliding, 2-19 at ratio 2 with their
 * sources 2, 8 and 14, Engram at 1 and 14, the three DSpark blocks (ratio
 * 0) after layer 19, targets 17-19; past layer 24 the reindexing layers
 * need the candidate source 20. */
START_TEST(first_layers)
{
	struct tf_config c;
	ck_assert_int_eq(tf_config_preset(&c, "release"), TF_OK);
	ck_assert_int_eq(tf_config_first_layers(&c, 20), TF_OK);
	ck_assert_uint_eq(c.layers, 20);
	ck_assert_uint_eq(c.n_ratios, 23);
	ck_assert_uint_eq(c.compress_ratios[1], 0);
	ck_assert_uint_eq(c.compress_ratios[2], 2);
	ck_assert_uint_eq(c.compress_ratios[19], 2);
	ck_assert_uint_eq(c.compress_ratios[20], 0);
	ck_assert_uint_eq(c.n_kv_sources, 3);
	ck_assert_uint_eq(c.kv_sources[2], 14);
	ck_assert_uint_eq(c.n_index_sources, 3);
	ck_assert_uint_eq(c.n_engram, 2);
	ck_assert_uint_eq(c.engram_layers[1], 14);
	ck_assert_int_eq(c.candidate_source, -1);
	ck_assert_uint_eq(c.dspark_targets[0], 17);
	ck_assert_uint_eq(c.dspark_targets[2], 19);
	ck_assert_uint_eq(tf_config_all_layers(&c), 23);
	ck_assert_int_eq(tf_config_preset(&c, "release"), TF_OK);
	ck_assert_int_eq(tf_config_first_layers(&c, 30), TF_OK);
	ck_assert_int_eq(c.candidate_source, 20);
	ck_assert_uint_eq(c.n_index_sources, 6);
	ck_assert_int_eq(tf_config_preset(&c, "release"), TF_OK);
	ck_assert_int_eq(tf_config_first_layers(&c, 41), TF_ERR_CONFIG);
	ck_assert_int_eq(tf_config_first_layers(&c, 0), TF_ERR_CONFIG);
}
END_TEST

/* tf_synth_src gives the bytes tf_synth_write wrote, read back from the
 * pack, for every tensor, whole and in an inner range. */
START_TEST(synth_src_is_the_pack)
{
	struct tf_config c;
	synth("tiny", false, 1ull << 30, &c);
	struct tf_synth_opts o = {.config = &c, .seed = 5, .bits = {2, 3, 4}, .nbits = 3,
				  .codebooks = TF_SYNTH_MIXED};
	struct tf_synth_src *src;
	ck_assert_int_eq(tf_synth_src_new(&o, &src), TF_OK);
	struct tf_pack pk;
	ck_assert_int_eq(tf_pack_open(&pk, dir), TF_OK);
	size_t checked = 0;
	for (size_t i = 0; i < pk.n; i++) {
		const struct tf_pack_tensor *t = &pk.tensors[i];
		uint64_t n = t->t->end - t->t->begin, off = n / 3, k = n - off - n / 5;
		uint8_t *a = malloc(n + 1), *b = malloc(n + 1);
		ck_assert_int_eq(tf_pack_read(&pk, t, 0, a, n), TF_OK);
		ck_assert_int_eq(tf_synth_src_read(src, t->t->name, 0, b, n), TF_OK);
		ck_assert_msg(!memcmp(a, b, n), "%s differs", t->t->name);
		ck_assert_int_eq(tf_synth_src_read(src, t->t->name, off, b, k), TF_OK);
		ck_assert_msg(!memcmp(a + off, b, k), "%s bytes %llu.. differ", t->t->name,
			      (unsigned long long)off);
		ck_assert_int_eq(tf_synth_src_read(src, t->t->name, n - 1, b, 2), TF_ERR_RANGE);
		free(a);
		free(b);
		checked++;
	}
	ck_assert_uint_gt(checked, 50);
	uint8_t x;
	ck_assert_int_eq(tf_synth_src_read(src, "no.such.tensor", 0, &x, 1), TF_ERR_NOTFOUND);
	tf_pack_close(&pk);
	tf_synth_src_free(src);
}
END_TEST

Suite *suite_model(void)
{
	Suite *s = suite_create("model");
	TCase *t = tcase_create("model");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 120);
	tcase_add_test(t, release_topology);
	tcase_add_test(t, presets_valid);
	tcase_add_test(t, config_parse);
	tcase_add_test(t, plan_parts_cover);
	tcase_add_test(t, plan_release_q28);
	tcase_add_test(t, synth_deterministic);
	tcase_add_test(t, synth_src_is_the_pack);
	tcase_add_test(t, first_layers);
	suite_add_tcase(s, t);
	return s;
}
