/* digest.h: SHA-256 and BLAKE2b-512 through OpenSSL's libcrypto (EVP), one-
 * shot and streaming, plus lowercase hex. */
#ifndef TF_BASE_DIGEST_H
#define TF_BASE_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

enum tf_digest_kind { TF_DIGEST_SHA256, TF_DIGEST_BLAKE2B };

#define TF_SHA256_LEN 32
#define TF_BLAKE2B_LEN 64

struct tf_digest {
	void *ctx; /* EVP_MD_CTX, owned */
	enum tf_digest_kind kind;
};

tf_status tf_digest_init(struct tf_digest *d, enum tf_digest_kind kind);
tf_status tf_digest_update(struct tf_digest *d, const void *data, size_t n);
/* Write the digest (32 or 64 bytes) to out and release d. */
tf_status tf_digest_final(struct tf_digest *d, uint8_t *out);
/* Release without a result (safe after final). */
void tf_digest_release(struct tf_digest *d);
size_t tf_digest_len(enum tf_digest_kind kind);

tf_status tf_sha256(const void *data, size_t n, uint8_t out[TF_SHA256_LEN]);
tf_status tf_blake2b(const void *data, size_t n, uint8_t out[TF_BLAKE2B_LEN]);

/* Lowercase hex of n bytes into out (2n+1 bytes, NUL-terminated). */
void tf_hex(const uint8_t *bytes, size_t n, char *out);

#endif
