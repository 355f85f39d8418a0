/* prepared_tar.c: prepared images as a tar stream (libarchive), so a rank's
 * images can travel over a pipe: tf-prepare -o - | ssh host tf-prepare
 * --import -.
 *
 * Export writes pax entries with fixed metadata (mtime 0, uid/gid 0, mode
 * 0644, no user names) so the stream depends only on the files. Import
 * accepts only names of the form <key>/rank<r>of<w>/<L<i>|top>.bin (no
 * other path can be written: no "..", no absolute names, no links), writes
 * each atomically and verifies it completely before keeping it. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"
#include "model/prepare.h"
#include "model/prepared.h"

#define CHUNK (1u << 20)

tf_status tf_prep_tar_begin(struct tf_prep_tar *t, int fd, bool zstd)
{
	struct archive *a = archive_write_new();
	t->a = NULL;
	if (!a)
		return tf_err(TF_ERR_NOMEM, "out of memory");
	if (archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
	    (zstd && archive_write_add_filter_zstd(a) != ARCHIVE_OK) ||
	    archive_write_set_bytes_in_last_block(a, 1) != ARCHIVE_OK ||
	    archive_write_open_fd(a, fd) != ARCHIVE_OK) {
		tf_status st = tf_err(TF_ERR_UNAVAILABLE, "tar stream: %s", archive_error_string(a));
		archive_write_free(a);
		return st;
	}
	t->a = a;
	return TF_OK;
}

tf_status tf_prep_tar_add(struct tf_prep_tar *t, const char *rel, const char *path)
{
	struct archive *a = t->a;
	struct archive_entry *e = NULL;
	char *buf = NULL;
	struct stat sb;
	tf_status st = TF_OK;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return tf_err_errno(TF_ERR_IO, "cannot open '%s'", path);
	if (fstat(fd, &sb)) {
		st = tf_err_errno(TF_ERR_IO, "cannot stat '%s'", path);
		goto out;
	}
	if (!(e = archive_entry_new()) || !(buf = malloc(CHUNK))) {
		st = tf_err(TF_ERR_NOMEM, "out of memory");
		goto out;
	}
	archive_entry_set_pathname(e, rel);
	archive_entry_set_filetype(e, AE_IFREG);
	archive_entry_set_perm(e, 0644);
	archive_entry_set_size(e, sb.st_size);
	archive_entry_set_mtime(e, 0, 0);
	if (archive_write_header(a, e) != ARCHIVE_OK) {
		st = tf_err(TF_ERR_IO, "tar stream: '%s': %s", rel, archive_error_string(a));
		goto out;
	}
	for (uint64_t off = 0; off < (uint64_t)sb.st_size;) {
		size_t n = (uint64_t)sb.st_size - off < CHUNK ? (size_t)((uint64_t)sb.st_size - off) : CHUNK;
		if ((st = tf_file_pread(fd, buf, n, off)))
			goto out;
		if (archive_write_data(a, buf, n) != (la_ssize_t)n) {
			st = tf_err(TF_ERR_IO, "tar stream: '%s': %s", rel, archive_error_string(a));
			goto out;
		}
		off += n;
	}
out:
	archive_entry_free(e);
	free(buf);
	close(fd);
	return st;
}

tf_status tf_prep_tar_end(struct tf_prep_tar *t)
{
	struct archive *a = t->a;
	tf_status st = TF_OK;
	if (archive_write_close(a) != ARCHIVE_OK)
		st = tf_err(TF_ERR_IO, "tar stream: %s", archive_error_string(a));
	archive_write_free(a);
	t->a = NULL;
	return st;
}

void tf_prep_tar_abort(struct tf_prep_tar *t)
{
	if (t->a)
		archive_write_free(t->a);
	t->a = NULL;
}

/* Write the current member of a to path atomically. */
static tf_status unpack_member(struct archive *a, const char *rel, const char *path, char *buf)
{
	struct tf_atomic_file f;
	tf_status st = tf_atomic_open(&f, path);
	if (st)
		return st;
	for (;;) {
		la_ssize_t n = archive_read_data(a, buf, CHUNK);
		if (n < 0) {
			st = tf_err(TF_ERR_FORMAT, "tar stream: '%s': %s", rel, archive_error_string(a));
			break;
		}
		if (!n)
			break;
		if ((st = tf_file_write(f.fd, buf, (size_t)n)))
			break;
	}
	if (st) {
		tf_atomic_abort(&f);
		return st;
	}
	return tf_atomic_commit(&f);
}

