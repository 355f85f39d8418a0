/* route.c: the route table (route.h). */
#include "serve/route.h"

#include <stddef.h>
#include <string.h>

static const struct tf_route routes[] = {
	{"GET", "/health", TF_ROUTE_HEALTH, false, true},
	{"GET", "/v1/health", TF_ROUTE_HEALTH, false, true},
	{"GET", "/v1/models", TF_ROUTE_MODELS, false, false},
	{"GET", "/models", TF_ROUTE_MODELS, false, false},
	{"GET", "/metrics", TF_ROUTE_METRICS, false, false},
	{"GET", "/v1/metrics", TF_ROUTE_METRICS, false, false},
	{"POST", "/v1/chat/completions", TF_ROUTE_CHAT, false, false},
	{"POST", "/chat/completions", TF_ROUTE_CHAT, false, false},
	{"POST", "/v1/completions", TF_ROUTE_COMPLETIONS, false, false},
	{"POST", "/completions", TF_ROUTE_COMPLETIONS, false, false},
	{"POST", "/v1/responses", TF_ROUTE_RESPONSES, false, false},
	{"POST", "/responses", TF_ROUTE_RESPONSES, false, false},
	{"POST", "/v1/messages", TF_ROUTE_MESSAGES, true, false},
	{"POST", "/messages", TF_ROUTE_MESSAGES, true, false},
	{"POST", "/v1/messages/count_tokens", TF_ROUTE_COUNT, true, false},
	{"POST", "/messages/count_tokens", TF_ROUTE_COUNT, true, false},
	{"POST", "/tokenize", TF_ROUTE_TOKENIZE, false, false},
	{"POST", "/v1/tokenize", TF_ROUTE_TOKENIZE, false, false},
	{"POST", "/detokenize", TF_ROUTE_DETOKENIZE, false, false},
	{"POST", "/v1/detokenize", TF_ROUTE_DETOKENIZE, false, false},
};
#define NROUTES (sizeof(routes) / sizeof(routes[0]))

const struct tf_route *tf_route_find(const char *method, const char *path, const char **allow)
{
	*allow = NULL;
	for (size_t i = 0; i < NROUTES; i++)
		if (!strcmp(routes[i].path, path)) {
			if (!strcmp(routes[i].method, method))
				return &routes[i];
			*allow = routes[i].method;
		}
	return NULL;
}

const char *tf_route_stored_id(const char *path)
{
	const char *id = !strncmp(path, "/v1/responses/", 14) ? path + 14
		: !strncmp(path, "/responses/", 11) ? path + 11 : NULL;
	return id && *id && !strchr(id, '/') ? id : NULL;
}

bool tf_route_generates(enum tf_route_kind k)
{
	return k == TF_ROUTE_CHAT || k == TF_ROUTE_COMPLETIONS || k == TF_ROUTE_MESSAGES ||
	       k == TF_ROUTE_RESPONSES;
}

enum tf_api tf_route_api(enum tf_route_kind k)
{
	return k == TF_ROUTE_CHAT ? TF_API_CHAT : k == TF_ROUTE_COMPLETIONS ? TF_API_COMPLETIONS
		: k == TF_ROUTE_MESSAGES ? TF_API_MESSAGES : k == TF_ROUTE_RESPONSES ? TF_API_RESPONSES
		: TF_API_COUNT_TOKENS;
}

enum tf_text_route tf_route_text(enum tf_route_kind k)
{
	return k == TF_ROUTE_COUNT ? TF_TEXT_COUNT : k == TF_ROUTE_TOKENIZE ? TF_TEXT_TOKENIZE
		: TF_TEXT_DETOKENIZE;
}
