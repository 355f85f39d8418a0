/* alloc.h: checked allocation. These never exit: they return NULL on
 * failure (and on a size product that overflows) and the caller turns that
 * into TF_ERR_NOMEM. The caller frees with free(). */
#ifndef TF_BASE_ALLOC_H
#define TF_BASE_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* n * size bytes, uninitialised; NULL on overflow or failure. */
void *tf_alloc_array(size_t n, size_t size);
/* n * size bytes, zeroed; NULL on overflow or failure. */
void *tf_calloc(size_t n, size_t size);
/* Resize *p to n * size bytes; on failure *p is unchanged and -1 returned. */
int tf_realloc_array(void *p, size_t n, size_t size);
/* A copy of s (NULL for NULL or on failure). */
char *tf_strdup(const char *s);
/* A NUL-terminated copy of n bytes of s. */
char *tf_strndup(const char *s, size_t n);
/* Aligned allocation (align a power of two ≥ sizeof(void *)); zeroed. */
void *tf_alloc_aligned(size_t align, size_t size);

/* a * b into *out; false on overflow. */
static inline bool tf_mul_ok(uint64_t a, uint64_t b, uint64_t *out)
{
	return !__builtin_mul_overflow(a, b, out);
}
/* a + b into *out; false on overflow. */
static inline bool tf_add_ok(uint64_t a, uint64_t b, uint64_t *out)
{
	return !__builtin_add_overflow(a, b, out);
}

#endif
