/* digest.c: SHA-256 and BLAKE2b-512 over OpenSSL EVP. */
#include "base/digest.h"

#include <openssl/evp.h>

static const EVP_MD *md_of(enum tf_digest_kind kind)
{
	return kind == TF_DIGEST_SHA256 ? EVP_sha256() : EVP_blake2b512();
}

size_t tf_digest_len(enum tf_digest_kind kind)
{
	return kind == TF_DIGEST_SHA256 ? TF_SHA256_LEN : TF_BLAKE2B_LEN;
}

tf_status tf_digest_init(struct tf_digest *d, enum tf_digest_kind kind)
{
	d->kind = kind;
	d->ctx = EVP_MD_CTX_new();
	if (!d->ctx)
		return tf_err(TF_ERR_NOMEM, "cannot create a digest context");
	if (EVP_DigestInit_ex(d->ctx, md_of(kind), NULL) != 1) {
		tf_digest_release(d);
		return tf_err(TF_ERR_UNAVAILABLE, "libcrypto refused the digest");
	}
	return TF_OK;
}

tf_status tf_digest_update(struct tf_digest *d, const void *data, size_t n)
{
	if (n && EVP_DigestUpdate(d->ctx, data, n) != 1)
		return tf_err(TF_ERR_INTERNAL, "digest update failed");
	return TF_OK;
}

tf_status tf_digest_final(struct tf_digest *d, uint8_t *out)
{
	unsigned len = 0;
	int ok = EVP_DigestFinal_ex(d->ctx, out, &len);
	tf_digest_release(d);
	return ok == 1 ? TF_OK : tf_err(TF_ERR_INTERNAL, "digest final failed");
}

void tf_digest_release(struct tf_digest *d)
{
	EVP_MD_CTX_free(d->ctx);
	d->ctx = NULL;
}

static tf_status oneshot(enum tf_digest_kind kind, const void *data, size_t n, uint8_t *out)
{
	struct tf_digest d;
	tf_status st = tf_digest_init(&d, kind);
	if (st)
		return st;
	if ((st = tf_digest_update(&d, data, n))) {
		tf_digest_release(&d);
		return st;
	}
	return tf_digest_final(&d, out);
}

tf_status tf_sha256(const void *data, size_t n, uint8_t out[TF_SHA256_LEN])
{
	return oneshot(TF_DIGEST_SHA256, data, n, out);
}

tf_status tf_blake2b(const void *data, size_t n, uint8_t out[TF_BLAKE2B_LEN])
{
	return oneshot(TF_DIGEST_BLAKE2B, data, n, out);
}

void tf_hex(const uint8_t *bytes, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[bytes[i] >> 4];
		out[2 * i + 1] = digits[bytes[i] & 15];
	}
	out[2 * n] = 0;
}
