/* pack.h: a pack folder: config.json, tokenizer.json, safetensors shards and
 * an optional model.safetensors.index.json whose weight_map names each
 * tensor's shard. Without an index, every *.safetensors file is a shard,
 * sorted by name.
 *
 * Opening reads headers only. Refused, with the file and tensor named: a
 * missing config.json or tokenizer.json, a shard the index names that does
 * not exist, a tensor the index places in a shard that lacks it, a tensor in
 * two shards (without an index), a tensor the index does not list. A tensor
 * that the index assigns to another shard is skipped in the shard that also
 * holds it. */
#ifndef TF_PACK_PACK_H
#define TF_PACK_PACK_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "base/hmap.h"
#include "base/status.h"
#include "pack/safetensors.h"

#define TF_PACK_INDEX "model.safetensors.index.json"

struct tf_pack_tensor {
	const struct tf_st_tensor *t; /* name, dtype, shape, offsets */
	uint32_t shard;
};

struct tf_pack {
	char *dir;
	json_t *config;            /* config.json, owned */
	char *tokenizer_path;      /* <dir>/tokenizer.json */
	bool has_index;
	size_t nshards;
	char **shard_names;        /* file names inside dir, sorted */
	struct tf_st_file *shards;
	size_t n;                  /* tensors, in shard order then offset */
	struct tf_pack_tensor *tensors;
	struct tf_hmap by_name;
	uint64_t total_bytes;      /* tensor data bytes */
	uint64_t file_bytes;       /* shard file sizes */
};

/* Open and validate a pack folder. Release with tf_pack_close. */
tf_status tf_pack_open(struct tf_pack *p, const char *dir);
void tf_pack_close(struct tf_pack *p);
/* A tensor by name, or NULL. Borrowed. */
const struct tf_pack_tensor *tf_pack_find(const struct tf_pack *p, const char *name);
/* Read len bytes at off within a tensor. Thread safe (pread). */
tf_status tf_pack_read(const struct tf_pack *p, const struct tf_pack_tensor *t, uint64_t off,
		       void *buf, size_t len);
/* The shard file of a tensor. */
static inline const struct tf_st_file *tf_pack_shard(const struct tf_pack *p,
						     const struct tf_pack_tensor *t)
{
	return &p->shards[t->shard];
}

#endif
