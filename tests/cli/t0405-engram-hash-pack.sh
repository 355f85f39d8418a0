#!/usr/bin/env bash
# tf-engram-hash shard --pack cuts a rank's rows out of a pack's Engram
# table tensor: the shard's rows are the tensor's bytes, checked with a
# plain reading of the safetensors file in Python.
. "$TF_TESTS/lib.sh"
tf-pack-synth -q --preset tiny --seed 5 -o pack
mkdir shards
run tf-engram-hash shard --pack pack --layer 5 --rank 1 --world 2 -o shards
expect_rc 0
expect_err "shards/engram-l5-r1of2.bin: layer 5, rows 2064..4152 of 4152"
/usr/bin/python3 - pack shards/engram-l5-r1of2.bin <<'PY' || fail "shard rows differ from the pack's table"
import glob, json, struct, sys
pack, shard = sys.argv[1], sys.argv[2]
for f in sorted(glob.glob(pack + "/*.safetensors")):
    data = open(f, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    head = json.loads(data[8:8 + n])
    t = head.get("layers.5.engram.table")
    if t:
        a, b = t["data_offsets"]
        table = data[8 + n + a:8 + n + b]
        break
else:
    sys.exit("no table")
rows = open(shard, "rb").read()
assert struct.unpack("<6Q", rows[:48])[1:] == (5, 2064, 4152, 4152, 264)
assert rows[4096:] == table[2064 * 264:4152 * 264], "rows differ"
PY
# the whole table at TP 1, and a layer the config lacks
tf-engram-hash shard -q --pack pack --layer 1 -o shards
[ "$(stat -c %s shards/engram-l1-r0of1.bin)" -eq $((4096 + 4062 * 264)) ] || fail "layer 1 size"
run tf-engram-hash shard --pack pack --layer 3 -o shards
expect_rc 64
run tf-engram-hash shard --pack missing -o shards
expect_rc 66
