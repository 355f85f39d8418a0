/* prepare_engram.c: tf-prepare's use of the Engram modules: a rank's row
 * range (engram_layout.h), its shard cut out of the pack (engram_cut.h),
 * and the check of a shard already on disk (engram_shard.h). */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"
#include "model/engram_cut.h"
#include "model/engram_layout.h"
#include "model/engram_shard.h"
#include "model/prepare.h"

tf_status tf_prepare_engram_range(const struct tf_config *c, uint32_t ei, uint32_t rank,
				  uint32_t world, uint64_t *lo, uint64_t *hi, uint64_t *total)
{
	struct tf_engram_layout lay;
	uint32_t c0, c1;
	tf_status st = tf_engram_layout_init(&lay, c);
	if (st)
		return st;
	if (ei >= lay.nlayers)
		return tf_err(TF_ERR_ARG, "Engram layer index %u of %u", ei, lay.nlayers);
	tf_engram_rank_cols(lay.cols, rank, world, &c0, &c1);
	tf_engram_layout_span(&lay, ei, c0, c1, lo, hi);
	*total = lay.rows[ei];
	return TF_OK;
}

tf_status tf_prepare_engram_write(const struct tf_config *c, const struct tf_pack *pack,
				  const struct tf_plan *plan, const struct tf_plan_native *table,
				  const char *path, void (*progress)(void *ctx, uint64_t n), void *ctx,
				  uint64_t *read_bytes)
{
	struct tf_engram_layout lay;
	int ei = tf_config_engram_index(c, table->spec.layer);
	uint64_t lo, hi, total;
	*read_bytes = 0;
	if (ei < 0)
		return tf_err(TF_ERR_ARG, "'%s' is not an Engram table", table->spec.name);
	tf_status st = tf_engram_layout_init(&lay, c);
	if (st || (st = tf_prepare_engram_range(c, (uint32_t)ei, plan->rank, plan->world, &lo, &hi,
						&total)))
		return st;
	if ((st = tf_engram_cut(pack, &lay, (uint32_t)ei, plan->rank, plan->world, path, NULL)))
		return st;
	*read_bytes = (hi - lo) * TF_ENGRAM_ROW_BYTES;
	if (progress)
		progress(ctx, *read_bytes);
	return TF_OK;
}

tf_status tf_prepare_engram_check(const char *path, const struct tf_engram_expect *ex,
				  uint64_t *layer)
{
	unsigned char hdr[48];
	struct stat sb;
	struct tf_engram_shard_header h;
	tf_status st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return tf_err_errno(errno == ENOENT ? TF_ERR_NOTFOUND : TF_ERR_IO, "cannot open '%s'", path);
	if (fstat(fd, &sb))
		st = tf_err_errno(TF_ERR_IO, "cannot stat '%s'", path);
	else if ((uint64_t)sb.st_size < sizeof hdr)
		st = tf_err(TF_ERR_FORMAT, "'%s': %lld bytes, too short for an Engram shard (truncated?)",
			    path, (long long)sb.st_size);
	else if (!(st = tf_file_pread(fd, hdr, sizeof hdr, 0)))
		st = tf_engram_shard_header_parse(hdr, sizeof hdr, (uint64_t)sb.st_size, path, &h);
	close(fd);
	if (st)
		return st;
	if (layer)
		*layer = h.layer;
	if (ex && (ex->layer != h.layer || ex->lo != h.lo || ex->hi != h.hi || ex->total != h.total))
		return tf_err(TF_ERR_MISMATCH, "'%s': holds layer %llu rows %llu..%llu of %llu, expected "
			      "layer %llu rows %llu..%llu of %llu", path, (unsigned long long)h.layer,
			      (unsigned long long)h.lo, (unsigned long long)h.hi,
			      (unsigned long long)h.total, (unsigned long long)ex->layer,
			      (unsigned long long)ex->lo, (unsigned long long)ex->hi,
			      (unsigned long long)ex->total);
	return TF_OK;
}
