/* file.h: whole-length pread/pwrite loops, small-file reads, and atomic
 * writes (write a temporary beside the target, fsync, rename over it, fsync
 * the folder) so a reader never sees half a file and a crash never loses
 * what was there before. */
#ifndef TF_BASE_FILE_H
#define TF_BASE_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/status.h"

/* Read exactly n bytes at off (retrying short reads and EINTR). A read that
 * ends early is TF_ERR_FORMAT ("short read"), a failed one TF_ERR_IO. */
tf_status tf_file_pread(int fd, void *buf, size_t n, uint64_t off);
/* Write exactly n bytes at off. */
tf_status tf_file_pwrite(int fd, const void *buf, size_t n, uint64_t off);
/* Write exactly n bytes at the current position (pipes and sockets too);
 * EPIPE is reported as TF_ERR_IO with errno kept as EPIPE. */
tf_status tf_file_write(int fd, const void *buf, size_t n);

/* Read a whole regular file (or "-" for stdin) of at most max bytes into a
 * NUL-terminated heap buffer the caller frees. A larger file is
 * TF_ERR_RANGE; a missing one TF_ERR_NOTFOUND. */
tf_status tf_file_read_all(const char *path, size_t max, char **data, size_t *len);

/* An atomic file: data goes to "<path>.tmp.<pid>" and appears at path only
 * on commit. */
struct tf_atomic_file {
	int fd;
	char *path;
	char *tmp;
};

/* Create the temporary (mode 0644). */
tf_status tf_atomic_open(struct tf_atomic_file *f, const char *path);
/* fsync, rename over path, fsync the folder; closes f in every case. */
tf_status tf_atomic_commit(struct tf_atomic_file *f);
/* Remove the temporary and close; safe on a zeroed or committed f. */
void tf_atomic_abort(struct tf_atomic_file *f);
/* Write data to path atomically in one call. */
tf_status tf_file_write_atomic(const char *path, const void *data, size_t n);

/* fsync the folder that holds path (after a rename or create). */
tf_status tf_file_sync_dir(const char *path);
/* mkdir -p with mode 0755. */
tf_status tf_file_mkdirs(const char *path);
/* True when path exists (any type). */
bool tf_file_exists(const char *path);
/* path joined with name, heap-allocated ("a" + "b" = "a/b"); NULL on OOM. */
char *tf_path_join(const char *dir, const char *name);

#endif
