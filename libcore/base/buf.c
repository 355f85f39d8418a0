/* buf.c: growable byte buffer. */
#include "base/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tf_buf_init(struct tf_buf *b)
{
	b->data = NULL;
	b->len = b->cap = 0;
}

void tf_buf_release(struct tf_buf *b)
{
	free(b->data);
	tf_buf_init(b);
}

tf_status tf_buf_reserve(struct tf_buf *b, size_t n)
{
	if (b->len + n + 1 < b->len)
		return tf_err(TF_ERR_NOMEM, "buffer size overflow");
	if (b->len + n + 1 <= b->cap)
		return TF_OK;
	size_t cap = b->cap ? b->cap : 64;
	while (cap < b->len + n + 1)
		cap = cap * 2 > cap ? cap * 2 : b->len + n + 1;
	char *d = realloc(b->data, cap);
	if (!d)
		return tf_err(TF_ERR_NOMEM, "cannot grow a buffer to %zu bytes", cap);
	b->data = d;
	b->cap = cap;
	return TF_OK;
}

tf_status tf_buf_append(struct tf_buf *b, const void *data, size_t n)
{
	tf_status st = tf_buf_reserve(b, n);
	if (st)
		return st;
	if (n)
		memcpy(b->data + b->len, data, n);
	b->len += n;
	b->data[b->len] = 0;
	return TF_OK;
}

tf_status tf_buf_puts(struct tf_buf *b, const char *s)
{
	return tf_buf_append(b, s, strlen(s));
}

tf_status tf_buf_putc(struct tf_buf *b, char c)
{
	return tf_buf_append(b, &c, 1);
}

tf_status tf_buf_vprintf(struct tf_buf *b, const char *fmt, va_list ap)
{
	va_list ap2;
	va_copy(ap2, ap);
	int n = vsnprintf(NULL, 0, fmt, ap2);
	va_end(ap2);
	if (n < 0)
		return tf_err(TF_ERR_ARG, "bad format string");
	tf_status st = tf_buf_reserve(b, (size_t)n);
	if (st)
		return st;
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	b->len += (size_t)n;
	return TF_OK;
}

tf_status tf_buf_printf(struct tf_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	tf_status st = tf_buf_vprintf(b, fmt, ap);
	va_end(ap);
	return st;
}

void tf_buf_reset(struct tf_buf *b)
{
	b->len = 0;
	if (b->data)
		b->data[0] = 0;
}

char *tf_buf_detach(struct tf_buf *b, size_t *len)
{
	if (!b->data && tf_buf_reserve(b, 0))
		return NULL;
	b->data[b->len] = 0;
	char *d = b->data;
	if (len)
		*len = b->len;
	tf_buf_init(b);
	return d;
}
