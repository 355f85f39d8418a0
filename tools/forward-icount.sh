#!/usr/bin/env bash
# forward-icount.sh BUILD_A BUILD_B: the CPU forward of two builds (their
# build/ folders, e.g. a worktree of an older commit and this one) on the
# same tiny pack and 48-token prompt, as decode (one row a call) and as one
# prefill call, under callgrind: instructions executed (repeatable whatever
# else the machine does) and whether the logits are bit-identical.
set -eu
a=${1:?usage: forward-icount.sh BUILD_A BUILD_B}
b=${2:?usage: forward-icount.sh BUILD_A BUILD_B}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$b/bin/tf-pack-synth" -p tiny -s 1 -q -o "$work/pack"
ids=$(seq 0 47 | awk '{printf "%s%d", (NR > 1 ? "," : ""), 3 + ($1 * 37) % 500}')
for mode in decode prefill; do
	chunk=()
	[ "$mode" = decode ] && chunk=(--chunk 1)
	for side in a b; do
		dir=$a
		[ $side = b ] && dir=$b
		valgrind --tool=callgrind --callgrind-out-file="$work/$side.cg" \
			"$dir/tests/oracle/logits" -j 1 "${chunk[@]}" "$work/pack" "$ids" \
			"$work/$mode.$side.npy" 2>"$work/$side.log" >/dev/null
		eval "n_$side=$(sed -n 's/.*I *refs: *//p' "$work/$side.log" | tr -d ,)"
	done
	same=$(/usr/bin/python3 -c 'import sys, numpy as np
a, b = (np.load(f).view(np.uint32) for f in sys.argv[1:])
print("bit-identical" if a.shape == b.shape and (a == b).all() else "DIFFERENT")' \
		"$work/$mode.a.npy" "$work/$mode.b.npy")
	# shellcheck disable=SC2154
	awk -v m="$mode" -v x="$n_a" -v y="$n_b" -v s="$same" \
		'BEGIN { printf "%-8s %15.0f %15.0f  %+.2f%%  logits %s\n", m, x, y, 100 * (y - x) / x, s }'
done
