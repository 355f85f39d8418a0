/* stub.h: the stub engine backend, for tests and load benchmarks of the
 * server: deterministic text at a fixed rate, chosen by markers in the
 * prompt text. No model, no weights: it reads the prompt through the text
 * hooks it is given and writes its scripts through them, so it runs under
 * any tokenizer.
 *
 * Markers (the first found in the prompt wins):
 *   @short   "Short reply." then end-of-sequence
 *   @long    an endless sentence: runs until max_tokens or a halt
 *   @wait    wait_ms of silence (no token), then the @short reply
 *   @hang    silent until cancelled or halted
 *   @think   a reasoning sentence, then "Hello there!"
 *   @tool    reasoning, "Checking." and two DSML tool calls (get_weather)
 *   @stop    reasoning "ok", content "abc END def" (for stop strings)
 *   @sample  max_tokens words drawn by the request's seed and position
 *            (greedy when temperature <= 0): concurrent == solo
 *   @fail    the prompt's last piece fails (the request alone fails)
 *   anything else: "Plain answer."
 * Reasoning (followed by "</think>") is written only when the prompt text
 * ends with "<think>", as a thinking-mode prompt does.
 *
 * Timing: a round with decode rows takes token_ms; prompt pieces add
 * piece_us per prompt token.
 *
 * Constrained output (tf_engine_params.grammar): once the grammar applies
 * (at once, or after the script's reasoning when grammar_after is set),
 * the script gives way to draws under the grammar's mask: end-of-sequence
 * as soon as the grammar allows it, else an allowed id picked by the seed
 * and the draw's number, so the same request gives the same output.
 *
 * Log-probabilities: every token is certain (log-probability 0) and its own
 * only alternative. */
#ifndef TF_ENGINE_STUB_H
#define TF_ENGINE_STUB_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/status.h"
#include "engine/engine.h"

struct tf_stub_text {
	void *ctx;
	/* Append the text of ids to out. */
	tf_status (*decode)(void *ctx, const int32_t *ids, size_t n, struct tf_buf *out);
	/* Encode text (no special tokens); *ids is the caller's (free). */
	tf_status (*encode)(void *ctx, const char *text, size_t n, int32_t **ids, size_t *nids);
	int32_t eos;
};

struct tf_stub_config {
	struct tf_stub_text text;
	double token_ms; /* per decode round (default 15; 0 is allowed with zero_ok) */
	double piece_us; /* per prompt token (default 20; 0 is allowed with zero_ok) */
	double wait_ms;  /* the silence of @wait (default 800) */
	bool zero_ok;    /* token_ms and piece_us 0 mean no delay (benchmarks of the server) */
};

/* A stub backend; the engine frees it (backend.free). */
tf_status tf_stub_new(const struct tf_stub_config *c, struct tf_engine_backend *out);

#endif
