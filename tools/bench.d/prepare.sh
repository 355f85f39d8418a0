#!/usr/bin/env bash
# tf-prepare throughput on a small pack (world 1, default jobs: one per
# CPU) against a plain sequential read of the same shards (cat to
# /dev/null) in the same run, with the same cache state for both:
#   cold: the shards' pages dropped before each (dd iflag=nocache count=0,
#         posix_fadvise DONTNEED on these files only; fincore checks it);
#   warm: the shards read once before, so both read from the page cache;
#   shm:  warm, images to /dev/shm (no disk writes: the converter's own cost).
# Rate = shard bytes / wall time; ratio = cat time / tf-prepare time, for
# wall time and for CPU time (user + sys), median of REPS runs; the order of
# the two alternates between runs. tf-prepare also hashes its images and
# writes and syncs as many bytes as it reads, so the I/O anchors follow: the
# same bytes read and written with direct I/O, alone and at once.
set -euo pipefail
bin=${TF_BIN:?}
reps=${REPS:-5}
work=$(mktemp -d /tmp/tf-bench-prepare.XXXXXX)
shm=
trap 'rm -rf "$work" ${shm:+"$shm"}' EXIT
"$bin/tf-pack-synth" -p small --seed 1 --shard-size 32M -q -o "$work/small"
sync
shards=("$work"/small/*.safetensors)
bytes=$(cat "${shards[@]}" | wc -c)
drop() {
	for f in "${shards[@]}"; do dd if="$f" iflag=nocache count=0 status=none; done
	if command -v fincore >/dev/null; then
		local left
		left=$(fincore -nbo RES "${shards[@]}" | awk '{ s += $1 } END { print s + 0 }')
		[ "$left" -eq 0 ] || echo "warning: $left bytes of the shards still cached" >&2
	fi
}
TIMEFORMAT='%R %U %S'
# timed FILE CMD...: append "wall user+sys" of CMD to FILE
timed() {
	local f=$1 t
	shift
	t=$({ time "$@" >/dev/null 2>&1; } 2>&1)
	echo "$t" | awk '{ printf "%.3f %.3f\n", $1, $2 + $3 }' >>"$f"
}
run_cat() { timed "$work/cat.t" cat "${shards[@]}"; }
run_prep() {
	rm -rf "${out:?}"/*
	sync
	[ "$mode" = cold ] && drop
	timed "$work/prep.t" "$bin/tf-prepare" "$work/small" -o "$out" -q
}
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
for mode in cold warm shm; do
	out=$work/out
	if [ "$mode" = shm ]; then
		[ -d /dev/shm ] || continue
		shm=$(mktemp -d /dev/shm/tf-bench.XXXXXX)
		out=$shm
	fi
	mkdir -p "$out"
	rm -f "$work/cat.t" "$work/prep.t"
	cat "${shards[@]}" >/dev/null
	for ((i = 0; i < reps; i++)); do
		if ((i % 2)); then
			[ "$mode" = cold ] && drop
			run_cat
			run_prep
		else
			run_prep
			[ "$mode" = cold ] && drop
			run_cat
		fi
	done
	paste -d' ' "$work/cat.t" "$work/prep.t" | awk -v b="$bytes" -v m="$mode" '{
		printf "%s: cat %.3f s (%.0f MB/s, cpu %.3f s); tf-prepare %.3f s (%.0f MB/s, cpu %.3f s); ratio wall %.2f cpu %.2f\n",
			m, $1, b / 1e6 / $1, $2, $3, b / 1e6 / $3, $4, $1 / $3, $2 / $4 }'
	wall=$(paste -d' ' "$work/cat.t" "$work/prep.t" | awk '{ print $1 / $3 }' | median)
	cpu=$(paste -d' ' "$work/cat.t" "$work/prep.t" | awk '{ print $2 / $4 }' | median)
	printf '%s: shards %.1f MB, %d runs: median ratio (cat / tf-prepare) wall %.2f, cpu %.2f\n' \
		"$mode" "$(awk -v b="$bytes" 'BEGIN { print b / 1e6 }')" "$reps" "$wall" "$cpu"
done
# The disk's bound: tf-prepare reads the shards and writes as many bytes,
# synced. Direct reads and writes of the same size, alone and at once.
mb=$(((bytes + (1 << 20) - 1) >> 20))
cat "${shards[@]}" >"$work/all.bin"
sync
for _ in 1 2 3; do
	dd if="$work/all.bin" iflag=nocache count=0 status=none
	t0=$(date +%s.%N)
	dd if="$work/all.bin" of=/dev/null bs=1M iflag=direct status=none
	t1=$(date +%s.%N)
	dd if=/dev/zero of="$work/w.bin" bs=1M count=$mb oflag=direct conv=fsync status=none
	t2=$(date +%s.%N)
	rm -f "$work/w.bin"
	sync
	dd if="$work/all.bin" of=/dev/null bs=1M iflag=direct status=none &
	dd if=/dev/zero of="$work/w.bin" bs=1M count=$mb oflag=direct conv=fsync status=none
	wait
	t3=$(date +%s.%N)
	rm -f "$work/w.bin"
	awk -v t0="$t0" -v t1="$t1" -v t2="$t2" -v t3="$t3" -v mb="$mb" 'BEGIN {
		r = t1 - t0; w = t2 - t1; rw = t3 - t2
		printf "disk, %s MiB direct: read %.3f s, write+fsync %.3f s, both at once %.3f s; read / both %.2f\n",
			mb, r, w, rw, r / rw }'
done
