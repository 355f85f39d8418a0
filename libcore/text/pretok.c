/* pretok.c: the pre-tokenizer: a Sequence of Split(Isolated) steps, each a
 * regex (or literal string) compiled with PCRE2, then ByteLevel.
 *
 * Hugging Face compiles these regexes with Oniguruma. The translation below
 * rewrites the escapes whose meaning differs in PCRE2 and refuses the ones
 * it cannot make equal:
 *   \s, \S  Oniguruma: Unicode White_Space. PCRE2 (UCP) also matches
 *           U+180E, so both become explicit classes.
 *   \h, \H  Oniguruma: a hex digit. PCRE2: horizontal space.
 *   \uHHHH  Oniguruma only; becomes \x{HHHH}.
 *   .       any character but LF in Oniguruma; written out as [^\n] so
 *           PCRE2's newline setting does not matter.
 *   \w \W \b \B, nested classes, and ^ $ outside a class (line anchors in
 *           Oniguruma's Ruby syntax): refused.
 * \d stays: Unicode decimal digits (\p{Nd}) in both, as \s is Unicode in
 * Hugging Face's Oniguruma (JavaScript's \d, by contrast, is ASCII only). */
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/json.h"
#include "text/pretok_fast.h"
#include "text/tok_impl.h"
#include "text/ucd.h"

static bool fast_applies(const struct tf_tok *tok);

/* Unicode White_Space, as a class body. */
#define WS_BODY "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}" \
		"\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/* The regex ByteLevel(use_regex=true) splits with (GPT-2). */
static const char gpt2_regex[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static tf_status translate(const char *re, size_t n, struct tf_buf *out, const char *what)
{
	bool in_class = false;
	size_t class_start = 0;
	tf_status st = TF_OK;
	for (size_t i = 0; i < n && !st; i++) {
		char c = re[i];
		if (c == '\\' && i + 1 < n) {
			char e = re[++i];
			switch (e) {
			case 's':
				st = tf_buf_puts(out, in_class ? WS_BODY : "[" WS_BODY "]");
				break;
			case 'S':
				if (in_class)
					return tf_err(TF_ERR_UNSUPPORTED,
						      "%s: regex /%s/: \\S inside a class is not implemented",
						      what, re);
				st = tf_buf_puts(out, "[^" WS_BODY "]");
				break;
			case 'h':
				st = tf_buf_puts(out, in_class ? "0-9a-fA-F" : "[0-9a-fA-F]");
				break;
			case 'H':
				if (in_class)
					return tf_err(TF_ERR_UNSUPPORTED,
						      "%s: regex /%s/: \\H inside a class is not implemented",
						      what, re);
				st = tf_buf_puts(out, "[^0-9a-fA-F]");
				break;
			case 'w':
			case 'W':
			case 'b':
			case 'B':
				return tf_err(TF_ERR_UNSUPPORTED,
					      "%s: regex /%s/: \\%c is not implemented (its word set "
					      "differs between Oniguruma and PCRE2)",
					      what, re, e);
			case 'u':
				if (i + 4 < n) {
					st = tf_buf_printf(out, "\\x{%.4s}", re + i + 1);
					i += 4;
					break;
				}
				/* fall through */
			default:
				st = tf_buf_putc(out, '\\');
				if (!st)
					st = tf_buf_putc(out, e);
			}
			continue;
		}
		if (in_class) {
			if (c == '[' || (c == '&' && i + 1 < n && re[i + 1] == '&'))
				return tf_err(TF_ERR_UNSUPPORTED,
					      "%s: regex /%s/: nested or intersected classes are not "
					      "implemented",
					      what, re);
			/* A ']' right after '[' or '[^' is a literal. */
			if (c == ']' && i > class_start)
				in_class = false;
		} else if (c == '[') {
			in_class = true;
			class_start = i + 1 + (i + 1 < n && re[i + 1] == '^');
			if (class_start < n && re[class_start] == ']')
				class_start++;
		} else if (c == '.') {
			st = tf_buf_puts(out, "[^\\n]");
			continue;
		} else if (c == '^' || c == '$') {
			return tf_err(TF_ERR_UNSUPPORTED,
				      "%s: regex /%s/: the anchor %c is not implemented", what, re, c);
		}
		st = tf_buf_putc(out, c);
	}
	return st;
}

/* A literal string as a regex. */
static tf_status quote(const char *s, size_t n, struct tf_buf *out)
{
	tf_status st = TF_OK;
	for (size_t i = 0; i < n && !st; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c < 0x80 && !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
				  (c >= 'A' && c <= 'Z')))
			st = tf_buf_printf(out, "\\x{%x}", c);
		else
			st = tf_buf_putc(out, (char)c);
	}
	return st;
}

