#!/usr/bin/env bash
# tf-bench decode --backend cpu: prefill and decode rates of a tiny pack
# (written by tf-pack-synth, and through --preset), JSON, the acceptance of
# DSpark drafts (--draft), and refusals: a
# bad pack (exit 65), the cuda backend without a GPU (69, at world 2 too), --devices
# misuse (64), neither or both
# of --pack and --preset (64), --layers (a preset's first layers).
. "$TF_TESTS/lib.sh"

run tf-pack-synth -p tiny -q -o pack
expect_rc 0

run tf-bench decode --backend cpu --pack pack -r 1,2 --ctx 8 -j 2 -t 0.05 --json
expect_rc 0
expect_json 'j.length == 2 && j[0].rows == 1 && j[1].rows == 2 && j[0].model == "pack"'
expect_json 'j.every(r => r.ctx == 8 && r.prefill_tps > 0 && r.decode_tps > 0 && r.steps >= 1)'

run tf-bench decode --backend cpu --preset tiny -r 1 --ctx 4 -t 0.02
expect_rc 0
expect_out '^model +rows +ctx'
expect_out '^tiny +1 +4 +1 '

# with DSpark drafts: every step gains 1 to block + 1 tokens per sequence
run tf-bench decode --backend cpu --pack pack -r 1,3 --ctx 6 -j 2 -t 0.05 --draft --json
expect_rc 0
expect_json 'j.length == 2 && j.every(r => r.draft_block == 3 && r.spec_steps >= 1 && r.spec_tps > 0 && r.draft_ms > 0)'
expect_json 'j.every(r => r.drafted == 3 * r.rows * r.spec_steps && r.accepted >= 0 && r.accepted <= r.drafted)'
expect_json 'j.every(r => r.tokens_per_step >= 1 && r.tokens_per_step <= 4 && Math.abs(r.accept_rate - r.accepted / r.drafted) < 1e-3)'
run tf-bench decode --backend cpu --pack pack -r 1 --ctx 4 -t 0.02 --draft
expect_rc 0
expect_out '^model +rows +ctx .* accept +tok/step +spec-t/s +draft-ms'

# a config that no longer matches the tensors
sed -i 's/"hidden_size": *256/"hidden_size": 384/' pack/config.json
run tf-bench decode --backend cpu --pack pack -r 1 --ctx 4 -t 0.02
expect_rc 65
expect_err "^tf-bench: decode: pack"

run tf-bench decode --backend cpu --pack nonexistent -r 1
expect_rc 66
expect_err "does not exist"

# --backend cuda (the default) without a GPU, or in a build without kernels
run tf-pack-synth -p tiny -q -o pack2
expect_rc 0
if ! ls /dev/nvidia0 >/dev/null 2>&1; then
	run tf-bench decode --pack pack2
	expect_rc 69
	expect_err "cuda backend"
	run tf-bench decode --backend cuda --world 2 --devices 0,0 --pack pack2
	expect_rc 69
	expect_err "rank 0 of 2: cuda backend"
fi
# --devices: one GPU a rank, with the cuda backend only
run tf-bench decode --backend cuda --world 2 --devices 0 --pack pack2
expect_rc 64
expect_err "lists 1 GPUs for 2 ranks"
run tf-bench decode --backend cpu --world 2 --devices 0,1 --pack pack2
expect_rc 64
expect_err "needs --backend cuda"

# --layers cuts a preset: 4 of tiny's layers still validate
run tf-bench decode --backend cpu --preset tiny --layers 4 -r 2 --ctx 4 -t 0.02 --json
expect_rc 0
expect_json 'j.length == 1 && j[0].rows == 2 && j[0].decode_tps > 0'
run tf-bench decode --backend cpu --pack pack2 --layers 4
expect_rc 64
expect_err "cuts a --preset"

run tf-bench decode --backend cpu
expect_rc 64
expect_err "one of --pack DIR and --preset NAME"

run tf-bench decode --backend cpu --pack pack --preset tiny
expect_rc 64

# the decode example of tf-bench(1), as written there, in a shorter run
sed -n '/^tf-bench decode --backend cpu/p' "$TF_TESTS/../../man/man1/tf-bench.1" >examples
[ "$(wc -l <examples)" -eq 1 ] || fail "tf-bench(1) should show one decode example"
bash -c "$(sed 's/-t 1$/-t 0.02/' examples)" >/dev/null || fail "example failed"
