#!/usr/bin/env bash
# tf-serve --synthetic: a sparse pack of a config's first layers (headers
# only: tf-pack-synth --layers --sparse) is served with generated weights;
# the same seed gives the same reply twice, a dense pack of that seed a
# different one (its trellises are the pack's, not random bits); --engine
# cuda without a GPU is exit 69 naming the backend.
. "$TF_TESTS/lib.sh"

run tf-pack-synth -p tiny --layers 4 --sparse -q -o sparse
expect_rc 0
node -e 'const c = require("./sparse/config.json"); const t = c.text_config || c;
	process.exit(t.num_hidden_layers === 4 ? 0 : 1)' || fail "config does not have 4 layers"
run tf-pack-synth -p tiny --layers 4 -q -o dense
expect_rc 0

req='{"prompt":"Once upon a time","max_tokens":8,"temperature":0}'
serve() { tf-serve -j 2 --once --path /v1/completions "$@"; }
run serve --synthetic sparse <<<"$req"
expect_rc 0
a=$(node -e 'process.stdout.write(JSON.parse(require("fs").readFileSync(0)).choices[0].text)' <out)
run serve --synthetic sparse <<<"$req"
expect_rc 0
b=$(node -e 'process.stdout.write(JSON.parse(require("fs").readFileSync(0)).choices[0].text)' <out)
[ "$a" = "$b" ] || fail "two synthetic replies differ"
run serve dense <<<"$req"
expect_rc 0
expect_json 'j.usage.completion_tokens === 8'
c=$(node -e 'process.stdout.write(JSON.parse(require("fs").readFileSync(0)).choices[0].text)' <out)
[ "$a" != "$c" ] || fail "the synthetic reply equals the dense pack's"

run tf-pack-synth -p tiny --layers 60 -q -o bad
expect_rc 78
expect_err "layers"

if ! ls /dev/nvidia0 >/dev/null 2>&1; then
	run tf-serve --engine cuda --check sparse
	expect_rc 69
	expect_err "cuda backend"
fi
