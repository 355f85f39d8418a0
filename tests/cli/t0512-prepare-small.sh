#!/usr/bin/env bash
# A small pack prepares for worlds 1 and 2 within the stated memory bound
# (tf-prepare(1): about 8 MiB per job plus headers, under 32 MiB), verifies
# and travels through a tar pipe.
. "$TF_TESTS/lib.sh"

tf-pack-synth --preset small --seed 2 --shard-size 32M -o small -q
for w in 1 2; do
	for ((r = 0; r < w; r++)); do
		run tf-prepare small -o prepared -r $r -w $w -v
		expect_rc 0
		rss=$(sed -nE 's/.*peak RSS ([0-9]+) KiB.*/\1/p' err)
		[ -n "$rss" ] && [ "$rss" -lt 32768 ] || fail "peak RSS ${rss:-?} KiB, bound 32768"
		tf-prepare small -o - -r $r -w $w | tf-prepare --import - -o piped
	done
done
run tf-prepare --list -o prepared small --verify
expect_rc 0
[ "$(grep -c 'verified	matches' out)" -eq 3 ] || fail "three rank folders expected"
diff -r prepared piped || fail "piped images differ"
