/* engram_host.c: engram-host.bin and engram-hash-ref.bin, read and written
 * (layouts in engram_host.h). */
#include "model/engram_host.h"

#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/file.h"

/* The largest host file: header, 8 layers, 8 multipliers, 2^24 map ids. */
#define HOST_MAX_BYTES (8 + 16 + 4 * 8 + 8 * 64 + 4 * (size_t)TF_ENGRAM_MAX_VOCAB)
/* Fixtures are small test files. */
#define FIXTURE_MAX_BYTES ((size_t)256 << 20)

/* A bounds-checked little-endian reader over a byte range. */
struct cur {
	const unsigned char *p;
	size_t left;
	size_t off;
	const char *what;
};

static tf_status take(struct cur *c, size_t n, const char *field, const unsigned char **out)
{
	if (c->left < n)
		return tf_err(TF_ERR_FORMAT, "'%s': truncated at byte %zu (%s needs %zu bytes, %zu left)",
			      c->what, c->off, field, n, c->left);
	*out = c->p;
	c->p += n;
	c->left -= n;
	c->off += n;
	return TF_OK;
}

static tf_status get_u32(struct cur *c, const char *field, uint32_t *v)
{
	const unsigned char *b = NULL;
	tf_status st = take(c, 4, field, &b);
	if (!st)
		*v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
	return st;
}

static tf_status get_i64(struct cur *c, const char *field, int64_t *v)
{
	const unsigned char *b = NULL;
	tf_status st = take(c, 8, field, &b);
	if (!st) {
		uint64_t u = 0;
		for (int i = 7; i >= 0; i--)
			u = u << 8 | b[i];
		*v = (int64_t)u;
	}
	return st;
}

static tf_status get_u32s(struct cur *c, const char *field, uint32_t *out, size_t n)
{
	if (n > c->left / 4)
		return tf_err(TF_ERR_FORMAT, "'%s': truncated at byte %zu (%s: %zu ids, %zu bytes left)",
			      c->what, c->off, field, n, c->left);
	for (size_t i = 0; i < n; i++)
		get_u32(c, field, &out[i]);
	return TF_OK;
}

static void put_u32(struct tf_buf *b, uint32_t v, tf_status *st)
{
	unsigned char x[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
			      (unsigned char)(v >> 24)};
	if (!*st)
		*st = tf_buf_append(b, x, 4);
}

static void put_i64(struct tf_buf *b, int64_t v, tf_status *st)
{
	unsigned char x[8];
	for (int i = 0; i < 8; i++)
		x[i] = (unsigned char)((uint64_t)v >> (8 * i));
	if (!*st)
		*st = tf_buf_append(b, x, 8);
}

tf_status tf_engram_map_check(const uint32_t *map, uint32_t vocab, uint32_t compressed)
{
	uint32_t next = 0; /* the next new compressed id */
	for (uint32_t i = 0; i < vocab; i++) {
		if (map[i] > next || map[i] >= compressed)
			return tf_err(TF_ERR_FORMAT,
				      "token map: id %u maps to %u, but only %u compressed ids "
				      "were seen before it (of %u)",
				      i, map[i], next, compressed);
		if (map[i] == next)
			next++;
	}
	if (next != compressed)
		return tf_err(TF_ERR_FORMAT, "token map: %u distinct compressed ids, header says %u",
			      next, compressed);
	return TF_OK;
}

tf_status tf_engram_host_init(struct tf_engram_host *h, const struct tf_config *c,
			      uint32_t *map, uint32_t vocab, uint32_t compressed)
{
	memset(h, 0, sizeof(*h));
	h->map = map;
	tf_status st = tf_engram_config_check(c);
	if (st)
		return st;
	if (vocab < 1 || vocab > TF_ENGRAM_MAX_VOCAB)
		return tf_err(TF_ERR_RANGE, "token map of %u ids (1..%u allowed)", vocab,
			      TF_ENGRAM_MAX_VOCAB);
	h->nlayers = c->n_engram;
	h->max_ngram = c->engram_max_ngram;
	h->vocab = vocab;
	h->compressed = compressed;
	memcpy(h->layer_ids, c->engram_layers, sizeof(h->layer_ids));
	for (uint32_t l = 0; l < c->n_engram; l++)
		tf_engram_multipliers(c->engram_layers[l], compressed, c->engram_max_ngram, h->mult[l]);
	return tf_engram_map_check(map, vocab, compressed);
}

void tf_engram_host_release(struct tf_engram_host *h)
{
	free(h->map);
	memset(h, 0, sizeof(*h));
}

