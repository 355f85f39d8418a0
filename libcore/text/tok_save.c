/* tok_save.c: a loaded tokenizer back to tokenizer.json text: the file's
 * own settings (kept at load with the vocab, merges and added tokens taken
 * out), the vocab in id order, the merges in their original form, and every
 * added token, including those added since. */
#include <stdlib.h>
#include <string.h>

#include "text/tok_impl.h"

static json_t *pair_json(const struct tf_tok *tok, const uint32_t m[2])
{
	if (tok->merges_as_pairs)
		return json_pack("[s#s#]", tok->vkey[m[0]], (int)tok->vkey_len[m[0]], tok->vkey[m[1]],
				 (int)tok->vkey_len[m[1]]);
	size_t a = tok->vkey_len[m[0]], b = tok->vkey_len[m[1]];
	char *s = malloc(a + b + 1);
	if (!s)
		return NULL;
	memcpy(s, tok->vkey[m[0]], a);
	s[a] = ' ';
	memcpy(s + a + 1, tok->vkey[m[1]], b);
	json_t *j = json_stringn_nocheck(s, a + b + 1);
	free(s);
	return j;
}

static tf_status build_json(const struct tf_tok *tok, json_t **out)
{
	json_t *root = json_deep_copy(tok->rest);
	json_t *added = json_array(), *vocab = json_object(), *merges = json_array();
	if (!root || !added || !vocab || !merges)
		goto nomem;
	for (size_t i = 0; i < tok->nadded; i++) {
		const struct added *a = &tok->added[i];
		json_t *o = json_pack("{s:I,s:s#,s:b,s:b,s:b,s:b,s:b}", "id", (json_int_t)a->id,
				      "content", a->content, (int)a->len, "single_word", 0, "lstrip",
				      0, "rstrip", 0, "normalized", !!(a->flags & TF_TOK_NORMALIZED),
				      "special", !!(a->flags & TF_TOK_SPECIAL));
		if (!o || json_array_append_new(added, o))
			goto nomem;
	}
	for (uint32_t id = 0; id < tok->nids; id++)
		if (tok->vkey[id] &&
		    json_object_setn_new_nocheck(vocab, tok->vkey[id], tok->vkey_len[id],
						 json_integer(id)))
			goto nomem;
	for (size_t r = 0; r < tok->nmerges; r++) {
		json_t *m = pair_json(tok, tok->merge_list[r]);
		if (!m || json_array_append_new(merges, m))
			goto nomem;
	}
	json_t *model = json_object_get(root, "model");
	json_object_set_new(root, "added_tokens", added);
	json_object_set_new(model, "vocab", vocab);
	json_object_set_new(model, "merges", merges);
	*out = root;
	return TF_OK;
nomem:
	json_decref(root);
	json_decref(added);
	json_decref(vocab);
	json_decref(merges);
	return tf_err(TF_ERR_NOMEM, "tokenizer: out of memory while saving");
}

tf_status tf_tok_save(const struct tf_tok *tok, struct tf_buf *out)
{
	json_t *root;
	tf_status st = build_json(tok, &root);
	if (st)
		return st;
	char *s = json_dumps(root, JSON_INDENT(2));
	json_decref(root);
	if (!s)
		return tf_err(TF_ERR_NOMEM, "tokenizer: out of memory while saving");
	st = tf_buf_puts(out, s);
	if (!st)
		st = tf_buf_putc(out, '\n');
	free(s);
	return st;
}
