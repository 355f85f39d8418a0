#!/usr/bin/env bash
# tf-tokenize export: the tokenizer back as tokenizer.json (loads again, same
# ids), with the V4.1 markers added by --v41-markers.
. "$TF_TESTS/lib.sh"
tok=$TF_TESTS/../data/mini_tokenizer.json

run tf-tokenize export -t "$tok"
expect_rc 0
mv out same.json
expect_json_file() { node -e "const j=JSON.parse(require('fs').readFileSync('$1','utf8')); if(!($2)) process.exit(1)" || fail "$1: $2"; }
expect_json_file same.json 'j.model.type === "BPE" && j.added_tokens.length === 11 && j.model.merges.length === 10'
run tf-tokenize export -t same.json
expect_rc 0
cmp -s out same.json || fail "export is not stable"

# a tokenizer without the markers gets them at the first unused ids
node -e "const j=JSON.parse(require('fs').readFileSync('$tok','utf8')); j.added_tokens=j.added_tokens.slice(0,3); require('fs').writeFileSync('v3like.json', JSON.stringify(j))"
run tf-tokenize export --v41-markers -t v3like.json
expect_rc 0
mv out v41.json
expect_json_file v41.json 'j.added_tokens.length === 11 && j.added_tokens[3].content === "<｜System｜>" && j.added_tokens[3].id === 266 && j.added_tokens[3].normalized && !j.added_tokens[3].special && j.added_tokens[10].content === "<｜deepseek_image｜>" && j.added_tokens[10].special'
printf '<think>x</think>' >stdin.txt
run tf-tokenize encode -t v41.json <stdin.txt
expect_rc 0
[ "$(cat out)" = "269 120 270" ] || fail "markers: $(cat out)"
