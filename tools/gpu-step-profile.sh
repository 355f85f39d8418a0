#!/usr/bin/env bash
# gpu-step-profile.sh OUT [ROWS...]: the kernels of one decode step of the
# release's first 4 layers (tf-bench decode --backend cuda --preset release
# --layers 4 --ctx 1024, eager: TF_CUDA_GRAPHS=0), each timed alone by
# Nsight Compute (gpu__time_duration, clocks and caches left as they are),
# at each row count (default 1 16). Writes OUT/ncuR.csv (every kernel of
# the run), OUT/ncuR.log (tf-bench's table) and OUT/stepR.txt: the last
# step's kernels (as many as tf-bench's "kernels" column says a step
# queues) summed by name, largest first, then in launch order. Runs on a
# GPU host with ncu (tools/gpu-check.sh's); BIN (default build/bin).
set -u
out=${1:?usage: gpu-step-profile.sh OUT [ROWS...]}
shift
rows=("$@")
[ ${#rows[@]} -eq 0 ] && rows=(1 16)
bin=${BIN:-build/bin}
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$ncu" ] || { echo "gpu-step-profile: no ncu on this host" >&2; exit 1; }
mkdir -p "$out"
for r in "${rows[@]}"; do
	TF_CUDA_GRAPHS=0 timeout 300 "$ncu" --clock-control none --cache-control none \
		--metrics gpu__time_duration.sum --csv --log-file "$out/ncu$r.csv" \
		"$bin/tf-bench" decode --backend cuda --preset release --layers 4 -r "$r" \
		--ctx 1024 -t 0.3 >"$out/ncu$r.log" 2>&1
	n=$(awk '$1 == "release" { k = $(NF - 1) } END { print int(k + 0.5) }' "$out/ncu$r.log")
	python3 - "$out/ncu$r.csv" "$n" >"$out/step$r.txt" <<'PY'
import collections, csv, sys
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))][1:]
ks = [(r[4], r[8], float(r[14].replace(',', '')) / 1000) for r in rows]
step = ks[-int(sys.argv[2]):]
tot = sum(t for _, _, t in step)
print(f"kernels {len(step)}, sum {tot:.1f} us")
agg = collections.defaultdict(lambda: [0, 0.0])
for name, _, t in step:
    agg[name][0] += 1
    agg[name][1] += t
for name, (c, t) in sorted(agg.items(), key=lambda x: -x[1][1]):
    print(f"{t:9.1f} us {100 * t / tot:5.1f}% n={c:4d} avg={t / c:7.2f} {name[:60]}")
print()
for i, (name, grid, t) in enumerate(step):
    print(f"{i:4d} {t:8.2f} {name[:48]:48s} {grid}")
PY
done
