/* engram_cut.c: a rank's Engram row shard from a pack's table tensor. */
#include "model/engram_cut.h"

#include <stdio.h>
#include <stdlib.h>

#include "model/engram_rows.h"
#include "model/engram_shard.h"

#define CHUNK_ROWS 1024

tf_status tf_engram_cut(const struct tf_pack *p, const struct tf_engram_layout *lay, uint32_t l,
			uint32_t rank, uint32_t world, const char *path,
			struct tf_progress *progress)
{
	char name[64];
	snprintf(name, sizeof(name), "layers.%u.engram.table", lay->layer_ids[l]);
	const struct tf_pack_tensor *t = tf_pack_find(p, name);
	if (!t)
		return tf_err(TF_ERR_NOTFOUND, "'%s': no tensor '%s'", p->dir, name);
	const struct tf_st_tensor *st_t = t->t;
	if (st_t->dtype != TF_DTYPE_U8 || st_t->ndim != 2 || st_t->shape[0] != lay->rows[l] ||
	    st_t->shape[1] != TF_ENGRAM_ROW_BYTES)
		return tf_err(TF_ERR_FORMAT, "'%s': '%s' is not U8 [%llu, %d]", p->dir, name,
			      (unsigned long long)lay->rows[l], TF_ENGRAM_ROW_BYTES);
	uint32_t c0, c1;
	tf_engram_rank_cols(lay->cols, rank, world, &c0, &c1);
	struct tf_engram_shard_header h = {lay->layer_ids[l], 0, 0, lay->rows[l],
					   TF_ENGRAM_ROW_BYTES};
	tf_engram_layout_span(lay, l, c0, c1, &h.lo, &h.hi);
	struct tf_engram_shard_writer w;
	tf_status st = tf_engram_shard_create(&w, path, &h);
	if (st)
		return st;
	/* rows go straight from the pack into the writer's window */
	size_t chunk = tf_engram_shard_max_rows(&w) < CHUNK_ROWS ? tf_engram_shard_max_rows(&w) :
								    CHUNK_ROWS;
	for (uint64_t r = h.lo; r < h.hi && !st;) {
		size_t n = h.hi - r < chunk ? (size_t)(h.hi - r) : chunk;
		void *rows;
		if (!(st = tf_engram_shard_room(&w, n, &rows)) &&
		    !(st = tf_pack_read(p, t, r * TF_ENGRAM_ROW_BYTES, rows, n * TF_ENGRAM_ROW_BYTES)))
			tf_engram_shard_filled(&w);
		if (!st && progress)
			tf_progress_add(progress, n);
		r += n;
	}
	if (st) {
		tf_engram_shard_abort(&w);
		return st;
	}
	return tf_engram_shard_commit(&w);
}
