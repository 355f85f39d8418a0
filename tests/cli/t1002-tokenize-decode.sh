#!/usr/bin/env bash
# tf-tokenize decode: ids back to text, lines, JSON, JSONL, round trips,
# unknown ids (exit 65).
. "$TF_TESTS/lib.sh"
tok=$TF_TESTS/../data/mini_tokenizer.json

run tf-tokenize decode -t "$tok" <<<"264 264 97 116 256"
expect_rc 0
[ "$(cat out)" = " the theater" ] || fail "decode: '$(cat out)'"

# a partial character at the end is one U+FFFD
run tf-tokenize decode -t "$tok" <<<"97 228 184"
expect_rc 0
[ "$(cat out)" = $'a\xef\xbf\xbd' ] || fail "partial character: $(od -c out)"

# round trip of lines, with JSON arrays and with JSONL output
printf 'the theater\n  spaces\t\n<｜User｜>12345\nnaïve 中文\n' >in.txt
tf-tokenize encode --lines -t "$tok" in.txt >ids.txt
run tf-tokenize decode --lines -t "$tok" ids.txt
expect_rc 0
cmp -s out in.txt || fail "--lines round trip"
tf-tokenize encode --lines --json -t "$tok" in.txt >ids.json
run tf-tokenize decode --json --lines -t "$tok" ids.json
expect_rc 0
cmp -s out in.txt || fail "--json round trip"
run tf-tokenize decode --json --jsonl -t "$tok" ids.json
expect_rc 0
head -1 out | grep -qx '{"text":"the theater"}' || fail "--jsonl: $(head -1 out)"
mv out docs.jsonl
run tf-tokenize encode --jsonl -t "$tok" docs.jsonl
expect_rc 0
cmp -s out ids.txt || fail "JSONL round trip"

# whole input: all ids, one document, no newline added
printf '263\n32 263\n' >stdin.txt
run tf-tokenize decode -t "$tok" <stdin.txt
expect_rc 0
[ "$(od -An -c out | tr -d ' \n')" = "thethe" ] || fail "whole: $(od -c out)"

# unknown ids and bad input are bad data
run tf-tokenize decode -t "$tok" <<<"264 999999"
expect_rc 65
expect_err "unknown token id 999999"
expect_one_line_err
run tf-tokenize decode -t "$tok" <<<"264 x7"
expect_rc 65
expect_err "not a token id"
run tf-tokenize decode --json -t "$tok" <<<"[1, 2"
expect_rc 65
expect_err "line 1"
run tf-tokenize decode --json -t "$tok" <<<'[1, -3]'
expect_rc 65
