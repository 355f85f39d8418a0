/* stjson.h: a strict, allocation-light JSON reader for safetensors headers.
 *
 * A release pack's headers describe 178k tensors; reading them through a
 * general JSON tree costs a second. This reader walks the header once and
 * hands each tensor entry to the caller: it accepts exactly RFC 8259 JSON
 * (UTF-8 checked, escapes decoded, no NUL in strings, nothing after the
 * top-level value but whitespace), with the shapes safetensors allows: a
 * top-level object of name -> {"dtype": string, "shape": [uint...],
 * "data_offsets": [uint, uint]} (other keys inside an entry are skipped, as
 * the reference reader does) and "__metadata__" -> {string: string}. */
#ifndef TF_PACK_STJSON_H
#define TF_PACK_STJSON_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define TF_STJSON_MAX_DIMS 8

struct tf_stjson_entry {
	const char *name;      /* NUL-terminated, valid until the next callback */
	size_t name_len;
	const char *dtype;     /* NULL when missing */
	int ndim;              /* -1 when "shape" is missing */
	uint64_t shape[TF_STJSON_MAX_DIMS];
	int noffsets;          /* -1 when "data_offsets" is missing */
	uint64_t offsets[2];
};

/* Called once per tensor entry; a non-zero return stops the walk with it. */
typedef tf_status (*tf_stjson_fn)(void *ctx, const struct tf_stjson_entry *e);

/* Walk n bytes of header text. *metadata receives the "__metadata__"
 * object (caller json_decrefs) or NULL. what names the file in messages. */
tf_status tf_stjson_walk(const char *text, size_t n, const char *what, tf_stjson_fn fn,
			 void *ctx, json_t **metadata);

#endif
