/* fuzz_chat.c: chat rendering of arbitrary JSON: a request object, or a
 * messages array rendered with the defaults. Never crashes; a rendered
 * prompt's offsets lie inside it. */
#include <stdint.h>
#include <stdlib.h>

#include "text/chat.h"
#include "text/pyjson.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *v = tf_pyjson_loads((const char *)data, size);
	if (!v)
		return 0;
	struct tf_chat_prompt p;
	tf_chat_prompt_init(&p);
	tf_status st;
	if (json_is_object(v)) {
		st = tf_chat_render_request(v, NULL, &p);
	} else {
		struct tf_chat_settings s;
		tf_chat_settings_init(&s);
		s.thinking = size & 1;
		st = tf_chat_render(v, &s, &p);
		tf_chat_settings_release(&s);
	}
	if (!st && (p.history_len > p.text.len || p.rewind > p.history_len))
		abort();
	struct tf_buf b = TF_BUF_INIT;
	tf_pyjson_dump(&b, v, size & 2);
	tf_buf_release(&b);
	tf_chat_prompt_release(&p);
	json_decref(v);
	return 0;
}
