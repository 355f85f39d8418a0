/* prepared.c: reading, validating and writing prepared image files (the
 * format of tf-prepared(5); see prepared.h for the outline).
 *
 * Byte layout, little-endian throughout:
 *     0  magic "TFPREPIM"         8  u32 version      12 u32 count
 *     16 u64 header_len          24 u64 file_len      32 u32 rank
 *     36 u32 world               40 u8 key[32]        72 u64 reserved (0)
 *     80 count entries of 96 bytes, each followed by its name (name_len
 *        bytes, no NUL) and zero padding to a multiple of 8:
 *        0 u8 dtype  1 u8 ndim  2 u16 name_len  4 u32 reserved (0)
 *        8 u64 shape[4] (unused dimensions 0)  40 u64 offset  48 u64 length
 *        56 u8 sha256[32]  88 u64 reserved (0)
 *     then the SHA-256 of all header bytes before it; header_len ends there.
 * Payloads follow in entry order, each at a multiple of 4096 at or after
 * header_len, length = elements × element size; the file is zero-padded to
 * a multiple of 4096 and file_len is its exact size.
 *
 * The reader refuses any other byte: this is the check that turns a flipped
 * bit, a truncated file, another version, key, rank or world into an error
 * naming the file (and the entry) instead of wrong weights. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/file.h"
#include "model/prepared.h"

#define HDR_FIXED 80u
#define ENT_FIXED 96u
#define MAX_HEADER (64u << 20)
#define VERIFY_CHUNK (4u << 20)

static const struct {
	const char *name;
	size_t size;
} dtypes[TF_PREP_DTYPE_COUNT] = {
	[TF_PREP_F32] = {"f32", 4}, [TF_PREP_BF16] = {"bf16", 2}, [TF_PREP_F16] = {"f16", 2},
	[TF_PREP_I16] = {"i16", 2}, [TF_PREP_I32] = {"i32", 4},   [TF_PREP_U8] = {"u8", 1},
	[TF_PREP_I64] = {"i64", 8},
};

const char *tf_prep_dtype_name(enum tf_prep_dtype d)
{
	return (unsigned)d < TF_PREP_DTYPE_COUNT ? dtypes[d].name : "?";
}

size_t tf_prep_dtype_size(enum tf_prep_dtype d)
{
	return (unsigned)d < TF_PREP_DTYPE_COUNT ? dtypes[d].size : 0;
}

static uint64_t align_up(uint64_t x, uint64_t a)
{
	return (x + a - 1) / a * a;
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)v);
	put32(p + 4, (uint32_t)(v >> 32));
}

static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

/* elements × size of an entry, or false on overflow. */
static bool entry_bytes(enum tf_prep_dtype dt, uint32_t ndim, const uint64_t *shape, uint64_t *out)
{
	uint64_t n = tf_prep_dtype_size(dt);
	for (uint32_t i = 0; i < ndim; i++) {
		if (shape[i] && n > UINT64_MAX / shape[i])
			return false;
		n *= shape[i];
	}
	*out = n;
	return true;
}

void tf_prep_close(struct tf_prep_image *im)
{
	if (im->fd >= 0)
		close(im->fd);
	free(im->path);
	free(im->e);
	free(im->names);
	tf_hmap_release(&im->by_name);
	memset(im, 0, sizeof(*im));
	im->fd = -1;
}

