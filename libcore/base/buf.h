/* buf.h: a growable byte buffer, always NUL-terminated after its length.
 *
 * struct tf_buf b = TF_BUF_INIT; ... tf_buf_release(&b);
 * The buffer owns its data; tf_buf_detach hands it to the caller (free()). */
#ifndef TF_BASE_BUF_H
#define TF_BASE_BUF_H

#include <stdarg.h>
#include <stddef.h>

#include "base/status.h"

struct tf_buf {
	char *data; /* NULL until the first growth */
	size_t len;
	size_t cap;
};

#define TF_BUF_INIT {NULL, 0, 0}

void tf_buf_init(struct tf_buf *b);
void tf_buf_release(struct tf_buf *b);
/* Make room for n more bytes (plus the NUL). TF_ERR_NOMEM on failure. */
tf_status tf_buf_reserve(struct tf_buf *b, size_t n);
tf_status tf_buf_append(struct tf_buf *b, const void *data, size_t n);
tf_status tf_buf_puts(struct tf_buf *b, const char *s);
tf_status tf_buf_putc(struct tf_buf *b, char c);
tf_status tf_buf_printf(struct tf_buf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
tf_status tf_buf_vprintf(struct tf_buf *b, const char *fmt, va_list ap);
/* Drop the contents, keep the memory. */
void tf_buf_reset(struct tf_buf *b);
/* Hand the data (NUL-terminated, never NULL on success) to the caller and
 * reset b; *len receives the length when non-NULL. NULL on failure. */
char *tf_buf_detach(struct tf_buf *b, size_t *len);

#endif
