/* prepare.h: the converter from a pack and a rank's weight plan to the
 * rank's prepared images (prepared.h): one file per block, L<i>.bin, and
 * top.bin for the top-level tensors.
 *
 * What an image holds (tf-prepared(5) lists the names):
 * - each planned EXL3 group's part: <g>.trellis I16 [K'/16, N'/16, 16·bits],
 *   <g>.suh F16 [K'], <g>.svh F16 [N'], <g>.cb I32 [1] (the codebook);
 * - the routed experts of a projection together, <b>.ffn.experts.<w>.*:
 *   .trellis I16 [E, K'/16, N'/16, 16·bits] when all share a width (stack),
 *   else .data I16 [...] holding them back to back at 16-byte alignment with
 *   .offsets I64 [E] (bytes); always .bits I32 [E], .suh F16 [E, K'],
 *   .svh F16 [E, N'], .cb I32 [1];
 * - natives converted to what the runtime holds: norms and f32-only
 *   tensors as F32, f16/bf16 matrices as BF16 (rounded to nearest even
 *   once), sliced by rows as the plan says.
 * Engram tables are not part of the images: tf-prepare writes each rank's
 * rows as an Engram shard beside them (tf_prepare_engram_*, below).
 *
 * Memory: a writer reads the pack with pread in chunks of at most
 * TF_PREPARE_CHUNK bytes, straight into the image writer's window
 * (TF_PREP_WINDOW bytes, and a second one while a direct write is in
 * flight) or, for reads that gather or convert, into one buffer of
 * TF_PREPARE_CHUNK bytes: 2.25 MiB per writer whatever the pack's size. Functions here are thread-safe for distinct output files. */
#ifndef TF_MODEL_PREPARE_H
#define TF_MODEL_PREPARE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "model/config.h"
#include "model/plan.h"
#include "model/prepared.h"
#include "pack/pack.h"

/* The converter's version: part of every key; bump it when the images'
 * content changes for the same pack. */
#define TF_PREPARE_CONVERTER "tf-prepare/1"
#define TF_PREPARE_CHUNK (256u << 10)

/* The key of rank's images of pack (prepared_dir.c's recipe over every
 * shard's name, size and header digest). options: "" for none. */
tf_status tf_prepare_key(const struct tf_pack *pack, uint32_t rank, uint32_t world,
			 const char *options, uint8_t key[TF_PREP_KEY_LEN]);

/* The layout of one image: declare its entries on w (before begin), and
 * say how many payload bytes it will hold. layer: a block index or
 * TF_PREP_TOP. */
tf_status tf_prepare_declare(const struct tf_config *c, const struct tf_plan *plan, uint32_t layer,
			     struct tf_prep_writer *w, uint64_t *payload_bytes);

/* Write the image of layer to path (atomically). *read_bytes gets the pack
 * bytes read. progress(ctx, n) is called as pack bytes are consumed (may be
 * NULL; called from this thread). commit: see enum tf_prep_commit. */
tf_status tf_prepare_write(const struct tf_config *c, const struct tf_pack *pack,
			   const struct tf_plan *plan, uint32_t layer,
			   const uint8_t key[TF_PREP_KEY_LEN], const char *path,
			   enum tf_prep_commit commit,
			   void (*progress)(void *ctx, uint64_t n), void *ctx, uint64_t *read_bytes);

/* The state of an existing image file. */
enum tf_prepare_state {
	TF_PREPARE_OK,      /* present and valid (verified when asked) */
	TF_PREPARE_MISSING, /* no file */
	TF_PREPARE_DAMAGED, /* present but refused: the message says why */
};
/* Check path against key, rank and world (payload digests too when
 * verify). Returns the state; for DAMAGED, msg (n bytes) gets the reason
 * naming the file and entry. */
enum tf_prepare_state tf_prepare_check(const char *path, const uint8_t key[TF_PREP_KEY_LEN],
				       uint32_t rank, uint32_t world, bool verify, char *msg,
				       size_t n);

/* ---- Engram shards (prepare_engram.c) ----
 *
 * A rank's rows of an Engram layer's table, as engram_cut.h writes them
 * (engram-l<L>-r<r>of<W>.bin, tf-engram(5)): tf-prepare adds them to the
 * rank's folder. The format carries no digest, so checks cover the header
 * and the size. */

/* The table rows [*lo, *hi) that rank of world owns of Engram layer index
 * ei (0-based in engram_layers), and the table's *total rows
 * (engram_layout.h). TF_ERR_CONFIG when the config's Engram settings are
 * inconsistent. */
tf_status tf_prepare_engram_range(const struct tf_config *c, uint32_t ei, uint32_t rank,
				  uint32_t world, uint64_t *lo, uint64_t *hi, uint64_t *total);
/* Write rank's shard of the Engram table native (TF_SLICE_ENGRAM) to path,
 * atomically (fsync and rename). */
tf_status tf_prepare_engram_write(const struct tf_config *c, const struct tf_pack *pack,
				  const struct tf_plan *plan, const struct tf_plan_native *table,
				  const char *path, void (*progress)(void *ctx, uint64_t n), void *ctx,
				  uint64_t *read_bytes);
/* Check a shard file's header against its size and, with expect (non-NULL),
 * against the layer and rows it should hold. *layer (may be NULL) gets the
 * header's layer. TF_ERR_NOTFOUND when missing, TF_ERR_FORMAT or
 * TF_ERR_MISMATCH naming the file otherwise. */
struct tf_engram_expect {
	uint64_t layer, lo, hi, total;
};
tf_status tf_prepare_engram_check(const char *path, const struct tf_engram_expect *expect,
				  uint64_t *layer);

#endif
