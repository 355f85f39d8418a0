#!/usr/bin/env bash
# fuzz-smoke.sh TARGET...: run each libFuzzer target for a short while over
# its seed corpus (tests/fuzz/corpus/<name>/) so every `make check` exercises
# the parsers of outside input under ASan and UBSan. TF_FUZZ_SECONDS sets
# the time per target (default 20).
set -u
secs=${TF_FUZZ_SECONDS:-20}
pass=0 fail=0
for t in "$@"; do
	name=$(basename "$t")
	seeds="tests/fuzz/corpus/${name#fuzz_}"
	corpus=$(mktemp -d)
	[ -d "$seeds" ] && cp -r "$seeds"/. "$corpus"/
	if "$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 "$corpus" >"$corpus.log" 2>&1; then
		pass=$((pass + 1))
		runs=$(grep -oE '^#[0-9]+' "$corpus.log" | tail -1)
		echo "PASS fuzz $name (${runs:-#0} inputs in ${secs}s)"
	else
		fail=$((fail + 1))
		echo "FAIL fuzz $name"
		tail -40 "$corpus.log" | sed 's/^/    /'
	fi
	rm -rf "$corpus" "$corpus.log"
done
echo "fuzz: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
