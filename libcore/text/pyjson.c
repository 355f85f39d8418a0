/* pyjson.c: Python's json.dumps / json.loads / repr over jansson values. */
#include "text/pyjson.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

tf_status tf_pyjson_dump_str(struct tf_buf *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	tf_status st = tf_buf_reserve(b, n + 2);
	if (st)
		return st;
	b->data[b->len++] = '"';
	size_t run = 0; /* bytes copied as they are, flushed in one append */
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		if ((st = tf_buf_append(b, s + run, i - run)))
			return st;
		run = i + 1;
		char esc[7] = {'\\', 0};
		size_t len = 2;
		switch (c) {
		case '"': esc[1] = '"'; break;
		case '\\': esc[1] = '\\'; break;
		case '\n': esc[1] = 'n'; break;
		case '\r': esc[1] = 'r'; break;
		case '\t': esc[1] = 't'; break;
		case '\b': esc[1] = 'b'; break;
		case '\f': esc[1] = 'f'; break;
		default:
			memcpy(esc + 1, "u00", 3);
			esc[4] = hex[c >> 4];
			esc[5] = hex[c & 15];
			len = 6;
		}
		if ((st = tf_buf_append(b, esc, len)))
			return st;
	}
	if ((st = tf_buf_append(b, s + run, n - run)))
		return st;
	return tf_buf_putc(b, '"');
}

tf_status tf_pyjson_dump_float(struct tf_buf *b, double f)
{
	if (isnan(f))
		return tf_buf_puts(b, "NaN");
	if (isinf(f))
		return tf_buf_puts(b, f > 0 ? "Infinity" : "-Infinity");
	/* The shortest correctly rounded digits that read back as f. */
	char e[40];
	for (int prec = 1; prec <= 17; prec++) {
		snprintf(e, sizeof e, "%.*e", prec - 1, f);
		if (strtod(e, NULL) == f)
			break;
	}
	const char *p = e;
	bool neg = *p == '-';
	if (neg)
		p++;
	char digits[20];
	size_t nd = 0;
	for (; *p && *p != 'e'; p++)
		if (*p != '.')
			digits[nd++] = *p;
	while (nd > 1 && digits[nd - 1] == '0')
		nd--;
	int decpt = atoi(p + 1) + 1; /* value = 0.DIGITS x 10^decpt */
	if (digits[0] == '0')
		decpt = 1;
	char out[48];
	size_t o = 0;
	if (neg)
		out[o++] = '-';
	if (decpt <= -4 || decpt > 16) {
		out[o++] = digits[0];
		if (nd > 1) {
			out[o++] = '.';
			memcpy(out + o, digits + 1, nd - 1);
			o += nd - 1;
		}
		int x = decpt - 1;
		o += (size_t)snprintf(out + o, sizeof out - o, "e%c%02d", x < 0 ? '-' : '+', abs(x));
	} else if (decpt <= 0) {
		out[o++] = '0';
		out[o++] = '.';
		for (int i = 0; i < -decpt; i++)
			out[o++] = '0';
		memcpy(out + o, digits, nd);
		o += nd;
	} else {
		for (int i = 0; i < decpt; i++)
			out[o++] = (size_t)i < nd ? digits[i] : '0';
		out[o++] = '.';
		if ((size_t)decpt < nd) {
			memcpy(out + o, digits + decpt, nd - (size_t)decpt);
			o += nd - (size_t)decpt;
		} else {
			out[o++] = '0';
		}
	}
	return tf_buf_append(b, out, o);
}

tf_status tf_pyjson_dump(struct tf_buf *b, const json_t *v, bool compact)
{
	const char *comma = compact ? "," : ", ", *colon = compact ? ":" : ": ";
	tf_status st = TF_OK;
	switch (json_typeof(v)) {
	case JSON_OBJECT: {
		const char *key;
		size_t klen;
		json_t *x;
		bool first = true;
		if ((st = tf_buf_putc(b, '{')))
			return st;
		json_object_keylen_foreach((json_t *)v, key, klen, x) {
			if (!first && (st = tf_buf_puts(b, comma)))
				return st;
			first = false;
			if ((st = tf_pyjson_dump_str(b, key, klen)) || (st = tf_buf_puts(b, colon)) ||
			    (st = tf_pyjson_dump(b, x, compact)))
				return st;
		}
		return tf_buf_putc(b, '}');
	}
	case JSON_ARRAY:
		if ((st = tf_buf_putc(b, '[')))
			return st;
		for (size_t i = 0; i < json_array_size(v); i++) {
			if (i && (st = tf_buf_puts(b, comma)))
				return st;
			if ((st = tf_pyjson_dump(b, json_array_get(v, i), compact)))
				return st;
		}
		return tf_buf_putc(b, ']');
	case JSON_STRING:
		return tf_pyjson_dump_str(b, json_string_value(v), json_string_length(v));
	case JSON_INTEGER:
		return tf_buf_printf(b, "%lld", (long long)json_integer_value(v));
	case JSON_REAL:
		return tf_pyjson_dump_float(b, json_real_value(v));
	case JSON_TRUE:
		return tf_buf_puts(b, "true");
	case JSON_FALSE:
		return tf_buf_puts(b, "false");
	case JSON_NULL:
		return tf_buf_puts(b, "null");
	}
	return st;
}

