#!/usr/bin/env bash
# tf-prepare throughput on a small pack (world 1) against a plain sequential
# read of the same shards (cat to /dev/null) in the same run: the shards'
# pages are dropped from the cache before each (dd iflag=nocache), so both
# read from disk. Bytes are the shards' size; tf-prepare also writes and
# fsyncs its images. Three runs each of one job and of two, and one job
# writing to /dev/shm (no disk writes: the converter's own cost).
set -euo pipefail
bin=${TF_BIN:?}
work=$(mktemp -d /tmp/tf-bench-prepare.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$bin/tf-pack-synth" -p small --seed 1 --shard-size 32M -q -o "$work/small"
sync
bytes=$(cat "$work"/small/*.safetensors | wc -c)
drop() { for f in "$work"/small/*.safetensors; do dd if="$f" iflag=nocache count=0 status=none; done; }
now() { date +%s.%N; }
out=$work/out
for jobs in 1 2 shm; do
	j=1
	case $jobs in shm) [ -d /dev/shm ] || continue; out=$(mktemp -d /dev/shm/tf-bench.XXXXXX) ;; *) j=$jobs ;; esac
	for _ in 1 2 3; do
		drop
		t0=$(now)
		cat "$work"/small/*.safetensors >/dev/null
		t1=$(now)
		rm -rf "${out:?}"/*
		sync
		drop
		t2=$(now)
		"$bin/tf-prepare" "$work/small" -o "$out" -q -j "$j" >/dev/null
		t3=$(now)
		awk -v b="$bytes" -v c="$(echo "$t1 - $t0" | bc)" -v p="$(echo "$t3 - $t2" | bc)" -v j="$jobs" 'BEGIN {
			printf "shards %.1f MB: cat %.3f s (%.0f MB/s); tf-prepare -j %s %.3f s (%.0f MB/s); ratio %.2f\n",
				b / 1e6, c, b / 1e6 / c, j, p, b / 1e6 / p, c / p }'
	done
done
case $out in /dev/shm/*) rm -rf "$out" ;; esac
