#!/usr/bin/env bash
# tf-bench decode --draft: the drafted run's tokens equal plain greedy
# decoding's, position by position from the same forks (spec_checked,
# spec_differ; a difference exits 1). On a random tiny pack no draft is
# accepted, so this compares the verify rows' own tokens; on a pack whose
# final norms and Markov head are zeroed every logit is 0, the model and
# the drafter both pick token 0, and every draft is accepted, so the kept
# drafts are compared too.
. "$TF_TESTS/lib.sh"

run tf-pack-synth -p tiny -q -o pack
expect_rc 0
run tf-bench decode --backend cpu --pack pack -r 1,3 --ctx 6 -j 2 -t 0.2 --draft --json
expect_rc 0
expect_json 'j.length == 2 && j.every(r => r.spec_checked >= r.rows && r.spec_differ == 0)'
expect_json 'j.every(r => r.spec_checked <= r.rows * r.steps)'

# zero tensors in place (safetensors: 8-byte header length, JSON header)
cp -r pack zero
python3 - zero norm.weight mtp.0.norm.weight mtp.0.markov_head.head.weight <<'PY'
import json, os, struct, sys
pack, names = sys.argv[1], sys.argv[2:]
index = json.load(open(os.path.join(pack, "model.safetensors.index.json")))["weight_map"]
for n in names:
    with open(os.path.join(pack, index[n]), "r+b") as f:
        hl = struct.unpack("<Q", f.read(8))[0]
        b, e = json.loads(f.read(hl))[n]["data_offsets"]
        f.seek(8 + hl + b)
        f.write(b"\0" * (e - b))
PY
run tf-bench decode --backend cpu --pack zero -r 1,3 --ctx 6 -j 2 -t 0.2 --draft --json
expect_rc 0
expect_json 'j.every(r => r.accept_rate == 1 && r.tokens_per_step == 4)'
expect_json 'j.every(r => r.spec_checked >= r.rows && r.spec_differ == 0)'
echo ok
