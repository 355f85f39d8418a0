#!/usr/bin/env bash
# tf-tokenize count: a total, per line, and as JSON; bad JSONL is exit 65.
. "$TF_TESTS/lib.sh"
tok=$TF_TESTS/../data/mini_tokenizer.json

printf ' the theater' >stdin.txt

run tf-tokenize count -t "$tok" <stdin.txt
expect_rc 0
[ "$(cat out)" = 5 ] || fail "count: $(cat out)"

printf 'the\n\nab\n' >stdin.txt

run tf-tokenize count --lines -t "$tok" <stdin.txt
expect_rc 0
[ "$(cat out)" = $'1\n0\n2' ] || fail "--lines: $(cat out)"

printf '{"text":"the"}\n{"text":"ab"}\n' >stdin.txt

run tf-tokenize count --jsonl --json -t "$tok" <stdin.txt
expect_rc 0
expect_json 'j.documents === 2 && j.tokens === 3 && j.bytes === 5'

printf '{"text":"the"}\n{"text":1}\n' >stdin.txt

run tf-tokenize count --jsonl -t "$tok" <stdin.txt
expect_rc 65
expect_err 'line 2: no "text" string'
printf '{"text":"the"\n' >stdin.txt
run tf-tokenize count --jsonl -t "$tok" <stdin.txt
expect_rc 65
expect_err 'line 1'
