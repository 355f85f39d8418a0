#!/usr/bin/env bash
# tf-bench decode --backend cpu: prefill and decode tokens/s of synthetic
# tiny and small packs (two threads), then greedy decoding with DSpark
# drafts (acceptance rate, tokens/s), beside the anchor of the same run:
# the CPU EXL3 GEMM alone on one layer of the small preset's expert shape
# (512x512, 3 bits, one row), what a decode step is made of.
set -euo pipefail
bin=${TF_BIN:?}
for p in tiny small; do
	"$bin/tf-bench" decode --backend cpu --preset "$p" -r 1,4 --ctx 64 -j 2 -t 2 --draft
done
"$bin/tf-bench" kernels --backend cpu -s 512x512 -b 3 -r 1 -c 3inst -j 2
