/* tinypack.h: for the unit suites that load a model from a pack: a
 * synthetic pack of the `tiny` preset (EXL3 at 2, 3 and 4 bits, mixed
 * codebooks, 4 MiB shards, an index) in a fresh folder under /tmp, and the
 * distance between two sets of logits they compare with. */
#ifndef TF_TESTS_TINYPACK_H
#define TF_TESTS_TINYPACK_H

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/config.h"
#include "model/synth.h"

struct tinypack {
	char dir[64];   /* the temporary folder */
	char pack[128]; /* dir/pack */
};

/* Write the pack for seed (cfg NULL: the tiny preset as it is; otherwise
 * that config, with synthesis options o when o is not NULL). tag names the
 * folder (/tmp/tf-TAG-XXXXXX). */
static inline void tinypack_make_with(struct tinypack *p, const char *tag, const struct tf_config *cfg,
				      const struct tf_synth_opts *o)
{
	snprintf(p->dir, sizeof p->dir, "/tmp/tf-%s-XXXXXX", tag);
	ck_assert_ptr_nonnull(mkdtemp(p->dir));
	snprintf(p->pack, sizeof p->pack, "%s/pack", p->dir);
	struct tf_synth_opts so = *o;
	so.config = cfg;
	struct tf_synth_stats ss;
	ck_assert_int_eq(tf_synth_write(&so, p->pack, &ss), TF_OK);
}

static inline void tinypack_make(struct tinypack *p, const char *tag, uint64_t seed)
{
	struct tf_config cfg;
	ck_assert_int_eq(tf_config_preset(&cfg, "tiny"), TF_OK);
	struct tf_synth_opts so = {.seed = seed, .bits = {2, 3, 4}, .nbits = 3,
				   .codebooks = TF_SYNTH_MIXED, .shard_bytes = 4u << 20, .index = true};
	tinypack_make_with(p, tag, &cfg, &so);
}

/* How far logits a are from b: the worst |a - b| over the largest |b|
 * (a NaN anywhere counts as infinitely far). */
static inline double tinypack_rel(const float *a, const float *b, size_t n)
{
	double d = 0, s = 1e-30;
	for (size_t i = 0; i < n; i++) {
		double e = fabs((double)a[i] - b[i]);
		if (e > d || e != e)
			d = e != e ? INFINITY : e;
		if (fabs(b[i]) > s)
			s = fabs(b[i]);
	}
	return d / s;
}

/* Remove the folder and everything in it. */
static inline void tinypack_drop(struct tinypack *p)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", p->dir);
	ck_assert_int_eq(system(cmd), 0);
}

#endif