/* Parse the header in buf[0..len) (len >= header_len) into im. */
static tf_status parse(struct tf_prep_image *im, const char *what, const uint8_t *buf, size_t len,
		       uint64_t file_len, const struct tf_prep_expect *ex)
{
	if (len < HDR_FIXED || memcmp(buf, TF_PREP_MAGIC, 8))
		return tf_err(TF_ERR_FORMAT, "'%s': not a prepared image (bad magic)", what);
	uint32_t version = get32(buf + 8), count = get32(buf + 12);
	if (version != TF_PREP_VERSION)
		return tf_err(TF_ERR_VERSION, "'%s': prepared image version %u, expected %u", what,
			      version, TF_PREP_VERSION);
	uint64_t hlen = get64(buf + 16), flen = get64(buf + 24);
	im->rank = get32(buf + 32);
	im->world = get32(buf + 36);
	memcpy(im->key, buf + 40, TF_PREP_KEY_LEN);
	if (flen != file_len || flen % TF_PREP_ALIGN || flen < align_up(hlen, TF_PREP_ALIGN))
		return tf_err(TF_ERR_FORMAT, "'%s': file is %llu bytes, header says %llu (truncated?)",
			      what, (unsigned long long)file_len, (unsigned long long)flen);
	if (count > TF_PREP_MAX_ENTRIES || hlen < HDR_FIXED + TF_SHA256_LEN || hlen > len ||
	    hlen > MAX_HEADER || !all_zero(buf + 72, 8))
		return tf_err(TF_ERR_FORMAT, "'%s': bad header (count %u, header_len %llu)", what, count,
			      (unsigned long long)hlen);
	uint8_t dig[TF_SHA256_LEN];
	tf_status st = tf_sha256(buf, hlen - TF_SHA256_LEN, dig);
	if (st)
		return st;
	if (memcmp(dig, buf + hlen - TF_SHA256_LEN, TF_SHA256_LEN))
		return tf_err(TF_ERR_FORMAT, "'%s': header digest mismatch (damaged header)", what);
	if (!im->world || im->rank >= im->world)
		return tf_err(TF_ERR_FORMAT, "'%s': rank %u of world %u", what, im->rank, im->world);
	if (ex && ex->world && (ex->rank != im->rank || ex->world != im->world))
		return tf_err(TF_ERR_MISMATCH, "'%s': holds rank %u of %u, expected rank %u of %u", what,
			      im->rank, im->world, ex->rank, ex->world);
	if (ex && ex->key && memcmp(ex->key, im->key, TF_PREP_KEY_LEN))
		return tf_err(TF_ERR_MISMATCH, "'%s': made for another pack or options (key differs)", what);

	im->e = calloc(count ? count : 1, sizeof(*im->e));
	im->names = malloc(hlen);
	if (!im->e || !im->names)
		return tf_err(TF_ERR_NOMEM, "'%s': out of memory", what);
	im->n = count;
	uint64_t pos = HDR_FIXED, end = hlen - TF_SHA256_LEN, data_at = align_up(hlen, TF_PREP_ALIGN);
	char *np = im->names;
	for (uint32_t i = 0; i < count; i++) {
		struct tf_prep_entry *e = &im->e[i];
		if (pos + ENT_FIXED > end)
			return tf_err(TF_ERR_FORMAT, "'%s': entry %u runs past the header", what, i);
		const uint8_t *p = buf + pos;
		uint32_t nlen = (uint32_t)p[2] | (uint32_t)p[3] << 8;
		e->dtype = p[0];
		e->ndim = p[1];
		if (p[0] >= TF_PREP_DTYPE_COUNT || p[1] > TF_PREP_MAX_DIMS || !nlen ||
		    nlen > TF_PREP_MAX_NAME || !all_zero(p + 4, 4) || !all_zero(p + 88, 8) ||
		    pos + ENT_FIXED + nlen > end)
			return tf_err(TF_ERR_FORMAT, "'%s': entry %u: bad fields", what, i);
		for (uint32_t d = 0; d < TF_PREP_MAX_DIMS; d++) {
			e->shape[d] = get64(p + 8 + 8 * d);
			if (d >= e->ndim && e->shape[d])
				return tf_err(TF_ERR_FORMAT, "'%s': entry %u: bad shape", what, i);
		}
		e->offset = get64(p + 40);
		e->length = get64(p + 48);
		memcpy(e->sha256, p + 56, TF_SHA256_LEN);
		memcpy(np, p + ENT_FIXED, nlen);
		np[nlen] = 0;
		e->name = np;
		if (memchr(np, 0, nlen))
			return tf_err(TF_ERR_FORMAT, "'%s': entry %u: NUL in the name", what, i);
		uint64_t want;
		if (!entry_bytes(e->dtype, e->ndim, e->shape, &want) || want != e->length)
			return tf_err(TF_ERR_FORMAT, "'%s': entry '%s': length %llu does not match its shape",
				      what, np, (unsigned long long)e->length);
		if (e->offset % TF_PREP_ALIGN || e->offset < data_at || e->length > flen ||
		    e->offset > flen - e->length)
			return tf_err(TF_ERR_FORMAT, "'%s': entry '%s': payload at %llu+%llu out of place",
				      what, np, (unsigned long long)e->offset, (unsigned long long)e->length);
		data_at = e->offset + e->length;
		if (tf_hmap_put_str(&im->by_name, np, nlen, i))
			return tf_err(TF_ERR_NOMEM, "'%s': out of memory", what);
		if (im->by_name.live != i + 1)
			return tf_err(TF_ERR_FORMAT, "'%s': entry '%s' appears twice", what, np);
		np += nlen + 1;
		uint64_t padded = align_up(ENT_FIXED + nlen, 8);
		if (!all_zero(p + ENT_FIXED + nlen, padded - ENT_FIXED - nlen) || pos + padded > end)
			return tf_err(TF_ERR_FORMAT, "'%s': entry %u: bad padding", what, i);
		pos += padded;
	}
	if (pos != end)
		return tf_err(TF_ERR_FORMAT, "'%s': %llu stray header bytes", what,
			      (unsigned long long)(end - pos));
	if (align_up(data_at, TF_PREP_ALIGN) != flen)
		return tf_err(TF_ERR_FORMAT, "'%s': %llu bytes after the last payload", what,
			      (unsigned long long)(flen - data_at));
	im->header_len = hlen;
	im->file_len = flen;
	return TF_OK;
}

