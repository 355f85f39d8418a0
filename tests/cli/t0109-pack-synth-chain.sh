#!/usr/bin/env bash
# tf-pack-synth --chain: a pack whose DSpark drafts are right. Greedy
# speculative decoding on it accepts every draft (tokens per step = the
# block + 1) and its tokens still equal plain greedy decoding's, where the
# same pack without --chain accepts almost none; the chain's states are
# printed; --chain with --sparse (no weights to rewrite) is refused.
. "$TF_TESTS/lib.sh"

run tf-pack-synth -p tiny --seed 5 --chain -o chain
expect_rc 0
expect_err 'chain of 16 states'
run tf-bench decode --backend cpu --pack chain -r 1,3 --ctx 20 -j 2 -t 0.3 --draft --json
expect_rc 0
expect_json 'j.length == 2 && j.every(r => r.accept_rate == 1 && r.tokens_per_step == 4)'
expect_json 'j.every(r => r.spec_checked >= r.rows && r.spec_differ == 0)'

run tf-pack-synth -p tiny --seed 5 -q -o plain
expect_rc 0
run tf-bench decode --backend cpu --pack plain -r 1 --ctx 20 -j 2 -t 0.3 --draft --json
expect_rc 0
expect_json 'j[0].accept_rate < 0.5'

run tf-pack-synth -p tiny --chain --sparse -q -o bad
expect_rc 64
expect_err 'not with --sparse'
echo ok
