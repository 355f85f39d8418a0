/* seqw.c: the sequential writer through an aligned window (seqw.h). */
#include "base/seqw.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
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

/* Wait for the write in flight (if any) and finish what it left: a direct
 * write the kernel refused is done again as a plain one, a short one
 * completed. */
static tf_status wait_inflight(struct tf_seqw *s)
{
	if (!s->ifl_n)
		return TF_OK;
	struct io_uring_cqe *cqe;
	int r;
	while ((r = io_uring_wait_cqe(s->ring, &cqe)) == -EINTR)
		;
	size_t n = s->ifl_n;
	s->ifl_n = 0;
	if (r < 0) /* no completion to be had: the write's fate is unknown, do it again */
		return out(s, s->ifl_p, n, s->ifl_off);
	int res = cqe->res;
	io_uring_cqe_seen(s->ring, cqe);
	if (res < 0) {
		if (res == -EINVAL && s->direct)
			go_buffered(s);
		else if (res != -EINTR && res != -EAGAIN) {
			errno = -res;
			return tf_err_errno(TF_ERR_IO, "'%s': write at offset %llu failed", s->what,
					    (unsigned long long)s->ifl_off);
		}
		res = 0;
	}
	return (size_t)res < n ? out(s, s->ifl_p + res, n - (size_t)res, s->ifl_off + (uint64_t)res) :
				 TF_OK;
}

/* Send win[0, n) to base: with a ring, start the write and switch to the
 * spare window (the bytes from n on move there); else write it now. */
static tf_status send_block(struct tf_seqw *s, size_t n)
{
	tf_status st = wait_inflight(s); /* the spare is free again */
	if (st)
		return st;
	if (s->ring && s->direct) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(s->ring);
		if (sqe) {
			io_uring_prep_write(sqe, s->fd, s->win, (unsigned)n, s->base);
			if (io_uring_submit(s->ring) == 1) {
				s->ifl_p = s->win;
				s->ifl_n = n;
				s->ifl_off = s->base;
				memcpy(s->spare, s->win + n, s->fill - n);
				uint8_t *t = s->win;
				s->win = s->spare;
				s->spare = t;
				return TF_OK;
			}
		}
		/* the ring fails us: drop it (and any write left unsubmitted in
		 * it) and go on in turn */
		io_uring_queue_exit(s->ring);
		free(s->ring);
		s->ring = NULL;
	}
	if ((st = out(s, s->win, n, s->base)))
		return st;
	memmove(s->win, s->win + n, s->fill - n);
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
	/* direct writes go out asynchronously (one in flight, from a second
	 * window) while the caller fills the next; without io_uring, in turn */
	if (s->direct && (s->spare = window_get(cap)) && (s->ring = malloc(sizeof(struct io_uring))) &&
	    io_uring_queue_init(2, s->ring, 0)) {
		free(s->ring);
		s->ring = NULL;
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
		tf_status st = send_block(s, a);
		if (st)
			return st;
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
	if ((st = wait_inflight(s)))
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
	if (s->ring) {
		if (s->ifl_n) /* after an error: the kernel may still read the window */
			wait_inflight(s);
		io_uring_queue_exit(s->ring);
		free(s->ring);
		s->ring = NULL;
	}
	window_put(s->win, s->cap);
	window_put(s->spare, s->cap);
	s->win = s->spare = NULL;
}
