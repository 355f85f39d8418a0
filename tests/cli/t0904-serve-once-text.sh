#!/usr/bin/env bash
# tf-serve --once on the text routes: U+0000 is a character of the prompt,
# a tokenize reply written from its ids is whole JSON (a 1 MB prompt too),
# and a body that is not JSON says so.
. "$TF_TESTS/lib.sh"

once() { tf-serve --engine stub --once "$@"; }

run once --path /v1/tokenize <<<'{"prompt":"x\u0000 yy"}'
expect_rc 0
expect_json 'j.count === 5 && j.tokens.length === 5 && j.tokens[1] === 0 && j.max_model_len === 4096 && j.token_strs === null'

run once --path /v1/detokenize <<<'{"tokens":[120,0,32,121]}'
expect_rc 0
expect_json 'j.prompt === "x\u0000 y"'

run once --path /v1/completions <<<'{"prompt":"x\u0000 yyyy","max_tokens":1}'
expect_rc 0
expect_json 'j.usage.prompt_tokens === 7'

node -e 'process.stdout.write(JSON.stringify({prompt: "ab".repeat(500000)}))' >big.json
run once --path /tokenize <big.json
expect_rc 0
expect_json 'j.count === 1000000 && j.tokens[0] === 97 && j.tokens[999999] === 98'

run once --path /tokenize <<<'{"prompt": "x'
expect_rc 65
expect_json 'j.error.message.startsWith("the request body is not valid JSON")'

run once --path /tokenize <<<'[1]'
expect_rc 65
expect_json 'j.error.message === "the request body must be a JSON object"'

run once <<<'{"messages":[{"role":"user","content":"hi"}],"stop":["a\u0000b"]}'
expect_rc 65
expect_json 'j.error.param === "stop" && /U\+0000/.test(j.error.message)'