/* Open and fully verify an imported image against its path. */
static tf_status check_member(const char *rel, const char *path, uint32_t rank, uint32_t world)
{
	const char *base = strrchr(rel, '/') + 1;
	if (!strncmp(base, "engram-", 7)) { /* an Engram shard: its header and size */
		unsigned long layer = strtoul(base + 8, NULL, 10);
		uint64_t held;
		tf_status st = tf_prepare_engram_check(path, NULL, &held);
		if (!st && held != layer)
			st = tf_err(TF_ERR_MISMATCH, "'%s': holds layer %llu", rel, (unsigned long long)held);
		return st;
	}
	struct tf_prep_image im;
	struct tf_prep_expect ex = {.rank = rank, .world = world};
	tf_status st = tf_prep_open(&im, path, &ex);
	if (st)
		return st;
	char hex[2 * TF_PREP_KEY_LEN + 1];
	tf_hex(im.key, TF_PREP_KEY_HEX / 2, hex);
	if (strncmp(hex, rel, TF_PREP_KEY_HEX))
		st = tf_err(TF_ERR_MISMATCH, "'%s': its key %s does not match its folder", rel, hex);
	if (!st)
		st = tf_prep_verify(&im);
	tf_prep_close(&im);
	return st;
}

tf_status tf_prep_tar_import(int fd, const char *dir, size_t *files)
{
	struct archive *a = archive_read_new();
	struct archive_entry *e;
	char *buf = malloc(CHUNK), *path = NULL, *parent = NULL;
	tf_status st = TF_OK;
	*files = 0;
	if (!a || !buf) {
		st = tf_err(TF_ERR_NOMEM, "out of memory");
		goto out;
	}
	archive_read_support_filter_all(a);
	archive_read_support_format_tar(a);
	if (archive_read_open_fd(a, fd, CHUNK) != ARCHIVE_OK) {
		st = tf_err(TF_ERR_FORMAT, "tar stream: %s", archive_error_string(a));
		goto out;
	}
	for (;;) {
		int r = archive_read_next_header(a, &e);
		if (r == ARCHIVE_EOF)
			break;
		if (r != ARCHIVE_OK) {
			st = tf_err(TF_ERR_FORMAT, "tar stream: %s", archive_error_string(a));
			goto out;
		}
		const char *rel = archive_entry_pathname(e);
		uint32_t rank, world;
		if (!rel)
			rel = "";
		if (archive_entry_filetype(e) != AE_IFREG) {
			st = tf_err(TF_ERR_FORMAT, "tar stream: '%s': not a regular file", rel);
			goto out;
		}
		if ((st = tf_prep_check_relpath(rel, &rank, &world)))
			goto out;
		free(path);
		if (!(path = tf_path_join(dir, rel)) || !(parent = strdup(path))) {
			st = tf_err(TF_ERR_NOMEM, "out of memory");
			goto out;
		}
		*strrchr(parent, '/') = 0;
		st = tf_file_mkdirs(parent);
		free(parent);
		parent = NULL;
		if (st || (st = unpack_member(a, rel, path, buf)))
			goto out;
		if ((st = check_member(rel, path, rank, world))) {
			unlink(path);
			goto out;
		}
		++*files;
	}
out:
	if (a)
		archive_read_free(a);
	free(buf);
	free(path);
	free(parent);
	return st;
}
