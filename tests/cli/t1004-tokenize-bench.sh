#!/usr/bin/env bash
# tf-tokenize bench: figures for one and two threads, text and JSON.
. "$TF_TESTS/lib.sh"
tok=$TF_TESTS/../data/mini_tokenizer.json

for i in $(seq 1 2000); do echo "line $i: the theater, <｜User｜> naïve 中文 12345"; done >corpus.txt
run tf-tokenize bench --seconds 0.05 -t "$tok" corpus.txt
expect_rc 0
expect_out '^threads 1, [0-9]+ documents'
expect_out '^encode [0-9.]+ MB/s'
expect_out '^decode [0-9.]+ MB/s'
run tf-tokenize bench --json --lines --threads 2 --seconds 0.05 -t "$tok" corpus.txt
expect_rc 0
expect_json 'j.threads === 2 && j.documents === 2000 && j.encode_mb_s > 0 && j.decode_mb_s > 0 && j.tokens > 2000'
