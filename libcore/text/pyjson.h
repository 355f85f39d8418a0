/* pyjson.h: JSON text exactly as Python's json module writes and reads it,
 * over jansson values.
 *
 * The DeepSeek-V4.1 chat encoding embeds json.dumps(v, ensure_ascii=False)
 * output in prompts (tool schemas, non-string tool arguments, response
 * schemas) and the DSML reader emits compact arguments; both must be byte
 * for byte what Python writes: ", " / ": " separators (or "," / ":" when
 * compact), non-ASCII kept, only '"', '\\' and control characters escaped,
 * floats as Python's repr (shortest round trip: 1.0, 1e-05, 1e+16), object
 * keys in their own order. Reading is json.loads: any top-level value,
 * surrounding JSON whitespace allowed.
 *
 * Not covered (jansson cannot hold them): integers beyond 64 bits, NaN and
 * Infinity (Python reads and writes them; here they are invalid JSON). */
#ifndef TF_TEXT_PYJSON_H
#define TF_TEXT_PYJSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"
#include "base/status.h"

/* Append json.dumps(v, ensure_ascii=False) (compact: separators (",", ":"))
 * to b. TF_ERR_NOMEM on allocation failure. */
tf_status tf_pyjson_dump(struct tf_buf *b, const json_t *v, bool compact);

/* Append a JSON string literal of s[0..n) (quotes included). */
tf_status tf_pyjson_dump_str(struct tf_buf *b, const char *s, size_t n);

/* Append Python's repr() of a float (what str() of a float prints). */
tf_status tf_pyjson_dump_float(struct tf_buf *b, double f);

/* Python's str() of a scalar as text parts hold it: a string as itself, an
 * integer in decimal, true/false as True/False, a float as its repr.
 * Returns false (and appends nothing) for null, arrays and objects. */
bool tf_pyjson_scalar_text(struct tf_buf *b, const json_t *v, tf_status *st);

/* Python's repr() of a value, for error messages: 'text', 1, 1.5, True,
 * None, [1, 'a'], {'k': 2}. */
tf_status tf_pyjson_repr(struct tf_buf *b, const json_t *v);

/* json.loads of s[0..n): a new value, or NULL when the text is not JSON. */
json_t *tf_pyjson_loads(const char *s, size_t n);

/* Python truthiness: null, false, 0, 0.0, "", [] and {} are false. */
bool tf_pyjson_truthy(const json_t *v);

#endif
