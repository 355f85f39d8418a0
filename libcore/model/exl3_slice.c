/* exl3_slice.c: a tensor-parallel rank's part of an EXL3 group.
 *
 * Facts: dsv41-model-facts.md §3 "TP slices" (Group.part: cuts on multiples
 * of world·128; a row split takes contiguous K-tile rows and the suh slice
 * with svh whole; a column split takes a run of tiles in each K-tile row,
 * stride (N/16)·tileBytes, K/16 runs, and the svh slice with suh whole; one
 * covering read, then a gather). exl3-format.md §6: exllamav3's
 * tp_import_split (modules/quant/exl3.py) cuts on tile boundaries; the cut
 * must also fall on 128-blocks for the Hadamard to survive, which is why
 * the split dimension must divide by world·128.
 *
 * Why the parts add up: Ĥ is block-diagonal over 128-blocks, so with K cut
 * into whole blocks y = Σ_ranks ((x_r ⊙ suh_r)·Ĥ·Ŵ_r)·Ĥ ⊙ svh (row split,
 * summed), and with N cut into whole blocks each rank's columns are
 * independent (column split, concatenated). */
#include <string.h>

#include "model/exl3.h"

tf_status tf_exl3_part(const struct tf_exl3_geom *whole, enum tf_exl3_split split, uint32_t rank,
		       uint32_t world, struct tf_exl3_part *part)
{
	tf_status st = tf_exl3_geom_check(whole);
	if (st)
		return st;
	if (!world || rank >= world)
		return tf_err(TF_ERR_ARG, "rank %u of world %u", rank, world);
	size_t tb = tf_exl3_tile_bytes(whole->bits), kt = whole->k / 16, nt = whole->n / 16;
	memset(part, 0, sizeof(*part));
	part->split = split;
	part->g = *whole;
	part->nruns = 1;
	switch (split) {
	case TF_EXL3_WHOLE:
		part->run_bytes = part->stride = tf_exl3_trellis_bytes(whole);
		return TF_OK;
	case TF_EXL3_ROW:
		if (whole->k % (world * 128))
			return tf_err(TF_ERR_FORMAT, "EXL3 row split: K=%u does not divide into %u parts of 128-blocks",
				      whole->k, world);
		part->g.k = whole->k / world;
		part->k0 = rank * part->g.k;
		part->off = (uint64_t)(part->k0 / 16) * nt * tb;
		part->run_bytes = part->stride = (uint64_t)(part->g.k / 16) * nt * tb;
		return TF_OK;
	case TF_EXL3_COL:
		if (whole->n % (world * 128))
			return tf_err(TF_ERR_FORMAT, "EXL3 column split: N=%u does not divide into %u parts of 128-blocks",
				      whole->n, world);
		part->g.n = whole->n / world;
		part->n0 = rank * part->g.n;
		part->off = (uint64_t)(part->n0 / 16) * tb;
		part->stride = (uint64_t)nt * tb;
		part->run_bytes = (uint64_t)(part->g.n / 16) * tb;
		part->nruns = (uint32_t)kt;
		return TF_OK;
	}
	return tf_err(TF_ERR_ARG, "EXL3 split %d: unknown", (int)split);
}

void tf_exl3_part_span(const struct tf_exl3_part *part, uint64_t *lo, uint64_t *hi)
{
	*lo = part->off;
	*hi = part->off + (uint64_t)(part->nruns - 1) * part->stride + part->run_bytes;
}

void tf_exl3_part_gather(const struct tf_exl3_part *part, const void *src, uint64_t src_off,
			 void *dst)
{
	const unsigned char *s = (const unsigned char *)src + (part->off - src_off);
	unsigned char *d = dst;
	for (uint32_t i = 0; i < part->nruns; i++)
		memcpy(d + (size_t)i * part->run_bytes, s + (size_t)i * part->stride, part->run_bytes);
}

void tf_exl3_part_layer(const struct tf_exl3_layer *whole, const struct tf_exl3_part *part,
			uint16_t *trellis_buf, struct tf_exl3_layer *out)
{
	tf_exl3_part_gather(part, whole->trellis, 0, trellis_buf);
	out->g = part->g;
	out->trellis = trellis_buf;
	out->suh = whole->suh + part->k0;
	out->svh = whole->svh + part->n0;
	out->bias = NULL;
	if (whole->bias && (part->split != TF_EXL3_ROW || part->k0 == 0))
		out->bias = whole->bias + part->n0;
}
