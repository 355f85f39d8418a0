/* hmap.c: open-addressing hash map with tombstone-driven rebuilds. */
#include "base/hmap.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

enum { EMPTY = 0, LIVE = 1, TOMB = 2 };

uint64_t tf_hash_u64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x ? x : 1;
}

uint64_t tf_hash_bytes(const void *p, size_t n)
{
	const unsigned char *s = p;
	uint64_t h = 0x9e3779b97f4a7c15ULL ^ (n * 0xff51afd7ed558ccdULL);
	while (n >= 8) {
		uint64_t w;
		memcpy(&w, s, 8);
		h = (h ^ (w * 0x87c37b91114253d5ULL)) * 0x4cf5ad432745937fULL;
		h ^= h >> 29;
		s += 8;
		n -= 8;
	}
	uint64_t w = 0;
	memcpy(&w, s, n);
	h = (h ^ (w * 0x87c37b91114253d5ULL)) * 0x4cf5ad432745937fULL;
	return tf_hash_u64(h);
}

void tf_hmap_init(struct tf_hmap *m, enum tf_hmap_kind kind)
{
	memset(m, 0, sizeof *m);
	m->kind = kind;
}

void tf_hmap_release(struct tf_hmap *m)
{
	free(m->slots);
	tf_hmap_init(m, m->kind);
}

static uint64_t slot_hash(const struct tf_hmap *m, uint64_t key)
{
	return m->kind == TF_HMAP_U64 ? tf_hash_u64(key) : key;
}

/* Find the slot of a key (live) or, with *ins, the first reusable slot. */
static size_t find(const struct tf_hmap *m, uint64_t key, const char *s, size_t n,
		   bool *found)
{
	size_t mask = m->cap - 1, i = slot_hash(m, key) & mask, ins = SIZE_MAX;
	for (;; i = (i + 1) & mask) {
		const struct tf_hmap_slot *sl = &m->slots[i];
		if (sl->state == EMPTY) {
			*found = false;
			return ins != SIZE_MAX ? ins : i;
		}
		if (sl->state == TOMB) {
			if (ins == SIZE_MAX)
				ins = i;
			continue;
		}
		if (sl->hash == key &&
		    (m->kind == TF_HMAP_U64 || (sl->len == n && !memcmp(sl->str, s, n)))) {
			*found = true;
			return i;
		}
	}
}

static tf_status rebuild(struct tf_hmap *m, size_t cap)
{
	struct tf_hmap_slot *old = m->slots;
	size_t oldcap = m->cap;
	m->slots = tf_calloc(cap, sizeof *m->slots);
	if (!m->slots) {
		m->slots = old;
		return tf_err(TF_ERR_NOMEM, "cannot grow a hash map to %zu slots", cap);
	}
	m->cap = cap;
	m->tombs = 0;
	for (size_t i = 0; i < oldcap; i++) {
		if (old[i].state != LIVE)
			continue;
		bool f;
		size_t j = find(m, old[i].hash, old[i].str, old[i].len, &f);
		m->slots[j] = old[i];
	}
	free(old);
	return TF_OK;
}

tf_status tf_hmap_reserve(struct tf_hmap *m, size_t n)
{
	size_t cap = m->cap ? m->cap : 16;
	while (n * 10 >= cap * 7)
		cap *= 2;
	return cap > m->cap ? rebuild(m, cap) : TF_OK;
}

static tf_status put(struct tf_hmap *m, uint64_t key, const char *s, size_t n, uintptr_t val)
{
	tf_status st = tf_hmap_reserve(m, m->live + 1);
	if (st)
		return st;
	bool f;
	size_t i = find(m, key, s, n, &f);
	struct tf_hmap_slot *sl = &m->slots[i];
	if (!f) {
		if (sl->state == TOMB)
			m->tombs--;
		sl->hash = key;
		sl->str = s;
		sl->len = n;
		sl->state = LIVE;
		m->live++;
	}
	sl->val = val;
	return TF_OK;
}

static bool get(const struct tf_hmap *m, uint64_t key, const char *s, size_t n, uintptr_t *val)
{
	if (!m->cap)
		return false;
	bool f;
	size_t i = find(m, key, s, n, &f);
	if (f && val)
		*val = m->slots[i].val;
	return f;
}

static bool del(struct tf_hmap *m, uint64_t key, const char *s, size_t n, uintptr_t *old)
{
	if (!m->cap)
		return false;
	bool f;
	size_t i = find(m, key, s, n, &f);
	if (!f)
		return false;
	if (old)
		*old = m->slots[i].val;
	m->slots[i].state = TOMB;
	m->live--;
	m->tombs++;
	if (m->tombs * 10 >= m->cap) {
		/* A failed rebuild leaves the old table intact and usable. */
		if (rebuild(m, m->cap) == TF_OK)
			m->rebuilds++;
	}
	return true;
}

tf_status tf_hmap_put(struct tf_hmap *m, uint64_t key, uintptr_t val)
{
	return put(m, key, NULL, 0, val);
}

bool tf_hmap_get(const struct tf_hmap *m, uint64_t key, uintptr_t *val)
{
	return get(m, key, NULL, 0, val);
}

bool tf_hmap_del(struct tf_hmap *m, uint64_t key, uintptr_t *old)
{
	return del(m, key, NULL, 0, old);
}

tf_status tf_hmap_put_str(struct tf_hmap *m, const char *s, size_t n, uintptr_t val)
{
	return put(m, tf_hash_bytes(s, n), s, n, val);
}

bool tf_hmap_get_str(const struct tf_hmap *m, const char *s, size_t n, uintptr_t *val)
{
	return get(m, tf_hash_bytes(s, n), s, n, val);
}

bool tf_hmap_del_str(struct tf_hmap *m, const char *s, size_t n, uintptr_t *old)
{
	return del(m, tf_hash_bytes(s, n), s, n, old);
}

bool tf_hmap_next(const struct tf_hmap *m, size_t *i, const struct tf_hmap_slot **slot)
{
	for (; *i < m->cap; (*i)++) {
		if (m->slots[*i].state == LIVE) {
			*slot = &m->slots[(*i)++];
			return true;
		}
	}
	return false;
}

size_t tf_hmap_free_slots(const struct tf_hmap *m)
{
	return m->cap - m->live - m->tombs;
}
