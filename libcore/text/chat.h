/* chat.h: the DeepSeek-V4.1 chat encoding: OpenAI-style messages to the
 * prompt text, byte for byte as DeepSeek's encoder plus the serving rules
 * render it (dsv41-text-facts.md §2):
 *
 *   <｜begin▁of▁sentence｜>[<｜System｜>][Reasoning Effort: N (...)\n\n]system
 *   [\n\n## Tools ...][\n\n## Response Format: ...]<｜User｜>text
 *   <｜Assistant｜><think>reasoning</think>content[\n\n<｜DSML｜ calls>...]
 *   <｜end▁of▁sentence｜><｜User｜><tool_result>...</tool_result><｜Assistant｜><think>
 *
 * Messages: system, developer (a system message), user, assistant (content,
 * reasoning_content or reasoning, tool_calls), tool (tool_call_id, content)
 * and latest_reminder. Content is a string, null, a list of text parts
 * (joined by blank lines) or other JSON (written as JSON); image parts
 * render as a notice text when one is set, else the request is refused.
 *
 * This is not a template engine: the format is code, as the reference's is.
 * Every function here is reentrant; nothing is shared between calls. */
#ifndef TF_TEXT_CHAT_H
#define TF_TEXT_CHAT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"
#include "base/status.h"

#define TF_CHAT_BOS "<｜begin▁of▁sentence｜>"
#define TF_CHAT_EOS "<｜end▁of▁sentence｜>"
#define TF_CHAT_SYSTEM "<｜System｜>"
#define TF_CHAT_USER "<｜User｜>"
#define TF_CHAT_ASSISTANT "<｜Assistant｜>"
#define TF_CHAT_REMINDER "<｜latest_reminder｜>"
#define TF_CHAT_THINK "<think>"
#define TF_CHAT_THINK_END "</think>"
#define TF_CHAT_IMAGE "<｜deepseek_image｜>"
/* A typed image marker is written with U+200B after '<': the same text to a
 * reader, ordinary BPE tokens to the model, never the image token. */
#define TF_CHAT_IMAGE_ESCAPED "<\u200b｜deepseek_image｜>"

/* The reasoning effort when a request names none ("high"). */
#define TF_CHAT_BUDGET_DEFAULT 75

/* How one request renders. Settings hold references to the JSON they
 * point at (tf_chat_settings_release drops them). */
struct tf_chat_settings {
	bool thinking;       /* thinking mode (prompt ends in <think>) or chat */
	int budget;          /* the effort line's 1-100 */
	bool drop_thinking;  /* drop reasoning before the last user turn;
				ignored (kept) when tools are offered */
	bool generation;     /* append <｜Assistant｜><think> (or </think>) at the end */
	json_t *tools;       /* offered tools (a non-empty array) or NULL */
	json_t *response_format; /* the schema shown under ## Response Format, or NULL */
	char *image_text;    /* what an image part renders as; NULL: refused */
};

/* Defaults: thinking on, effort high (75), drop_thinking on, generation
 * on, no tools, no schema, images refused. */
void tf_chat_settings_init(struct tf_chat_settings *s);
void tf_chat_settings_release(struct tf_chat_settings *s);

/* Read a chat request's settings over the defaults already in s. Fields,
 * each optional (later ones in this list win):
 *   tools (a list of objects; tool_choice "none" offers none),
 *   response_format ({"type": "json_schema", "json_schema": {"schema": S}}
 *     or {"type": "json_object"}; any other object with another "type" is
 *     taken as the schema itself, as the fixtures give it),
 *   thinking (true/false, or Anthropic's {"type": "enabled" | "adaptive" |
 *     "disabled"}), enable_thinking,
 *   budget (an effort that sets the effort line only: 1-100 or a name
 *     other than none / minimal; thinking unchanged),
 *   reasoning_effort, then chat_template_kwargs.reasoning_effort
 *     (tf_chat_effort: sets thinking and budget),
 *   chat_template_kwargs.enable_thinking / .thinking,
 *   drop_thinking (also in chat_template_kwargs),
 *   add_generation_prompt or generation,
 *   image_text (a string: image parts render as it).
 * TF_ERR_FORMAT with the reason for a bad value (the message a client gets
 * with HTTP 400). */
tf_status tf_chat_settings_read(struct tf_chat_settings *s, const json_t *req);

/* A reasoning_effort value: none / minimal (thinking off), low (50),
 * medium / high (75), xhigh / max (100), case-insensitive and trimmed, or
 * the digits of an integer 1-100 (a JSON integer or a string). Sets
 * *thinking and, when on, *budget. TF_ERR_FORMAT "reasoning_effort must be
 * 1-100 or low / medium / high / max" for anything else. */
tf_status tf_chat_effort(const json_t *v, bool *thinking, int *budget);
tf_status tf_chat_effort_text(const char *s, size_t n, bool *thinking, int *budget);

/* A rendered prompt. */
struct tf_chat_prompt {
	struct tf_buf text;  /* the prompt (UTF-8, NUL-terminated) */
	size_t history_len;  /* its length without the final generation suffix */
	size_t rewind;       /* the rewind point: where the latest user message's
				content starts (what an edit of that message
				changes first, so an edited last turn can resume
				from a cache of the text before it);
				history_len when there is no user message */
	bool thinking;       /* the reply starts in reasoning (suffix <think>) */
};

void tf_chat_prompt_init(struct tf_chat_prompt *p);
void tf_chat_prompt_release(struct tf_chat_prompt *p);

/* Render messages (a JSON array) with settings s into p (initialised by the
 * caller; its text is replaced). TF_ERR_FORMAT with the reason when the
 * request is refused (e.g. "messages[1].content: images are not served by
 * this DeepSeek-V4.1 build"); p is then left empty. */
tf_status tf_chat_render(const json_t *messages, const struct tf_chat_settings *s,
			 struct tf_chat_prompt *p);

/* tf_chat_settings_read over a copy of defaults (NULL: the built-in
 * defaults), then tf_chat_render of req's "messages". */
tf_status tf_chat_render_request(const json_t *req, const struct tf_chat_settings *defaults,
				 struct tf_chat_prompt *p);

#endif
