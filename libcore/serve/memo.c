/* memo.c: reasoning memory (memo.h): a ring of entries and a map from key
 * to ring slot, under one mutex. */
#include "serve/memo.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/digest.h"
#include "base/hmap.h"

struct memo_entry {
	char *key, *val;
};

struct tf_memo {
	pthread_mutex_t mu;
	struct tf_hmap map; /* key -> slot + 1 */
	struct memo_entry *ring;
	size_t cap, next;
};

tf_status tf_memo_new(size_t cap, struct tf_memo **out)
{
	struct tf_memo *m = tf_calloc(1, sizeof(*m));
	if (!m || !(m->ring = tf_calloc(cap ? cap : 1, sizeof(*m->ring)))) {
		free(m);
		return tf_err(TF_ERR_NOMEM, "reasoning memory: out of memory");
	}
	m->cap = cap ? cap : 1;
	pthread_mutex_init(&m->mu, NULL);
	tf_hmap_init(&m->map, TF_HMAP_STR);
	*out = m;
	return TF_OK;
}

void tf_memo_free(struct tf_memo *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->cap; i++) {
		free(m->ring[i].key);
		free(m->ring[i].val);
	}
	tf_hmap_release(&m->map);
	pthread_mutex_destroy(&m->mu);
	free(m->ring);
	free(m);
}

static void memo_put(struct tf_memo *m, const char *key, const char *val, size_t vlen)
{
	char *k = tf_strdup(key), *v = tf_strndup(val, vlen);
	if (!k || !v) {
		free(k);
		free(v);
		return;
	}
	pthread_mutex_lock(&m->mu);
	uintptr_t old;
	if (tf_hmap_get_str(&m->map, k, strlen(k), &old)) { /* refresh in place */
		free(m->ring[old - 1].val);
		m->ring[old - 1].val = v;
		free(k);
	} else {
		struct memo_entry *e = &m->ring[m->next];
		if (e->key)
			tf_hmap_del_str(&m->map, e->key, strlen(e->key), NULL);
		free(e->key);
		free(e->val);
		e->key = k;
		e->val = v;
		if (tf_hmap_put_str(&m->map, k, strlen(k), m->next + 1)) {
			free(e->key);
			free(e->val);
			e->key = e->val = NULL;
		}
		m->next = (m->next + 1) % m->cap;
	}
	pthread_mutex_unlock(&m->mu);
}

static char *memo_get(struct tf_memo *m, const char *key)
{
	char *v = NULL;
	uintptr_t slot;
	pthread_mutex_lock(&m->mu);
	if (tf_hmap_get_str(&m->map, key, strlen(key), &slot))
		v = tf_strdup(m->ring[slot - 1].val);
	pthread_mutex_unlock(&m->mu);
	return v;
}

static void content_key(const char *text, size_t n, char *key)
{
	uint8_t d[TF_SHA256_LEN];
	strcpy(key, "c:");
	if (tf_sha256(text, n, d))
		memset(d, 0, sizeof(d));
	tf_hex(d, sizeof(d), key + 2);
}

static void message_text(const json_t *c, struct tf_buf *out)
{
	if (json_is_string(c)) {
		tf_buf_append(out, json_string_value(c), json_string_length(c));
		return;
	}
	size_t i;
	const json_t *p;
	json_array_foreach(c, i, p) {
		const json_t *t = json_object_get(p, "text");
		if (json_is_string(t))
			tf_buf_append(out, json_string_value(t), json_string_length(t));
	}
}

size_t tf_memo_restore(struct tf_memo *m, json_t *chat)
{
	size_t restored = 0, i;
	json_t *msg;
	json_array_foreach(json_object_get(chat, "messages"), i, msg) {
		const char *role = json_string_value(json_object_get(msg, "role"));
		if (!role || strcmp(role, "assistant") || json_object_get(msg, "reasoning_content") ||
		    json_object_get(msg, "reasoning"))
			continue;
		char *val = NULL;
		size_t k;
		const json_t *c;
		json_array_foreach(json_object_get(msg, "tool_calls"), k, c) {
			const char *id = json_string_value(json_object_get(c, "id"));
			if (id && (val = memo_get(m, id)))
				break;
		}
		if (!val) {
			struct tf_buf t = TF_BUF_INIT;
			message_text(json_object_get(msg, "content"), &t);
			if (t.len) {
				char key[2 + 2 * TF_SHA256_LEN + 1];
				content_key(t.data, t.len, key);
				val = memo_get(m, key);
			}
			tf_buf_release(&t);
		}
		if (val) {
			json_object_set_new(msg, "reasoning_content", json_string(val));
			restored++;
			free(val);
		}
	}
	return restored;
}

void tf_memo_put_call(struct tf_memo *m, const char *id, const char *reasoning, size_t n)
{
	memo_put(m, id, reasoning, n);
}

void tf_memo_put_content(struct tf_memo *m, const char *content, size_t clen,
			 const char *reasoning, size_t n)
{
	char key[2 + 2 * TF_SHA256_LEN + 1];
	content_key(content, clen, key);
	memo_put(m, key, reasoning, n);
}
