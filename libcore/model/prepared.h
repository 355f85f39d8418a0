/* prepared.h: prepared images, tf's own file format for a rank's weights in
 * the form the runtime loads without further work, and the folder that
 * holds them. The format is documented in tf-prepared(5).
 *
 * An image file (little-endian):
 *     header  (80 bytes)  magic "TFPREPIM", u32 version, u32 count,
 *                         u64 header_len, u64 file_len, u32 rank,
 *                         u32 world, u8 key[32], u64 reserved (prepared.c)
 *     entries (count)     96 bytes each, then the name, padded to 8
 *     header digest       SHA-256 of every header byte before it
 *     payloads            each at a 4 KiB-aligned offset; file padded to 4 KiB
 * An entry: name, dtype, shape (up to 4 dims), offset, length, SHA-256.
 *
 * A folder: <dir>/<key>/rank<r>of<w>/{L<i>.bin, top.bin} (and the rank's
 * Engram shards, engram-l<L>-r<r>of<w>.bin, see prepare.h), where <key> is the
 * hex of the first 16 bytes of a SHA-256 over the format version, the
 * converter version, the pack's identity (per shard: name, size and the
 * SHA-256 of its header bytes), the rank, the world and the options. Every
 * image also stores the full key, its rank and world, so a file moved into
 * another folder is refused.
 *
 * Reading checks magic, version, the header digest, bounds, alignment and
 * overlaps, the key, rank and world; tf_prep_verify also checks every
 * payload digest and that the padding is zero. Errors name the file and,
 * where there is one, the entry. Writers produce the file atomically (a
 * temporary, fsync, rename; see enum tf_prep_commit). */
#ifndef TF_MODEL_PREPARED_H
#define TF_MODEL_PREPARED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/digest.h"
#include "base/hmap.h"
#include "base/seqw.h"
#include "base/status.h"

#define TF_PREP_MAGIC "TFPREPIM"
#define TF_PREP_VERSION 1u
#define TF_PREP_ALIGN 4096u
#define TF_PREP_MAX_DIMS 4
#define TF_PREP_MAX_ENTRIES 65536u
#define TF_PREP_MAX_NAME 1024u
#define TF_PREP_KEY_LEN 32
/* Hex characters of the key used as the folder name (16 bytes). */
#define TF_PREP_KEY_HEX 32

/* Element types of an entry. Stored as a u8; values only grow at the end. */
enum tf_prep_dtype {
	TF_PREP_F32 = 0,
	TF_PREP_BF16 = 1,
	TF_PREP_F16 = 2,
	TF_PREP_I16 = 3,
	TF_PREP_I32 = 4,
	TF_PREP_U8 = 5,
	TF_PREP_I64 = 6,
	TF_PREP_DTYPE_COUNT
};

/* "f32", "bf16", ...; "?" otherwise. */
const char *tf_prep_dtype_name(enum tf_prep_dtype d);
/* Bytes per element; 0 for an unknown type. */
size_t tf_prep_dtype_size(enum tf_prep_dtype d);

struct tf_prep_entry {
	const char *name;        /* NUL-terminated; owned by the image */
	enum tf_prep_dtype dtype;
	uint32_t ndim;           /* 0..4 */
	uint64_t shape[TF_PREP_MAX_DIMS];
	uint64_t offset, length; /* bytes in the file; offset % 4096 == 0 */
	uint8_t sha256[TF_SHA256_LEN];
};

/* An opened image. */
struct tf_prep_image {
	char *path;
	int fd;                  /* -1 when parsed from memory */
	uint64_t file_len, header_len;
	uint32_t rank, world;
	uint8_t key[TF_PREP_KEY_LEN];
	size_t n;
	struct tf_prep_entry *e; /* in file order */
	char *names;             /* one block for every name */
	struct tf_hmap by_name;
};

/* What a reader expects of an image: NULL key, or a world of 0, checks
 * none of key, rank and world (for listing). */
struct tf_prep_expect {
	const uint8_t *key;
	uint32_t rank, world;
};

/* Open path and validate its header (not the payloads); compare key, rank
 * and world with expect (may be NULL). TF_ERR_FORMAT for damage,
 * TF_ERR_VERSION for another version, TF_ERR_MISMATCH for another key,
 * rank or world, TF_ERR_NOTFOUND for a missing file. Release with
 * tf_prep_close. */