/* The header both formats share, up to and including the multipliers. */
static tf_status parse_header(struct cur *c, struct tf_engram_host *h)
{
	const unsigned char *m = NULL;
	tf_status st = take(c, 8, "magic", &m);
	if (st)
		return st;
	if (memcmp(m, TF_ENGRAM_HOST_MAGIC, 8)) {
		if (!memcmp(m, TF_ENGRAM_HOST_MAGIC, 7))
			return tf_err(TF_ERR_VERSION, "'%s': unknown version '%.8s' (expected '%s')",
				      c->what, (const char *)m, TF_ENGRAM_HOST_MAGIC);
		return tf_err(TF_ERR_FORMAT, "'%s': not an Engram host file (bad magic)", c->what);
	}
	if ((st = get_u32(c, "L", &h->nlayers)) || (st = get_u32(c, "M", &h->max_ngram)) ||
	    (st = get_u32(c, "vocab", &h->vocab)) || (st = get_u32(c, "compressed", &h->compressed)))
		return st;
	if (h->nlayers < 1 || h->nlayers > TF_ENGRAM_MAX_LAYERS)
		return tf_err(TF_ERR_FORMAT, "'%s': %u layers (1..%d allowed)", c->what, h->nlayers,
			      TF_ENGRAM_MAX_LAYERS);
	if (h->max_ngram < 2 || h->max_ngram > TF_ENGRAM_MAX_NGRAM)
		return tf_err(TF_ERR_FORMAT, "'%s': max n-gram %u (2..%d allowed)", c->what,
			      h->max_ngram, TF_ENGRAM_MAX_NGRAM);
	if (h->vocab < 1 || h->vocab > TF_ENGRAM_MAX_VOCAB)
		return tf_err(TF_ERR_FORMAT, "'%s': vocab %u (1..%u allowed)", c->what, h->vocab,
			      TF_ENGRAM_MAX_VOCAB);
	if (h->compressed < 1 || h->compressed > h->vocab)
		return tf_err(TF_ERR_FORMAT, "'%s': %u compressed ids for a vocab of %u", c->what,
			      h->compressed, h->vocab);
	if ((st = get_u32s(c, "layer ids", h->layer_ids, h->nlayers)))
		return st;
	for (uint32_t l = 0; l < h->nlayers; l++)
		for (uint32_t s = 0; s < h->max_ngram; s++) {
			if ((st = get_i64(c, "multipliers", &h->mult[l][s])))
				return st;
			if (h->mult[l][s] <= 0 || !(h->mult[l][s] & 1))
				return tf_err(TF_ERR_FORMAT,
					      "'%s': multiplier %lld of layer %u is not odd and positive",
					      c->what, (long long)h->mult[l][s], h->layer_ids[l]);
		}
	return TF_OK;
}

tf_status tf_engram_host_parse(const void *data, size_t n, const char *what,
			       struct tf_engram_host *h)
{
	struct cur c = {data, n, 0, what};
	memset(h, 0, sizeof(*h));
	tf_status st = parse_header(&c, h);
	if (st)
		goto out;
	if (c.left != (size_t)h->vocab * 4) {
		st = tf_err(TF_ERR_FORMAT, "'%s': %zu bytes after the header, the map of %u ids needs %zu",
			    what, c.left, h->vocab, (size_t)h->vocab * 4);
		goto out;
	}
	h->map = malloc((size_t)h->vocab * 4);
	if (!h->map) {
		st = tf_err(TF_ERR_NOMEM, "'%s': no memory for the token map", what);
		goto out;
	}
	get_u32s(&c, "map", h->map, h->vocab);
	st = tf_engram_map_check(h->map, h->vocab, h->compressed);
	if (st)
		tf_err_wrap(st, "'%s': ", what);
out:
	if (st)
		tf_engram_host_release(h);
	return st;
}

tf_status tf_engram_host_read(const char *path, struct tf_engram_host *h)
{
	char *data = NULL;
	size_t n = 0;
	memset(h, 0, sizeof(*h));
	tf_status st = tf_file_read_all(path, HOST_MAX_BYTES, &data, &n);
	if (!st)
		st = tf_engram_host_parse(data, n, path, h);
	free(data);
	return st;
}

static void put_header(struct tf_buf *b, const struct tf_engram_host *h, tf_status *st)
{
	if (!*st)
		*st = tf_buf_append(b, TF_ENGRAM_HOST_MAGIC, 8);
	put_u32(b, h->nlayers, st);
	put_u32(b, h->max_ngram, st);
	put_u32(b, h->vocab, st);
	put_u32(b, h->compressed, st);
	for (uint32_t l = 0; l < h->nlayers; l++)
		put_u32(b, h->layer_ids[l], st);
	for (uint32_t l = 0; l < h->nlayers; l++)
		for (uint32_t s = 0; s < h->max_ngram; s++)
			put_i64(b, h->mult[l][s], st);
}

tf_status tf_engram_host_write(const struct tf_engram_host *h, const char *path)
{
	struct tf_buf b = TF_BUF_INIT;
	tf_status st = tf_buf_reserve(&b, 64 + 8 * 64 + (size_t)h->vocab * 4);
	put_header(&b, h, &st);
	for (uint32_t i = 0; i < h->vocab; i++)
		put_u32(&b, h->map[i], &st);
	if (!st)
		st = tf_file_write_atomic(path, b.data, b.len);
	tf_buf_release(&b);
	return st;
}

