/* auth.c: API keys (server_impl.h): kept as SHA-256 digests, a request's
 * key compared with every one, every byte (constant time). The keys are
 * set before the server serves and only read after: thread safe. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/alloc.h"
#include "serve/server_impl.h"

tf_status tf_auth_init(struct tf_server *s, const char *const *keys, size_t n)
{
	if (!n)
		return TF_OK;
	s->keys = tf_calloc(n, sizeof(*s->keys));
	if (!s->keys)
		return tf_err(TF_ERR_NOMEM, "server: out of memory");
	for (size_t i = 0; i < n; i++)
		tf_sha256(keys[i], strlen(keys[i]), s->keys[i]);
	s->nkeys = n;
	return TF_OK;
}

/* Whether k is one of the keys: every key, every byte (constant time). */
static bool key_match(struct tf_server *s, const char *k)
{
	uint8_t d[TF_SHA256_LEN];
	if (!k || !*k || tf_sha256(k, strlen(k), d))
		return false;
	unsigned match = 0;
	for (size_t i = 0; i < s->nkeys; i++) {
		unsigned diff = 0;
		for (size_t j = 0; j < TF_SHA256_LEN; j++)
			diff |= d[j] ^ s->keys[i][j];
		match |= diff == 0;
	}
	return match != 0;
}

/* A key in x-api-key or as Authorization: Bearer; either may hold it (a
 * wrong or empty one in the other header does not count against it). */
bool tf_auth_ok(struct tf_server *s, struct MHD_Connection *mc)
{
	if (s->nkeys == 0)
		return true;
	const char *k = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "x-api-key");
	const char *a = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Authorization");
	bool by_key = key_match(s, k);
	bool by_bearer = a && !strncasecmp(a, "Bearer ", 7) && key_match(s, a + 7);
	return by_key || by_bearer;
}
