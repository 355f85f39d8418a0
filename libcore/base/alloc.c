/* alloc.c: checked allocation. */
#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

void *tf_alloc_array(size_t n, size_t size)
{
	size_t bytes;
	if (__builtin_mul_overflow(n, size, &bytes))
		return NULL;
	return malloc(bytes ? bytes : 1);
}

void *tf_calloc(size_t n, size_t size)
{
	size_t bytes;
	if (__builtin_mul_overflow(n, size, &bytes))
		return NULL;
	return calloc(bytes ? n : 1, bytes ? size : 1);
}

int tf_realloc_array(void *p, size_t n, size_t size)
{
	size_t bytes;
	if (__builtin_mul_overflow(n, size, &bytes))
		return -1;
	void **pp = p;
	void *q = realloc(*pp, bytes ? bytes : 1);
	if (!q)
		return -1;
	*pp = q;
	return 0;
}

char *tf_strdup(const char *s)
{
	return s ? strdup(s) : NULL;
}

char *tf_strndup(const char *s, size_t n)
{
	char *d = malloc(n + 1);
	if (!d)
		return NULL;
	memcpy(d, s, n);
	d[n] = 0;
	return d;
}

void *tf_alloc_aligned(size_t align, size_t size)
{
	void *p = NULL;
	size_t rounded = (size + align - 1) / align * align;
	if (rounded < size || posix_memalign(&p, align, rounded ? rounded : align))
		return NULL;
	memset(p, 0, rounded ? rounded : align);
	return p;
}
