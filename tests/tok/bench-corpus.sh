#!/usr/bin/env bash
# bench-corpus.sh: write the tokenizer benchmark corpus to stdout, one
# document per line: the repository's own C, shell and man sources (code and
# English) and the generated multilingual conformance corpus (CJK, kana,
# Thai, Khmer, Devanagari, Arabic, emoji, JSON, whitespace runs, special
# tokens), each document's newlines turned into spaces. The same bytes for
# the same commit.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
git ls-files 'libcore/*.c' 'libcore/*.h' 'bin/*.c' 'tests/*.c' 'tests/*.sh' 'man/*' '*.md' |
	grep -v '^libcore/text/ucd.c$' |
	while read -r f; do tr '\n' ' ' <"$f" | fold -w 400 -s; echo; done
node tests/tok/corpus.cjs 2400 | node -e '
	for (const l of require("fs").readFileSync(0, "utf8").split("\n"))
		if (l) console.log(JSON.parse(l).text.replace(/[\r\n\u2028\u2029\u0085]/g, " "));'