tf_status tf_prep_open(struct tf_prep_image *im, const char *path,
		       const struct tf_prep_expect *expect);
/* Validate an image header held in memory (for fuzzing and tests): buf
 * holds the first len bytes of a file of file_len bytes. */
tf_status tf_prep_parse(struct tf_prep_image *im, const char *what, const void *buf, size_t len,
			uint64_t file_len, const struct tf_prep_expect *expect);
void tf_prep_close(struct tf_prep_image *im);

/* An entry by name, or NULL. Borrowed. */
const struct tf_prep_entry *tf_prep_find(const struct tf_prep_image *im, const char *name);
/* Read len bytes at off inside entry e (bounds checked). */
tf_status tf_prep_read(const struct tf_prep_image *im, const struct tf_prep_entry *e,
		       uint64_t off, void *buf, size_t len);
/* Check every payload's SHA-256 and that all padding is zero, so that any
 * changed byte of the file is found (reads the whole file in chunks of at
 * most 4 MiB). TF_ERR_FORMAT naming the file and entry on the first
 * mismatch. */
tf_status tf_prep_verify(const struct tf_prep_image *im);

/* How a writer's commit makes its file durable and visible. */
enum tf_prep_commit {
	TF_PREP_COMMIT_SYNC = 0,   /* fsync the file, rename, fsync the folder */
	TF_PREP_COMMIT_FILE = 1,   /* fsync the file, rename; the caller then calls
				    * tf_file_sync_dir once for many files */
	TF_PREP_COMMIT_NOSYNC = 2, /* rename only: temporary images */
	TF_PREP_COMMIT_STAGED = 3, /* leave the complete file at tf_prep_staged_path
				    * (not synced, not renamed); the caller makes many
				    * durable at once (syncfs), then tf_prep_publish */
};

/* "<path>.tmp.<pid>": where a writer (and the Engram shard writer) builds
 * path. Heap; the caller frees. */
char *tf_prep_staged_path(const char *path);
/* Rename a staged file into place (after the caller made it durable). */
tf_status tf_prep_publish(const char *path);

/* The writer: declare every entry, begin (lays out offsets, creates
 * "<path>.tmp.<pid>"), write the entries' bytes in file order (the order
 * they were declared in) with put, or in place with room and filled (any
 * number of calls; the digest is taken as they pass), then commit.
 *
 * The payloads go to the file through a window of TF_PREP_WINDOW bytes
 * (base/seqw.h; two while a direct write is in flight): O_DIRECT where the
 * file system takes it and the commit syncs, so they reach the disk in
 * large blocks with no page-cache copy and commit's fsync has little left
 * to write. */
#define TF_PREP_WINDOW (1u << 20)
/* The most bytes one tf_prep_writer_room gives. */
#define TF_PREP_ROOM_MAX (TF_PREP_WINDOW - 4096u)
struct tf_prep_writer {
	char *path, *tmp;
	int fd;
	uint8_t key[TF_PREP_KEY_LEN];
	uint32_t rank, world;
	size_t n, cap;
	struct tf_prep_entry *e;
	char **names;
	uint64_t *done;          /* bytes written per entry */
	struct tf_digest *dig;   /* per entry, live between begin and commit */
	struct tf_hmap by_name;
	uint64_t header_len, file_len;
	struct tf_seqw sw;       /* the payloads' window, from begin */
	int pend;                /* the entry of the open room, or -1 */
	size_t pend_len;         /* and its length */
	void *pend_at;           /* and where it is */
	bool begun;
	int commit;              /* enum tf_prep_commit; 0 unless set after init */
};

tf_status tf_prep_writer_init(struct tf_prep_writer *w, const char *path,
			      const uint8_t key[TF_PREP_KEY_LEN], uint32_t rank, uint32_t world);
/* Declare an entry; its length is the product of shape times the element
 * size. Duplicate names are refused. */
tf_status tf_prep_writer_add(struct tf_prep_writer *w, const char *name, enum tf_prep_dtype dtype,
			     uint32_t ndim, const uint64_t *shape);
tf_status tf_prep_writer_begin(struct tf_prep_writer *w);
/* Append len bytes to entry name (they must follow what was put before,
 * and no later entry may have been written yet: TF_ERR_ARG). */
tf_status tf_prep_writer_put(struct tf_prep_writer *w, const char *name, const void *data,
			     size_t len);
