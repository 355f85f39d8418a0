#!/usr/bin/env bash
# bench.sh: run every benchmark of BENCHMARKS.md with the programs in
# $TF_BIN (make bench sets it). Each block prints its own table; copy the
# figures into BENCHMARKS.md with the date.
set -euo pipefail
: "${TF_BIN:?set TF_BIN to the folder of the built programs}"
export PATH="$TF_BIN:$PATH"

echo "== CPU EXL3 GEMV per core (tf-bench kernels)"
tf-bench kernels -t 1
