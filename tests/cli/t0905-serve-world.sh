#!/usr/bin/env bash
# tf-serve --world/--rank and --local-ranks on the cpu engine and a tiny
# pack: a greedy --once reply of two rank processes (started either way)
# is the same, and four ranks' equals one's and two's; settings that differ (the fabric's or the serving ones)
# are refused on every rank naming the setting (exit 78); misuse is 64.
. "$TF_TESTS/lib.sh"

run tf-pack-synth -p tiny --seed 3 -q -o pack
expect_rc 0
echo '{"messages":[{"role":"user","content":"Say something."}],"max_tokens":10,"temperature":0,"reasoning_effort":"none"}' >req.json

run tf-serve --once -q -j 1 pack <req.json
expect_rc 0
cp out w1.json

run tf-serve --once -q -j 1 --local-ranks 2 pack <req.json
expect_rc 0
expect_json 'j.usage.completion_tokens === 10'
cp out w2.json

# the same two ranks started one by one (TF_TP_PORT: rank 0's rendezvous)
port=$((20000 + $$ % 20000))
export TF_TP_PORT=$port
tf-serve -q --world 2 --rank 1 -j 1 pack 2>r1.err &
r1=$!
run tf-serve --once -q --world 2 --rank 0 -j 1 pack <req.json
expect_rc 0
wait "$r1" || fail "rank 1 exited $?"
cmp -s <(node -e 'const j=JSON.parse(require("fs").readFileSync("out"));console.log(j.choices[0].message.content)') \
	<(node -e 'const j=JSON.parse(require("fs").readFileSync("w2.json"));console.log(j.choices[0].message.content)') ||
	fail "--world 2 and --local-ranks 2 differ"

# four ranks (the tiny pack's heads, groups, expert width and vocabulary
# divide by 4): the same greedy reply as one rank and as two (measured on
# this pack: the reordered sums of worlds 2 and 4 move no greedy pick)
run tf-serve --once -q -j 1 --local-ranks 4 pack <req.json
expect_rc 0
expect_json 'j.usage.completion_tokens === 10'
for w in w1.json w2.json; do
	node -e 'const f=require("fs"), a=JSON.parse(f.readFileSync("out")), b=JSON.parse(f.readFileSync(process.argv[1]));
		if (a.choices[0].message.content !== b.choices[0].message.content) process.exit(1)' "$w" ||
		fail "--local-ranks 4 differs from $w"
done

# --check at world 2 loads every rank and stops them
run tf-serve --check -q --local-ranks 2 pack
expect_rc 0
expect_out 'world 2'

# a fabric setting that differs: both refuse, naming it
port=$((port + 13)); export TF_TP_PORT=$port
TF_TP_FAILFAST_GRACE_S=2 tf-serve -q --world 2 --rank 1 pack 2>r1.err &
r1=$!
run tf-serve -q --world 2 --rank 0 -p 0 pack
expect_rc 78
expect_err 'TF_TP_FAILFAST_GRACE_S'
set +e; wait "$r1"; rc1=$?; set -e
[ "$rc1" -eq 78 ] || fail "rank 1 exited $rc1, expected 78"
grep -q 'TF_TP_FAILFAST_GRACE_S' r1.err || fail "rank 1 does not name the setting"

# a serving setting that differs: both refuse, naming it and rank 0's
port=$((port + 13)); export TF_TP_PORT=$port
tf-serve -q --world 2 --rank 1 --context 2048 pack 2>r1.err &
r1=$!
run tf-serve -q --world 2 --rank 0 -p 0 pack
expect_rc 78
expect_err "serving settings differs from rank 0's: 'context 2048' vs rank 0's 'context 4096'"
set +e; wait "$r1"; rc1=$?; set -e
[ "$rc1" -eq 78 ] || fail "rank 1 exited $rc1, expected 78"
grep -q "'context 2048' vs rank 0's 'context 4096'" r1.err || fail "rank 1 does not name the setting"
unset TF_TP_PORT

run tf-serve --engine stub --world 2
expect_rc 64
expect_err 'need a model engine'
run tf-serve --world 2 --rank 2 pack
expect_rc 64
expect_err 'must be below --world'
run tf-serve --local-ranks 65 pack
expect_rc 64

# --devices: one GPU a rank, for the cuda engine only, not with --device
run tf-serve --local-ranks 2 --devices 0,0 --check pack
expect_rc 64
expect_err '--devices applies only to the cuda engine'
run tf-serve --engine cuda --local-ranks 2 --devices 0 --check pack
expect_rc 64
expect_err '--devices lists 1 GPU for 2 ranks'
run tf-serve --engine cuda --local-ranks 2 --devices 0,a --check pack
expect_rc 64
run tf-serve --engine cuda --local-ranks 2 --device 1 --devices 0,0 --check pack
expect_rc 64
expect_err '--device and --devices do not go together'
# a device comm needs device memory: not the cpu engine's
TF_COMM_BACKEND=nccl run tf-serve --local-ranks 2 --check pack
expect_rc 78
expect_err 'TF_COMM_BACKEND=nccl carries device memory'
