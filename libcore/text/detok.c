/* detok.c: whole and streaming decode with from_utf8_lossy semantics. */
#include "text/detok.h"
#include "text/tok_impl.h"

#include <stdlib.h>
#include <string.h>

/* The valid range of the first continuation byte after a lead byte (RFC 3629
 * table 3-7), and how many continuation bytes it needs; need 0 marks a byte
 * that cannot start a character. */
struct lead {
	uint8_t need, lo, hi;
};

static struct lead lead_of(uint8_t b)
{
	if (b >= 0xC2 && b <= 0xDF)
		return (struct lead){1, 0x80, 0xBF};
	if (b == 0xE0)
		return (struct lead){2, 0xA0, 0xBF};
	if (b == 0xED)
		return (struct lead){2, 0x80, 0x9F};
	if (b >= 0xE1 && b <= 0xEF)
		return (struct lead){2, 0x80, 0xBF};
	if (b == 0xF0)
		return (struct lead){3, 0x90, 0xBF};
	if (b >= 0xF1 && b <= 0xF3)
		return (struct lead){3, 0x80, 0xBF};
	if (b == 0xF4)
		return (struct lead){3, 0x80, 0x8F};
	return (struct lead){0, 0, 0};
}

/* Length of the valid character at s[0..n), 0 when s starts with an invalid
 * subpart (its length in *bad, at least 1), or 0 with *bad = 0 when the
 * bytes so far are a valid but incomplete character. */
static size_t char_len(const uint8_t *s, size_t n, size_t *bad)
{
	struct lead l = lead_of(s[0]);
	*bad = 1;
	if (!l.need)
		return 0;
	size_t j = 1;
	for (size_t k = 0; k < l.need; k++, j++) {
		if (j >= n) {
			*bad = 0;
			return 0;
		}
		uint8_t lo = k ? 0x80 : l.lo, hi = k ? 0xBF : l.hi;
		if (s[j] < lo || s[j] > hi) {
			*bad = j;
			return 0;
		}
	}
	return j;
}

bool tf_utf8_valid(const void *p, size_t n)
{
	const uint8_t *s = p, *e = s + n;
	while (s < e) {
		if (e - s >= 8) {
			uint64_t w;
			memcpy(&w, s, 8);
			if (!(w & 0x8080808080808080ull)) {
				s += 8;
				continue;
			}
		}
		uint8_t c = s[0];
		if (c < 0x80) {
			s++;
			continue;
		}
		/* the ranges of RFC 3629 (see lead_of) */
		if (c < 0xC2 || c > 0xF4)
			return false;
		if (c < 0xE0) {
			if (e - s < 2 || (s[1] & 0xC0) != 0x80)
				return false;
			s += 2;
		} else if (c < 0xF0) {
			if (e - s < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 ||
			    (c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] > 0x9F))
				return false;
			s += 3;
		} else {
			if (e - s < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 ||
			    (s[3] & 0xC0) != 0x80 || (c == 0xF0 && s[1] < 0x90) ||
			    (c == 0xF4 && s[1] > 0x8F))
				return false;
			s += 4;
		}
	}
	return true;
}

static const char fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

size_t tf_utf8_lossy(const void *p, size_t n, bool final, struct tf_buf *out, tf_status *st)
{
	const uint8_t *s = p;
	size_t i = 0, run = 0; /* [run, i) is valid text not yet copied */
	*st = TF_OK;
	while (i < n) {
		if (s[i] < 0x80) {
			i++;
			continue;
		}
		size_t bad, len = char_len(s + i, n - i, &bad);
		if (len) {
			i += len;
			continue;
		}
		if (!bad && !final)
			break; /* hold back the incomplete tail */
		if ((*st = tf_buf_append(out, s + run, i - run)) ||
		    (*st = tf_buf_append(out, fffd, sizeof fffd)))
			return i;
		i += bad ? bad : n - i;
		run = i;
	}
	if ((*st = tf_buf_append(out, s + run, i - run)))
		return run;
	return i;
}

tf_status tf_tok_decode(const struct tf_tok *tok, const uint32_t *ids, size_t n,
			struct tf_buf *out)
{
	/* Copy every token's bytes, then check the UTF-8 once: it is almost
	 * always valid. When not, convert the copied bytes lossily. */
	size_t start = out->len;
	tf_status st = TF_OK;
	const char *arena = tok->arena.data;
	for (size_t i = 0; i < n; i++) {
		uint32_t id = ids[i];
		if (id >= tok->nids || tok->boff[id] == TOK_NONE)
			continue;
		const char *b = arena + tok->boff[id];
		size_t len = tok->blen[id];
		if (out->cap - out->len <= len + 16 &&
		    (st = tf_buf_reserve(out, len < 4096 ? 4096 : len + 16)))
			return st;
		/* Short tokens (most) move as one 16-byte copy: the arena has
		 * 16 bytes of slack after every token, the buffer room. */
		if (len <= 16)
			memcpy(out->data + out->len, b, 16);
		else
			memcpy(out->data + out->len, b, len);
		out->len += len;
	}
	if (out->len == start)
		return TF_OK;
	out->data[out->len] = 0;
	if (tf_utf8_valid(out->data + start, out->len - start))
		return TF_OK;
	char *raw = malloc(out->len - start);
	if (!raw)
		return tf_err(TF_ERR_NOMEM, "decode: out of memory");
	size_t m = out->len - start;
	memcpy(raw, out->data + start, m);
	out->len = start;
	tf_utf8_lossy(raw, m, true, out, &st);
	free(raw);
	return st;
}

void tf_detok_init(struct tf_detok *d, const struct tf_tok *tok)
{
	memset(d, 0, sizeof *d);
	d->tok = tok;
}

tf_status tf_detok_push_bytes(struct tf_detok *d, const void *bytes, size_t n,
			      struct tf_buf *out)
{
	const uint8_t *s = bytes;
	tf_status st;
	/* Complete (or reject) the held-back character byte by byte first. */
	while (d->npend && n) {
		d->pend[d->npend++] = *s++;
		n--;
		size_t used = tf_utf8_lossy(d->pend, d->npend, false, out, &st);
		if (st)
			return st;
		memmove(d->pend, d->pend + used, d->npend - used);
		d->npend -= (uint8_t)used;
	}
	if (!n)
		return TF_OK;
	size_t used = tf_utf8_lossy(s, n, false, out, &st);
	if (st)
		return st;
	memcpy(d->pend, s + used, n - used); /* at most 3 bytes */
	d->npend = (uint8_t)(n - used);
	return TF_OK;
}

tf_status tf_detok_push(struct tf_detok *d, uint32_t id, struct tf_buf *out)
{
	size_t len;
	const uint8_t *b = tf_tok_bytes(d->tok, id, &len);
	return b ? tf_detok_push_bytes(d, b, len, out) : TF_OK;
}

tf_status tf_detok_flush(struct tf_detok *d, struct tf_buf *out)
{
	tf_status st = TF_OK;
	if (d->npend)
		tf_utf8_lossy(d->pend, d->npend, true, out, &st);
	d->npend = 0;
	return st;
}

size_t tf_detok_pending(const struct tf_detok *d)
{
	return d->npend;
}
