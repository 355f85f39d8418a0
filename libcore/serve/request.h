/* request.h: reading request bodies of the generation routes: OpenAI chat
 * completions and completions, Anthropic messages and count_tokens. Each is
 * validated field by field (a bad one is TF_ERR_FORMAT with the message a
 * client gets in its 400, and the parameter it names) and normalised: an
 * Anthropic or Responses request becomes an OpenAI-shaped chat request for
 * the family's renderer, sampling fields become engine parameters.
 *
 * Pure functions over the body bytes: no engine, no server, no globals, so
 * this is also the fuzz target's entry (tests/fuzz/fuzz_request.c). */
#ifndef TF_SERVE_REQUEST_H
#define TF_SERVE_REQUEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

enum tf_api {
	TF_API_CHAT,         /* POST /v1/chat/completions */
	TF_API_COMPLETIONS,  /* POST /v1/completions */
	TF_API_MESSAGES,     /* POST /v1/messages */
	TF_API_COUNT_TOKENS, /* POST /v1/messages/count_tokens */
	TF_API_RESPONSES,    /* POST /v1/responses (converted to a chat request) */
};

/* Constrained output a request asks for (serve/constrain.h). */
enum tf_req_guide {
	TF_GUIDE_NONE,
	TF_GUIDE_JSON,   /* any JSON object: response_format json_object */
	TF_GUIDE_SCHEMA, /* a JSON schema: json_schema, guided_json, a strict tool */
	TF_GUIDE_REGEX,  /* guided_regex */
	TF_GUIDE_CHOICE, /* guided_choice */
	TF_GUIDE_TOOLS,  /* strict tools or a forced call: the DSML calls block */
};

#define TF_REQ_MAX_STOP 16
#define TF_REQ_MAX_LOGPROBS 20 /* top alternatives a token may carry */

struct tf_req {
	enum tf_api api;
	json_t *body;           /* the parsed body (owned) */
	json_t *chat;           /* OpenAI-shaped chat request to render (owned), chat routes */
	const char *prompt;     /* completions with a text prompt (borrowed from body) */
	size_t prompt_len;      /* its bytes (U+0000 may be among them) */
	int32_t *ids;           /* completions with token ids (owned) */
	size_t nids;
	const char *model;      /* as asked, or NULL */
	bool stream, include_usage;
	int64_t max_tokens;     /* -1: not given */
	bool ignore_eos, background;
	bool no_draft;          /* "draft": false: the serial reference (no speculative drafts) */
	bool has_temperature, has_top_p, has_top_k, has_min_p, has_seed;
	double temperature, top_p, min_p;
	int64_t top_k;
	uint64_t seed;
	const char *stop[TF_REQ_MAX_STOP]; /* borrowed from body */
	size_t nstop;
	bool logprobs;          /* chat logprobs: true, or completions logprobs: N */
	int64_t top_logprobs;   /* alternatives per token, 0..TF_REQ_MAX_LOGPROBS */
	const json_t *tools;    /* offered tools in OpenAI shape (borrowed from chat) or NULL */
	const char *force;      /* a call must be made: the tool's name, or "" for any
				 * (tool_choice required / a named function, Anthropic
				 * any / tool); NULL: the model chooses (borrowed) */
	enum tf_req_guide guide;
	const json_t *guide_value; /* the schema, regex string or choice list (borrowed) */
	json_t *guide_own;      /* what guide_value points into when the request held
				 * it as text (guided_json as a string), owned */
	const char *guide_param; /* the field it came from ("response_format", ...) */
	/* Responses: store (default true), the previous response named, and
	 * the input as items (a string input as one user message), owned. */
	bool store, has_store;
	const char *prev_id;    /* previous_response_id (borrowed from body) or NULL */
	json_t *input_items;
	const char *param;      /* on a failure: the parameter at fault, or NULL */
	char param_buf[48];     /* where param points when it named a key of the body */
};

/* Parse and validate n bytes of a body for api. vocab bounds token ids
 * (0: unchecked). On failure r->param may name the field and tf_errmsg
 * holds the message; r is released either way on failure. */
tf_status tf_req_parse(enum tf_api api, const char *body, size_t n, uint32_t vocab,
		       struct tf_req *r);
void tf_req_release(struct tf_req *r);

/* A Responses request after previous_response_id: the stored conversation
 * items (borrowed) go before this request's input (after its
 * instructions) in r->chat's messages. On failure (a malformed stored
 * item) r->param names previous_response_id and tf_errmsg says why; r is
 * kept either way. */
tf_status tf_req_prior(struct tf_req *r, const json_t *items);

#endif
