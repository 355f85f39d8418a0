#!/usr/bin/env bash
# gpu-check.sh OUT [TEST...]: on a GPU host, over a build made elsewhere
# (build/bin, build/tests/gpu and .rtlibs carried; nothing is built here):
# the GPU tests (tests/gpu/run.sh; default: every build/tests/gpu/gpu_*),
# gpu_ops and gpu_model once more each with a deliberate break (each must
# fail: break.log, model-break.log), the server tests against tf-serve
# --engine cuda (tests/server/run.sh with TF_ENGINE=cuda: server.log), and
# tf-bench kernels --ops --json. Logs and JSON go into OUT; the last lines
# printed are the summary. TF_GPU_CHECK_OPS=0 leaves the op timings out,
# TF_GPU_CHECK_SERVER=0 the server tests, TF_GPU_CHECK_BREAK=0 the breaks.
#
# The server tests need node and tests/server/node_modules (carry it: 21 MB;
# the host cannot reach the registry). Without node on the host, a node
# carried as .rtlibs/bin/node, or as .rtlibs/bin/node.xz or node.gz (a node
# binary is ~100 MB, over what a carry takes; xz -6 makes it 24), is used;
# with none the step fails, saying so.
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
# the proof that gpu_ops and gpu_model can fail: a broken op must fail each
if [ "${TF_GPU_CHECK_BREAK:-1}" != 0 ]; then
	if build/tests/gpu/gpu_ops --quick --only rmsnorm --break rmsnorm >"$out/break.log" 2>&1; then
		echo "gpu-check: gpu_ops passed with rmsnorm broken" | tee -a "$out/break.log"
		rc=1
	else
		echo "gpu-check: gpu_ops failed with rmsnorm broken, as it must" >>"$out/break.log"
	fi
	# a failed bound is exit 1 after the summary line; 77 (no GPU), 70 (no
	# tf_model_be), a failed call (exit 1 before the summary) or a crash
	# prove nothing
	build/tests/gpu/gpu_model --quick --break moe_route >"$out/model-break.log" 2>&1
	brc=$?
	if [ "$brc" = 1 ] && grep -q '^gpu_model: FAIL' "$out/model-break.log"; then
		echo "gpu-check: gpu_model failed with moe_route broken, as it must" >>"$out/model-break.log"
	elif [ "$brc" = 0 ]; then
		echo "gpu-check: gpu_model passed with moe_route broken" >>"$out/model-break.log"
		rc=1
	else
		echo "gpu-check: gpu_model with moe_route broken did not run to its bounds (exit $brc)" \
			>>"$out/model-break.log"
		rc=1
	fi
fi
# the SDKs against tf-serve --engine cuda
if [ "${TF_GPU_CHECK_SERVER:-1}" != 0 ]; then
	if ! command -v node >/dev/null; then
		if [ -x .rtlibs/bin/node ]; then
			PATH="$here/.rtlibs/bin:$PATH"
		else
			for z in xz gzip; do
				ext=${z/gzip/gz}
				[ -f ".rtlibs/bin/node.$ext" ] || continue
				nodedir=$(mktemp -d /tmp/tf-node.XXXXXX)
				"$z" -dc ".rtlibs/bin/node.$ext" >"$nodedir/node" && chmod +x "$nodedir/node" &&
					PATH="$nodedir:$PATH"
				break
			done
		fi
	fi
	{ command -v node && node --version; } >"$out/server.log" 2>&1
	TF_ENGINE=cuda TF_BIN="$here/build/bin" tests/server/run.sh >>"$out/server.log" 2>&1 || rc=1
fi
if [ "${TF_GPU_CHECK_OPS:-1}" != 0 ]; then
	build/bin/tf-bench kernels --ops --json >"$out/ops.json" 2>"$out/ops.txt" || rc=1
fi
grep -E '^(PASS|FAIL|SKIP) |^gpu: ' "$out/tests.log"
[ -f "$out/break.log" ] && tail -2 "$out/break.log"
[ -f "$out/model-break.log" ] && grep -E '^gpu_model: (PASS|FAIL)|^gpu-check: ' "$out/model-break.log"
[ -f "$out/server.log" ] && grep -E '^server: ' "$out/server.log"
[ -f "$out/ops.txt" ] && tail -5 "$out/ops.txt"
exit $rc
