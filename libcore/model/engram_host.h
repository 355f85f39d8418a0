/* engram_host.h: the Engram host file, engram-host.bin: what hashing needs
 * besides the config (layer ids, multipliers, the token map), precomputed
 * once from the tokenizer (tf-engram-hash host), and the hash fixture
 * format engram-hash-ref.bin (tf-engram(5) describes both).
 *
 * engram-host.bin, little-endian, no padding:
 *   "DSV41EH1"; u32 L, M, vocab, compressed; u32 layer_ids[L];
 *   i64 mult[L][M]; u32 map[vocab]
 * The magic carries the version (the reference's format has no other). A
 * reader checks every count against the caps and the file size, that each
 * multiplier is odd and positive, and that the map numbers its compressed
 * ids by first appearance (so they are exactly 0 .. compressed - 1).
 *
 * engram-hash-ref.bin: the same header without the map, then u32 used and
 * (u32 id, u32 mapped) x used, then u32 cases, each: u32 n, u32 nb,
 * u32 ids[n], u32 lookback[nb], i64 rows[n][L][(M - 1) * heads].
 *
 * Functions here are reentrant; a host is owned by its caller. */
#ifndef TF_MODEL_ENGRAM_HOST_H
#define TF_MODEL_ENGRAM_HOST_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "model/engram_layout.h"

#define TF_ENGRAM_HOST_MAGIC "DSV41EH1"
#define TF_ENGRAM_MAX_VOCAB (1u << 24) /* token ids a map may cover */

struct tf_engram_host {
	uint32_t nlayers;    /* L */
	uint32_t max_ngram;  /* M: multipliers per layer */
	uint32_t vocab;      /* token ids the map covers */
	uint32_t compressed; /* distinct compressed ids */
	uint32_t layer_ids[TF_ENGRAM_MAX_LAYERS];
	int64_t mult[TF_ENGRAM_MAX_LAYERS][TF_ENGRAM_MAX_NGRAM];
	uint32_t *map;       /* [vocab]: token id -> compressed id; owned */
};

/* Fill a host for the config's Engram layers from a token map (taken over: the host frees
 * it), computing the multipliers for its compressed size. */
tf_status tf_engram_host_init(struct tf_engram_host *h, const struct tf_config *c,
			      uint32_t *map, uint32_t vocab, uint32_t compressed);
void tf_engram_host_release(struct tf_engram_host *h);

/* Parse n bytes of an engram-host.bin (what names it in messages).
 * TF_ERR_FORMAT for anything malformed, TF_ERR_VERSION for another
 * DSV41EH version. */
tf_status tf_engram_host_parse(const void *data, size_t n, const char *what,
			       struct tf_engram_host *h);
tf_status tf_engram_host_read(const char *path, struct tf_engram_host *h);
/* Write atomically. */
tf_status tf_engram_host_write(const struct tf_engram_host *h, const char *path);
/* Check the map: values < compressed, numbered by first appearance. */
tf_status tf_engram_map_check(const uint32_t *map, uint32_t vocab, uint32_t compressed);

/* One case of a hash fixture. */
struct tf_engram_case {
	uint32_t n, nb;
	uint32_t *ids;      /* [n] */
	uint32_t *lookback; /* [nb] */
	int64_t *rows;      /* [n][L][cols] */
};

/* A parsed engram-hash-ref.bin: the host (its map holds the listed ids;
 * the others are UINT32_MAX) and the cases. */
struct tf_engram_fixture {
	struct tf_engram_host host;
	uint32_t cols;
	uint32_t ncases;
	struct tf_engram_case *cases;
};

/* Parse a fixture whose layers have cols columns each. Every id of every
 * case must be listed in the map or be past the vocab. */
tf_status tf_engram_fixture_parse(const void *data, size_t n, const char *what, uint32_t cols,
				  struct tf_engram_fixture *f);
tf_status tf_engram_fixture_read(const char *path, uint32_t cols, struct tf_engram_fixture *f);
void tf_engram_fixture_release(struct tf_engram_fixture *f);

#endif