tf_status tf_prep_parse(struct tf_prep_image *im, const char *what, const void *buf, size_t len,
			uint64_t file_len, const struct tf_prep_expect *expect)
{
	memset(im, 0, sizeof(*im));
	im->fd = -1;
	tf_hmap_init(&im->by_name, TF_HMAP_STR);
	tf_status st = parse(im, what, buf, len, file_len, expect);
	if (st)
		tf_prep_close(im);
	return st;
}

tf_status tf_prep_open(struct tf_prep_image *im, const char *path,
		       const struct tf_prep_expect *expect)
{
	memset(im, 0, sizeof(*im));
	im->fd = -1;
	tf_hmap_init(&im->by_name, TF_HMAP_STR);
	uint8_t fixed[HDR_FIXED], *buf = NULL;
	struct stat sb;
	tf_status st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return tf_err_errno(errno == ENOENT ? TF_ERR_NOTFOUND : TF_ERR_IO, "cannot open '%s'", path);
	if (fstat(fd, &sb)) {
		st = tf_err_errno(TF_ERR_IO, "cannot stat '%s'", path);
		goto out;
	}
	if ((uint64_t)sb.st_size < HDR_FIXED) {
		st = tf_err(TF_ERR_FORMAT, "'%s': %lld bytes, too short for a prepared image", path,
			    (long long)sb.st_size);
		goto out;
	}
	if ((st = tf_file_pread(fd, fixed, HDR_FIXED, 0)))
		goto out;
	uint64_t hlen = memcmp(fixed, TF_PREP_MAGIC, 8) ? HDR_FIXED : get64(fixed + 16);
	if (hlen < HDR_FIXED || hlen > MAX_HEADER || hlen > (uint64_t)sb.st_size)
		hlen = HDR_FIXED; /* parse reports it */
	if (!(buf = malloc(hlen))) {
		st = tf_err(TF_ERR_NOMEM, "'%s': out of memory", path);
		goto out;
	}
	if ((st = tf_file_pread(fd, buf, hlen, 0)))
		goto out;
	if ((st = parse(im, path, buf, hlen, (uint64_t)sb.st_size, expect)))
		goto out;
	if (!(im->path = strdup(path))) {
		st = tf_err(TF_ERR_NOMEM, "out of memory");
		goto out;
	}
	im->fd = fd;
	fd = -1;
out:
	free(buf);
	if (fd >= 0)
		close(fd);
	if (st)
		tf_prep_close(im);
	return st;
}

