/* once.h: tf-serve --once: one request served outside HTTP, through the
 * same route table and generation as the server, its reply or SSE stream
 * written to a FILE. Not HTTP: no slots, keys, keepalives or drain. */
#ifndef TF_SERVE_ONCE_H
#define TF_SERVE_ONCE_H

#include <stddef.h>
#include <stdio.h>

#include "base/status.h"
#include "serve/gen.h"

/* Serve one request: body (n bytes) for the POST route path, the reply or
 * the SSE stream written to out. *status gets the HTTP status the reply
 * carries. TF_ERR_ARG for a path that is no POST route (*status 404),
 * TF_ERR_IO when out cannot be written. */
tf_status tf_serve_once(const struct tf_gen_env *env, const char *path, const char *body,
			size_t n, FILE *out, int *status);

#endif
