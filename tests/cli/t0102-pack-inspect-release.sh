#!/usr/bin/env bash
# A release-shaped sparse pack (DSv4.1-Flash, real q28 widths): inspect and
# the plan of rank 1 of 2 with per-rank byte totals.
. "$TF_TESTS/lib.sh"

run tf-pack-synth -p release --sparse -o rel
expect_rc 0
expect_err "sparse"
[ "$(du -sm rel | cut -f1)" -lt 200 ] || fail "sparse pack takes disk"
run tf-pack-inspect --rank 1 --world 2 --json --summary rel
expect_rc 0
expect_json 'j.config.layers === 40 && j.config.mtp_layers === 3 && j.layers.length === 43'
expect_json 'j.totals.bits_per_weight > 2.7 && j.totals.bits_per_weight < 2.9'
expect_json 'j.plan.rank === 1 && j.plan.world === 2 && j.plan.total_bytes > 90e9 && j.plan.total_bytes < 120e9'
# the layer-0 routed + shared experts' trellis of a TP-2 rank: 1709752320 bytes
# (the real pack's figure) plus their suh/svh slices
expect_json 'j.plan.layers[0].expert_bytes + j.plan.layers[0].shared_bytes >= 1709752320'
