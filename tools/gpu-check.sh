#!/usr/bin/env bash
# gpu-check.sh OUT [TEST...]: on a GPU host, over a build made elsewhere
# (build/bin, build/tests/gpu and .rtlibs carried; nothing is built here):
# the GPU tests (tests/gpu/run.sh; default: every build/tests/gpu/gpu_*),
# gpu_ops once more with a deliberate break (it must fail), and
# tf-bench kernels --ops --json. Logs and JSON go into OUT; the last lines
# printed are the summary. TF_GPU_CHECK_OPS=0 leaves the op timings out.
set -u
out=${1:?usage: gpu-check.sh OUT [TEST...]}
shift
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here" || exit 1
export LD_LIBRARY_PATH="$here/.rtlibs/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$out"
tests=("$@")
if [ ${#tests[@]} -eq 0 ]; then
	for t in build/tests/gpu/gpu_*; do
		[ -x "$t" ] && [ -f "$t" ] && tests+=("$t")
	done
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw \
	--format=csv >"$out/gpu.txt" 2>&1
date -u +%FT%TZ >>"$out/gpu.txt"
rc=0
TF_GPU_SKIP_OK=${TF_GPU_SKIP_OK:-1} TF_BIN="$here/build/bin" \
	tests/gpu/run.sh "${tests[@]}" >"$out/tests.log" 2>&1 || rc=1
# the proof that gpu_ops can fail: a broken op must fail it
if build/tests/gpu/gpu_ops --quick --only rmsnorm --break rmsnorm >"$out/break.log" 2>&1; then
	echo "gpu-check: gpu_ops passed with rmsnorm broken" | tee -a "$out/break.log"
	rc=1
else
	echo "gpu-check: gpu_ops failed with rmsnorm broken, as it must" >>"$out/break.log"
fi
if [ "${TF_GPU_CHECK_OPS:-1}" != 0 ]; then
	build/bin/tf-bench kernels --ops --json >"$out/ops.json" 2>"$out/ops.txt" || rc=1
fi
grep -E '^(PASS|FAIL|SKIP) |^gpu: ' "$out/tests.log"
tail -2 "$out/break.log"
[ -f "$out/ops.txt" ] && tail -5 "$out/ops.txt"
exit $rc
