/* json.h: helpers over jansson: loading a file or text with the place of
 * the error in the message, typed field reads that name the key, and
 * printing to a stream. Objects keep their insertion order, so --json
 * output is stable. */
#ifndef TF_BASE_JSON_H
#define TF_BASE_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/status.h"

/* Parse n bytes of JSON text (must be valid UTF-8, any top-level value).
 * what names the source in messages. The caller owns *out (json_decref). */
tf_status tf_json_parse(const char *text, size_t n, const char *what, json_t **out);
/* Read and parse a file of at most max bytes ("-" is stdin). */
tf_status tf_json_load(const char *path, size_t max, json_t **out);

/* Typed reads of obj[key]. A missing key leaves *out untouched and returns
 * TF_ERR_NOTFOUND without a message (callers keep defaults); a wrong type or
 * range is TF_ERR_FORMAT naming what and key. */
tf_status tf_json_i64(const json_t *obj, const char *what, const char *key, int64_t min,
		      int64_t max, int64_t *out);
tf_status tf_json_f64(const json_t *obj, const char *what, const char *key, double *out);
tf_status tf_json_bool(const json_t *obj, const char *what, const char *key, bool *out);
/* Borrowed string (valid while obj lives). */
tf_status tf_json_str(const json_t *obj, const char *what, const char *key, const char **out);

/* Print v to f (indented when pretty) with a newline. */
tf_status tf_json_print(FILE *f, const json_t *v, bool pretty);

#endif