void tf_engram_fixture_release(struct tf_engram_fixture *f)
{
	for (uint32_t i = 0; f->cases && i < f->ncases; i++) {
		free(f->cases[i].ids);
		free(f->cases[i].lookback);
		free(f->cases[i].rows);
	}
	free(f->cases);
	tf_engram_host_release(&f->host);
	memset(f, 0, sizeof(*f));
}

static tf_status parse_case(struct cur *c, struct tf_engram_fixture *f, struct tf_engram_case *k)
{
	const struct tf_engram_host *h = &f->host;
	tf_status st;
	if ((st = get_u32(c, "case n", &k->n)) || (st = get_u32(c, "case nb", &k->nb)))
		return st;
	size_t per = (size_t)h->nlayers * f->cols * 8;
	if (k->n > c->left / 4 || k->nb > c->left / 4 || (k->n && per > c->left / k->n))
		return tf_err(TF_ERR_FORMAT, "'%s': case of %u ids and %u lookback runs past the end",
			      c->what, k->n, k->nb);
	k->ids = malloc((size_t)k->n * 4 + 4);
	k->lookback = malloc((size_t)k->nb * 4 + 4);
	k->rows = malloc((size_t)k->n * per + 8);
	if (!k->ids || !k->lookback || !k->rows)
		return tf_err(TF_ERR_NOMEM, "'%s': no memory for a case", c->what);
	if ((st = get_u32s(c, "case ids", k->ids, k->n)) ||
	    (st = get_u32s(c, "case lookback", k->lookback, k->nb)))
		return st;
	for (uint32_t i = 0; i < k->n + k->nb; i++) {
		uint32_t id = i < k->n ? k->ids[i] : k->lookback[i - k->n];
		if (id < h->vocab && h->map[id] == UINT32_MAX)
			return tf_err(TF_ERR_FORMAT, "'%s': case id %u is not in the map entries",
				      c->what, id);
	}
	for (size_t i = 0; i < (size_t)k->n * h->nlayers * f->cols; i++)
		if ((st = get_i64(c, "case rows", &k->rows[i])))
			return st;
	return TF_OK;
}

tf_status tf_engram_fixture_parse(const void *data, size_t n, const char *what, uint32_t cols,
				  struct tf_engram_fixture *f)
{
	struct cur c = {data, n, 0, what};
	memset(f, 0, sizeof(*f));
	f->cols = cols;
	uint32_t used = 0;
	tf_status st = parse_header(&c, &f->host);
	if (st || (st = get_u32(&c, "used", &used)))
		goto out;
	struct tf_engram_host *h = &f->host;
	h->map = malloc((size_t)h->vocab * 4);
	if (!h->map) {
		st = tf_err(TF_ERR_NOMEM, "'%s': no memory for the map", what);
		goto out;
	}
	memset(h->map, 0xff, (size_t)h->vocab * 4);
	if (used > c.left / 8) {
		st = tf_err(TF_ERR_FORMAT, "'%s': %u map entries run past the end", what, used);
		goto out;
	}
	for (uint32_t i = 0; i < used; i++) {
		uint32_t id, v;
		get_u32(&c, "map id", &id);
		get_u32(&c, "map value", &v);
		if (id >= h->vocab || v >= h->compressed) {
			st = tf_err(TF_ERR_FORMAT, "'%s': map entry %u -> %u out of range", what, id, v);
			goto out;
		}
		h->map[id] = v;
	}
	if ((st = get_u32(&c, "cases", &f->ncases)))
		goto out;
	if (f->ncases > c.left / 8) {
		st = tf_err(TF_ERR_FORMAT, "'%s': %u cases run past the end", what, f->ncases);
		goto out;
	}
	f->cases = calloc(f->ncases + 1, sizeof(*f->cases));
	if (!f->cases) {
		st = tf_err(TF_ERR_NOMEM, "'%s': no memory for cases", what);
		goto out;
	}
	for (uint32_t i = 0; i < f->ncases; i++)
		if ((st = parse_case(&c, f, &f->cases[i])))
			goto out;
	if (c.left)
		st = tf_err(TF_ERR_FORMAT, "'%s': %zu bytes after the last case", what, c.left);
out:
	if (st)
		tf_engram_fixture_release(f);
	return st;
}

tf_status tf_engram_fixture_read(const char *path, uint32_t cols, struct tf_engram_fixture *f)
{
	char *data = NULL;
	size_t n = 0;
	memset(f, 0, sizeof(*f));
	tf_status st = tf_file_read_all(path, FIXTURE_MAX_BYTES, &data, &n);
	if (!st)
		st = tf_engram_fixture_parse(data, n, path, cols, f);
	free(data);
	return st;
}
