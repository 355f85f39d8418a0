#!/usr/bin/env bash
# cuda-kernels.sh: tf-bench kernels (the EXL3 matmul against the copy
# bandwidth and bf16 cuBLAS) where a GPU is; says so and skips otherwise.
set -euo pipefail
bin=${TF_BIN:?}
if ! "$bin/tf-bench" kernels -s 128x128 -b 2 -r 1 -n 3 --no-cublas >/dev/null 2>&1; then
	echo "no usable CUDA device here: skipped"
	exit 0
fi
"$bin/tf-bench" kernels
