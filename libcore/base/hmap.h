/* hmap.h: an open-addressing hash map (linear probing) from u64 or byte-
 * string keys to uintptr_t values.
 *
 * String keys are borrowed: the caller keeps the bytes alive while they are
 * in the map. Removal leaves a tombstone; removals are counted and when
 * tombstones reach a tenth of the capacity the table is rebuilt at the same
 * size, so endless insert/delete never fills it with tombstones. The table
 * grows at 70% live load, so at least a fifth of it is always empty.
 * Not thread safe; callers lock. */
#ifndef TF_BASE_HMAP_H
#define TF_BASE_HMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

enum tf_hmap_kind { TF_HMAP_U64, TF_HMAP_STR };

struct tf_hmap_slot {
	uint64_t hash;   /* u64 maps: the key itself */
	const char *str; /* string maps: the borrowed key bytes */
	size_t len;
	uintptr_t val;
	uint8_t state;   /* 0 empty, 1 live, 2 tombstone */
};

struct tf_hmap {
	struct tf_hmap_slot *slots;
	size_t cap; /* a power of two, or 0 before the first insert */
	size_t live;
	size_t tombs;
	size_t rebuilds; /* same-size rebuilds done (for tests and stats) */
	enum tf_hmap_kind kind;
};

void tf_hmap_init(struct tf_hmap *m, enum tf_hmap_kind kind);
void tf_hmap_release(struct tf_hmap *m);
/* Pre-size for n live entries. */
tf_status tf_hmap_reserve(struct tf_hmap *m, size_t n);

/* u64 maps. put replaces an existing value. */
tf_status tf_hmap_put(struct tf_hmap *m, uint64_t key, uintptr_t val);
bool tf_hmap_get(const struct tf_hmap *m, uint64_t key, uintptr_t *val);
bool tf_hmap_del(struct tf_hmap *m, uint64_t key, uintptr_t *old);

/* String maps: key is n bytes at s (not necessarily NUL-terminated). */
tf_status tf_hmap_put_str(struct tf_hmap *m, const char *s, size_t n, uintptr_t val);
bool tf_hmap_get_str(const struct tf_hmap *m, const char *s, size_t n, uintptr_t *val);
bool tf_hmap_del_str(struct tf_hmap *m, const char *s, size_t n, uintptr_t *old);

/* Iterate: size_t i = 0; while (tf_hmap_next(m, &i, &slot)) ... */
bool tf_hmap_next(const struct tf_hmap *m, size_t *i, const struct tf_hmap_slot **slot);

/* Count of empty (never used, not tombstone) slots. */
size_t tf_hmap_free_slots(const struct tf_hmap *m);

/* A fast 64-bit hash of n bytes (not cryptographic, never 0). */
uint64_t tf_hash_bytes(const void *p, size_t n);
/* A 64-bit mix of an integer (never 0). */
uint64_t tf_hash_u64(uint64_t x);

#endif
