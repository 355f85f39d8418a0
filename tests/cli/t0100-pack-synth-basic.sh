#!/usr/bin/env bash
# tf-pack-synth writes valid, deterministic packs; shard size does not change
# the tensors; --no-index packs open too.
. "$TF_TESTS/lib.sh"

run tf-pack-synth -p tiny --seed 3 -o a
expect_rc 0
expect_err "wrote 'a': [0-9]+ tensors in 1 shards"
[ -s a/config.json ] && [ -s a/tokenizer.json ] && [ -s a/model.safetensors.index.json ] || fail "pack files missing"

run tf-pack-synth -p tiny --seed 3 -q -o b
expect_rc 0
[ ! -s err ] || fail "-q should be silent"
cmp a/model-00001-of-00001.safetensors b/model-00001-of-00001.safetensors || fail "same seed, different bytes"
cmp a/tokenizer.json b/tokenizer.json || fail "tokenizer differs"

run tf-pack-synth -p tiny --seed 4 -q -o c
cmp -s a/model-00001-of-00001.safetensors c/model-00001-of-00001.safetensors && fail "seed ignored"

# smaller shards: more files, the same tensors
run tf-pack-synth -p tiny --seed 3 --shard-size 1M -o d --json
expect_rc 0
expect_json 'j.shards > 4 && j.tensors > 1000'
tf-pack-inspect --json a | node -e 'const j=JSON.parse(require("fs").readFileSync(0));console.log(j.tensors.map(t=>t.name+" "+t.dtype+" "+t.shape).sort().join("\n"))' >a.list
tf-pack-inspect --json d | node -e 'const j=JSON.parse(require("fs").readFileSync(0));console.log(j.tensors.map(t=>t.name+" "+t.dtype+" "+t.shape).sort().join("\n"))' >d.list
cmp a.list d.list || fail "tensor lists differ between shard sizes"

# rewriting with fewer shards removes the stale ones
run tf-pack-synth -p tiny --seed 3 -q -o d
[ "$(ls d/*.safetensors | wc -l)" -eq 1 ] || fail "stale shards left behind"

run tf-pack-synth -p tiny --no-index -q -o e
expect_rc 0
[ ! -e e/model.safetensors.index.json ] || fail "index written"
run tf-pack-inspect --summary e
expect_rc 0

# a config file instead of a preset
run tf-pack-synth -c a/config.json --bits 4 --codebook mcg -q -o f
expect_rc 0
run tf-pack-inspect --json --summary f
expect_json 'j.group_bits["4"] === j.totals.groups && j.codebooks.mcg === j.totals.groups'
