#!/usr/bin/env bash
# CPU EXL3 GEMV per core (tf-bench kernels): K = 2, 4, 6 on a 4096x4096
# layer, beside the portable C path and a plain read of the same bytes.
set -euo pipefail
"${TF_BIN:?}/tf-bench" kernels --backend cpu -s 4096x4096 -b 2,4,6 -r 1 -j 1
