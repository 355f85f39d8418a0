#!/usr/bin/env bash
# tf-serve --once: one request on stdin, the reply or the SSE stream on
# stdout, the exit code from the status.
. "$TF_TESTS/lib.sh"

once() { tf-serve --engine stub --stub-token-ms 0 --once "$@"; }

echo '{"messages":[{"role":"user","content":"hi @think"}]}' >req.json
run once <req.json
expect_rc 0
expect_json 'j.object === "chat.completion" && j.choices[0].message.content === "Hello there!"'
expect_json 'j.choices[0].message.reasoning_content === "Let me think about the greeting."'
expect_json 'j.usage.total_tokens === j.usage.prompt_tokens + j.usage.completion_tokens'

run once <<<'{"messages":[{"role":"user","content":"hi @short"}],"stream":true,"reasoning_effort":"none"}'
expect_rc 0
expect_out '^data: \{"id":"chatcmpl-'
[ "$(tail -c 14 out)" = "data: [DONE]" ] || [ "$(tail -n 2 out | head -1)" = "data: [DONE]" ] || fail "no [DONE] at the end"
grep -c '"content"' out | grep -qx 12 || fail "12 content deltas expected"

run once --path /v1/completions <<<'{"prompt":"hi @short","max_tokens":5}'
expect_rc 0
expect_json 'j.object === "text_completion" && j.choices[0].text === "Short" && j.choices[0].finish_reason === "length"'

run once --path /v1/messages <<<'{"model":"m","max_tokens":20,"messages":[{"role":"user","content":"@short"}]}'
expect_rc 0
expect_json 'j.type === "message" && j.content[0].text === "Short reply." && j.stop_reason === "end_turn"'

run once --path /v1/messages/count_tokens <<<'{"messages":[{"role":"user","content":"hi"}]}'
expect_rc 0
expect_json 'j.input_tokens === "user: hi\nassistant: ".length'

run once <<<'{"messages":[]}'
expect_rc 65
expect_json 'j.error.message === "messages must be a non-empty list"'
expect_err 'HTTP 400'

run once <<<'{"messages":[{"role":"user","content":"@fail"}]}'
expect_rc 70
expect_json 'j.error.type === "server_error"'

run once --path /v1/nothing <<<'{}'
expect_rc 64
expect_err 'not a POST route'

run once --path v1 <<<'{}'
expect_rc 64
