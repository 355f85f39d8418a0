#!/usr/bin/env bash
# The NumPy oracle's EXL3 decoder (tests/oracle/exl3.py), written from
# exl3-format.md: every test vector of §8 (codebooks, tile states, decoded
# weights, FNV hashes), then a tiny pack read through its own safetensors
# reader with one group dequantised to the config's shape. Debian's
# python3-numpy: /usr/bin/python3, not a python3 earlier on PATH.
. "$TF_TESTS/lib.sh"

py=/usr/bin/python3
oracle="$TF_TESTS/../oracle"
if ! "$py" -c 'import numpy' 2>/dev/null; then
	echo "no NumPy for $py (python3-numpy): the oracle is not run"
	exit 0
fi

run "$py" "$oracle/exl3.py" selftest
expect_rc 0
expect_out "all vectors agree"

run tf-pack-synth -p tiny -q -o pack
expect_rc 0
cat >dq.py <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import exl3
p = exl3.Pack("pack")
c = p.config.get("text_config", p.config)
W = exl3.dequant(p, "layers.0.attn.wq_a")
assert W.shape == (c["hidden_size"], c["q_lora_rank"]), W.shape
rms = float(np.sqrt((W ** 2).mean() * W.shape[0]))
print("wq_a", W.shape, "column RMS x sqrt(K) %.3f" % rms)
assert 0.5 < rms < 2, rms  # synthetic layers keep unit scale (exl3-format.md §7)
PY
run "$py" dq.py "$oracle"
expect_rc 0
expect_out "^wq_a \(256, 128\)"
