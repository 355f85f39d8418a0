/* safetensors.c: validated safetensors reading and streaming writing. */
#include "pack/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/file.h"
#include "pack/stjson.h"

uint64_t tf_st_numel(const struct tf_st_tensor *t)
{
	uint64_t n = 1;
	for (int i = 0; i < t->ndim; i++)
		n *= t->shape[i];
	return n;
}

static int by_begin(const void *a, const void *b)
{
	const struct tf_st_tensor *x = a, *y = b;
	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	return x->end < y->end ? -1 : x->end > y->end;
}

/* Check one header entry and store it in t (name set later). */
static tf_status check_entry(const char *what, const struct tf_stjson_entry *e,
			     struct tf_st_tensor *t)
{
	const char *name = e->name;
	if (!e->dtype)
		return tf_err(TF_ERR_FORMAT, "'%s': tensor '%s': missing dtype", what, name);
	int d = tf_dtype_parse(e->dtype);
	if (d < 0)
		return tf_err(TF_ERR_FORMAT, "'%s': tensor '%s': unknown dtype '%s'", what, name,
			      e->dtype);
	t->dtype = (enum tf_dtype)d;
	if (e->ndim == -1)
		return tf_err(TF_ERR_FORMAT, "'%s': tensor '%s': missing shape", what, name);
	if (e->ndim < 0)
		return tf_err(TF_ERR_FORMAT, "'%s': tensor '%s': shape is not a list of "
			      "non-negative integers", what, name);
	if (e->ndim > TF_ST_MAX_DIMS)
		return tf_err(TF_ERR_FORMAT, "'%s': tensor '%s': more than %d dimensions", what,
			      name, TF_ST_MAX_DIMS);
	t->ndim = e->ndim;
	uint64_t numel = 1;
	for (int i = 0; i < t->ndim; i++) {
		t->shape[i] = e->shape[i];
		if (!tf_mul_ok(numel, t->shape[i], &numel))
			return tf_err(TF_ERR_FORMAT, "'%s': tensor '%s': shape product overflows",
				      what, name);
	}
	if (e->noffsets != 2)
		return tf_err(TF_ERR_FORMAT, "'%s': tensor '%s': data_offsets must be two "
			      "non-negative integers", what, name);
	t->begin = e->offsets[0];
	t->end = e->offsets[1];
	if (t->end < t->begin)
		return tf_err(TF_ERR_FORMAT, "'%s': tensor '%s': data_offsets end before they begin",
			      what, name);
	uint64_t bits;
	if (!tf_mul_ok(numel, tf_dtype_bits(t->dtype), &bits))
		return tf_err(TF_ERR_FORMAT, "'%s': tensor '%s': size overflows", what, name);
	if (bits % 8)
		return tf_err(TF_ERR_FORMAT, "'%s': tensor '%s': %s data does not end on a byte "
			      "(misaligned slice)", what, name, tf_dtype_name(t->dtype));
	if (t->end - t->begin != bits / 8)
		return tf_err(TF_ERR_FORMAT, "'%s': tensor '%s': %llu bytes for %llu %s elements "
			      "(want %llu)", what, name, (unsigned long long)(t->end - t->begin),
			      (unsigned long long)numel, tf_dtype_name(t->dtype),
			      (unsigned long long)(bits / 8));
	return TF_OK;
}

struct collect {
	struct tf_st_file *f;
	const char *what;
	size_t cap;
	struct tf_buf names; /* every name, NUL-separated; pointers fixed at the end */
};

static tf_status collect_entry(void *ctx, const struct tf_stjson_entry *e)
{
	struct collect *c = ctx;
	struct tf_st_file *f = c->f;
	if (f->n == c->cap) {
		c->cap = c->cap ? c->cap * 2 : 256;
		if (tf_realloc_array(&f->t, c->cap, sizeof *f->t))
			return tf_err(TF_ERR_NOMEM, "out of memory");
	}
	struct tf_st_tensor *t = &f->t[f->n];
	memset(t, 0, sizeof *t);
	tf_status st = check_entry(c->what, e, t);
	if (st)
		return st;
	t->name = (const char *)(uintptr_t)c->names.len; /* an offset until fixed up */
	if ((st = tf_buf_append(&c->names, e->name, e->name_len + 1)))
		return st;
	f->n++;
	return TF_OK;
}

