/* prepared_dir.c: the folder of prepared images: keys, paths, and the
 * names a folder may hold.
 *
 * The key is a SHA-256 over, in order (every integer little-endian, every
 * string as u32 length then bytes):
 *     "TFPREPKEY", u32 TF_PREP_VERSION, the converter string;
 *     per shard in name order: "shard", name, u64 size, SHA-256 of its header;
 *     "end", u32 rank, u32 world, the options string.
 * The shard's header bytes (its u64 length and JSON) say every tensor's
 * name, dtype, shape and place, so the key changes when the pack does,
 * without reading the data; mtimes are left out so that a copied pack keeps
 * its images (dsv41-model-facts.md §4 describes the reference's key, which
 * hashes its Zig source and mtimes; this is tf's own). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"
#include "model/prepared.h"

static tf_status upd_u32(struct tf_prep_key *k, uint32_t v)
{
	uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
	return tf_digest_update(&k->d, b, 4);
}

static tf_status upd_u64(struct tf_prep_key *k, uint64_t v)
{
	tf_status st = upd_u32(k, (uint32_t)v);
	return st ? st : upd_u32(k, (uint32_t)(v >> 32));
}

static tf_status upd_str(struct tf_prep_key *k, const char *s)
{
	size_t n = strlen(s);
	tf_status st = upd_u32(k, (uint32_t)n);
	return st ? st : tf_digest_update(&k->d, s, n);
}

tf_status tf_prep_key_begin(struct tf_prep_key *k, const char *converter)
{
	tf_status st = tf_digest_init(&k->d, TF_DIGEST_SHA256);
	if (!st)
		st = upd_str(k, "TFPREPKEY");
	if (!st)
		st = upd_u32(k, TF_PREP_VERSION);
	if (!st)
		st = upd_str(k, converter);
	if (st)
		tf_digest_release(&k->d);
	return st;
}

tf_status tf_prep_key_shard(struct tf_prep_key *k, const char *name, uint64_t size,
			    const uint8_t header_sha256[TF_SHA256_LEN])
{
	tf_status st = upd_str(k, "shard");
	if (!st)
		st = upd_str(k, name);
	if (!st)
		st = upd_u64(k, size);
	if (!st)
		st = tf_digest_update(&k->d, header_sha256, TF_SHA256_LEN);
	if (st)
		tf_digest_release(&k->d);
	return st;
}

tf_status tf_prep_key_finish(struct tf_prep_key *k, uint32_t rank, uint32_t world,
			     const char *options, uint8_t key[TF_PREP_KEY_LEN])
{
	tf_status st = upd_str(k, "end");
	if (!st)
		st = upd_u32(k, rank);
	if (!st)
		st = upd_u32(k, world);
	if (!st)
		st = upd_str(k, options ? options : "");
	if (st) {
		tf_digest_release(&k->d);
		return st;
	}
	return tf_digest_final(&k->d, key);
}

tf_status tf_prep_shard_digest(const char *path, uint8_t out[TF_SHA256_LEN], uint64_t *size)
{
	uint8_t lenb[8], *buf = NULL;
	struct stat sb;
	struct tf_digest d = {0};
	tf_status st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return tf_err_errno(errno == ENOENT ? TF_ERR_NOTFOUND : TF_ERR_IO, "cannot open '%s'", path);
	if (fstat(fd, &sb)) {
		st = tf_err_errno(TF_ERR_IO, "cannot stat '%s'", path);
		goto out;
	}
	*size = (uint64_t)sb.st_size;
	if ((st = tf_file_pread(fd, lenb, 8, 0)))
		goto out;
	uint64_t n = 0;
	for (int i = 7; i >= 0; i--)
		n = n << 8 | lenb[i];
	if (n > 100000000ull || n > *size - 8) {
		st = tf_err(TF_ERR_FORMAT, "'%s': safetensors header length %llu out of range", path,
			    (unsigned long long)n);
		goto out;
	}
	if ((st = tf_digest_init(&d, TF_DIGEST_SHA256)) || (st = tf_digest_update(&d, lenb, 8)))
		goto out;
	size_t cap = 1u << 20;
	if (!(buf = malloc(cap))) {
		st = tf_err(TF_ERR_NOMEM, "out of memory");
		goto out;
	}
	for (uint64_t off = 0; off < n; off += cap) {
		size_t m = n - off < cap ? (size_t)(n - off) : cap;
		if ((st = tf_file_pread(fd, buf, m, 8 + off)) || (st = tf_digest_update(&d, buf, m)))
			goto out;
	}
	st = tf_digest_final(&d, out);
out:
	tf_digest_release(&d);
	free(buf);
	close(fd);
	return st;
}

char *tf_prep_rank_dir(const char *dir, const uint8_t key[TF_PREP_KEY_LEN], uint32_t rank,
		       uint32_t world)
{
	char hex[2 * TF_PREP_KEY_LEN + 1], *out;
	tf_hex(key, TF_PREP_KEY_HEX / 2, hex);
	if (asprintf(&out, "%s/%s/rank%uof%u", dir, hex, rank, world) < 0)
		return NULL;
	return out;
}

void tf_prep_file_name(uint32_t layer, char *buf, size_t n)
{
	if (layer == TF_PREP_TOP)
		snprintf(buf, n, "top.bin");
	else
		snprintf(buf, n, "L%u.bin", layer);
}

/* Parse a decimal without sign or leading zeros (except "0") at *p. */
static bool take_uint(const char **p, uint32_t max, uint32_t *out)
{
	const char *s = *p;
	uint64_t v = 0;
	if (*s < '0' || *s > '9' || (*s == '0' && s[1] >= '0' && s[1] <= '9'))
		return false;
	while (*s >= '0' && *s <= '9') {
		v = v * 10 + (uint64_t)(*s++ - '0');
		if (v > max)
			return false;
	}
	*out = (uint32_t)v;
	*p = s;
	return true;
}

tf_status tf_prep_check_relpath(const char *rel, uint32_t *rank, uint32_t *world)
{
	const char *p = rel;
	for (int i = 0; i < TF_PREP_KEY_HEX; i++, p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			goto bad;
	if (strncmp(p, "/rank", 5))
		goto bad;
	p += 5;
	uint32_t layer;
	if (!take_uint(&p, 1024, rank) || strncmp(p, "of", 2))
		goto bad;
	p += 2;
	if (!take_uint(&p, 1024, world) || *p++ != '/' || !*world || *rank >= *world)
		goto bad;
	if (!strcmp(p, "top.bin"))
		return TF_OK;
	if (!strncmp(p, "engram-l", 8)) { /* engram-l<L>-r<r>of<w>.bin, the same r and w */
		uint32_t r2, w2;
		p += 8;
		if (!take_uint(&p, 1u << 20, &layer) || strncmp(p, "-r", 2))
			goto bad;
		p += 2;
		if (!take_uint(&p, 1024, &r2) || strncmp(p, "of", 2))
			goto bad;
		p += 2;
		if (!take_uint(&p, 1024, &w2) || strcmp(p, ".bin") || r2 != *rank || w2 != *world)
			goto bad;
		return TF_OK;
	}
	if (*p++ != 'L' || !take_uint(&p, 1u << 20, &layer) || strcmp(p, ".bin"))
		goto bad;
	return TF_OK;
bad:
	return tf_err(TF_ERR_FORMAT, "'%s': not a prepared image path (<key>/rank<r>of<w>/"
		      "<L<i>|top|engram-l<i>-r<r>of<w>>.bin)", rel);
}
