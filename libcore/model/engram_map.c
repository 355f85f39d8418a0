/* engram_map.c: the Engram token map (rules in engram_map.h). */
#include "model/engram_map.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/hmap.h"
#include "text/tokenizer.h"

#define SENTINEL 0xE000

/* Unicode White_Space, as Rust's char::is_whitespace (Strip uses it). */
static int is_white(int32_t c)
{
	return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
	       (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
	       c == 0x205f || c == 0x3000;
}

static int is_mark(int32_t c)
{
	utf8proc_category_t k = utf8proc_category(c);
	return k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_MC || k == UTF8PROC_CATEGORY_ME;
}

static tf_status put_cp(struct tf_buf *b, int32_t c)
{
	utf8proc_uint8_t u[4];
	utf8proc_ssize_t n = utf8proc_encode_char(c, u);
	return tf_buf_append(b, u, (size_t)n);
}

tf_status tf_engram_normalize(const char *text, size_t n, struct tf_buf *out)
{
	tf_buf_reset(out);
	utf8proc_uint8_t *nfkc = NULL, *nfd = NULL;
	int32_t *cp = NULL;
	tf_status st = TF_OK;
	utf8proc_ssize_t len = utf8proc_map((const utf8proc_uint8_t *)text, (utf8proc_ssize_t)n,
					    &nfkc, UTF8PROC_STABLE | UTF8PROC_COMPOSE |
							   UTF8PROC_COMPAT);
	if (len < 0) {
		st = tf_err(len == UTF8PROC_ERROR_NOMEM ? TF_ERR_NOMEM : TF_ERR_FORMAT,
			    "normalize: %s", utf8proc_errmsg(len));
		goto out;
	}
	len = utf8proc_map(nfkc, len, &nfd, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
	if (len < 0) {
		st = tf_err(TF_ERR_FORMAT, "normalize: %s", utf8proc_errmsg(len));
		goto out;
	}
	/* Marks dropped, lowercased, [ \t\r\n]+ collapsed: into cp[]. Lowercase
	 * can grow a character to two (U+0130), so room for 2 per byte. */
	cp = malloc(((size_t)len * 2 + 1) * sizeof(*cp));
	if (!cp) {
		st = tf_err(TF_ERR_NOMEM, "normalize: out of memory");
		goto out;
	}
	size_t m = 0;
	for (utf8proc_ssize_t at = 0; at < len;) {
		int32_t c;
		at += utf8proc_iterate(nfd + at, len - at, &c);
		if (is_mark(c))
			continue;
		if (c == 0x130) { /* full lowercase: i + combining dot above */
			cp[m++] = 'i';
			cp[m++] = 0x307;
			continue;
		}
		c = utf8proc_tolower(c);
		if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
			if (m && cp[m - 1] == ' ')
				continue;
			c = ' ';
		}
		cp[m++] = c;
	}
	/* ^ $ -> sentinel, strip, sentinel -> space */
	if (m == 1 && cp[0] == ' ')
		cp[0] = SENTINEL;
	size_t a = 0, b = m;
	while (a < b && is_white(cp[a]))
		a++;
	while (b > a && is_white(cp[b - 1]))
		b--;
	for (size_t i = a; i < b && !st; i++)
		st = put_cp(out, cp[i] == SENTINEL ? ' ' : cp[i]);
out:
	free(nfkc);
	free(nfd);
	free(cp);
	return st;
}

/* True when the bytes are not valid UTF-8 or hold U+FFFD: then decoding
 * the id alone shows a replacement character. */
static int shows_fffd(const uint8_t *s, size_t n)
{
	for (size_t at = 0; at < n;) {
		int32_t c;
		utf8proc_ssize_t k = utf8proc_iterate(s + at, (utf8proc_ssize_t)(n - at), &c);
		if (k < 0 || c == 0xfffd)
			return 1;
		at += (size_t)k;
	}
	return 0;
}

tf_status tf_engram_map_key(const uint8_t *text, size_t n, const char *raw, size_t rawn,
			    struct tf_buf *key)
{
	tf_buf_reset(key);
	if (!text)
		n = 0;
	if (n && shows_fffd(text, n))
		return tf_buf_append(key, raw ? raw : "", raw ? rawn : 0);
	tf_status st = tf_engram_normalize((const char *)text, n, key);
	if (!st && key->len == 0 && n)
		st = tf_buf_append(key, text, n);
	return st;
}

tf_status tf_engram_map_build_fn(uint32_t vocab, tf_engram_token_fn fn, void *ctx,
				 uint32_t **map, uint32_t *compressed)
{
	*map = NULL;
	*compressed = 0;
	struct tf_hmap seen;
	struct tf_buf key = TF_BUF_INIT;
	char **keys = calloc((size_t)vocab + 1, sizeof(*keys)); /* owned key bytes */
	uint32_t *m = malloc((size_t)vocab * 4 + 4), next = 0;
	tf_status st = TF_OK;
	tf_hmap_init(&seen, TF_HMAP_STR);
	if (!keys || !m) {
		st = tf_err(TF_ERR_NOMEM, "token map: out of memory");
		goto out;
	}
	for (uint32_t id = 0; id < vocab; id++) {
		size_t len = 0, rawn = 0;
		const char *raw = NULL;
		const uint8_t *text = fn(ctx, id, &len, &raw, &rawn);
		if ((st = tf_engram_map_key(text, len, raw, rawn, &key))) {
			tf_err_wrap(st, "token %u: ", id);
			goto out;
		}
		uintptr_t v;
		if (tf_hmap_get_str(&seen, key.data ? key.data : "", key.len, &v)) {
			m[id] = (uint32_t)v;
			continue;
		}
		keys[next] = malloc(key.len + 1);
		if (!keys[next]) {
			st = tf_err(TF_ERR_NOMEM, "token map: out of memory");
			goto out;
		}
		if (key.len)
			memcpy(keys[next], key.data, key.len);
		if ((st = tf_hmap_put_str(&seen, keys[next], key.len, next)))
			goto out;
		m[id] = next++;
	}
	*map = m;
	m = NULL;
	*compressed = next;
out:
	for (uint32_t i = 0; keys && i < next; i++)
		free(keys[i]);
	free(keys);
	free(m);
	tf_hmap_release(&seen);
	tf_buf_release(&key);
	return st;
}

static const uint8_t *tok_token(void *ctx, uint32_t id, size_t *len, const char **raw,
				size_t *rawn)
{
	const struct tf_tok *tok = ctx;
	*raw = tf_tok_piece(tok, id, rawn);
	return tf_tok_bytes(tok, id, len);
}

tf_status tf_engram_map_build(const struct tf_tok *tok, uint32_t **map, uint32_t *vocab,
			      uint32_t *compressed)
{
	*vocab = tf_tok_vocab_size(tok);
	return tf_engram_map_build_fn(*vocab, tok_token, (void *)tok, map, compressed);
}
