#!/usr/bin/env bash
# fuzz-smoke.sh TARGET...: run each libFuzzer target over its seed corpus
# (tests/fuzz/corpus/<name>/) and then a fixed, seeded number of mutations,
# so every `make check` exercises the parsers of outside input under ASan
# and UBSan and gives the same verdict on every run (a check must not pass
# or fail by luck). TF_FUZZ_RUNS sets the mutations per target (default
# 20000), TF_FUZZ_SEED the seed (default 1); TF_FUZZ_SECONDS, when set,
# runs by time instead, for longer unseeded campaigns by hand.
set -u
runs=${TF_FUZZ_RUNS:-20000}
seed=${TF_FUZZ_SEED:-1}
if [ -n "${TF_FUZZ_SECONDS:-}" ]; then
	limit=(-max_total_time="$TF_FUZZ_SECONDS")
	what="${TF_FUZZ_SECONDS}s"
else
	limit=(-seed="$seed" -runs="$runs")
	what="seed $seed"
fi
pass=0 fail=0
for t in "$@"; do
	name=$(basename "$t")
	seeds="tests/fuzz/corpus/${name#fuzz_}"
	corpus=$(mktemp -d)
	[ -d "$seeds" ] && cp -r "$seeds"/. "$corpus"/
	if "$t" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 "$corpus" >"$corpus.log" 2>&1; then
		pass=$((pass + 1))
		count=$(grep -oE '^#[0-9]+' "$corpus.log" | tail -1)
		echo "PASS fuzz $name (${count:-#0} inputs, $what)"
	else
		fail=$((fail + 1))
		echo "FAIL fuzz $name"
		tail -40 "$corpus.log" | sed 's/^/    /'
	fi
	rm -rf "$corpus" "$corpus.log"
done
echo "fuzz: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
