#!/usr/bin/env bash
# A small pack prepares for worlds 1 and 2 within the stated memory bound
# (tf-prepare(1): about 2.5 MiB per job plus headers, under 32 MiB with up
# to 8 jobs; 4 here, whatever the machine's CPUs), verifies
# and travels through a tar pipe.
. "$TF_TESTS/lib.sh"

tf-pack-synth --preset small --seed 2 --shard-size 32M -o small -q
# under ASan (make SANITIZE=1) the shadow memory makes RSS meaningless
bound=32768
if ldd "$(command -v tf-prepare)" | grep -q libasan; then bound=1000000; fi
for w in 1 2; do
	for ((r = 0; r < w; r++)); do
		run tf-prepare small -o prepared -r $r -w $w -v -j 4
		expect_rc 0
		rss=$(sed -nE 's/.*peak RSS ([0-9]+) KiB.*/\1/p' err)
		[ -n "$rss" ] && [ "$rss" -lt "$bound" ] || fail "peak RSS ${rss:-?} KiB, bound $bound"
		tf-prepare small -o - -r $r -w $w | tf-prepare --import - -o piped
	done
done
run tf-prepare --list -o prepared small --verify
expect_rc 0
[ "$(grep -c 'verified	matches' out)" -eq 3 ] || fail "three rank folders expected"
diff -r prepared piped || fail "piped images differ"
