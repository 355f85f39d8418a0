/* check_prepare.c: unit tests of libcore/model/prepare: a synthetic tiny
 * pack prepared for worlds 1 and 2; each image's groups equal the pack's
 * slices byte for byte; run through the EXL3 GEMM, the ranks' parts
 * concatenate (column) or sum (row) to the whole layer; routed experts
 * (stacked or ragged) give each expert's part; natives are converted. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/f16.h"
#include "base/file.h"
#include "base/rng.h"
#include "model/config.h"
#include "model/engram_shard.h"
#include "model/exl3.h"
#include "model/plan.h"
#include "model/prepare.h"
#include "model/synth.h"
#include "pack/pack.h"

static char tmpdir[64];
static struct tf_config cfg;
static struct tf_pack pack;

static void setup(void)
{
	strcpy(tmpdir, "/tmp/tf-prepare-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
	ck_assert_int_eq(tf_config_preset(&cfg, "tiny"), TF_OK);
	struct tf_synth_opts so = {.config = &cfg, .seed = 5, .bits = {2, 3, 4}, .nbits = 3,
				   .codebooks = TF_SYNTH_MIXED, .shard_bytes = 4u << 20, .index = true};
	char *pd = tf_path_join(tmpdir, "pack");
	struct tf_synth_stats ss;
	ck_assert_int_eq(tf_synth_write(&so, pd, &ss), TF_OK);
	ck_assert_int_eq(tf_pack_open(&pack, pd), TF_OK);
	ck_assert_uint_gt(pack.nshards, 1);
	free(pd);
}

static void teardown(void)
{
	tf_pack_close(&pack);
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	ck_assert_int_eq(system(cmd), 0);
}

/* A whole tensor of the pack, read into heap memory. */
static void *read_all(const struct tf_pack_tensor *t)
{
	size_t n = t->t->end - t->t->begin;
	void *b = malloc(n ? n : 1);
	ck_assert_int_eq(tf_pack_read(&pack, t, 0, b, n), TF_OK);
	return b;
}

static void *read_entry(const struct tf_prep_image *im, const char *name, size_t *len)
{
	const struct tf_prep_entry *e = tf_prep_find(im, name);
	ck_assert_msg(e != NULL, "no entry '%s'", name);
	void *b = malloc(e->length ? e->length : 1);
	ck_assert_int_eq(tf_prep_read(im, e, 0, b, e->length), TF_OK);
	if (len)
		*len = e->length;
	return b;
}

static enum tf_exl3_cb cb_of(enum tf_codebook c)
{
	return c == TF_CODEBOOK_MCG ? TF_EXL3_CB_MCG : c == TF_CODEBOOK_MUL1 ? TF_EXL3_CB_MUL1 :
									 TF_EXL3_CB_3INST;
}

/* The whole layer of a planned group, from the pack. */
struct whole {
	struct tf_exl3_layer L;
	void *tr, *suh, *svh;
};

static void whole_load(const struct tf_plan_group *g, struct whole *w)
{
	w->tr = read_all(g->trellis);
	w->suh = read_all(g->suh);
	w->svh = read_all(g->svh);
	w->L = (struct tf_exl3_layer){{g->spec.k, g->spec.n, g->bits, cb_of(g->codebook)}, w->tr,
				      w->suh, w->svh, NULL};
}

static void whole_free(struct whole *w)
{
	free(w->tr);
	free(w->suh);
	free(w->svh);
}

static float *randn(size_t n, uint64_t seed)
{
	struct tf_rng r;
	tf_rng_seed(&r, seed);
	float *x = malloc(4 * n);
	for (size_t i = 0; i < n; i++)
		x[i] = tf_rng_normal(&r);
	return x;
}

/* y of a rank's part (rows k0..k0+kp of the whole input x) into yp. */
static void part_output(uint32_t bits, enum tf_exl3_cb cb, uint32_t k0, uint32_t kp, uint32_t np,
			const void *trellis, const uint16_t *suh, const uint16_t *svh, const float *x,
			float *yp)
{
	struct tf_exl3_layer L = {{kp, np, bits, cb}, trellis, suh, svh, NULL};
	float *xr = malloc(4 * kp);
	memcpy(xr, x + k0, 4 * kp);
	ck_assert_int_eq(tf_exl3_matmul(&L, xr, 1, yp, NULL), TF_OK);
	free(xr);
}

