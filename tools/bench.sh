#!/usr/bin/env bash
# bench.sh: the benchmarks `make bench` runs on this machine (no GPU), each
# printing its figure with the anchor measured in the same run. TF_BIN is the
# folder of the programs. Results go to stdout; BENCHMARKS.md records them.
set -euo pipefail
bin=${TF_BIN:?}
work=$(mktemp -d /tmp/tf-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT

echo "== pack: tf-pack-synth write rate (small preset) vs dd to the same disk"
"$bin/tf-pack-synth" -p small -q --json -o "$work/small"
dd if=/dev/zero of="$work/dd.bin" bs=1M count=256 conv=fsync 2>&1 | tail -1
rm -f "$work/dd.bin"

echo "== pack: tf-pack-inspect of a release-shaped pack (178k tensors, 50 shards)"
"$bin/tf-pack-synth" -p release --sparse -q -o "$work/rel"
for _ in 1 2 3; do
	/usr/bin/time -f "inspect wall %e s, max RSS %M KiB" \
		"$bin/tf-pack-inspect" --summary --rank 1 --world 2 "$work/rel" >/dev/null
done
for f in tools/bench.d/*.sh; do
	[ -e "$f" ] || continue
	echo "== $(basename "$f" .sh)"
	bash "$f"
done
