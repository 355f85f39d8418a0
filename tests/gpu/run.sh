#!/usr/bin/env bash
# run.sh TEST...: run the GPU tests (build/tests/gpu/gpu_*), each with a
# 600 s limit; print one line per test and "N passed, N failed, N skipped".
# A test exits 77 when there is no GPU; skipped tests fail the run unless
# TF_GPU_SKIP_OK=1, since make check-gpu is meant for a GPU host.
set -u
pass=0 fail=0 skip=0
for t in "$@"; do
	name=$(basename "$t")
	log=$(mktemp)
	timeout 600 "$t" >"$log" 2>&1
	rc=$?
	case $rc in
	0) pass=$((pass + 1)); echo "PASS $name" ;;
	77) skip=$((skip + 1)); echo "SKIP $name: $(tail -1 "$log")" ;;
	*) fail=$((fail + 1)); echo "FAIL $name (exit $rc)" ;;
	esac
	sed 's/^/    /' "$log"
	rm -f "$log"
done
echo "gpu: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ] && { [ "$skip" -eq 0 ] || [ "${TF_GPU_SKIP_OK:-0}" = 1 ]; }
