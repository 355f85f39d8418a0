#!/usr/bin/env bash
# tf-tokenize encode: whole input, --lines, --jsonl, --json, stdin, threads.
. "$TF_TESTS/lib.sh"
tok=$TF_TESTS/../data/mini_tokenizer.json

printf ' the theater' >in.txt
run tf-tokenize encode -t "$tok" in.txt
expect_rc 0
[ "$(cat out)" = "264 264 97 116 256" ] || fail "ids: $(cat out)"

# stdin, and "-"; TF_TOKENIZER stands for -t
printf '<｜User｜>the' >stdin.txt
TF_TOKENIZER=$tok run tf-tokenize encode - <stdin.txt
expect_rc 0
[ "$(cat out)" = "1005 263" ] || fail "stdin ids: $(cat out)"

# one document per line (the newline is not part of it); JSON arrays
printf 'the\n\n<think>x\n' >lines.txt
run tf-tokenize encode --lines --json -t "$tok" lines.txt
expect_rc 0
[ "$(cat out)" = $'[263]\n[]\n[1007,120]' ] || fail "--lines --json: $(cat out)"

# JSON lines in, with escapes; the same ids from many threads
for i in $(seq 1 300); do printf '{"text":"line %d\\n the\\u00e9"}\n' "$i"; done >docs.jsonl
run tf-tokenize encode --jsonl -j 1 -t "$tok" docs.jsonl
expect_rc 0
mv out one.txt
run tf-tokenize encode --jsonl --threads 4 -t "$tok" docs.jsonl
expect_rc 0
cmp -s out one.txt || fail "--threads 4 differs from one thread"
[ "$(wc -l <out)" -eq 300 ] || fail "expected 300 lines"

# invalid UTF-8 encodes as U+FFFD
printf 'a\xff' >stdin.txt
run tf-tokenize encode -t "$tok" <stdin.txt
expect_rc 0
printf 'a\xef\xbf\xbd' | tf-tokenize encode -t "$tok" >want
cmp -s out want || fail "invalid UTF-8 is not U+FFFD"
