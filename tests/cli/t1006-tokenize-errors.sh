#!/usr/bin/env bash
# tf-tokenize misuse and bad tokenizers: usage (64), missing input (66),
# refused tokenizer features (named), bad tokenizer data (65).
. "$TF_TESTS/lib.sh"
tok=$TF_TESTS/../data/mini_tokenizer.json

run tf-tokenize
expect_rc 64
expect_err "no subcommand"
run tf-tokenize frobnicate -t "$tok"
expect_rc 64
expect_err "unknown subcommand 'frobnicate'"
run tf-tokenize encode
expect_rc 64
expect_err "no tokenizer"
run tf-tokenize encode --lines --jsonl -t "$tok"
expect_rc 64
run tf-tokenize encode -t "$tok" a b
expect_rc 64
run tf-tokenize --help
expect_rc 0
expect_out 'encode\|decode'
run tf-tokenize --version
expect_rc 0
expect_out "^tf-tokenize "

run tf-tokenize encode -t "$tok" missing.txt
expect_rc 66
expect_err "missing.txt"
expect_one_line_err
run tf-tokenize encode -t missing.json in
expect_rc 66

node -e "const j=JSON.parse(require('fs').readFileSync('$tok','utf8')); j.model.type='WordPiece'; require('fs').writeFileSync('wp.json', JSON.stringify(j))"
run tf-tokenize encode -t wp.json <<<x
expect_rc 69
expect_err "WordPiece.*not implemented"
expect_one_line_err
printf '{"model":' >broken.json
run tf-tokenize encode -t broken.json <<<x
expect_rc 65
expect_err "broken.json"
