/* constrain.h: constrained output as the server asks for it: a request's
 * response_format (json_object, json_schema), vLLM's guided_json,
 * guided_regex and guided_choice, or a strict forced tool call, compiled
 * with the grammar layer over the family's vocabulary (built on first use:
 * the byte strings of the ids that stand for plain text). */
#ifndef TF_SERVE_CONSTRAIN_H
#define TF_SERVE_CONSTRAIN_H

#include "base/status.h"
#include "grammar/grammar.h"
#include "serve/family.h"
#include "serve/request.h"

struct tf_fgrammar;

/* The lazily built vocabulary of a family (NULL when out of memory). */
struct tf_fgrammar *tf_fgrammar_new(void);
void tf_fgrammar_free(struct tf_fgrammar *g);
/* The plain family's, shared by every plain family of the process (its
 * vocabulary is always the same 256 bytes); tf_fgrammar_free leaves it. */
struct tf_fgrammar *tf_fgrammar_plain(void);

/* The family's grammar vocabulary, built once (thread safe). Borrowed:
 * valid until the family is released. */
tf_status tf_family_gvocab(const struct tf_family *f, const struct tf_gvocab **out);

/* The grammar of r's constraint (*out NULL when it asks for none). A
 * refusal the client caused (an unsupported keyword, a bad regex, a
 * schema that matches nothing) is TF_ERR_UNSUPPORTED, TF_ERR_FORMAT or
 * TF_ERR_ARG with the message for its 400; a family without text bytes is
 * TF_ERR_UNSUPPORTED. *out is the caller's. */
tf_status tf_constrain_compile(const struct tf_family *f, const struct tf_req *r,
			       struct tf_grammar **out);

#endif
