/* route.h: the route table: every path tf-serve answers, with its method,
 * what serves it, its error shape and whether it needs an API key; and
 * the paths of stored responses (/v1/responses/{id}). Shared by the HTTP
 * server and tf-serve --once. Not the serving: server.c dispatches on a
 * route's kind. The table is constant: thread safe. */
#ifndef TF_SERVE_ROUTE_H
#define TF_SERVE_ROUTE_H

#include <stdbool.h>

#include "serve/request.h"
#include "serve/text.h"

enum tf_route_kind {
	TF_ROUTE_HEALTH, TF_ROUTE_MODELS, TF_ROUTE_METRICS, TF_ROUTE_CHAT, TF_ROUTE_COMPLETIONS,
	TF_ROUTE_MESSAGES, TF_ROUTE_COUNT, TF_ROUTE_TOKENIZE, TF_ROUTE_DETOKENIZE, TF_ROUTE_RESPONSES,
};

struct tf_route {
	const char *method;
	const char *path;
	enum tf_route_kind kind;
	bool anthropic;  /* errors in Anthropic's shape */
	bool open;       /* no API key needed */
};

/* The route of method and path, or NULL; *allow: when only the method is
 * wrong, the one the path takes (else NULL). */
const struct tf_route *tf_route_find(const char *method, const char *path, const char **allow);

/* The id of /v1/responses/{id} (or /responses/{id}), or NULL for any
 * other path (one with a further segment among them). */
const char *tf_route_stored_id(const char *path);

/* Whether a route runs a generation (chat, completions, responses,
 * messages); its request API (count_tokens for the others). */
bool tf_route_generates(enum tf_route_kind k);
enum tf_api tf_route_api(enum tf_route_kind k);

/* The text route (text.h) of count_tokens, tokenize or detokenize. */
enum tf_text_route tf_route_text(enum tf_route_kind k);

#endif