tf_status tf_st_parse(struct tf_st_file *f, const char *what, const char *json,
		      uint64_t header_len, uint64_t file_size)
{
	f->header_len = header_len;
	f->data_off = 8 + header_len;
	f->file_size = file_size;
	tf_hmap_init(&f->by_name, TF_HMAP_STR);
	struct collect c = {f, what, 0, TF_BUF_INIT};
	tf_status st = tf_stjson_walk(json, header_len, what, collect_entry, &c, &f->metadata);
	if (st)
		goto out;
	f->names = tf_buf_detach(&c.names, NULL);
	if (!f->names) {
		st = tf_err(TF_ERR_NOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < f->n; i++)
		f->t[i].name = f->names + (uintptr_t)f->t[i].name;
	qsort(f->t, f->n, sizeof *f->t, by_begin);
	uint64_t at = 0;
	for (size_t i = 0; i < f->n; i++) {
		if (f->t[i].begin != at) {
			st = tf_err(TF_ERR_FORMAT, "'%s': tensor '%s': data_offsets [%llu, %llu) %s "
				    "(expected to start at %llu)", what, f->t[i].name,
				    (unsigned long long)f->t[i].begin, (unsigned long long)f->t[i].end,
				    f->t[i].begin < at ? "overlap another tensor" : "leave a gap",
				    (unsigned long long)at);
			goto out;
		}
		at = f->t[i].end;
	}
	if ((st = tf_hmap_reserve(&f->by_name, f->n)))
		goto out;
	for (size_t i = 0; i < f->n; i++) {
		const char *name = f->t[i].name;
		size_t len = strlen(name);
		if (tf_hmap_get_str(&f->by_name, name, len, NULL)) {
			st = tf_err(TF_ERR_FORMAT, "'%s': duplicate tensor '%s'", what, name);
			goto out;
		}
		if ((st = tf_hmap_put_str(&f->by_name, name, len, i)))
			goto out;
	}
	uint64_t want;
	if (!tf_add_ok(f->data_off, at, &want) || want != file_size)
		st = tf_err(TF_ERR_FORMAT, "'%s': file is %llu bytes; the header describes %llu",
			    what, (unsigned long long)file_size,
			    (unsigned long long)(f->data_off + at));
out:
	tf_buf_release(&c.names);
	return st;
}

tf_status tf_st_open(struct tf_st_file *f, const char *path)
{
	memset(f, 0, sizeof *f);
	f->fd = -1;
	char *hdr = NULL;
	tf_status st = TF_OK;
	if (!(f->path = strdup(path)))
		return tf_err(TF_ERR_NOMEM, "out of memory");
	f->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (f->fd < 0) {
		st = tf_err_errno(errno == ENOENT ? TF_ERR_NOTFOUND : TF_ERR_IO, "cannot open '%s'",
				  path);
		goto out;
	}
	struct stat sb;
	if (fstat(f->fd, &sb)) {
		st = tf_err_errno(TF_ERR_IO, "cannot stat '%s'", path);
		goto out;
	}
	uint64_t size = (uint64_t)sb.st_size, n = 0;
	uint8_t len8[8];
	if (size < 8) {
		st = tf_err(TF_ERR_FORMAT, "'%s': truncated: %llu bytes, shorter than the 8-byte "
			    "header length", path, (unsigned long long)size);
		goto out;
	}
	if ((st = tf_file_pread(f->fd, len8, 8, 0)))
		goto out;
	for (int i = 7; i >= 0; i--)
		n = n << 8 | len8[i];
	if (n > TF_ST_MAX_HEADER) {
		st = tf_err(TF_ERR_FORMAT, "'%s': header length %llu exceeds %llu bytes", path,
			    (unsigned long long)n, TF_ST_MAX_HEADER);
		goto out;
	}
	if (n > size - 8) {
		st = tf_err(TF_ERR_FORMAT, "'%s': header length %llu runs past the end of the "
			    "file (%llu bytes)", path, (unsigned long long)n, (unsigned long long)size);
		goto out;
	}
	if (!(hdr = malloc(n + 1))) {
		st = tf_err(TF_ERR_NOMEM, "out of memory for the header of '%s'", path);
		goto out;
	}
	if ((st = tf_file_pread(f->fd, hdr, n, 8))) {
		tf_err_wrap(st, "'%s': ", path);
		goto out;
	}
	hdr[n] = 0;
	st = tf_st_parse(f, path, hdr, n, size);
out:
	free(hdr);
	if (st)
		tf_st_close(f);
	return st;
}

void tf_st_close(struct tf_st_file *f)
{
	if (f->fd >= 0)
		close(f->fd);
	free(f->path);
	free(f->t);
	free(f->names);
	json_decref(f->metadata);
	tf_hmap_release(&f->by_name);
	memset(f, 0, sizeof *f);
	f->fd = -1;
}

const struct tf_st_tensor *tf_st_find(const struct tf_st_file *f, const char *name)
{
	uintptr_t i;
	if (!tf_hmap_get_str(&f->by_name, name, strlen(name), &i))
		return NULL;
	return &f->t[i];
}

tf_status tf_st_read(const struct tf_st_file *f, const struct tf_st_tensor *t, uint64_t off,
		     void *buf, size_t len)
{
	if (off > t->end - t->begin || len > t->end - t->begin - off)
		return tf_err(TF_ERR_RANGE, "'%s': read of %zu bytes at %llu past tensor '%s'",
			      f->path, len, (unsigned long long)off, t->name);
	tf_status st = tf_file_pread(f->fd, buf, len, f->data_off + t->begin + off);
	if (st)
		tf_err_wrap(st, "'%s': tensor '%s': ", f->path, t->name);
	return st;
}

/* --- writer --- */

tf_status tf_st_writer_init(struct tf_st_writer *w, const char *path)
{
	memset(w, 0, sizeof *w);
	w->fd = -1;
	tf_hmap_init(&w->by_name, TF_HMAP_STR);
	w->metadata = json_object();
	w->path = strdup(path);
	if (!w->path || !w->metadata) {
		tf_st_writer_release(w);
		return tf_err(TF_ERR_NOMEM, "out of memory");
	}
	return TF_OK;
}

tf_status tf_st_writer_add(struct tf_st_writer *w, const char *name, enum tf_dtype dtype,
			   int ndim, const uint64_t *shape)
{
	if (w->begun || ndim < 0 || ndim > TF_ST_MAX_DIMS || !strcmp(name, "__metadata__"))
		return tf_err(TF_ERR_ARG, "cannot add tensor '%s'", name);
	if (tf_hmap_get_str(&w->by_name, name, strlen(name), NULL))
		return tf_err(TF_ERR_ARG, "duplicate tensor '%s'", name);
	if (w->n == w->cap) {
		size_t cap = w->cap ? w->cap * 2 : 64;
		if (tf_realloc_array(&w->t, cap, sizeof *w->t) ||
		    tf_realloc_array(&w->names, cap, sizeof *w->names))
			return tf_err(TF_ERR_NOMEM, "out of memory");
		w->cap = cap;
	}
	struct tf_st_tensor *t = &w->t[w->n];
	memset(t, 0, sizeof *t);
	if (!(w->names[w->n] = strdup(name)))
		return tf_err(TF_ERR_NOMEM, "out of memory");
	t->name = w->names[w->n];
	t->dtype = dtype;
	t->ndim = ndim;
	uint64_t numel = 1;
	for (int i = 0; i < ndim; i++) {
		t->shape[i] = shape[i];
		if (!tf_mul_ok(numel, shape[i], &numel))
			return tf_err(TF_ERR_ARG, "tensor '%s': shape overflows", name);
	}
	if (numel * tf_dtype_bits(dtype) % 8)
		return tf_err(TF_ERR_ARG, "tensor '%s': does not end on a byte", name);
	t->end = numel * tf_dtype_bits(dtype) / 8; /* its size until laid out */
	w->n++;
	return tf_hmap_put_str(&w->by_name, t->name, strlen(t->name), w->n - 1);
}

tf_status tf_st_writer_meta(struct tf_st_writer *w, const char *key, const char *value)
{
	if (json_object_set_new(w->metadata, key, json_string(value)))
		return tf_err(TF_ERR_ARG, "bad metadata '%s'", key);
	return TF_OK;
}

static int by_align_name(const void *a, const void *b)
{
	const struct tf_st_tensor *x = a, *y = b;
	if (x->dtype != y->dtype)
		return x->dtype > y->dtype ? -1 : 1;
	return strcmp(x->name, y->name);
}

tf_status tf_st_writer_begin(struct tf_st_writer *w)
{
	tf_status st = TF_OK;
	json_t *hdr = json_object();
	char *text = NULL;
	struct tf_buf b = TF_BUF_INIT;
	if (!hdr)
		return tf_err(TF_ERR_NOMEM, "out of memory");
	qsort(w->t, w->n, sizeof *w->t, by_align_name);
	tf_hmap_release(&w->by_name); /* re-keyed to the laid-out order below */
	if (json_object_size(w->metadata))
		json_object_set(hdr, "__metadata__", w->metadata);
	uint64_t at = 0;
	for (size_t i = 0; i < w->n; i++) {
		struct tf_st_tensor *t = &w->t[i];
		uint64_t size = t->end;
		t->begin = at;
		t->end = at + size;
		at = t->end;
		json_t *shape = json_array();
		for (int d = 0; d < t->ndim; d++)
			json_array_append_new(shape, json_integer((json_int_t)t->shape[d]));
		json_object_set_new(hdr, t->name,
				    json_pack("{s:s,s:o,s:[I,I]}", "dtype", tf_dtype_name(t->dtype),
					      "shape", shape, "data_offsets", (json_int_t)t->begin,
					      (json_int_t)t->end));
		if ((st = tf_hmap_put_str(&w->by_name, t->name, strlen(t->name), i)))
			goto out;
	}
	w->data_len = at;
	text = json_dumps(hdr, JSON_COMPACT | JSON_PRESERVE_ORDER);
	if (!text) {
		st = tf_err(TF_ERR_NOMEM, "cannot format the header of '%s'", w->path);
		goto out;
	}
	size_t n = strlen(text), padded = (n + 7) / 8 * 8;
	uint8_t len8[8];
	for (int i = 0; i < 8; i++)
		len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));
	if ((st = tf_buf_append(&b, len8, 8)) || (st = tf_buf_append(&b, text, n)))
		goto out;
	while (b.len < 8 + padded)
		if ((st = tf_buf_putc(&b, ' ')))
			goto out;
	w->data_off = 8 + padded;
	if (asprintf(&w->tmp, "%s.tmp.%ld", w->path, (long)getpid()) < 0) {
		w->tmp = NULL;
		st = tf_err(TF_ERR_NOMEM, "out of memory");
		goto out;
	}
	w->fd = open(w->tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (w->fd < 0) {
		st = tf_err_errno(TF_ERR_IO, "cannot create '%s'", w->tmp);
		goto out;
	}
	if ((st = tf_file_pwrite(w->fd, b.data, b.len, 0))) {
		tf_err_wrap(st, "'%s': ", w->tmp);
		goto out;
	}
	w->begun = true;
out:
	free(text);
	json_decref(hdr);
	tf_buf_release(&b);
	return st;
}

