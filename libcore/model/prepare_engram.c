/* prepare_engram.c: a rank's Engram table shard (prepare.h says the
 * format).
 *
 * Facts: dsv41-model-facts.md §5: bucket sizes are primes, per layer and
 * order the next primes not used by an earlier column (any layer), so
 * column j of Engram layer i is the (i·cols + j)-th prime at or above the
 * engram vocabulary (16,000,000 in the release: p[0][0] = 16,000,057);
 * offsets are prefix sums per layer, each layer's primes adding up to
 * engram_num_embeddings; under TP each rank owns whole columns (TP2: 0-11
 * and 12-23) and fetches only their rows; the shard file's header and name.
 * Primality: deterministic Miller-Rabin with bases 2, 7, 61 (exact below
 * 4,759,123,141, as the reference does). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/digest.h"
#include "base/file.h"
#include "model/prepare.h"

#define ROW TF_ENGRAM_ROW_BYTES
#define MAX_COLS 256

static uint64_t mulmod(uint64_t a, uint64_t b, uint64_t m)
{
	return (uint64_t)((unsigned __int128)a * b % m);
}

static uint64_t powmod(uint64_t a, uint64_t e, uint64_t m)
{
	uint64_t r = 1;
	for (a %= m; e; e >>= 1, a = mulmod(a, a, m))
		if (e & 1)
			r = mulmod(r, a, m);
	return r;
}

static bool is_prime(uint64_t n)
{
	if (n < 2)
		return false;
	static const uint64_t small[] = {2, 3, 5, 7, 11, 13, 61};
	for (size_t i = 0; i < sizeof(small) / sizeof(small[0]); i++)
		if (n % small[i] == 0)
			return n == small[i];
	uint64_t d = n - 1;
	int s = 0;
	while (!(d & 1)) {
		d >>= 1;
		s++;
	}
	static const uint64_t bases[] = {2, 7, 61};
	for (size_t i = 0; i < 3; i++) {
		uint64_t x = powmod(bases[i], d, n);
		if (x == 1 || x == n - 1)
			continue;
		int r = 1;
		for (; r < s; r++)
			if ((x = mulmod(x, x, n)) == n - 1)
				break;
		if (r == s)
			return false;
	}
	return true;
}

tf_status tf_prepare_engram_range(const struct tf_config *c, uint32_t ei, uint32_t rank,
				  uint32_t world, uint64_t *lo, uint64_t *hi, uint64_t *total)
{
	uint32_t cols = tf_config_hash_cols(c);
	if (ei >= c->n_engram || !cols || cols > MAX_COLS || !world || rank >= world)
		return tf_err(TF_ERR_ARG, "Engram layer %u, rank %u of %u", ei, rank, world);
	if (cols % world)
		return tf_err(TF_ERR_CONFIG, "%u Engram hash columns do not split over %u ranks", cols,
			      world);
	uint64_t p = c->engram_vocab, off[MAX_COLS + 1] = {0};
	/* walk the primes of the layers before this one, then this one's */
	for (uint64_t k = 0; k < (uint64_t)ei * cols + cols; k++) {
		while (!is_prime(p))
			p++;
		if (k >= (uint64_t)ei * cols) {
			uint32_t j = (uint32_t)(k - (uint64_t)ei * cols);
			off[j + 1] = off[j] + p;
		}
		p++;
	}
	if (off[cols] != c->engram_rows[ei])
		return tf_err(TF_ERR_CONFIG, "Engram layer %u: the primes give %llu rows, the config says %llu",
			      c->engram_layers[ei], (unsigned long long)off[cols],
			      (unsigned long long)c->engram_rows[ei]);
	*lo = off[cols / world * rank];
	*hi = off[cols / world * (rank + 1)];
	*total = off[cols];
	return TF_OK;
}