const struct tf_prep_entry *tf_prep_find(const struct tf_prep_image *im, const char *name)
{
	uintptr_t i;
	return tf_hmap_get_str(&im->by_name, name, strlen(name), &i) ? &im->e[i] : NULL;
}

tf_status tf_prep_read(const struct tf_prep_image *im, const struct tf_prep_entry *e,
		       uint64_t off, void *buf, size_t len)
{
	if (off > e->length || len > e->length - off)
		return tf_err(TF_ERR_RANGE, "'%s': entry '%s': read of %zu at %llu past its %llu bytes",
			      im->path, e->name, len, (unsigned long long)off,
			      (unsigned long long)e->length);
	tf_status st = tf_file_pread(im->fd, buf, len, e->offset + off);
	return st ? tf_err_wrap(st, "'%s': entry '%s': ", im->path, e->name) : TF_OK;
}

/* Check that the file's bytes [from, to) are all zero (the padding). */
static tf_status zero_gap(const struct tf_prep_image *im, uint64_t from, uint64_t to, uint8_t *buf,
			  size_t cap, const char *after)
{
	for (uint64_t off = from; off < to;) {
		size_t n = to - off < cap ? (size_t)(to - off) : cap;
		tf_status st = tf_file_pread(im->fd, buf, n, off);
		if (st)
			return tf_err_wrap(st, "'%s': ", im->path);
		if (!all_zero(buf, n))
			return tf_err(TF_ERR_FORMAT, "'%s': padding after %s is not zero (damaged)",
				      im->path, after);
		off += n;
	}
	return TF_OK;
}

tf_status tf_prep_verify(const struct tf_prep_image *im)
{
	size_t cap = VERIFY_CHUNK;
	uint8_t *buf = malloc(cap), dig[TF_SHA256_LEN];
	tf_status st = TF_OK;
	if (!buf)
		return tf_err(TF_ERR_NOMEM, "out of memory");
	uint64_t at = im->header_len;
	const char *after = "the header";
	for (size_t i = 0; i < im->n && !st; i++) {
		const struct tf_prep_entry *e = &im->e[i];
		struct tf_digest d;
		if ((st = zero_gap(im, at, e->offset, buf, cap, after)))
			break;
		if ((st = tf_digest_init(&d, TF_DIGEST_SHA256)))
			break;
		for (uint64_t off = 0; off < e->length && !st; off += cap) {
			size_t n = e->length - off < cap ? (size_t)(e->length - off) : cap;
			if (!(st = tf_prep_read(im, e, off, buf, n)))
				st = tf_digest_update(&d, buf, n);
		}
		if (st) {
			tf_digest_release(&d);
			break;
		}
		if ((st = tf_digest_final(&d, dig)))
			break;
		if (memcmp(dig, e->sha256, TF_SHA256_LEN))
			st = tf_err(TF_ERR_FORMAT, "'%s': entry '%s': payload digest mismatch (damaged)",
				    im->path, e->name);
		at = e->offset + e->length;
		after = e->name;
	}
	if (!st)
		st = zero_gap(im, at, im->file_len, buf, cap, after);
	free(buf);
	return st;
}

/* ---- writer ---- */

static int find_index(const struct tf_prep_writer *w, const char *name);

