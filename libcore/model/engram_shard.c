/* engram_shard.c: Engram row shard files: header, writer, and a batched
 * row reader over io_uring or a thread pool (see engram_shard.h). */
#include "model/engram_shard.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/num.h"
#include "base/thread.h"
#include "model/engram_rows.h"

#define DEFAULT_QD 64

struct tf_engram_shard {
	int fd;
	char *path;
	struct tf_engram_shard_header h;
	unsigned qd;
	int uring_ok;
	struct io_uring ring;
	struct tf_pool *pool; /* when io_uring is not used */
};

void tf_engram_shard_name(char *buf, size_t n, uint32_t layer, uint32_t rank, uint32_t world)
{
	snprintf(buf, n, "engram-l%u-r%uof%u.bin", layer, rank, world);
}

static uint64_t le64(const unsigned char *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static void put64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

tf_status tf_engram_shard_header_parse(const void *buf, size_t n, uint64_t file_size,
				       const char *what, struct tf_engram_shard_header *h)
{
	const unsigned char *p = buf;
	if (n < 48)
		return tf_err(TF_ERR_FORMAT, "'%s': truncated header (%zu of 48 bytes)", what, n);
	if (memcmp(p, TF_ENGRAM_SHARD_MAGIC, 8)) {
		if (!memcmp(p, TF_ENGRAM_SHARD_MAGIC, 7))
			return tf_err(TF_ERR_VERSION, "'%s': unknown version '%.8s' (expected '%s')",
				      what, (const char *)p, TF_ENGRAM_SHARD_MAGIC);
		return tf_err(TF_ERR_FORMAT, "'%s': not an Engram row shard (bad magic)", what);
	}
	h->layer = le64(p + 8);
	h->lo = le64(p + 16);
	h->hi = le64(p + 24);
	h->total = le64(p + 32);
	h->row_bytes = le64(p + 40);
	if (h->row_bytes != TF_ENGRAM_ROW_BYTES)
		return tf_err(TF_ERR_FORMAT, "'%s': rows of %llu bytes (expected %d)", what,
			      (unsigned long long)h->row_bytes, TF_ENGRAM_ROW_BYTES);
	if (h->lo > h->hi || h->hi > h->total || h->total > (UINT64_MAX - 4096) / 264)
		return tf_err(TF_ERR_FORMAT, "'%s': bad row range lo %llu, hi %llu, total %llu",
			      what, (unsigned long long)h->lo, (unsigned long long)h->hi,
			      (unsigned long long)h->total);
	uint64_t want = TF_ENGRAM_SHARD_HEADER + (h->hi - h->lo) * TF_ENGRAM_ROW_BYTES;
	if (file_size != want)
		return tf_err(TF_ERR_FORMAT, "'%s': %llu bytes, rows %llu..%llu need %llu", what,
			      (unsigned long long)file_size, (unsigned long long)h->lo,
			      (unsigned long long)h->hi, (unsigned long long)want);
	return TF_OK;
}

tf_status tf_engram_shard_create(struct tf_engram_shard_writer *w, const char *path,
				 const struct tf_engram_shard_header *h)
{
	memset(w, 0, sizeof(*w));
	w->f.fd = -1;
	if (h->lo > h->hi || h->hi > h->total)
		return tf_err(TF_ERR_ARG, "shard rows %llu..%llu of %llu", (unsigned long long)h->lo,
			      (unsigned long long)h->hi, (unsigned long long)h->total);
	w->h = *h;
	w->h.row_bytes = TF_ENGRAM_ROW_BYTES;
	tf_status st = tf_atomic_open(&w->f, path);
	if (st)
		return st;
	unsigned char *hdr;
	if ((st = tf_seqw_init(&w->sw, w->f.fd, w->f.tmp, 0, TF_ENGRAM_SHARD_WINDOW, true)) ||
	    (st = tf_seqw_room(&w->sw, 0, TF_ENGRAM_SHARD_HEADER, (void **)&hdr))) {
		tf_engram_shard_abort(w);
		return st;
	}
	memset(hdr, 0, TF_ENGRAM_SHARD_HEADER);
	memcpy(hdr, TF_ENGRAM_SHARD_MAGIC, 8);
	put64(hdr + 8, w->h.layer);
	put64(hdr + 16, w->h.lo);
	put64(hdr + 24, w->h.hi);
	put64(hdr + 32, w->h.total);
	put64(hdr + 40, w->h.row_bytes);
	return TF_OK;
}

size_t tf_engram_shard_max_rows(const struct tf_engram_shard_writer *w)
{
	return tf_seqw_max_room(&w->sw) / TF_ENGRAM_ROW_BYTES;
}

tf_status tf_engram_shard_room(struct tf_engram_shard_writer *w, size_t n, void **p)
{
	if (n > w->h.hi - w->h.lo - w->written || n > tf_engram_shard_max_rows(w))
		return tf_err(TF_ERR_ARG, "shard: %zu rows past hi %llu or too many at once", n,
			      (unsigned long long)w->h.hi);
	uint64_t at = TF_ENGRAM_SHARD_HEADER + w->written * TF_ENGRAM_ROW_BYTES;
	tf_status st = tf_seqw_room(&w->sw, at, n * TF_ENGRAM_ROW_BYTES, p);
	w->pend = st ? 0 : n;
	return st;
}

void tf_engram_shard_filled(struct tf_engram_shard_writer *w)
{
	w->written += w->pend;
	w->pend = 0;
}

tf_status tf_engram_shard_append(struct tf_engram_shard_writer *w, const uint8_t *rows, size_t n)
{
	size_t most = tf_engram_shard_max_rows(w);
	do {
		size_t k = n < most ? n : most;
		void *p;
		tf_status st = tf_engram_shard_room(w, k, &p);
		if (st)
			return st;
		memcpy(p, rows, k * TF_ENGRAM_ROW_BYTES);
		tf_engram_shard_filled(w);
		rows += k * TF_ENGRAM_ROW_BYTES;
		n -= k;
	} while (n);
	return TF_OK;
}

tf_status tf_engram_shard_commit(struct tf_engram_shard_writer *w)
{
	if (w->written != w->h.hi - w->h.lo) {
		tf_engram_shard_abort(w);
		return tf_err(TF_ERR_ARG, "shard: %llu of %llu rows written",
			      (unsigned long long)w->written,
			      (unsigned long long)(w->h.hi - w->h.lo));
	}
	tf_status st = tf_seqw_finish(&w->sw, TF_ENGRAM_SHARD_HEADER +
					      w->written * TF_ENGRAM_ROW_BYTES);
	tf_seqw_release(&w->sw);
	if (st) {
		tf_atomic_abort(&w->f);
		return st;
	}
	return tf_atomic_commit(&w->f);
}

void tf_engram_shard_abort(struct tf_engram_shard_writer *w)
{
	tf_seqw_release(&w->sw);
	tf_atomic_abort(&w->f);
}

/* TF_ENGRAM_QD and TF_ENGRAM_URING; bad values keep the defaults. */
static void settings(unsigned *qd, int *uring)
{
	int64_t v;
	const char *e = getenv("TF_ENGRAM_QD");
	*qd = DEFAULT_QD;
	if (e && !tf_parse_i64(e, 1, 4096, false, &v))
		*qd = (unsigned)v;
	e = getenv("TF_ENGRAM_URING");
	*uring = !(e && !strcmp(e, "0"));
}

tf_status tf_engram_shard_open(const char *path, struct tf_engram_shard **out)
{
	*out = NULL;
	tf_status st;
	struct tf_engram_shard *s = calloc(1, sizeof(*s));
	if (!s || !(s->path = strdup(path))) {
		free(s);
		return tf_err(TF_ERR_NOMEM, "no memory for shard '%s'", path);
	}
	s->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (s->fd < 0) {
		st = tf_err_errno(errno == ENOENT ? TF_ERR_NOTFOUND : TF_ERR_IO,
				  "cannot open '%s'", path);
		goto out;
	}
	struct stat sb;
	if (fstat(s->fd, &sb)) {
		st = tf_err_errno(TF_ERR_IO, "cannot stat '%s'", path);
		goto out;
	}
	unsigned char hdr[48];
	ssize_t got = pread(s->fd, hdr, sizeof(hdr), 0);
	if (got < 0) {
		st = tf_err_errno(TF_ERR_IO, "cannot read '%s'", path);
		goto out;
	}
	if ((st = tf_engram_shard_header_parse(hdr, (size_t)got, (uint64_t)sb.st_size, path, &s->h)))
		goto out;
	int uring;
	settings(&s->qd, &uring);
	if (uring && io_uring_queue_init(s->qd, &s->ring, 0) == 0)
		s->uring_ok = 1;
	else if ((st = tf_pool_new((int)s->qd, &s->pool)))
		goto out;
	*out = s;
	return TF_OK;
out:
	tf_engram_shard_close(s);
	return st;
}

void tf_engram_shard_close(struct tf_engram_shard *s)
{
	if (!s)
		return;
	if (s->uring_ok)
		io_uring_queue_exit(&s->ring);
	tf_pool_free(s->pool);
	if (s->fd >= 0)
		close(s->fd);
	free(s->path);
	free(s);
}

const struct tf_engram_shard_header *tf_engram_shard_info(const struct tf_engram_shard *s)
{
	return &s->h;
}

const char *tf_engram_shard_backend(const struct tf_engram_shard *s)
{
	return s->uring_ok ? "io_uring" : "threads";
}

static uint64_t row_off(const struct tf_engram_shard *s, uint64_t row)
{
	return TF_ENGRAM_SHARD_HEADER + (row - s->h.lo) * TF_ENGRAM_ROW_BYTES;
}

static tf_status fetch_uring(struct tf_engram_shard *s, const uint64_t *rows, size_t n,
			     uint8_t *out)
{
	size_t queued = 0, done = 0;
	unsigned inflight = 0;
	while (done < n) {
		while (queued < n && inflight < s->qd) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
			if (!sqe)
				break;
			io_uring_prep_read(sqe, s->fd, out + queued * TF_ENGRAM_ROW_BYTES,
					   TF_ENGRAM_ROW_BYTES, row_off(s, rows[queued]));
			io_uring_sqe_set_data64(sqe, queued);
			queued++;
			inflight++;
		}
		int rc = io_uring_submit_and_wait(&s->ring, 1);
		if (rc < 0 && rc != -EINTR) {
			errno = -rc;
			return tf_err_errno(TF_ERR_IO, "'%s': io_uring submit", s->path);
		}
		struct io_uring_cqe *cqe;
		unsigned head, seen = 0;
		tf_status st = TF_OK;
		io_uring_for_each_cqe(&s->ring, head, cqe)
		{
			size_t i = (size_t)io_uring_cqe_get_data64(cqe);
			int res = cqe->res;
			seen++;
			if (st)
				continue;
			if (res == -EINVAL || res == -EOPNOTSUPP) {
				/* a kernel with io_uring but without its read op */
				st = TF_ERR_UNSUPPORTED;
			} else if (res < 0) {
				errno = -res;
				st = tf_err_errno(TF_ERR_IO, "'%s': cannot read row %llu", s->path,
						  (unsigned long long)rows[i]);
			} else if (res < TF_ENGRAM_ROW_BYTES) {
				/* a short read: finish the row synchronously */
				st = tf_file_pread(s->fd, out + i * TF_ENGRAM_ROW_BYTES + res,
						   TF_ENGRAM_ROW_BYTES - (size_t)res,
						   row_off(s, rows[i]) + (uint64_t)res);
			}
		}
		io_uring_cq_advance(&s->ring, seen);
		inflight -= seen;
		done += seen;
		if (st) {
			/* drain what is still in flight before the buffers go */
			while (inflight) {
				if (io_uring_wait_cqe(&s->ring, &cqe))
					break;
				io_uring_cqe_seen(&s->ring, cqe);
				inflight--;
			}
			return st;
		}
	}
	return TF_OK;
}