START_TEST(groups_and_slices)
{
	uint8_t key[TF_PREP_KEY_LEN] = {0};
	double worst = 0;
	size_t checked = 0, experts_ragged = 0, experts_stacked = 0;
	for (uint32_t world = 1; world <= 2; world++) {
		struct tf_plan plan[2];
		struct tf_prep_image im[2];
		for (uint32_t r = 0; r < world; r++) {
			ck_assert_int_eq(tf_plan_build(&plan[r], &cfg, &pack, r, world), TF_OK);
			char name[64];
			snprintf(name, sizeof name, "L0.r%uw%u.bin", r, world);
			char *p = tf_path_join(tmpdir, name);
			uint64_t read = 0;
			enum tf_prep_commit sync = r ? TF_PREP_COMMIT_FILE : TF_PREP_COMMIT_SYNC;
			ck_assert_int_eq(tf_prepare_write(&cfg, &pack, &plan[r], 0, key, p, sync, NULL, NULL,
							  &read), TF_OK);
			ck_assert_uint_gt(read, 0);
			struct tf_prep_expect ex = {key, r, world};
			ck_assert_int_eq(tf_prep_open(&im[r], p, &ex), TF_OK);
			ck_assert_int_eq(tf_prep_verify(&im[r]), TF_OK);
			free(p);
		}
		/* every non-expert group of layer 0, through the GEMM */
		for (size_t i = 0; i < plan[0].ngroups; i++) {
			const struct tf_plan_group *g = &plan[0].groups[i];
			if (g->spec.layer != 0 || g->spec.proj == TF_PROJ_EXPERT_W1 ||
			    g->spec.proj == TF_PROJ_EXPERT_W2 || g->spec.proj == TF_PROJ_EXPERT_W3)
				continue;
			if (g->spec.proj == TF_PROJ_WO_A && world > 1)
				continue; /* each rank holds other slices: checked whole below */
			struct whole w;
			whole_load(g, &w);
			float *x = randn(g->spec.k, i), *y = malloc(4 * g->spec.n), *acc = calloc(g->spec.n, 4);
			float *yp = malloc(4 * g->spec.n);
			ck_assert_int_eq(tf_exl3_matmul(&w.L, x, 1, y, NULL), TF_OK);
			for (uint32_t r = 0; r < world; r++) {
				const struct tf_plan_group *gr = &plan[r].groups[i];
				ck_assert_str_eq(gr->spec.name, g->spec.name);
				char nm[160];
				snprintf(nm, sizeof nm, "%s.trellis", g->spec.name);
				void *tr = read_entry(&im[r], nm, NULL);
				snprintf(nm, sizeof nm, "%s.suh", g->spec.name);
				uint16_t *suh = read_entry(&im[r], nm, NULL);
				snprintf(nm, sizeof nm, "%s.svh", g->spec.name);
				uint16_t *svh = read_entry(&im[r], nm, NULL);
				snprintf(nm, sizeof nm, "%s.cb", g->spec.name);
				int32_t *cb = read_entry(&im[r], nm, NULL);
				ck_assert_int_eq(*cb, (int)gr->codebook);
				uint32_t kp = gr->k1 - gr->k0, np = gr->n1 - gr->n0;
				/* byte-exact against the library's slice of the whole */
				ck_assert(!memcmp(suh, (uint16_t *)w.suh + gr->k0, 2 * kp));
				ck_assert(!memcmp(svh, (uint16_t *)w.svh + gr->n0, 2 * np));
				part_output(g->bits, cb_of(g->codebook), gr->k0, kp, np, tr, suh, svh, x, yp);
				if (g->spec.split == TF_SPLIT_WHOLE) /* every rank: the whole trellis */
					ck_assert(!memcmp(tr, w.tr, g->trellis_bytes));
				for (uint32_t n = 0; n < np && (r == 0 || g->spec.split != TF_SPLIT_WHOLE); n++)
					acc[gr->n0 + n] += yp[n];
				free(tr);
				free(suh);
				free(svh);
				free(cb);
			}
			double gw = 0;
			for (uint32_t n = 0; n < g->spec.n; n++)
				gw = fmax(gw, fabs(acc[n] - y[n]));
			ck_assert_msg(gw < 1e-4, "world %u group %s (%s): worst %.3g", world, g->spec.name,
				      tf_split_name(g->spec.split), gw);
			worst = fmax(worst, gw);
			checked++;
			free(x);
			free(y);
			free(yp);
			free(acc);
			whole_free(&w);
		}
		/* routed experts of w1 (column) and w2 (row) */
		for (int wi = 0; wi < 2; wi++) {
			char prefix[64];
			snprintf(prefix, sizeof prefix, "layers.0.ffn.experts.w%d", wi ? 2 : 1);
			enum tf_proj proj = wi ? TF_PROJ_EXPERT_W2 : TF_PROJ_EXPERT_W1;
			for (uint32_t r = 0; r < world; r++) {
				char nm[96];
				snprintf(nm, sizeof nm, "%s.data", prefix);
				bool ragged = tf_prep_find(&im[r], nm) != NULL;
				size_t len;
				snprintf(nm, sizeof nm, "%s%s", prefix, ragged ? ".data" : ".trellis");
				uint8_t *data = read_entry(&im[r], nm, &len);
				snprintf(nm, sizeof nm, "%s.bits", prefix);
				int32_t *bits = read_entry(&im[r], nm, NULL);
				int64_t *offs = NULL;
				if (ragged) {
					snprintf(nm, sizeof nm, "%s.offsets", prefix);
					offs = read_entry(&im[r], nm, NULL);
				}
				snprintf(nm, sizeof nm, "%s.suh", prefix);
				uint16_t *suh = read_entry(&im[r], nm, NULL);
				snprintf(nm, sizeof nm, "%s.svh", prefix);
				uint16_t *svh = read_entry(&im[r], nm, NULL);
				uint32_t e = 0;
				uint64_t at = 0;
				for (size_t i = 0; i < plan[r].ngroups; i++) {
					const struct tf_plan_group *g = &plan[r].groups[i];
					if (g->spec.layer != 0 || g->spec.proj != proj)
						continue;
					uint32_t kp = g->k1 - g->k0, np = g->n1 - g->n0;
					ck_assert_int_eq(bits[e], (int)g->bits);
					uint64_t o = ragged ? (uint64_t)offs[e] : at;
					struct whole w;
					whole_load(g, &w);
					struct tf_exl3_part part;
					struct tf_exl3_geom wg = w.L.g;
					ck_assert_int_eq(tf_exl3_part(&wg, wi ? TF_EXL3_ROW : TF_EXL3_COL, r, world, &part),
							 TF_OK);
					uint8_t *want = malloc(g->trellis_bytes);
					tf_exl3_part_gather(&part, w.tr, 0, want);
					ck_assert(!memcmp(data + o, want, g->trellis_bytes));
					ck_assert(!memcmp(suh + (size_t)e * kp, (uint16_t *)w.suh + g->k0, 2 * kp));
					ck_assert(!memcmp(svh + (size_t)e * np, (uint16_t *)w.svh + g->n0, 2 * np));
					at = o + g->trellis_bytes;
					free(want);
					whole_free(&w);
					e++;
				}
				ck_assert_uint_eq(e, cfg.experts);
				ck_assert_uint_eq(at, len);
				ragged ? experts_ragged++ : experts_stacked++;
				free(data);
				free(bits);
				free(offs);
				free(suh);
				free(svh);
			}
		}
		/* natives: attn_norm as f32, the gate as bf16 */
		for (size_t i = 0; i < plan[0].nnatives; i++) {
			const struct tf_plan_native *n = &plan[0].natives[i];
			if (n->spec.layer != 0 || n->spec.store == TF_STORE_TABLE)
				continue;
			size_t len;
			void *got = read_entry(&im[0], n->spec.name, &len), *src = read_all(n->t);
			size_t count = len / (n->spec.store == TF_STORE_HALF ? 2 : 4);
			uint64_t row = (n->t->t->end - n->t->t->begin) / (n->spec.shape[0] ? n->spec.shape[0] : 1);
			const uint8_t *s = (const uint8_t *)src + n->r0 * row;
			for (size_t k = 0; k < count; k++) {
				float v;
				uint16_t h;
				if (n->t->t->dtype == TF_DTYPE_F32)
					memcpy(&v, s + 4 * k, 4);
				else {
					memcpy(&h, s + 2 * k, 2);
					v = n->t->t->dtype == TF_DTYPE_BF16 ? tf_bf16_to_f32(h) : tf_f16_to_f32(h);
				}
				if (n->spec.store == TF_STORE_HALF)
					ck_assert_uint_eq(((uint16_t *)got)[k], tf_f32_to_bf16(v));
				else
					ck_assert(((float *)got)[k] == v);
			}
			free(got);
			free(src);
		}
		for (uint32_t r = 0; r < world; r++) {
			tf_prep_close(&im[r]);
			tf_plan_release(&plan[r]);
		}
	}
	printf("prepare: %zu groups, %zu ragged + %zu stacked expert sets; worst |parts - whole| = %.3g "
	       "(tolerance 1e-4)\n", checked, experts_ragged, experts_stacked, worst);
	ck_assert_uint_gt(checked, 5);
	ck_assert(worst < 1e-4);
}
END_TEST