tf_status tf_prep_writer_init(struct tf_prep_writer *w, const char *path,
			      const uint8_t key[TF_PREP_KEY_LEN], uint32_t rank, uint32_t world)
{
	memset(w, 0, sizeof(*w));
	w->fd = -1;
	w->pend = -1;
	tf_hmap_init(&w->by_name, TF_HMAP_STR);
	if (!world || rank >= world)
		return tf_err(TF_ERR_ARG, "rank %u of world %u", rank, world);
	if (!(w->path = strdup(path)))
		return tf_err(TF_ERR_NOMEM, "out of memory");
	memcpy(w->key, key, TF_PREP_KEY_LEN);
	w->rank = rank;
	w->world = world;
	return TF_OK;
}

tf_status tf_prep_writer_add(struct tf_prep_writer *w, const char *name, enum tf_prep_dtype dtype,
			     uint32_t ndim, const uint64_t *shape)
{
	size_t nlen = strlen(name);
	if (w->begun || !nlen || nlen > TF_PREP_MAX_NAME || ndim > TF_PREP_MAX_DIMS ||
	    (unsigned)dtype >= TF_PREP_DTYPE_COUNT || w->n >= TF_PREP_MAX_ENTRIES)
		return tf_err(TF_ERR_ARG, "'%s': cannot add entry '%s'", w->path, name);
	if (find_index(w, name) >= 0)
		return tf_err(TF_ERR_ARG, "'%s': entry '%s' added twice", w->path, name);
	if (w->n == w->cap) {
		size_t cap = w->cap ? 2 * w->cap : 16;
		struct tf_prep_entry *e = realloc(w->e, cap * sizeof(*e));
		if (e)
			w->e = e;
		char **names = e ? realloc(w->names, cap * sizeof(*names)) : NULL;
		if (!e || !names)
			return tf_err(TF_ERR_NOMEM, "out of memory");
		w->names = names;
		w->cap = cap;
	}
	struct tf_prep_entry *e = &w->e[w->n];
	memset(e, 0, sizeof(*e));
	e->dtype = dtype;
	e->ndim = ndim;
	for (uint32_t i = 0; i < ndim; i++)
		e->shape[i] = shape[i];
	if (!entry_bytes(dtype, ndim, shape, &e->length))
		return tf_err(TF_ERR_RANGE, "'%s': entry '%s' is too large", w->path, name);
	if (!(w->names[w->n] = strdup(name)))
		return tf_err(TF_ERR_NOMEM, "out of memory");
	e->name = w->names[w->n];
	if (tf_hmap_put_str(&w->by_name, e->name, nlen, w->n)) {
		free(w->names[w->n]);
		return tf_err(TF_ERR_NOMEM, "out of memory");
	}
	w->n++;
	return TF_OK;
}

static int find_index(const struct tf_prep_writer *w, const char *name)
{
	uintptr_t i;
	return tf_hmap_get_str(&w->by_name, name, strlen(name), &i) ? (int)i : -1;
}

tf_status tf_prep_writer_begin(struct tf_prep_writer *w)
{
	if (w->begun)
		return tf_err(TF_ERR_ARG, "'%s': begun twice", w->path);
	uint64_t h = HDR_FIXED;
	for (size_t i = 0; i < w->n; i++)
		h += align_up(ENT_FIXED + strlen(w->e[i].name), 8);
	w->header_len = h + TF_SHA256_LEN;
	uint64_t at = align_up(w->header_len, TF_PREP_ALIGN);
	for (size_t i = 0; i < w->n; i++) {
		at = align_up(at, TF_PREP_ALIGN);
		w->e[i].offset = at;
		at += w->e[i].length;
	}
	w->file_len = align_up(at, TF_PREP_ALIGN);
	w->done = calloc(w->n ? w->n : 1, sizeof(*w->done));
	w->dig = calloc(w->n ? w->n : 1, sizeof(*w->dig));
	if (!w->done || !w->dig)
		return tf_err(TF_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < w->n; i++) {
		tf_status st = tf_digest_init(&w->dig[i], TF_DIGEST_SHA256);
		if (st)
			return st;
	}
	struct tf_atomic_file f;
	tf_status st = tf_atomic_open(&f, w->path);
	if (st)
		return st;
	w->fd = f.fd;
	w->tmp = f.tmp;
	free(f.path);
	/* direct I/O when the file is to be synced; a temporary image (read
	 * back at once) stays in the page cache */
	if ((st = tf_seqw_init(&w->sw, w->fd, w->tmp, align_up(w->header_len, TF_PREP_ALIGN),
			       TF_PREP_WINDOW, w->commit != TF_PREP_COMMIT_NOSYNC)))
		return st;
	w->begun = true;
	return TF_OK;
}