bool tf_pyjson_scalar_text(struct tf_buf *b, const json_t *v, tf_status *st)
{
	switch (json_typeof(v)) {
	case JSON_STRING:
		*st = tf_buf_append(b, json_string_value(v), json_string_length(v));
		return true;
	case JSON_INTEGER:
		*st = tf_buf_printf(b, "%lld", (long long)json_integer_value(v));
		return true;
	case JSON_REAL: {
		double f = json_real_value(v);
		*st = isnan(f) ? tf_buf_puts(b, "nan") :
		      isinf(f) ? tf_buf_puts(b, f > 0 ? "inf" : "-inf") :
				 tf_pyjson_dump_float(b, f);
		return true;
	}
	case JSON_TRUE:
		*st = tf_buf_puts(b, "True");
		return true;
	case JSON_FALSE:
		*st = tf_buf_puts(b, "False");
		return true;
	default:
		*st = TF_OK;
		return false;
	}
}

static tf_status repr_str(struct tf_buf *b, const char *s, size_t n)
{
	char q = memchr(s, '\'', n) && !memchr(s, '"', n) ? '"' : '\'';
	tf_status st = tf_buf_putc(b, q);
	for (size_t i = 0; i < n && !st; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '\\' || c == (unsigned char)q)
			st = tf_buf_printf(b, "\\%c", c);
		else if (c == '\n')
			st = tf_buf_puts(b, "\\n");
		else if (c == '\r')
			st = tf_buf_puts(b, "\\r");
		else if (c == '\t')
			st = tf_buf_puts(b, "\\t");
		else if (c < 0x20 || c == 0x7f)
			st = tf_buf_printf(b, "\\x%02x", c);
		else
			st = tf_buf_putc(b, (char)c);
	}
	return st ? st : tf_buf_putc(b, q);
}

tf_status tf_pyjson_repr(struct tf_buf *b, const json_t *v)
{
	tf_status st = TF_OK;
	switch (json_typeof(v)) {
	case JSON_STRING:
		return repr_str(b, json_string_value(v), json_string_length(v));
	case JSON_NULL:
		return tf_buf_puts(b, "None");
	case JSON_ARRAY:
		if ((st = tf_buf_putc(b, '[')))
			return st;
		for (size_t i = 0; i < json_array_size(v); i++)
			if ((i && (st = tf_buf_puts(b, ", "))) || (st = tf_pyjson_repr(b, json_array_get(v, i))))
				return st;
		return tf_buf_putc(b, ']');
	case JSON_OBJECT: {
		const char *key;
		json_t *x;
		bool first = true;
		if ((st = tf_buf_putc(b, '{')))
			return st;
		json_object_foreach((json_t *)v, key, x) {
			if ((!first && (st = tf_buf_puts(b, ", "))) || (st = repr_str(b, key, strlen(key))) ||
			    (st = tf_buf_puts(b, ": ")) || (st = tf_pyjson_repr(b, x)))
				return st;
			first = false;
		}
		return tf_buf_putc(b, '}');
	}
	default:
		tf_pyjson_scalar_text(b, v, &st);
		return st;
	}
}

json_t *tf_pyjson_loads(const char *s, size_t n)
{
	json_error_t e;
	return json_loadb(s, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
}

bool tf_pyjson_truthy(const json_t *v)
{
	if (!v)
		return false;
	switch (json_typeof(v)) {
	case JSON_OBJECT: return json_object_size(v) > 0;
	case JSON_ARRAY: return json_array_size(v) > 0;
	case JSON_STRING: return json_string_length(v) > 0;
	case JSON_INTEGER: return json_integer_value(v) != 0;
	case JSON_REAL: return json_real_value(v) != 0;
	case JSON_TRUE: return true;
	default: return false;
	}
}
