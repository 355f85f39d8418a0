/* engram_cut.h: cut a tensor-parallel rank's Engram row shard out of a
 * pack: the rows of the rank's hash columns of one layer's table tensor
 * ("layers.<L>.engram.table", u8 [rows, 264]) written as
 * engram-l<L>-r<r>of<W>.bin (engram_shard.h). Memory stays flat: rows are
 * copied in bounded chunks. Reentrant. */
#ifndef TF_MODEL_ENGRAM_CUT_H
#define TF_MODEL_ENGRAM_CUT_H

#include <stdint.h>

#include "base/progress.h"
#include "base/status.h"
#include "model/engram_layout.h"
#include "pack/pack.h"

/* Write the shard of Engram layer index l (0-based in the layout) for rank
 * of world to path, atomically. The table must be U8 [lay->rows[l], 264];
 * TF_ERR_NOTFOUND when the pack lacks it, TF_ERR_FORMAT for another shape.
 * progress (or NULL) counts rows. */
tf_status tf_engram_cut(const struct tf_pack *p, const struct tf_engram_layout *lay, uint32_t l,
			uint32_t rank, uint32_t world, const char *path,
			struct tf_progress *progress);

#endif
