/* file.c: pread/pwrite loops, small-file reads, atomic writes. */
#include "base/file.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"

tf_status tf_file_pread(int fd, void *buf, size_t n, uint64_t off)
{
	char *p = buf;
	while (n) {
		ssize_t r = pread(fd, p, n, (off_t)off);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return tf_err_errno(TF_ERR_IO, "read at offset %llu failed",
					    (unsigned long long)off);
		}
		if (r == 0)
			return tf_err(TF_ERR_FORMAT, "short read at offset %llu (%zu bytes missing)",
				      (unsigned long long)off, n);
		p += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return TF_OK;
}

tf_status tf_file_pwrite(int fd, const void *buf, size_t n, uint64_t off)
{
	const char *p = buf;
	while (n) {
		ssize_t r = pwrite(fd, p, n, (off_t)off);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return tf_err_errno(TF_ERR_IO, "write at offset %llu failed",
					    (unsigned long long)off);
		}
		p += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return TF_OK;
}

tf_status tf_file_write(int fd, const void *buf, size_t n)
{
	const char *p = buf;
	while (n) {
		ssize_t r = write(fd, p, n);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return tf_err_errno(TF_ERR_IO, "write failed");
		}
		p += r;
		n -= (size_t)r;
	}
	return TF_OK;
}

tf_status tf_file_read_all(const char *path, size_t max, char **data, size_t *len)
{
	*data = NULL;
	if (len)
		*len = 0;
	int fd = strcmp(path, "-") ? open(path, O_RDONLY | O_CLOEXEC) : 0;
	if (fd < 0)
		return tf_err_errno(errno == ENOENT ? TF_ERR_NOTFOUND : TF_ERR_IO,
				    "cannot open '%s'", path);
	struct tf_buf b = TF_BUF_INIT;
	tf_status st = TF_OK;
	for (;;) {
		if ((st = tf_buf_reserve(&b, 65536)))
			break;
		ssize_t r = read(fd, b.data + b.len, 65536);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			st = tf_err_errno(TF_ERR_IO, "cannot read '%s'", path);
			break;
		}
		if (r == 0)
			break;
		b.len += (size_t)r;
		if (b.len > max) {
			st = tf_err(TF_ERR_RANGE, "'%s' is larger than %zu bytes", path, max);
			break;
		}
	}
	if (fd)
		close(fd);
	if (st) {
		tf_buf_release(&b);
		return st;
	}
	*data = tf_buf_detach(&b, len);
	return *data ? TF_OK : tf_err(TF_ERR_NOMEM, "out of memory reading '%s'", path);
}

tf_status tf_atomic_open(struct tf_atomic_file *f, const char *path)
{
	f->fd = -1;
	f->path = strdup(path);
	f->tmp = NULL;
	if (!f->path || asprintf(&f->tmp, "%s.tmp.%ld", path, (long)getpid()) < 0) {
		free(f->path);
		f->path = f->tmp = NULL;
		return tf_err(TF_ERR_NOMEM, "out of memory");
	}
	f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (f->fd < 0) {
		tf_status st = tf_err_errno(TF_ERR_IO, "cannot create '%s'", f->tmp);
		free(f->path);
		free(f->tmp);
		f->path = f->tmp = NULL;
		return st;
	}
	return TF_OK;
}

tf_status tf_file_sync_dir(const char *path)
{
	char *copy = strdup(path);
	if (!copy)
		return tf_err(TF_ERR_NOMEM, "out of memory");
	int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	tf_status st = TF_OK;
	if (fd < 0 || fsync(fd))
		st = tf_err_errno(TF_ERR_IO, "cannot sync the folder of '%s'", path);
	if (fd >= 0)
		close(fd);
	free(copy);
	return st;
}

tf_status tf_atomic_commit(struct tf_atomic_file *f)
{
	tf_status st = TF_OK;
	if (fsync(f->fd))
		st = tf_err_errno(TF_ERR_IO, "cannot sync '%s'", f->tmp);
	if (close(f->fd) && !st)
		st = tf_err_errno(TF_ERR_IO, "cannot close '%s'", f->tmp);
	f->fd = -1;
	if (!st && rename(f->tmp, f->path))
		st = tf_err_errno(TF_ERR_IO, "cannot rename '%s' to '%s'", f->tmp, f->path);
	if (!st)
		st = tf_file_sync_dir(f->path);
	if (st)
		unlink(f->tmp);
	free(f->path);
	free(f->tmp);
	f->path = f->tmp = NULL;
	return st;
}

void tf_atomic_abort(struct tf_atomic_file *f)
{
	if (f->fd >= 0)
		close(f->fd);
	if (f->tmp)
		unlink(f->tmp);
	free(f->path);
	free(f->tmp);
	f->fd = -1;
	f->path = f->tmp = NULL;
}

tf_status tf_file_write_atomic(const char *path, const void *data, size_t n)
{
	struct tf_atomic_file f;
	tf_status st = tf_atomic_open(&f, path);
	if (st)
		return st;
	if ((st = tf_file_write(f.fd, data, n))) {
		tf_err_wrap(st, "'%s': ", f.tmp);
		tf_atomic_abort(&f);
		return st;
	}
	return tf_atomic_commit(&f);
}

tf_status tf_file_mkdirs(const char *path)
{
	char *p = strdup(path);
	if (!p)
		return tf_err(TF_ERR_NOMEM, "out of memory");
	tf_status st = TF_OK;
	for (char *s = p + 1;; s++) {
		if (*s != '/' && *s)
			continue;
		char c = *s;
		*s = 0;
		if (mkdir(p, 0755) && errno != EEXIST) {
			st = tf_err_errno(TF_ERR_IO, "cannot create folder '%s'", p);
			break;
		}
		*s = c;
		if (!c)
			break;
	}
	free(p);
	return st;
}

bool tf_file_exists(const char *path)
{
	struct stat s;
	return stat(path, &s) == 0;
}

char *tf_path_join(const char *dir, const char *name)
{
	char *out = NULL;
	size_t n = strlen(dir);
	if (asprintf(&out, "%s%s%s", dir, n && dir[n - 1] == '/' ? "" : "/", name) < 0)
		return NULL;
	return out;
}
