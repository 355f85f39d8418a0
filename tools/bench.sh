#!/usr/bin/env bash
# bench.sh: run every benchmark of BENCHMARKS.md with the programs in
# $TF_BIN (make bench sets it). Each block prints its own figures; copy them
# into BENCHMARKS.md with the date.
set -euo pipefail
: "${TF_BIN:?set TF_BIN to the folder of the built programs}"
export PATH="$TF_BIN:$PATH"

echo "== Engram hashing, one thread (tf-engram-hash bench)"
tf-engram-hash bench -c release -n 4000000

echo "== Engram row fetch: random 264-byte rows vs dd of the same file"
scratch=$(mktemp -d "${TMPDIR:-/tmp}/tf-bench-engram.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
shard=$scratch/engram-l1-r0of1.bin
tf-engram-hash shard -q -c small --layer 1 -o "$shard"
ls -l "$shard" | awk '{print "shard:", $5, "bytes"}'
dd if="$shard" of=/dev/null bs=1M 2>&1 | tail -1 | sed 's/^/dd bs=1M (sequential, warm): /'
tf-engram-hash bench -c small -n 400000 "$shard" | grep '^fetch'
TF_ENGRAM_URING=0 tf-engram-hash bench -c small -n 400000 "$shard" | grep '^fetch'
dd if="$shard" of=/dev/null bs=264 count=400000 2>&1 | tail -1 | sed 's/^/dd bs=264 (sequential 264-byte reads, warm): /'
