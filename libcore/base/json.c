/* json.c: jansson helpers. */
#include "base/json.h"

#include <stdlib.h>

#include "base/file.h"

tf_status tf_json_parse(const char *text, size_t n, const char *what, json_t **out)
{
	json_error_t e;
	*out = json_loadb(text, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
	if (!*out)
		return tf_err(TF_ERR_FORMAT, "'%s': bad JSON at line %d column %d: %s", what, e.line,
			      e.column, e.text);
	return TF_OK;
}

tf_status tf_json_load(const char *path, size_t max, json_t **out)
{
	char *text;
	size_t n;
	*out = NULL;
	tf_status st = tf_file_read_all(path, max, &text, &n);
	if (st)
		return st;
	st = tf_json_parse(text, n, path, out);
	free(text);
	return st;
}

static tf_status want(const json_t *obj, const char *key, const json_t **v)
{
	*v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
	return *v && !json_is_null(*v) ? TF_OK : TF_ERR_NOTFOUND;
}

tf_status tf_json_i64(const json_t *obj, const char *what, const char *key, int64_t min,
		      int64_t max, int64_t *out)
{
	const json_t *v;
	if (want(obj, key, &v))
		return TF_ERR_NOTFOUND;
	json_int_t i;
	if (json_is_integer(v)) {
		i = json_integer_value(v);
	} else if (json_is_real(v) && json_real_value(v) == (double)(json_int_t)json_real_value(v)) {
		i = (json_int_t)json_real_value(v);
	} else {
		return tf_err(TF_ERR_FORMAT, "%s: '%s' is not an integer", what, key);
	}
	if (i < min || i > max)
		return tf_err(TF_ERR_FORMAT, "%s: '%s' = %lld is out of range [%lld, %lld]", what, key,
			      (long long)i, (long long)min, (long long)max);
	*out = i;
	return TF_OK;
}

tf_status tf_json_f64(const json_t *obj, const char *what, const char *key, double *out)
{
	const json_t *v;
	if (want(obj, key, &v))
		return TF_ERR_NOTFOUND;
	if (!json_is_number(v))
		return tf_err(TF_ERR_FORMAT, "%s: '%s' is not a number", what, key);
	*out = json_number_value(v);
	return TF_OK;
}

tf_status tf_json_bool(const json_t *obj, const char *what, const char *key, bool *out)
{
	const json_t *v;
	if (want(obj, key, &v))
		return TF_ERR_NOTFOUND;
	if (!json_is_boolean(v))
		return tf_err(TF_ERR_FORMAT, "%s: '%s' is not true or false", what, key);
	*out = json_is_true(v);
	return TF_OK;
}

tf_status tf_json_str(const json_t *obj, const char *what, const char *key, const char **out)
{
	const json_t *v;
	if (want(obj, key, &v))
		return TF_ERR_NOTFOUND;
	if (!json_is_string(v))
		return tf_err(TF_ERR_FORMAT, "%s: '%s' is not a string", what, key);
	*out = json_string_value(v);
	return TF_OK;
}

tf_status tf_json_print(FILE *f, const json_t *v, bool pretty)
{
	size_t flags = JSON_ENCODE_ANY | (pretty ? JSON_INDENT(2) : JSON_COMPACT);
	if (json_dumpf(v, f, flags) || fputc('\n', f) == EOF)
		return tf_err(TF_ERR_IO, "cannot write JSON");
	return TF_OK;
}
