#!/usr/bin/env bash
# gpu-invariant-bench.sh OUT [BIN]: the cost of the batch-invariant path
# (issue 15, "concurrent == solo"), as BENCHMARKS.md records it: tf-bench
# decode of half the release (--preset release --layers 20, weights
# generated on the device) at 1, 4, 16 and 64 sequences and 1K context, on
# the default (fastest, batch-variant) path and on --batch-invariant, one
# after the other in the same call; then prefill of a 4K prompt on both.
# Each line's tokens are compared with the same rows' among fewer rows
# (tf-bench(1)): the invariant run exits 1 on a difference. BIN holds
# tf-bench (default build/bin). Each step's log goes to OUT, a summary
# line per step to OUT/summary.txt. Runs on a GPU host.
set -u
out=${1:?usage: gpu-invariant-bench.sh OUT [BIN]}
bin=${2:-build/bin}
mkdir -p "$out"
S=$out/summary.txt
step() {
	local name=$1 limit=$2 s rc
	shift 2
	s=$(date +%s)
	timeout "$limit" "$@" >"$out/$name.log" 2>&1
	rc=$?
	echo "$name rc=$rc $(($(date +%s) - s)) s" >>"$S"
}
dec="$bin/tf-bench decode --backend cuda --preset release --layers 20"
# shellcheck disable=SC2086 # $dec is words
{
	step dec1k-default 150 $dec -r 1,4,16,64 --ctx 1024 -t 3
	step dec1k-invariant 150 $dec -r 1,4,16,64 --ctx 1024 -t 3 --batch-invariant
	step pre4k-default 120 $dec -r 1 --ctx 4096 -t 1
	step pre4k-invariant 120 $dec -r 1 --ctx 4096 -t 1 --batch-invariant
}
cat "$S"