uint64_t tf_prep_writer_size(const struct tf_prep_writer *w)
{
	return w->file_len;
}

tf_status tf_prep_writer_room(struct tf_prep_writer *w, const char *name, size_t len, void **p)
{
	int i = find_index(w, name);
	if (!w->begun || i < 0 || w->pend >= 0)
		return tf_err(TF_ERR_ARG, "'%s': no entry '%s' to write", w->path, name);
	struct tf_prep_entry *e = &w->e[i];
	if (len > e->length - w->done[i] || len > TF_PREP_ROOM_MAX)
		return tf_err(TF_ERR_ARG, "'%s': entry '%s': %zu bytes past its %llu", w->path, name,
			      len, (unsigned long long)e->length);
	tf_status st = tf_seqw_room(&w->sw, e->offset + w->done[i], len, p);
	if (st)
		return tf_err_wrap(st, "entry '%s': ", name);
	w->pend = i;
	w->pend_len = len;
	w->pend_at = *p;
	return TF_OK;
}

tf_status tf_prep_writer_filled(struct tf_prep_writer *w)
{
	if (w->pend < 0)
		return tf_err(TF_ERR_ARG, "'%s': no room to fill", w->path);
	int i = w->pend;
	w->pend = -1;
	w->done[i] += w->pend_len;
	return tf_digest_update(&w->dig[i], w->pend_at, w->pend_len);
}

tf_status tf_prep_writer_put(struct tf_prep_writer *w, const char *name, const void *data,
			     size_t len)
{
	const uint8_t *d = data;
	do {
		size_t n = len < TF_PREP_ROOM_MAX ? len : TF_PREP_ROOM_MAX;
		void *p;
		tf_status st = tf_prep_writer_room(w, name, n, &p);
		if (st)
			return st;
		memcpy(p, d, n);
		if ((st = tf_prep_writer_filled(w)))
			return st;
		d += n;
		len -= n;
	} while (len);
	return TF_OK;
}

