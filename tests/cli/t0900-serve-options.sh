#!/usr/bin/env bash
# tf-serve: --help, --version, misuse (64), a missing pack (66), the cpu
# a pack the cpu engine refuses (65), --check, logprobs and the prompt cache
# option through --once.
. "$TF_TESTS/lib.sh"

run tf-serve --help
expect_rc 0
expect_out '^Usage: tf-serve'
expect_out '--engine'
expect_out 'TF_SSE_KEEPALIVE_S'

run tf-serve --version
expect_rc 0
expect_out '^tf-serve [0-9]'

run tf-serve --bogus
expect_rc 64
expect_err "Try 'tf-serve --help'"

run tf-serve
expect_rc 64
expect_err 'PACK or PREPARED folder is needed'

run tf-serve --engine gpu --check
expect_rc 64

run tf-serve --once --check --engine stub
expect_rc 64

run tf-serve --port 70000 --engine stub --check
expect_rc 64

run tf-serve --host localhost --engine stub --check
expect_rc 64
expect_err 'numeric IPv4 or IPv6'

run tf-serve --host ::1 --engine stub --check
expect_rc 0

TF_DRAIN_S=abc run tf-serve --engine stub --check
expect_rc 78
expect_err 'TF_DRAIN_S'

run tf-serve ./no-such-pack
expect_rc 66
expect_err "cannot open './no-such-pack'"

tf-pack-synth -p tiny -q -o tiny
mkdir pack
cp tiny/config.json tiny/tokenizer.json pack/
run tf-serve --engine cpu pack
expect_rc 65
expect_err "cannot load the model of 'pack'"
expect_one_line_err
run tf-serve --engine cpu --check tiny
expect_rc 0
expect_out '^ok: engine cpu, family dsv41, model tiny'
# one request through the CPU forward, greedy: the same reply twice
echo '{"messages":[{"role":"user","content":"hello"}],"max_tokens":6,"temperature":0}' >req.json
run tf-serve --once -j 1 tiny <req.json
expect_rc 0
expect_json 'j.usage.completion_tokens === 6 && j.choices[0].finish_reason === "length"'
cp out first.json
run tf-serve --once -j 2 tiny <req.json
node -e 'const f=require("fs"), a=JSON.parse(f.readFileSync("first.json")), b=JSON.parse(f.readFileSync("out"));
const pick=j=>JSON.stringify(j.choices[0].message); if (pick(a)!==pick(b)) process.exit(1)' || fail "greedy replies differ between thread counts"

# logprobs through --once, with the prompt cache off and on (same numbers)
echo '{"prompt":"hello there","max_tokens":4,"temperature":0,"logprobs":2}' >lp.json
run tf-serve --once -j 1 --path /v1/completions --prefix-cache 0 tiny <lp.json
expect_rc 0
expect_json 'j.choices[0].logprobs.tokens.length === 4 && j.choices[0].logprobs.token_logprobs.every(v => v <= 0)'
cp out lp0.json
TF_PREFIX_CACHE=2 run tf-serve --once -j 1 --path /v1/completions tiny <lp.json
expect_rc 0
node -e 'const f=require("fs"), a=JSON.parse(f.readFileSync("lp0.json")), b=JSON.parse(f.readFileSync("out"));
if (JSON.stringify(a.choices[0].logprobs)!==JSON.stringify(b.choices[0].logprobs)) process.exit(1)' || fail "logprobs differ with the prompt cache"
echo '{"prompt":"x","logprobs":21}' >lp.json
run tf-serve --once -j 1 --path /v1/completions tiny <lp.json
expect_rc 65
expect_out 'logprobs must be between 0 and 20'
run tf-serve --engine stub --check --prefix-cache -1
expect_rc 64
TF_PREFIX_CACHE=many run tf-serve --engine stub --check
expect_rc 78
expect_err 'TF_PREFIX_CACHE'

run tf-serve --engine stub --check
expect_rc 0
expect_out '^ok: engine stub, family plain, model stub, context 4096'
expect_no_err() { [ ! -s err ] || { cat err >&2; fail "stderr should be empty"; }; }
expect_no_err

TF_API_KEY=a,b TF_CONTEXT=8192 run tf-serve --engine stub --check --model m --api-key c
expect_rc 0
expect_out 'model m, context 8192'
expect_out '1 API key$'

printf 'k1\n# comment\nk2\n' >keys
chmod 600 keys
run tf-serve --engine stub --check --api-key-file keys
expect_rc 0
expect_out '2 API keys$'

run tf-serve --engine stub --check --api-key-file missing-keys
expect_rc 66