START_TEST(key_follows_pack)
{
	uint8_t k1[32], k2[32], k3[32];
	ck_assert_int_eq(tf_prepare_key(&pack, 0, 2, "", k1), TF_OK);
	ck_assert_int_eq(tf_prepare_key(&pack, 0, 2, "", k2), TF_OK);
	ck_assert(!memcmp(k1, k2, 32));
	ck_assert_int_eq(tf_prepare_key(&pack, 1, 2, "", k3), TF_OK);
	ck_assert(memcmp(k1, k3, 32));
	/* another pack (another seed): another key */
	struct tf_synth_opts so = {.config = &cfg, .seed = 6, .bits = {3}, .nbits = 1,
				   .codebooks = TF_SYNTH_MUL1, .shard_bytes = 4u << 20, .index = true};
	char *pd = tf_path_join(tmpdir, "pack2");
	struct tf_synth_stats ss;
	struct tf_pack p2;
	ck_assert_int_eq(tf_synth_write(&so, pd, &ss), TF_OK);
	ck_assert_int_eq(tf_pack_open(&p2, pd), TF_OK);
	ck_assert_int_eq(tf_prepare_key(&p2, 0, 2, "", k3), TF_OK);
	ck_assert(memcmp(k1, k3, 32));
	/* one width everywhere: the experts are stacked [E, K/16, N'/16, 48] */
	struct tf_plan plan;
	ck_assert_int_eq(tf_plan_build(&plan, &cfg, &p2, 1, 2), TF_OK);
	char *ip = tf_path_join(tmpdir, "stack.bin");
	ck_assert_int_eq(tf_prepare_write(&cfg, &p2, &plan, 0, k3, ip, TF_PREP_COMMIT_NOSYNC, NULL, NULL, NULL), TF_OK);
	struct tf_prep_image im;
	ck_assert_int_eq(tf_prep_open(&im, ip, NULL), TF_OK);
	ck_assert_int_eq(tf_prep_verify(&im), TF_OK);
	const struct tf_prep_entry *e = tf_prep_find(&im, "layers.0.ffn.experts.w1.trellis");
	ck_assert_ptr_nonnull(e);
	ck_assert_ptr_null(tf_prep_find(&im, "layers.0.ffn.experts.w1.data"));
	ck_assert_uint_eq(e->ndim, 4);
	ck_assert_uint_eq(e->shape[0], cfg.experts);
	ck_assert_uint_eq(e->shape[1], cfg.hidden / 16);
	ck_assert_uint_eq(e->shape[2], cfg.expert_width / 2 / 16);
	ck_assert_uint_eq(e->shape[3], 48);
	e = tf_prep_find(&im, "layers.0.ffn.experts.w1.cb");
	int32_t cb;
	ck_assert_int_eq(tf_prep_read(&im, e, 0, &cb, 4), TF_OK);
	ck_assert_int_eq(cb, TF_CODEBOOK_MUL1);
	tf_prep_close(&im);
	tf_plan_release(&plan);
	free(ip);
	tf_pack_close(&p2);
	free(pd);
}
END_TEST

