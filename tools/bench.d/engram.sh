#!/usr/bin/env bash
# bench.d/engram.sh: the Engram benchmarks (tools/bench.sh runs every bench.d
# script), with the programs in
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
# the release layout with buckets from 80,000 (not 16e6): 1.9 M rows, 0.5 GB
echo '{"text_config": {"engram_vocab_size": 80000, "engram_num_embeddings": [0, 0]}}' \
	>"$scratch/config.json"
tf-engram-hash shard -q -c "$scratch/config.json" --layer 1 -o "$shard"
ls -l "$shard" | awk '{print "shard:", $5, "bytes"}'
# drop this one file from the page cache (GNU dd; other files are untouched)
uncache() { dd if="$shard" iflag=nocache count=0 status=none; }
fetch() { tf-engram-hash bench -c "$scratch/config.json" -n "$1" "$shard" | grep '^fetch'; }
echo "-- warm (the file in the page cache)"
dd if="$shard" of=/dev/null bs=1M 2>&1 | tail -1 | sed 's/^/dd bs=1M: /'
dd if="$shard" of=/dev/null bs=264 count=400000 2>&1 | tail -1 | sed 's/^/dd bs=264: /'
fetch 400000
TF_ENGRAM_URING=0 fetch 400000
echo "-- cold (the file dropped from the page cache before each)"
uncache
dd if="$shard" of=/dev/null bs=1M 2>&1 | tail -1 | sed 's/^/dd bs=1M: /'
uncache
fetch 100000
uncache
TF_ENGRAM_URING=0 fetch 100000
