/* rstore.c: the Responses store (rstore.h): entries on a doubly linked
 * list in the order they were put (the head is the oldest), found by id
 * through a string map whose keys are the entries' own id strings. */
#include "serve/rstore.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/hmap.h"

struct entry {
	struct entry *prev, *next;
	char *id;
	char *response, *items; /* compact JSON */
	size_t bytes;
};

struct tf_rstore {
	pthread_mutex_t mu;
	struct tf_hmap map;       /* id -> struct entry *, keys borrowed from the entries */
	struct entry *head, *tail; /* oldest first */
	size_t n, bytes, max_n, max_bytes;
};

tf_status tf_rstore_new(size_t entries, size_t max_bytes, struct tf_rstore **out)
{
	*out = NULL;
	if (!entries || !max_bytes)
		return tf_err(TF_ERR_ARG, "responses store: the bounds must be positive");
	struct tf_rstore *s = tf_calloc(1, sizeof(*s));
	if (!s)
		return tf_err(TF_ERR_NOMEM, "responses store: out of memory");
	pthread_mutex_init(&s->mu, NULL);
	tf_hmap_init(&s->map, TF_HMAP_STR);
	s->max_n = entries;
	s->max_bytes = max_bytes;
	*out = s;
	return TF_OK;
}

static void entry_free(struct entry *e)
{
	free(e->id);
	free(e->response);
	free(e->items);
	free(e);
}

/* Unlink e and drop it from the map (under mu). */
static void unlink_entry(struct tf_rstore *s, struct entry *e)
{
	tf_hmap_del_str(&s->map, e->id, strlen(e->id), NULL);
	if (e->prev)
		e->prev->next = e->next;
	else
		s->head = e->next;
	if (e->next)
		e->next->prev = e->prev;
	else
		s->tail = e->prev;
	s->n--;
	s->bytes -= e->bytes;
	entry_free(e);
}

void tf_rstore_free(struct tf_rstore *s)
{
	if (!s)
		return;
	for (struct entry *e = s->head, *next; e; e = next) {
		next = e->next;
		entry_free(e);
	}
	tf_hmap_release(&s->map);
	pthread_mutex_destroy(&s->mu);
	free(s);
}

static struct entry *find(struct tf_rstore *s, const char *id)
{
	uintptr_t v;
	return tf_hmap_get_str(&s->map, id, strlen(id), &v) ? (struct entry *)v : NULL;
}

tf_status tf_rstore_put(struct tf_rstore *s, const char *id, const json_t *response,
			const json_t *items)
{
	struct entry *e = tf_calloc(1, sizeof(*e));
	if (!e)
		return tf_err(TF_ERR_NOMEM, "responses store: out of memory");
	e->id = tf_strdup(id);
	e->response = json_dumps(response, JSON_COMPACT);
	e->items = json_dumps(items, JSON_COMPACT);
	if (!e->id || !e->response || !e->items) {
		entry_free(e);
		return tf_err(TF_ERR_NOMEM, "responses store: out of memory");
	}
	e->bytes = strlen(e->id) + strlen(e->response) + strlen(e->items);
	if (e->bytes > s->max_bytes) {
		size_t b = e->bytes;
		entry_free(e);
		return tf_err(TF_ERR_RANGE, "responses store: response '%s' takes %zu bytes, more than "
			      "the store's %zu", id, b, s->max_bytes);
	}
	tf_status rc = TF_OK;
	pthread_mutex_lock(&s->mu);
	struct entry *old = find(s, id);
	if (old)
		unlink_entry(s, old);
	while (s->head && (s->n + 1 > s->max_n || s->bytes + e->bytes > s->max_bytes))
		unlink_entry(s, s->head);
	if (tf_hmap_put_str(&s->map, e->id, strlen(e->id), (uintptr_t)e)) {
		rc = tf_err(TF_ERR_NOMEM, "responses store: out of memory");
		entry_free(e);
	} else {
		e->prev = s->tail;
		if (s->tail)
			s->tail->next = e;
		else
			s->head = e;
		s->tail = e;
		s->n++;
		s->bytes += e->bytes;
	}
	pthread_mutex_unlock(&s->mu);
	return rc;
}

tf_status tf_rstore_get(struct tf_rstore *s, const char *id, json_t **response, json_t **items)
{
	char *rt = NULL, *it = NULL;
	bool found, oom = false;
	pthread_mutex_lock(&s->mu);
	struct entry *e = find(s, id);
	found = e != NULL;
	if (e && response)
		oom |= !(rt = tf_strdup(e->response));
	if (e && items)
		oom |= !(it = tf_strdup(e->items));
	pthread_mutex_unlock(&s->mu);
	/* parsed outside the lock: the texts are this call's copies */
	tf_status rc = TF_OK;
	if (!found) {
		rc = tf_err(TF_ERR_NOTFOUND, "Response with id '%.64s' not found.", id);
	} else if (oom) {
		rc = tf_err(TF_ERR_NOMEM, "responses store: out of memory");
	} else {
		if (response && !(*response = json_loads(rt, 0, NULL)))
			rc = tf_err(TF_ERR_NOMEM, "responses store: out of memory");
		if (!rc && items && !(*items = json_loads(it, 0, NULL))) {
			if (response)
				json_decref(*response);
			rc = tf_err(TF_ERR_NOMEM, "responses store: out of memory");
		}
	}
	free(rt);
	free(it);
	return rc;
}

bool tf_rstore_del(struct tf_rstore *s, const char *id)
{
	pthread_mutex_lock(&s->mu);
	struct entry *e = find(s, id);
	if (e)
		unlink_entry(s, e);
	pthread_mutex_unlock(&s->mu);
	return e != NULL;
}

void tf_rstore_usage(struct tf_rstore *s, size_t *entries, size_t *bytes)
{
	pthread_mutex_lock(&s->mu);
	*entries = s->n;
	*bytes = s->bytes;
	pthread_mutex_unlock(&s->mu);
}
