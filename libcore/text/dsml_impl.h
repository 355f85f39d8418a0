/* dsml_impl.h: what dsml.c shares with dsml_stream.c: the tag grammar,
 * typed values and call helpers. Not an interface: include dsml.h. */
#ifndef TF_TEXT_DSML_IMPL_H
#define TF_TEXT_DSML_IMPL_H

#include <stdint.h>

#include "text/dsml.h"

#define MARK "<｜DSML｜"
#define MARK_LEN (sizeof MARK - 1)
#define MARK_CLOSE "</｜DSML｜"
#define MARK_CLOSE_LEN (sizeof MARK_CLOSE - 1)
#define THINK_END "</think>"
#define THINK_END_LEN (sizeof THINK_END - 1)
/* Searches resume this far back: longer than any tag the stream waits for. */
#define DSML_WINDOW 64

struct dsml_tool {
	char *name;
	size_t len;
	const json_t *props; /* parameters.properties, or NULL */
};

struct tf_dsml_tools {
	struct dsml_tool *v;
	size_t n;
	json_t *ref;
};

struct dsml_match {
	size_t start, end;
};

/* An invoke or parameter header. */
struct dsml_head {
	size_t start, end;
	size_t name, name_len;
	bool string; /* parameters: string="true" */
};

/* A header probe's answer: matched, refused, or cut off by the end of the
 * text (it may still match as the text grows). */
enum dsml_got { DSML_OK, DSML_NO, DSML_MORE };
typedef enum dsml_got (*dsml_probe)(const char *t, size_t len, size_t p, struct dsml_head *h);

size_t dsml_space(const char *s, size_t len, size_t i);
void dsml_strip(const char *s, size_t n, size_t *a, size_t *b);
size_t dsml_partial(const char *t, size_t len, const char *tag);
size_t dsml_hold(const char *t, size_t len);
/* The same for every spelling the grammar reads (tf_dsml_stream_consistent). */
size_t dsml_hold_all(const char *t, size_t len);
bool dsml_think_end(const char *t, size_t n, size_t from, size_t *at);
bool dsml_block_tag(const char *s, size_t from, size_t to, bool close, struct dsml_match *m);
enum dsml_got dsml_invoke_at(const char *t, size_t len, size_t p, struct dsml_head *h);
enum dsml_got dsml_param_at(const char *t, size_t len, size_t p, struct dsml_head *h);
/* The first header at or after from in t[0..len); *again: where a later
 * search must start (the first header cut off, else just before a mark the
 * end may still be completing). */
bool dsml_search(const char *t, size_t len, size_t from, dsml_probe probe, struct dsml_head *hit,
		 size_t *again);
bool dsml_invoke_end(const char *s, size_t from, size_t to, struct dsml_match *m);
bool dsml_param_close(const char *t, size_t len, size_t from, struct dsml_match *m);
void dsml_split(const char *t, size_t n, bool thinking, bool has_end, size_t end, bool has_blk,
		const struct dsml_match *blk, size_t *reasoning, size_t *rest_at);
json_t *dsml_param_value(const char *raw, size_t n, bool string, const json_t *prop);
long dsml_known(const struct tf_dsml_tools *t, const char *name, size_t n);
const json_t *dsml_prop(const struct tf_dsml_tools *t, const char *call, size_t cn, const char *key, size_t kn);

void dsml_new_id(char id[TF_DSML_ID_LEN + 1]);
tf_status dsml_call_init(struct tf_dsml_call *c, const char *name, size_t n);
void dsml_call_release(struct tf_dsml_call *c);
bool dsml_has_arg(const struct tf_dsml_call *c, const char *key, size_t kn);
/* Takes value (released on failure). */
tf_status dsml_add_arg(struct tf_dsml_call *c, const char *key, size_t kn, json_t *value);
/* `{` (first) or `,`, the key, `:`, the compact value. */
tf_status dsml_fragment(struct tf_buf *out, bool first, const struct tf_dsml_arg *a);

#endif
