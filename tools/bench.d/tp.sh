#!/usr/bin/env bash
# tf-bench decode --world: tensor-parallel ranks on threads (one worker
# each) against world 1 with as many workers in the same run (the anchor),
# on synthetic tiny and small packs. The agreement of worlds 2 and 4 with
# world 1 is measured by the unit suite: CHECK_TP_SEEDS=30 CK_RUN_SUITE=tp
# build/tests/unit/check_all (BENCHMARKS.md, "TP on in-process ranks").
set -euo pipefail
bin=${TF_BIN:?}
for p in tiny small; do
	"$bin/tf-bench" decode --backend cpu --preset "$p" -w 1 -j 2 -r 1,4 --ctx 64 -t 2
	"$bin/tf-bench" decode --backend cpu --preset "$p" -w 2 -j 1 -r 1,4 --ctx 64 -t 2 | tail -n +2
	"$bin/tf-bench" decode --backend cpu --preset "$p" -w 4 -j 1 -r 1,4 --ctx 64 -t 2 | tail -n +2
done
