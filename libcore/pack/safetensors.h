/* safetensors.h: read and write safetensors files, validated exactly as the
 * format's reference implementation does.
 *
 * Layout: u64 little-endian header length N, N bytes of UTF-8 JSON (an object
 * of name -> {dtype, shape, data_offsets} plus an optional "__metadata__"
 * object of strings), then the data buffer. Validation: N <= 100,000,000;
 * JSON valid, an object, no duplicate keys; known dtypes; shapes of
 * non-negative integers whose product does not overflow; offsets sorted,
 * contiguous from 0, each END - BEGIN = elements x bits / 8 (sub-byte types
 * must end on a byte); 8 + N + the last END = the file size.
 *
 * The reader reads headers only; tensor data is read with pread into the
 * caller's buffers, never whole files. */
#ifndef TF_PACK_SAFETENSORS_H
#define TF_PACK_SAFETENSORS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/hmap.h"
#include "base/status.h"
#include "pack/dtype.h"

#define TF_ST_MAX_HEADER 100000000ULL
#define TF_ST_MAX_DIMS 8

struct tf_st_tensor {
	const char *name;      /* owned by the file */
	enum tf_dtype dtype;
	int ndim;
	uint64_t shape[TF_ST_MAX_DIMS];
	uint64_t begin, end;   /* relative to the data buffer; end exclusive */
};

struct tf_st_file {
	char *path;
	int fd;                /* -1 when parsed from memory */
	uint64_t file_size;
	uint64_t header_len;
	uint64_t data_off;     /* 8 + header_len */
	size_t n;              /* tensors, sorted by begin */
	struct tf_st_tensor *t;
	char *names;           /* one block holding every name */
	json_t *metadata;      /* "__metadata__" or NULL; owned */
	struct tf_hmap by_name;
};

/* Open and validate path; on failure the detail names the file and, where
 * there is one, the tensor. Release with tf_st_close. */
tf_status tf_st_open(struct tf_st_file *f, const char *path);
/* Validate a header held in memory (for fuzzing and tests): json is the N
 * header bytes; file_size is what the whole file would measure. */
tf_status tf_st_parse(struct tf_st_file *f, const char *what, const char *json,
		      uint64_t header_len, uint64_t file_size);
void tf_st_close(struct tf_st_file *f);

/* A tensor by name, or NULL. Borrowed. */
const struct tf_st_tensor *tf_st_find(const struct tf_st_file *f, const char *name);
/* Elements of a tensor (1 for rank 0). */
uint64_t tf_st_numel(const struct tf_st_tensor *t);
/* Read len bytes at offset off inside tensor t into buf. */
tf_status tf_st_read(const struct tf_st_file *f, const struct tf_st_tensor *t, uint64_t off,
		     void *buf, size_t len);
/* Absolute file offset of a tensor's first byte. */
static inline uint64_t tf_st_file_offset(const struct tf_st_file *f, const struct tf_st_tensor *t)
{
	return f->data_off + t->begin;
}

/* Writer: declare every tensor, then begin (writes the header: tensors laid
 * out by descending alignment then name, JSON padded with spaces to a
 * multiple of 8), then write data in any order with tf_st_writer_put, then
 * commit (atomic rename). With sparse, unwritten data stays a hole: real
 * headers, no disk for data. */
struct tf_st_writer {
	char *path;
	size_t n, cap;
	struct tf_st_tensor *t;
	char **names;
	json_t *metadata;
	struct tf_hmap by_name;
	int fd;
	char *tmp;
	uint64_t data_off, data_len;
	bool begun;
};

tf_status tf_st_writer_init(struct tf_st_writer *w, const char *path);
/* Declare a tensor (the name is copied). Duplicates are refused. */
tf_status tf_st_writer_add(struct tf_st_writer *w, const char *name, enum tf_dtype dtype,
			   int ndim, const uint64_t *shape);
/* Set a "__metadata__" entry. */
tf_status tf_st_writer_meta(struct tf_st_writer *w, const char *key, const char *value);
tf_status tf_st_writer_begin(struct tf_st_writer *w);
/* The laid-out tensor of a name (after begin), or NULL. */
const struct tf_st_tensor *tf_st_writer_find(const struct tf_st_writer *w, const char *name);
/* Write len bytes at offset off inside tensor name. */
tf_status tf_st_writer_put(struct tf_st_writer *w, const char *name, uint64_t off,
			   const void *data, size_t len);
/* Size the file, fsync, rename into place. Releases w. */
tf_status tf_st_writer_commit(struct tf_st_writer *w);
/* Drop everything (removes the temporary). Safe after commit. */
void tf_st_writer_release(struct tf_st_writer *w);

#endif
