/* rstore.h: the Responses API's store: finished responses kept in memory
 * for previous_response_id and GET / DELETE /v1/responses/{id}. Each entry
 * holds the response object and its conversation (the input items of the
 * chain that led to it, as given, then its output items), both as compact
 * JSON text. Bounded in entries and in bytes (the two texts and the id):
 * past either bound the oldest entries go first.
 *
 * Not here: the wire shapes (gen_responses.c) or HTTP (server.c).
 * Thread safe: HTTP threads, stream writers and --once call it at once;
 * one mutex guards each call, and what a call returns is the caller's. */
#ifndef TF_SERVE_RSTORE_H
#define TF_SERVE_RSTORE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

struct tf_rstore;

/* A store of at most entries responses and max_bytes bytes (entries > 0,
 * max_bytes > 0). *out is the caller's, freed with tf_rstore_free. */
tf_status tf_rstore_new(size_t entries, size_t max_bytes, struct tf_rstore **out);
void tf_rstore_free(struct tf_rstore *s);

/* Keep response under id with its conversation items (both borrowed,
 * serialised here). An id stored already is replaced. An entry larger
 * than the byte bound is not kept (TF_ERR_RANGE); the oldest entries make
 * room for the rest. */
tf_status tf_rstore_put(struct tf_rstore *s, const char *id, const json_t *response,
			const json_t *items);

/* The response object (when response is not NULL) and the conversation
 * items (when items is not NULL) stored under id, as new references the
 * caller decrefs. TF_ERR_NOTFOUND when id is unknown or was evicted. */
tf_status tf_rstore_get(struct tf_rstore *s, const char *id, json_t **response, json_t **items);

/* Remove id: true if it was there. */
bool tf_rstore_del(struct tf_rstore *s, const char *id);

/* Entries and bytes held now. */
void tf_rstore_usage(struct tf_rstore *s, size_t *entries, size_t *bytes);

#endif
