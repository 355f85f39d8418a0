#!/usr/bin/env bash
# tf-pack-inspect on a good pack: text and JSON, layers, plans for worlds 1, 2, 4.
. "$TF_TESTS/lib.sh"

tf-pack-synth -p tiny --bits 4 -q -o p
run tf-pack-inspect p
expect_rc 0
expect_out '^pack p: [0-9]+ tensors in 1 shards'
expect_out '^ +2 layers.2 +full +2'
expect_out '^ +6 layers.6 +reindex'
expect_out '^ +7 layers.7 +reuse'
expect_out '^ +8 mtp.0 +swa'
expect_out 'layers.1.engram.table +U8'
expect_out '^layers.0.attn.wq_a.trellis +I16 +\[16,8,(32|48|64)\] +[234] '
expect_out '^EXL3 groups: [0-9]+, [0-9.]+ bits per weight'

run tf-pack-inspect --json p
expect_rc 0
expect_json 'j.layers.length === 9 && j.layers[4].mode === "full" && j.layers[4].ratio === 1'
expect_json 'j.tensors.every(t => t.bytes >= 0) && j.totals.groups > 100 && j.plan.world === 1'

for w in 2 4; do
	for r in $(seq 0 $((w - 1))); do
		tf-pack-inspect --json --summary --rank "$r" --world "$w" p >"plan.$w.$r"
	done
done
node -e '
const fs=require("fs"), rd=f=>JSON.parse(fs.readFileSync(f));
const one=rd("plan.2.0").plan, two=rd("plan.2.1").plan;
if (one.world!==2 || two.rank!==1) process.exit(1);
if (one.total_bytes!==two.total_bytes) { console.error("ranks differ", one.total_bytes, two.total_bytes); process.exit(1); }
const w1=JSON.parse(require("child_process").execSync("tf-pack-inspect --json --summary p")).plan;
if (!(one.total_bytes < w1.total_bytes)) process.exit(1);
' || fail "plans inconsistent"

# the environment supplies rank and world; the command line wins
TF_TP_WORLD=2 TF_TP_RANK=1 tf-pack-inspect --json --summary p >env.json
node -e 'const j=JSON.parse(require("fs").readFileSync("env.json")); if (j.plan.rank!==1||j.plan.world!==2) process.exit(1)' || fail "env ignored"
TF_TP_WORLD=2 TF_TP_RANK=1 tf-pack-inspect --json --summary --rank 0 p >env.json
node -e 'const j=JSON.parse(require("fs").readFileSync("env.json")); if (j.plan.rank!==0) process.exit(1)' || fail "option should win"

# world 8 does not divide the tiny model
run tf-pack-inspect --world 8 --rank 0 p
expect_rc 78
expect_err "does not divide"