struct pool_job {
	struct tf_engram_shard *s;
	const uint64_t *rows;
	uint8_t *out;
	int err;       /* first errno, 0 if none */
	size_t bad;    /* its row index */
	pthread_mutex_t mu;
};

static void pool_read(void *ctx, size_t b, size_t e, int worker)
{
	struct pool_job *j = ctx;
	for (size_t i = b; i < e; i++) {
		uint8_t *dst = j->out + i * TF_ENGRAM_ROW_BYTES;
		size_t got = 0;
		while (got < TF_ENGRAM_ROW_BYTES) {
			ssize_t r = pread(j->s->fd, dst + got, TF_ENGRAM_ROW_BYTES - got,
					  (off_t)(row_off(j->s, j->rows[i]) + got));
			if (r > 0) {
				got += (size_t)r;
				continue;
			}
			if (r < 0 && errno == EINTR)
				continue;
			pthread_mutex_lock(&j->mu);
			if (!j->err) {
				j->err = r < 0 ? errno : EIO;
				j->bad = i;
			}
			pthread_mutex_unlock(&j->mu);
			return;
		}
	}
}

tf_status tf_engram_shard_fetch(struct tf_engram_shard *s, const uint64_t *rows, size_t n,
				uint8_t *out)
{
	for (size_t i = 0; i < n; i++)
		if (rows[i] < s->h.lo || rows[i] >= s->h.hi)
			return tf_err(TF_ERR_RANGE, "'%s': row %llu is outside the shard's %llu..%llu",
				      s->path, (unsigned long long)rows[i],
				      (unsigned long long)s->h.lo, (unsigned long long)s->h.hi - 1);
	if (!n)
		return TF_OK;
	if (s->uring_ok) {
		tf_status st = fetch_uring(s, rows, n, out);
		if (st != TF_ERR_UNSUPPORTED)
			return st;
		/* fall back to the thread pool for good */
		io_uring_queue_exit(&s->ring);
		s->uring_ok = 0;
		if ((st = tf_pool_new((int)s->qd, &s->pool)))
			return st;
	}
	struct pool_job j = {s, rows, out, 0, 0, PTHREAD_MUTEX_INITIALIZER};
	tf_pool_for(s->pool, n, 16, pool_read, &j);
	pthread_mutex_destroy(&j.mu);
	if (j.err) {
		errno = j.err;
		return tf_err_errno(TF_ERR_IO, "'%s': cannot read row %llu", s->path,
				    (unsigned long long)rows[j.bad]);
	}
	return TF_OK;
}
