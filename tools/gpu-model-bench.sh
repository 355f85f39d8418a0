#!/usr/bin/env bash
# gpu-model-bench.sh OUT [BIN]: issue 15's benchmarks of the model on one
# GPU, as BENCHMARKS.md records them: tf-bench decode of half the release
# (--preset release --layers 20, weights generated on the device) at 1, 4,
# 16 and 64 sequences and 1K, 4K and 32K context, each step beside its byte
# floor; the 1K case again with graphs off (TF_CUDA_GRAPHS=0); then
# tf-serve --engine cuda --synthetic on a sparse release-shaped pack of 20
# layers, loaded by tf-bench serve at concurrency 1, 16 and 64 (prompts of
# 400 random words, 64 tokens each). BIN holds tf-bench, tf-pack-synth and
# tf-serve (default build/bin). Each step's log goes to OUT; a summary line
# per step to OUT/summary.txt. The batch-invariant path's cost: dec1k again
# with --batch-invariant (dec1k-invariant), and prefill of a 4K prompt on
# both paths (pre4k, pre4k-invariant). STEPS (default all) picks some of:
# dec1k dec1k-eager dec1k-invariant dec4k dec32k pre4k pre4k-invariant
# serve; SERVE_C the concurrencies (1 16 64).
# Runs on a GPU host (tools/gpu-check.sh's).
set -u
steps=" ${STEPS:-dec1k dec1k-eager dec1k-invariant dec4k dec32k pre4k pre4k-invariant serve} "
on() { [[ $steps == *" $1 "* ]]; }
step_on() { on "${1%%-c*}" || on "$1"; }
out=${1:?usage: gpu-model-bench.sh OUT [BIN]}
bin=${2:-build/bin}
mkdir -p "$out"
S=$out/summary.txt
# shellcheck source=tools/gpu-steps.sh
. "$(dirname "$0")/gpu-steps.sh"
dec="$bin/tf-bench decode --backend cuda --preset release --layers 20"
# shellcheck disable=SC2086 # $dec is words
{
	step dec1k 150 $dec -r 1,4,16,64 --ctx 1024 -t 3
	step dec1k-eager 150 env TF_CUDA_GRAPHS=0 $dec -r 1,64 --ctx 1024 -t 3
	step dec1k-invariant 150 $dec -r 1,4,16,64 --ctx 1024 -t 3 --batch-invariant
	step dec4k 150 $dec -r 1,4,16,64 --ctx 4096 -t 3
	step dec32k 250 $dec -r 1,16,64 --ctx 32768 -t 3
	step pre4k 120 $dec -r 1 --ctx 4096 -t 1
	step pre4k-invariant 120 $dec -r 1 --ctx 4096 -t 1 --batch-invariant
}

on serve || { cat "$S"; exit 0; }
pack=$(mktemp -d /tmp/tf-rel20.XXXXXX)
trap 'kill "$srv" 2>/dev/null; rm -rf "$pack"' EXIT
"$bin/tf-pack-synth" -p release --layers 20 --sparse -q -o "$pack/rel20"
"$bin/tf-serve" --engine cuda --synthetic -c 8192 -l 64 --prefix-cache 0 --port 18090 \
	"$pack/rel20" >"$out/serve.log" 2>&1 &
srv=$!
serve_wait 18090 180
serve_load 18090 rel20
kill -TERM "$srv"
wait "$srv"
echo "serve exit $?" >>"$S"
cat "$S"
