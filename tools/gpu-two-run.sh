#!/usr/bin/env bash
# gpu-two-run.sh OUT [BIN]: issue 17's plan on a host with two GPUs
# (nvidia-h200-x2), in one call: the GPU tests (the fabric test asserting
# the backend that ran, the CUDA ranks), tf-tp-test --local 2 (suite on
# nccl, mailbox and host; fail-fast with either rank the victim; bench),
# tf-bench decode of the whole release at world 2 (--devices 0,1, each
# rank's slices generated on its own GPU; host collectives staged through
# pinned memory, the floor's collectives at the latency bench measured
# first), then tf-serve --local-ranks 2 --devices 0,1 --engine cuda
# --synthetic on a sparse release pack (TF_COMM_BACKEND, default nccl),
# loaded by tf-bench serve at concurrency 1, 16 and 64, and a follower
# killed under load (rank 0 must exit 70 within grace + 0.5 s). BIN holds
# the programs (default build/bin); the GPU tests are build/tests/gpu
# (GPU_TESTS). Each step's log goes to OUT, a line a step to
# OUT/summary.txt. Not yet run: written before the kind was lent.
set -u
out=${1:?usage: gpu-two-run.sh OUT [BIN]}
bin=${2:-build/bin}
gt=${GPU_TESTS:-build/tests/gpu}
mkdir -p "$out"
S=$out/summary.txt
# shellcheck source=tools/gpu-steps.sh
. "$(dirname "$0")/gpu-steps.sh"
step gpu-tests 300 env TF_BIN="$bin" tests/gpu/run.sh "$gt/gpu_fabric" "$gt/gpu_tp" tests/gpu/serve_ranks.sh
for b in nccl mailbox host; do
	step "tp-suite-$b" 120 "$bin/tf-tp-test" --local 2 --backend "$b" suite
done
step tp-failfast-0 60 "$bin/tf-tp-test" --local 2 failfast 0 kill
step tp-failfast-1 60 "$bin/tf-tp-test" --local 2 failfast 1 fatal
step tp-bench 120 "$bin/tf-tp-test" --local 2 --backend mailbox bench
# the smallest message's time (the table's third column) as the latency
us=$(awk '$1 ~ /^[0-9]+$/ && NF > 4 { print $3; exit }' "$out/tp-bench.log")
echo "collective latency ${us:-?} us (tp-bench's smallest message)" >>"$S"
dec="$bin/tf-bench decode --backend cuda --preset release --world 2 --devices 0,1 --collective-us ${us:-0}"
# shellcheck disable=SC2086 # $dec is words
{
	step dec1k-w2 300 $dec -r 1,4,16,64,256 --ctx 1024 -t 3 --json
	step dec32k-w2 400 $dec -r 1,16,64 --ctx 32768 -t 3 --json
	step pre4k-w2 200 $dec -r 1 --ctx 4096 -t 1 --json
	step pre32k-w2 300 $dec -r 1 --ctx 32768 -t 1 --json
}
pack=$(mktemp -d /tmp/tf-rel.XXXXXX)
trap 'kill "$srv" 2>/dev/null; rm -rf "$pack"' EXIT
"$bin/tf-pack-synth" -p release --sparse -q -o "$pack/rel"
TF_COMM_BACKEND=${TF_COMM_BACKEND:-nccl} "$bin/tf-serve" --engine cuda --synthetic --local-ranks 2 \
	--devices 0,1 -c 8192 -l 64 --prefix-cache 0 --port 18091 "$pack/rel" >"$out/serve.log" 2>&1 &
srv=$!
serve_wait 18091 400
serve_load 18091 rel
# a follower killed under load: rank 0 exits 70 in time
"$bin/tf-bench" serve --port 18091 --model rel --random-words 100 --max-tokens 256 --ignore-eos \
	--concurrency 16 --requests 64 >"$out/serve-kill-load.log" 2>&1 &
load=$!
sleep 5
t0=$(date +%s.%N)
pkill -KILL -f -- "--rank 1" || echo "no follower found" >>"$S"
wait "$srv"
rc=$?
echo "serve after the follower's kill: exit $rc in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }') s" >>"$S"
wait "$load"
cat "$S"