START_TEST(engram_layout)
{
	/* the release's check values (dsv41-model-facts.md §5) */
	struct tf_config rel;
	uint64_t lo, hi, total;
	ck_assert_int_eq(tf_config_preset(&rel, "release"), TF_OK);
	ck_assert_uint_eq(tf_config_hash_cols(&rel), 24);
	ck_assert_int_eq(tf_prepare_engram_range(&rel, 0, 0, 24, &lo, &hi, &total), TF_OK);
	ck_assert_uint_eq(lo, 0);
	ck_assert_uint_eq(hi, 16000057); /* p[0][0] */
	ck_assert_uint_eq(total, rel.engram_rows[0]);
	ck_assert_int_eq(tf_prepare_engram_range(&rel, 0, 23, 24, &lo, &hi, &total), TF_OK);
	ck_assert_uint_eq(lo, 368005705); /* offset[0][23] */
	ck_assert_int_eq(tf_prepare_engram_range(&rel, 1, 23, 24, &lo, &hi, &total), TF_OK);
	ck_assert_uint_eq(hi - lo, 16000889); /* p[1][23] */
	ck_assert_uint_eq(hi, total);
	rel.engram_rows[1]++;
	ck_assert_int_eq(tf_prepare_engram_range(&rel, 1, 0, 2, &lo, &hi, &total), TF_ERR_CONFIG);

	/* a tiny pack's shards: the rows of the rank's columns, checked */
	for (uint32_t world = 1; world <= 2; world++)
		for (uint32_t r = 0; r < world; r++) {
			struct tf_plan plan;
			ck_assert_int_eq(tf_plan_build(&plan, &cfg, &pack, r, world), TF_OK);
			size_t shards = 0;
			for (size_t i = 0; i < plan.nnatives; i++) {
				const struct tf_plan_native *n = &plan.natives[i];
				if (n->spec.slice != TF_SLICE_ENGRAM)
					continue;
				char name[64];
				tf_engram_shard_name(name, sizeof name, n->spec.layer, r, world);
				char *p = tf_path_join(tmpdir, name);
				uint64_t read;
				ck_assert_int_eq(tf_prepare_engram_write(&cfg, &pack, &plan, n, p, NULL, NULL, &read),
						 TF_OK);
				int ei = tf_config_engram_index(&cfg, n->spec.layer);
				struct tf_engram_expect ex = {n->spec.layer, 0, 0, 0};
				ck_assert_int_eq(tf_prepare_engram_range(&cfg, (uint32_t)ei, r, world, &ex.lo, &ex.hi,
									 &ex.total), TF_OK);
				ck_assert_uint_eq(read, (ex.hi - ex.lo) * TF_ENGRAM_ROW_BYTES);
				uint64_t layer;
				ck_assert_int_eq(tf_prepare_engram_check(p, &ex, &layer), TF_OK);
				ck_assert_uint_eq(layer, n->spec.layer);
				/* its rows are the pack's rows lo..hi-1 */
				uint8_t *all = read_all(n->t), *got = malloc(read);
				FILE *f = fopen(p, "rb");
				ck_assert_int_eq(fseek(f, TF_ENGRAM_SHARD_HEADER, SEEK_SET), 0);
				ck_assert_uint_eq(fread(got, 1, read, f), read);
				fclose(f);
				ck_assert(!memcmp(got, all + ex.lo * TF_ENGRAM_ROW_BYTES, read));
				/* another rank's expectation, a cut file */
				struct tf_engram_expect other = ex;
				other.lo++;
				ck_assert_int_eq(tf_prepare_engram_check(p, &other, NULL), TF_ERR_MISMATCH);
				ck_assert_int_eq(truncate(p, 5000), 0);
				ck_assert_int_eq(tf_prepare_engram_check(p, &ex, NULL), TF_ERR_FORMAT);
				free(all);
				free(got);
				free(p);
				shards++;
			}
			ck_assert_uint_eq(shards, cfg.n_engram);
			tf_plan_release(&plan);
		}
}
END_TEST

Suite *suite_prepare(void)
{
	Suite *s = suite_create("prepare");
	TCase *t = tcase_create("prepare");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 120);
	tcase_add_test(t, groups_and_slices);
	tcase_add_test(t, key_follows_pack);
	tcase_add_test(t, engram_layout);
	suite_add_tcase(s, t);
	return s;
}
