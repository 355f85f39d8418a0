/* engram_shard.h: Engram row shards, engram-l<L>-r<r>of<W>.bin: the rows
 * of one layer's table that one tensor-parallel rank owns (the span of its
 * hash columns), read by row index because a full table (~100 GB) is far
 * larger than memory.
 *
 * Layout (tf-engram(5)): a 4096-byte header whose first 48 bytes are six
 * little-endian u64 (magic "DSV41EN1", layer, lo, hi, total, row bytes =
 * 264) and the rest zero, then rows lo .. hi-1 of 264 bytes each
 * (engram_rows.h); the file is exactly 4096 + (hi - lo) * 264 bytes. Rows
 * are the layer's table rows (0 .. total-1), the numbers tf_engram_hash
 * gives.
 *
 * The reader fetches batches of rows with io_uring where the kernel allows
 * it, else with a pool of threads doing pread; TF_ENGRAM_URING=0 forces the
 * threads, TF_ENGRAM_QD sets the queue depth (requests in flight, default
 * 64). A reader serves one fetch at a time (callers lock); the writer is
 * for one thread. */
#ifndef TF_MODEL_ENGRAM_SHARD_H
#define TF_MODEL_ENGRAM_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "base/file.h"
#include "base/seqw.h"
#include "base/status.h"

#define TF_ENGRAM_SHARD_MAGIC "DSV41EN1"
#define TF_ENGRAM_SHARD_HEADER 4096

struct tf_engram_shard_header {
	uint64_t layer;
	uint64_t lo, hi;   /* rows [lo, hi) are in the file */
	uint64_t total;    /* rows in the layer's table */
	uint64_t row_bytes;
};

/* "engram-l<L>-r<r>of<W>.bin" into buf (at least 64 bytes). */
void tf_engram_shard_name(char *buf, size_t n, uint32_t layer, uint32_t rank, uint32_t world);

/* Check a header's first n bytes (n >= 48) against the file size: magic,
 * row bytes 264, lo <= hi <= total, and size == 4096 + (hi - lo) * 264.
 * TF_ERR_FORMAT (TF_ERR_VERSION for another DSV41EN version). */
tf_status tf_engram_shard_header_parse(const void *buf, size_t n, uint64_t file_size,
				       const char *what, struct tf_engram_shard_header *h);

/* Streaming writer: the header, then rows in order, committed atomically.
 * The file is written through a window of TF_ENGRAM_SHARD_WINDOW bytes
 * (base/seqw.h: O_DIRECT where the file system takes it), so the rows
 * reach the disk without a page-cache copy and the commit's fsync has
 * little left to do. */
#define TF_ENGRAM_SHARD_WINDOW (1u << 20)
struct tf_engram_shard_writer {
	struct tf_atomic_file f;
	struct tf_seqw sw;
	struct tf_engram_shard_header h;
	uint64_t written; /* rows so far */
	size_t pend;      /* rows of the open room */
};
tf_status tf_engram_shard_create(struct tf_engram_shard_writer *w, const char *path,
				 const struct tf_engram_shard_header *h);
/* Append n rows of 264 bytes. */
tf_status tf_engram_shard_append(struct tf_engram_shard_writer *w, const uint8_t *rows, size_t n);
/* The same in place: *p gets room for the next n rows (n at most
 * tf_engram_shard_max_rows); fill them (a pread straight into it), then
 * call tf_engram_shard_filled before any other call on w. */
size_t tf_engram_shard_max_rows(const struct tf_engram_shard_writer *w);
tf_status tf_engram_shard_room(struct tf_engram_shard_writer *w, size_t n, void **p);
void tf_engram_shard_filled(struct tf_engram_shard_writer *w);
/* Check that hi - lo rows were written, then fsync and rename. */
tf_status tf_engram_shard_commit(struct tf_engram_shard_writer *w);
void tf_engram_shard_abort(struct tf_engram_shard_writer *w);

struct tf_engram_shard;

/* Open and validate a shard for reading. The caller frees with
 * tf_engram_shard_close. */
tf_status tf_engram_shard_open(const char *path, struct tf_engram_shard **out);
void tf_engram_shard_close(struct tf_engram_shard *s);
const struct tf_engram_shard_header *tf_engram_shard_info(const struct tf_engram_shard *s);
/* "io_uring" or "threads". */
const char *tf_engram_shard_backend(const struct tf_engram_shard *s);

/* Fetch n rows by table row number into out [n][264]. A row outside
 * [lo, hi) is TF_ERR_RANGE (nothing is read); a failed read TF_ERR_IO. */
tf_status tf_engram_shard_fetch(struct tf_engram_shard *s, const uint64_t *rows, size_t n,
				uint8_t *out);

#endif
