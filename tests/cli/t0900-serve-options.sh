#!/usr/bin/env bash
# tf-serve: --help, --version, misuse (64), a missing pack (66), the cpu
# engine not built yet (69), --check.
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

mkdir pack
run tf-serve --engine cpu pack
expect_rc 69
expect_err 'cpu engine is not built yet'
expect_one_line_err

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