const struct tf_st_tensor *tf_st_writer_find(const struct tf_st_writer *w, const char *name)
{
	uintptr_t i;
	if (!w->begun || !tf_hmap_get_str(&w->by_name, name, strlen(name), &i))
		return NULL;
	return &w->t[i];
}

tf_status tf_st_writer_put(struct tf_st_writer *w, const char *name, uint64_t off,
			   const void *data, size_t len)
{
	const struct tf_st_tensor *t = tf_st_writer_find(w, name);
	if (!t)
		return tf_err(TF_ERR_ARG, "'%s': no tensor '%s' (or header not written)", w->path, name);
	if (off > t->end - t->begin || len > t->end - t->begin - off)
		return tf_err(TF_ERR_RANGE, "'%s': write past the end of tensor '%s'", w->path, name);
	tf_status st = tf_file_pwrite(w->fd, data, len, w->data_off + t->begin + off);
	if (st)
		tf_err_wrap(st, "'%s': ", w->tmp);
	return st;
}

tf_status tf_st_writer_commit(struct tf_st_writer *w)
{
	tf_status st = TF_OK;
	if (!w->begun && (st = tf_st_writer_begin(w)))
		goto out;
	if (ftruncate(w->fd, (off_t)(w->data_off + w->data_len))) {
		st = tf_err_errno(TF_ERR_IO, "cannot size '%s'", w->tmp);
		goto out;
	}
	if (fsync(w->fd)) {
		st = tf_err_errno(TF_ERR_IO, "cannot sync '%s'", w->tmp);
		goto out;
	}
	if (close(w->fd)) {
		w->fd = -1;
		st = tf_err_errno(TF_ERR_IO, "cannot close '%s'", w->tmp);
		goto out;
	}
	w->fd = -1;
	if (rename(w->tmp, w->path)) {
		st = tf_err_errno(TF_ERR_IO, "cannot rename '%s' to '%s'", w->tmp, w->path);
		goto out;
	}
	free(w->tmp);
	w->tmp = NULL;
	st = tf_file_sync_dir(w->path);
out:
	tf_st_writer_release(w);
	return st;
}

void tf_st_writer_release(struct tf_st_writer *w)
{
	if (w->fd >= 0)
		close(w->fd);
	if (w->tmp)
		unlink(w->tmp);
	for (size_t i = 0; i < w->n; i++)
		free(w->names[i]);
	free(w->names);
	free(w->t);
	free(w->tmp);
	free(w->path);
	json_decref(w->metadata);
	tf_hmap_release(&w->by_name);
	memset(w, 0, sizeof *w);
	w->fd = -1;
}