/* The same in place: *p gets room for the next len bytes (at most
 * TF_PREP_ROOM_MAX) of entry name; fill all of them (a pread straight into
 * it, a conversion), then call tf_prep_writer_filled before any other call
 * on w. */
tf_status tf_prep_writer_room(struct tf_prep_writer *w, const char *name, size_t len, void **p);
tf_status tf_prep_writer_filled(struct tf_prep_writer *w);
/* Every entry must be complete. Writes the header, then fsyncs, renames
 * into place and fsyncs the folder, or less as w->commit says (set it
 * between init and commit). Releases w in every case. */
tf_status tf_prep_writer_commit(struct tf_prep_writer *w);
/* Drop everything, removing the temporary. Safe after commit. */
void tf_prep_writer_release(struct tf_prep_writer *w);
/* The file size the declared entries give (after begin). */
uint64_t tf_prep_writer_size(const struct tf_prep_writer *w);

/* ---- folders and keys (prepared_dir.c) ---- */

/* The key of a rank's images. Feed the pack's shards in name order with
 * tf_prep_key_shard, then finish. */
struct tf_prep_key {
	struct tf_digest d;
};
/* converter: the converter's version string (what changes the images'
 * content: tf-prepare bumps it when its output changes). */
tf_status tf_prep_key_begin(struct tf_prep_key *k, const char *converter);
/* One shard: its file name, size and the SHA-256 of its header bytes (the
 * u64 length and the JSON). */
tf_status tf_prep_key_shard(struct tf_prep_key *k, const char *name, uint64_t size,
			    const uint8_t header_sha256[TF_SHA256_LEN]);
/* rank, world and an options string ("" for none), then the key. */
tf_status tf_prep_key_finish(struct tf_prep_key *k, uint32_t rank, uint32_t world,
			     const char *options, uint8_t key[TF_PREP_KEY_LEN]);

/* The SHA-256 of a safetensors file's header bytes (u64 length + JSON),
 * read with pread; the file's size in *size. */
tf_status tf_prep_shard_digest(const char *path, uint8_t out[TF_SHA256_LEN], uint64_t *size);

/* "<dir>/<keyhex>/rank<r>of<w>" (heap; the caller frees). */
char *tf_prep_rank_dir(const char *dir, const uint8_t key[TF_PREP_KEY_LEN], uint32_t rank,
		       uint32_t world);
/* The file name of layer i ("L<i>.bin") or of the top tensors ("top.bin",
 * for layer == TF_PREP_TOP) into buf (at least 16 bytes). */
#define TF_PREP_TOP UINT32_MAX
void tf_prep_file_name(uint32_t layer, char *buf, size_t n);

/* Check that path (relative, inside a prepared folder) has the form
 * "<32 hex>/rank<r>of<w>/<L<i>|top>.bin" or an Engram shard
 * ".../rank<r>of<w>/engram-l<i>-r<r>of<w>.bin": no "..", no absolute
 * paths, no other files. Fills rank and world. For tar import. */
tf_status tf_prep_check_relpath(const char *rel, uint32_t *rank, uint32_t *world);

/* ---- tar streams (prepared_tar.c) ---- */

/* A tar stream of prepared images written to fd (pax format, entries with
 * mtime 0, owner 0, mode 0644, so the same images give the same bytes);
 * with zstd, compressed. */
struct tf_prep_tar {
	void *a; /* struct archive *, owned */
};
tf_status tf_prep_tar_begin(struct tf_prep_tar *t, int fd, bool zstd);
/* Add the file at path under the name rel (tf_prep_check_relpath form),
 * read in chunks of 1 MiB. */
tf_status tf_prep_tar_add(struct tf_prep_tar *t, const char *rel, const char *path);
/* Finish the stream (and free t). */
tf_status tf_prep_tar_end(struct tf_prep_tar *t);
/* Free t without finishing (after an error). */
void tf_prep_tar_abort(struct tf_prep_tar *t);

/* Read a tar stream (plain or compressed: gzip, zstd, xz...) from fd into
 * dir: every member must be a prepared image path; each is written
 * atomically, then opened and fully verified (its key prefix, rank and
 * world must match its path), and removed again if it fails. *files gets
 * the number imported. */
tf_status tf_prep_tar_import(int fd, const char *dir, size_t *files);

#endif