static tf_status add_step(struct tf_tok *tok, const char *pattern, size_t n, bool literal,
			  const char *what)
{
	struct tf_buf re = TF_BUF_INIT;
	tf_status st;
	if (tok->nsteps == TOK_MAX_STEPS)
		return tf_err(TF_ERR_UNSUPPORTED, "%s: more than %d pre-tokenizer steps", what,
			      TOK_MAX_STEPS);
	st = literal ? quote(pattern, n, &re) : translate(pattern, n, &re, what);
	if (st || (st = tf_buf_puts(&re, ""))) /* makes data non-NULL */
		goto out;
	int err;
	PCRE2_SIZE off;
	pcre2_code *code = pcre2_compile((PCRE2_SPTR)re.data, re.len, PCRE2_UTF | PCRE2_UCP, &err,
					 &off, NULL);
	if (!code) {
		PCRE2_UCHAR msg[256];
		pcre2_get_error_message(err, msg, sizeof msg);
		st = tf_err(TF_ERR_FORMAT, "%s: regex /%.*s/: %s at offset %zu", what, (int)n,
			    pattern, (const char *)msg, (size_t)off);
		goto out;
	}
	struct pretok_step *s = &tok->steps[tok->nsteps++];
	s->re = code;
	s->literal = literal;
	s->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
	if (!(s->src = tf_strndup(pattern, n)))
		st = tf_err(TF_ERR_NOMEM, "tokenizer: out of memory");
out:
	tf_buf_release(&re);
	return st;
}

static tf_status load_split(struct tf_tok *tok, const json_t *p, const char *what)
{
	const char *behavior = NULL;
	bool invert = false;
	tf_json_str(p, what, "behavior", &behavior);
	tf_json_bool(p, what, "invert", &invert);
	if (!behavior || strcmp(behavior, "Isolated"))
		return tf_err(TF_ERR_UNSUPPORTED,
			      "%s: Split behavior '%s' is not implemented (only Isolated)", what,
			      behavior ? behavior : "?");
	if (invert)
		return tf_err(TF_ERR_UNSUPPORTED, "%s: Split with invert is not implemented", what);
	const json_t *pat = json_object_get(p, "pattern");
	const json_t *re = json_object_get(pat, "Regex"), *str = json_object_get(pat, "String");
	if (json_is_string(re))
		return add_step(tok, json_string_value(re), json_string_length(re), false, what);
	if (json_is_string(str))
		return add_step(tok, json_string_value(str), json_string_length(str), true, what);
	return tf_err(TF_ERR_FORMAT, "%s: Split has no Regex or String pattern", what);
}

static tf_status load_bytelevel(struct tf_tok *tok, const json_t *p, const char *what)
{
	bool prefix = false, use_regex = true;
	tf_json_bool(p, what, "add_prefix_space", &prefix);
	tf_json_bool(p, what, "use_regex", &use_regex);
	if (prefix)
		return tf_err(TF_ERR_UNSUPPORTED,
			      "%s: ByteLevel add_prefix_space is not implemented", what);
	return use_regex ? add_step(tok, gpt2_regex, strlen(gpt2_regex), false, what) : TF_OK;
}

tf_status tok_pretok_load(struct tf_tok *tok, const json_t *pre, const char *what)
{
	const json_t *list = pre, *one[1] = {pre};
	const char *type = NULL;
	size_t n = 1;
	if (!pre || json_is_null(pre))
		return tf_err(TF_ERR_UNSUPPORTED,
			      "%s: no pre_tokenizer; only byte-level (ByteLevel) BPE is implemented",
			      what);
	tf_json_str(pre, what, "type", &type);
	if (type && !strcmp(type, "Sequence")) {
		list = json_object_get(pre, "pretokenizers");
		if (!json_is_array(list))
			return tf_err(TF_ERR_FORMAT, "%s: pre_tokenizer Sequence has no list", what);
		n = json_array_size(list);
	} else {
		list = NULL;
	}
	if (!(tok->steps = calloc(TOK_MAX_STEPS, sizeof *tok->steps)))
		return tf_err(TF_ERR_NOMEM, "tokenizer: out of memory");
	bool bytelevel = false;
	for (size_t i = 0; i < n; i++) {
		const json_t *p = list ? json_array_get(list, i) : one[0];
		const char *t = NULL;
		tf_status st;
		tf_json_str(p, what, "type", &t);
		if (bytelevel)
			return tf_err(TF_ERR_UNSUPPORTED,
				      "%s: pre-tokenizer '%s' after ByteLevel is not implemented", what,
				      t ? t : "?");
		if (t && !strcmp(t, "Split")) {
			st = load_split(tok, p, what);
		} else if (t && !strcmp(t, "ByteLevel")) {
			st = load_bytelevel(tok, p, what);
			bytelevel = true;
		} else {
			st = tf_err(TF_ERR_UNSUPPORTED, "%s: pre-tokenizer '%s' is not implemented",
				    what, t ? t : "?");
		}
		if (st)
			return st;
	}
	if (!bytelevel)
		return tf_err(TF_ERR_UNSUPPORTED,
			      "%s: the pre-tokenizer does not end in ByteLevel; only byte-level BPE "
			      "is implemented",
			      what);
	tok->fast_ok = fast_applies(tok);
	tok->fast = tok->fast_ok && !getenv("TF_TOK_PCRE");
	return TF_OK;
}

/* The built-in splitter stands for these steps when they are DeepSeek's
 * three regexes and its Unicode table is PCRE2's version. */
static bool fast_applies(const struct tf_tok *tok)
{
	char version[32];
	if (tok->nsteps != 3)
		return false;
	for (size_t i = 0; i < 3; i++)
		if (tok->steps[i].literal || strcmp(tok->steps[i].src, tok_fast_patterns[i]))
			return false;
	return pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, version) > 0 &&
	       !strcmp(version, tf_ucd_version);
}

void tok_pretok_free(struct tf_tok *tok)
{
	for (size_t i = 0; i < tok->nsteps; i++) {
		pcre2_code_free(tok->steps[i].re);
		free(tok->steps[i].src);
	}
	free(tok->steps);
	tok->steps = NULL;
	tok->nsteps = 0;
}