void tf_prepare_engram_name(uint32_t layer, uint32_t rank, uint32_t world, char *buf, size_t n)
{
	snprintf(buf, n, "engram-l%u-r%uof%u.bin", layer, rank, world);
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

tf_status tf_prepare_engram_write(const struct tf_config *c, const struct tf_pack *pack,
				  const struct tf_plan *plan, const struct tf_plan_native *table,
				  const char *path, enum tf_prep_commit commit,
				  void (*progress)(void *ctx, uint64_t n), void *ctx,
				  uint64_t *read_bytes)
{
	uint64_t lo, hi, total;
	uint8_t *buf = NULL, hdr[TF_ENGRAM_SHARD_HEADER] = {0};
	struct tf_digest d = {0};
	struct tf_atomic_file f = {.fd = -1};
	int ei = tf_config_engram_index(c, table->spec.layer);
	tf_status st = ei < 0 ? tf_err(TF_ERR_ARG, "'%s' is not an Engram table", table->spec.name) :
				tf_prepare_engram_range(c, (uint32_t)ei, plan->rank, plan->world, &lo,
							&hi, &total);
	if (read_bytes)
		*read_bytes = 0;
	if (st)
		return st;
	if (table->t->t->end - table->t->t->begin != total * ROW)
		return tf_err(TF_ERR_FORMAT, "tensor '%s': %llu bytes, expected %llu rows of %u",
			      table->spec.name, (unsigned long long)(table->t->t->end - table->t->t->begin),
			      (unsigned long long)total, ROW);
	if (!(buf = malloc(TF_PREPARE_CHUNK / ROW * ROW)))
		return tf_err(TF_ERR_NOMEM, "out of memory");
	if ((st = tf_atomic_open(&f, path)) || (st = tf_digest_init(&d, TF_DIGEST_SHA256)))
		goto out;
	uint64_t at = TF_ENGRAM_SHARD_HEADER;
	for (uint64_t r = lo; r < hi;) {
		uint64_t n = hi - r < TF_PREPARE_CHUNK / ROW ? hi - r : TF_PREPARE_CHUNK / ROW;
		if ((st = tf_pack_read(pack, table->t, r * ROW, buf, n * ROW)) ||
		    (st = tf_digest_update(&d, buf, n * ROW)) ||
		    (st = tf_file_pwrite(f.fd, buf, n * ROW, at)))
			goto out;
		if (read_bytes)
			*read_bytes += n * ROW;
		if (progress)
			progress(ctx, n * ROW);
		at += n * ROW;
		r += n;
	}
	memcpy(hdr, TF_ENGRAM_SHARD_MAGIC, 8);
	put64(hdr + 8, table->spec.layer);
	put64(hdr + 16, lo);
	put64(hdr + 24, hi);
	put64(hdr + 32, total);
	put64(hdr + 40, ROW);
	if ((st = tf_digest_final(&d, hdr + 48)) ||
	    (st = tf_file_pwrite(f.fd, hdr, sizeof hdr, 0)))
		goto out;
	if (commit == TF_PREP_COMMIT_SYNC) {
		st = tf_atomic_commit(&f);
	} else {
		if (commit == TF_PREP_COMMIT_FILE && fsync(f.fd))
			st = tf_err_errno(TF_ERR_IO, "cannot sync '%s'", f.tmp);
		if (!st && close(f.fd))
			st = tf_err_errno(TF_ERR_IO, "cannot close '%s'", f.tmp);
		else if (!st)
			f.fd = -1;
		if (!st && commit != TF_PREP_COMMIT_STAGED && rename(f.tmp, f.path))
			st = tf_err_errno(TF_ERR_IO, "cannot rename '%s'", f.tmp);
		if (!st) {
			free(f.path);
			free(f.tmp);
		}
	}
	if (!st)
		f.fd = -1, f.path = f.tmp = NULL;
out:
	tf_digest_release(&d);
	if (f.fd >= 0 || f.tmp)
		tf_atomic_abort(&f);
	free(buf);
	return st;
}

tf_status tf_prepare_engram_check(const char *path, const struct tf_engram_expect *ex, bool verify,
				  uint64_t *layer_out)
{
	uint8_t hdr[TF_ENGRAM_SHARD_HEADER], *buf = NULL, dig[TF_SHA256_LEN];
	struct stat sb;
	tf_status st = TF_OK;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return tf_err_errno(errno == ENOENT ? TF_ERR_NOTFOUND : TF_ERR_IO, "cannot open '%s'", path);
	if (fstat(fd, &sb)) {
		st = tf_err_errno(TF_ERR_IO, "cannot stat '%s'", path);
		goto out;
	}
	if ((uint64_t)sb.st_size < sizeof hdr) {
		st = tf_err(TF_ERR_FORMAT, "'%s': %lld bytes, too short for an Engram shard (truncated?)",
			    path, (long long)sb.st_size);
		goto out;
	}
	if ((st = tf_file_pread(fd, hdr, sizeof hdr, 0)))
		goto out;
	uint64_t layer = get64(hdr + 8), lo = get64(hdr + 16), hi = get64(hdr + 24);
	uint64_t total = get64(hdr + 32), row = get64(hdr + 40);
	if (layer_out)
		*layer_out = layer;
	if (memcmp(hdr, TF_ENGRAM_SHARD_MAGIC, 8) || row != ROW || lo > hi || hi > total ||
	    hi - lo > ((uint64_t)1 << 40)) {
		st = tf_err(TF_ERR_FORMAT, "'%s': not an Engram shard (bad header)", path);
		goto out;
	}
	for (size_t i = 48 + TF_SHA256_LEN; i < sizeof hdr; i++)
		if (hdr[i]) {
			st = tf_err(TF_ERR_FORMAT, "'%s': header padding is not zero (damaged)", path);
			goto out;
		}
	if ((uint64_t)sb.st_size != sizeof hdr + (hi - lo) * ROW) {
		st = tf_err(TF_ERR_FORMAT, "'%s': %lld bytes, its header says %llu (truncated?)", path,
			    (long long)sb.st_size, (unsigned long long)(sizeof hdr + (hi - lo) * ROW));
		goto out;
	}
	if (ex && (ex->layer != layer || ex->lo != lo || ex->hi != hi || ex->total != total)) {
		st = tf_err(TF_ERR_MISMATCH, "'%s': holds layer %llu rows %llu..%llu of %llu, expected "
			    "layer %llu rows %llu..%llu of %llu", path, (unsigned long long)layer,
			    (unsigned long long)lo, (unsigned long long)hi, (unsigned long long)total,
			    (unsigned long long)ex->layer, (unsigned long long)ex->lo,
			    (unsigned long long)ex->hi, (unsigned long long)ex->total);
		goto out;
	}
	if (!verify)
		goto out;
	struct tf_digest d;
	size_t cap = TF_PREPARE_CHUNK;
	if (!(buf = malloc(cap))) {
		st = tf_err(TF_ERR_NOMEM, "out of memory");
		goto out;
	}
	if ((st = tf_digest_init(&d, TF_DIGEST_SHA256)))
		goto out;
	for (uint64_t off = sizeof hdr; off < (uint64_t)sb.st_size && !st;) {
		size_t n = (uint64_t)sb.st_size - off < cap ? (size_t)((uint64_t)sb.st_size - off) : cap;
		if (!(st = tf_file_pread(fd, buf, n, off)))
			st = tf_digest_update(&d, buf, n);
		off += n;
	}
	if (st) {
		tf_digest_release(&d);
		goto out;
	}
	if (!(st = tf_digest_final(&d, dig)) && memcmp(dig, hdr + 48, TF_SHA256_LEN))
		st = tf_err(TF_ERR_FORMAT, "'%s': rows digest mismatch (damaged)", path);
out:
	free(buf);
	close(fd);
	return st;
}
