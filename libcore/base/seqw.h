/* seqw.h: a sequential file writer through one aligned window of memory.
 *
 * The caller asks for room at a file position (never behind what it asked
 * for before), fills it in place (pread straight into it, convert into it)
 * and asks for the next room; the writer sends the window to the file in
 * large blocks aligned to TF_SEQW_ALIGN. Gaps between rooms are zero in
 * the file. Where the file system takes it the writes are O_DIRECT: the
 * data goes from the window to the device with no copy into the page cache
 * and no dirty pages left for fsync to write, so the final fsync has only
 * the metadata and a cache flush to do. Elsewhere (tmpfs on older kernels,
 * or when asked) they are plain pwrites. Direct writes go out through
 * io_uring, one in flight from a second window while the caller fills the
 * first (in turn where io_uring is missing). Memory: the two windows,
 * fixed at init; released windows (up to 16) are kept for the next
 * writers.
 *
 * A writer is for one thread; writers in different threads are fine. */
#ifndef TF_BASE_SEQW_H
#define TF_BASE_SEQW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define TF_SEQW_ALIGN 4096u

struct tf_seqw {
	int fd;           /* borrowed */
	const char *what; /* the file's name for errors (borrowed) */
	bool direct;      /* O_DIRECT is on for fd */
	uint8_t *win;     /* cap bytes, TF_SEQW_ALIGN-aligned */
	size_t cap;
	uint64_t base;    /* file offset of win[0]; aligned */
	size_t fill;      /* win[0, fill) holds the file's bytes from base */
	uint8_t *spare;   /* the second window of asynchronous writes */
	void *ring;       /* struct io_uring *, or NULL: writes in turn */
	const uint8_t *ifl_p; /* the write in flight (ifl_n 0: none) */
	size_t ifl_n;
	uint64_t ifl_off;
};

/* Start writing fd at offset start (a multiple of TF_SEQW_ALIGN) through
 * a window of cap bytes (a multiple of TF_SEQW_ALIGN, at least twice it).
 * direct: try O_DIRECT (kept off when fd's file system refuses it). */
tf_status tf_seqw_init(struct tf_seqw *s, int fd, const char *what, uint64_t start, size_t cap,
		       bool direct);
/* The largest len tf_seqw_room takes. */
size_t tf_seqw_max_room(const struct tf_seqw *s);
/* Room for the file's bytes [pos, pos + len) in *p: pos must not be behind
 * the end of the last room (TF_ERR_ARG), len at most tf_seqw_max_room.
 * The bytes between the last room's end and pos become zeros. *p is valid
 * until the next call; what it holds then goes to the file. */
tf_status tf_seqw_room(struct tf_seqw *s, uint64_t pos, size_t len, void **p);
/* Write n bytes at off, outside the sequential stream (a header left for
 * last, before tf_seqw_finish): while the writer is direct, data, n and off
 * must be multiples of TF_SEQW_ALIGN. */
tf_status tf_seqw_pwrite(struct tf_seqw *s, const void *data, size_t n, uint64_t off);
/* Write everything up to end (zeros from the last room's end), leave the
 * file exactly end bytes long and fd without O_DIRECT. The caller then
 * fsyncs and closes fd. */
tf_status tf_seqw_finish(struct tf_seqw *s, uint64_t end);
/* Free the window (not fd). Safe on a zeroed or finished s. */
void tf_seqw_release(struct tf_seqw *s);

#endif
