/* seqw.c: the sequential writer through an aligned window (seqw.h). */
#include "base/seqw.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Released windows kept for the next writer, so that a program writing
 * many files in turn touches fresh pages (a page fault each) only once. */
#define POOL 16
static struct {
	pthread_mutex_t mu;
	size_t n;
	struct {
		uint8_t *p;
		size_t cap;
	} v[POOL];
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER};

static uint8_t *window_get(size_t cap)
{
	uint8_t *p = NULL;
	pthread_mutex_lock(&pool.mu);
	for (size_t i = 0; i < pool.n; i++)
		if (pool.v[i].cap == cap) {
			p = pool.v[i].p;
			pool.v[i] = pool.v[--pool.n];
			break;
		}
	pthread_mutex_unlock(&pool.mu);
	/* not zeroed: rooms are filled by the caller and gaps by zero_to */
	return p ? p : aligned_alloc(TF_SEQW_ALIGN, cap);
}

static void window_put(uint8_t *p, size_t cap)
{
	if (!p)
		return;
	pthread_mutex_lock(&pool.mu);
	if (pool.n < POOL) {
		pool.v[pool.n].p = p;
		pool.v[pool.n++].cap = cap;
		p = NULL;
	}
	pthread_mutex_unlock(&pool.mu);
	free(p);
}

static uint64_t align_down(uint64_t v)
{
	return v & ~(uint64_t)(TF_SEQW_ALIGN - 1);
}

static uint64_t align_up(uint64_t v)
{
	return align_down(v + TF_SEQW_ALIGN - 1);
}

/* Turn O_DIRECT off for the rest of the file (after the file system or the
 * device refused an aligned direct write). */
static void go_buffered(struct tf_seqw *s)
{
	int fl = fcntl(s->fd, F_GETFL);
	if (fl >= 0)
		fcntl(s->fd, F_SETFL, fl & ~O_DIRECT);
	s->direct = false;
}

/* Write n bytes at off; a direct write that the kernel refuses (EINVAL) is
 * retried as a plain one. */
static tf_status out(struct tf_seqw *s, const uint8_t *p, size_t n, uint64_t off)
{
	while (n) {
		ssize_t r = pwrite(s->fd, p, n, (off_t)off);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EINVAL && s->direct) {
				go_buffered(s);
				continue;
			}
			return tf_err_errno(TF_ERR_IO, "'%s': write at offset %llu failed", s->what,
					    (unsigned long long)off);
		}
		if (r == 0)
			return tf_err(TF_ERR_IO, "'%s': write at offset %llu wrote nothing", s->what,
				      (unsigned long long)off);
		p += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return TF_OK;
}

tf_status tf_seqw_init(struct tf_seqw *s, int fd, const char *what, uint64_t start, size_t cap,
		       bool direct)
{
	memset(s, 0, sizeof(*s));
	s->fd = fd;
	s->what = what;
	if (start % TF_SEQW_ALIGN || cap % TF_SEQW_ALIGN || cap < 2 * TF_SEQW_ALIGN)
		return tf_err(TF_ERR_ARG, "'%s': writer at %llu with a window of %zu bytes", what,
			      (unsigned long long)start, cap);
	if (!(s->win = window_get(cap)))
		return tf_err(TF_ERR_NOMEM, "out of memory");
	s->cap = cap;
	s->base = start;
	if (direct) {
		int fl = fcntl(fd, F_GETFL);
		s->direct = fl >= 0 && !fcntl(fd, F_SETFL, fl | O_DIRECT);
	}
	return TF_OK;
}

size_t tf_seqw_max_room(const struct tf_seqw *s)
{
	return s->cap - TF_SEQW_ALIGN;
}

/* Zeros from the window's fill to z (a window offset, at most cap). */
static void zero_to(struct tf_seqw *s, size_t z)
{
	if (z > s->fill) {
		memset(s->win + s->fill, 0, z - s->fill);
		s->fill = z;
	}
}

tf_status tf_seqw_room(struct tf_seqw *s, uint64_t pos, size_t len, void **p)
{
	if (pos < s->base + s->fill || len > tf_seqw_max_room(s))
		return tf_err(TF_ERR_ARG, "'%s': %zu bytes at offset %llu: behind the end %llu or too "
			      "many", s->what, len, (unsigned long long)pos,
			      (unsigned long long)(s->base + s->fill));
	while (pos + len > s->base + s->cap) {
		/* send the window's whole blocks; keep the partial one. Since
		 * len <= cap - ALIGN, the room starts at least a block in, so
		 * there is one. */
		zero_to(s, pos - s->base < s->cap ? (size_t)(pos - s->base) : s->cap);
		size_t a = (size_t)align_down(s->fill);
		tf_status st = out(s, s->win, a, s->base);
		if (st)
			return st;
		memmove(s->win, s->win + a, s->fill - a);
		s->base += a;
		s->fill -= a;
	}
	zero_to(s, (size_t)(pos - s->base));
	s->fill = (size_t)(pos - s->base) + len;
	*p = s->win + (pos - s->base);
	return TF_OK;
}

tf_status tf_seqw_pwrite(struct tf_seqw *s, const void *data, size_t n, uint64_t off)
{
	return out(s, data, n, off);
}

tf_status tf_seqw_finish(struct tf_seqw *s, uint64_t end)
{
	void *p;
	tf_status st = tf_seqw_room(s, end, 0, &p);
	if (st)
		return st;
	size_t n = s->fill;
	if (s->direct) {
		n = (size_t)align_up(n);
		memset(s->win + s->fill, 0, n - s->fill);
	}
	if ((st = out(s, s->win, n, s->base)))
		return st;
	s->base += s->fill;
	s->fill = 0;
	if (s->direct)
		go_buffered(s); /* fd as the caller gave it */
	if (ftruncate(s->fd, (off_t)end))
		return tf_err_errno(TF_ERR_IO, "'%s': cannot set its size", s->what);
	return TF_OK;
}

void tf_seqw_release(struct tf_seqw *s)
{
	window_put(s->win, s->cap);
	s->win = NULL;
}