tf_status tf_prep_writer_commit(struct tf_prep_writer *w)
{
	tf_status st = TF_OK;
	uint8_t *h = NULL;
	if (!w->begun) {
		st = tf_err(TF_ERR_ARG, "'%s': commit before begin", w->path);
		goto out;
	}
	for (size_t i = 0; i < w->n; i++)
		if (w->done[i] != w->e[i].length) {
			st = tf_err(TF_ERR_INTERNAL, "'%s': entry '%s' has %llu of %llu bytes", w->path,
				    w->e[i].name, (unsigned long long)w->done[i],
				    (unsigned long long)w->e[i].length);
			goto out;
		}
	if (w->pend >= 0) {
		st = tf_err(TF_ERR_ARG, "'%s': commit with a room open", w->path);
		goto out;
	}
	uint64_t head = align_up(w->header_len, TF_PREP_ALIGN); /* zeros after the header */
	if (!(h = tf_alloc_aligned(TF_PREP_ALIGN, head))) {
		st = tf_err(TF_ERR_NOMEM, "out of memory");
		goto out;
	}
	memcpy(h, TF_PREP_MAGIC, 8);
	put32(h + 8, TF_PREP_VERSION);
	put32(h + 12, (uint32_t)w->n);
	put64(h + 16, w->header_len);
	put64(h + 24, w->file_len);
	put32(h + 32, w->rank);
	put32(h + 36, w->world);
	memcpy(h + 40, w->key, TF_PREP_KEY_LEN);
	uint64_t pos = HDR_FIXED;
	for (size_t i = 0; i < w->n; i++) {
		struct tf_prep_entry *e = &w->e[i];
		uint8_t *p = h + pos;
		size_t nlen = strlen(e->name);
		if ((st = tf_digest_final(&w->dig[i], e->sha256)))
			goto out;
		p[0] = (uint8_t)e->dtype;
		p[1] = (uint8_t)e->ndim;
		p[2] = (uint8_t)nlen;
		p[3] = (uint8_t)(nlen >> 8);
		for (int d = 0; d < TF_PREP_MAX_DIMS; d++)
			put64(p + 8 + 8 * d, e->shape[d]);
		put64(p + 40, e->offset);
		put64(p + 48, e->length);
		memcpy(p + 56, e->sha256, TF_SHA256_LEN);
		memcpy(p + ENT_FIXED, e->name, nlen);
		pos += align_up(ENT_FIXED + nlen, 8);
	}
	if ((st = tf_sha256(h, pos, h + pos)))
		goto out;
	if ((st = tf_seqw_pwrite(&w->sw, h, head, 0)) ||
	    (st = tf_seqw_finish(&w->sw, w->file_len)))
		goto out;
	if (w->commit != TF_PREP_COMMIT_SYNC) {
		int fd = w->fd;
		w->fd = -1;
		if (w->commit == TF_PREP_COMMIT_FILE && fsync(fd))
			st = tf_err_errno(TF_ERR_IO, "cannot sync '%s'", w->tmp);
		if (close(fd) && !st)
			st = tf_err_errno(TF_ERR_IO, "cannot close '%s'", w->tmp);
		if (!st && w->commit != TF_PREP_COMMIT_STAGED && rename(w->tmp, w->path))
			st = tf_err_errno(TF_ERR_IO, "cannot rename '%s' to '%s'", w->tmp, w->path);
		if (st)
			unlink(w->tmp);
		goto out;
	}
	struct tf_atomic_file f = {.fd = w->fd, .path = w->path, .tmp = w->tmp};
	st = tf_atomic_commit(&f); /* closes the fd, frees path and tmp */
	w->fd = -1;
	w->path = w->tmp = NULL;
out:
	free(h);
	tf_prep_writer_release(w);
	return st;
}

char *tf_prep_staged_path(const char *path)
{
	char *t;
	return asprintf(&t, "%s.tmp.%ld", path, (long)getpid()) < 0 ? NULL : t;
}

tf_status tf_prep_publish(const char *path)
{
	char *t = tf_prep_staged_path(path);
	tf_status st = TF_OK;
	if (!t)
		return tf_err(TF_ERR_NOMEM, "out of memory");
	if (rename(t, path))
		st = tf_err_errno(TF_ERR_IO, "cannot rename '%s' to '%s'", t, path);
	free(t);
	return st;
}

void tf_prep_writer_release(struct tf_prep_writer *w)
{
	if (w->fd >= 0) {
		struct tf_atomic_file f = {.fd = w->fd, .path = w->path, .tmp = w->tmp};
		tf_atomic_abort(&f);
		w->path = w->tmp = NULL;
	}
	for (size_t i = 0; i < w->n; i++)
		free(w->names[i]);
	if (w->dig)
		for (size_t i = 0; i < w->n; i++)
			tf_digest_release(&w->dig[i]);
	free(w->names);
	free(w->e);
	free(w->done);
	free(w->dig);
	free(w->path);
	free(w->tmp);
	tf_hmap_release(&w->by_name);
	tf_seqw_release(&w->sw);
	memset(w, 0, sizeof(*w));
	w->fd = -1;
	w->pend = -1;
}
