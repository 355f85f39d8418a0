#!/usr/bin/env bash
# run.sh [FILE...]: the server tests. Installs the pinned SDKs (npm ci, from
# package-lock.json) into node_modules when missing or stale, then runs every
# *.test.mjs with node's built-in test runner against $TF_BIN/tf-serve (stub
# engine, loopback only). Prints each test, then the closing
# "server: N passed, N failed" line; exits 1 on any failure.
set -u
here=$(cd "$(dirname "$0")" && pwd)
: "${TF_BIN:?set TF_BIN to the folder of the built programs}"
export TF_BIN LC_ALL=C.UTF-8
unset TF_LOG TF_API_KEY TF_API_KEY_FILE TF_SSE_KEEPALIVE_S TF_DRAIN_S TF_PORT TF_HOST TF_ENGINE TF_DRAFTS TF_DRAFT_DEPTH
cd "$here" || exit 1
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
	if ! npm ci --no-audit --no-fund --loglevel=error >"$here/npm.log" 2>&1; then
		tail -20 "$here/npm.log"
		echo "server: npm ci failed (see tests/server/npm.log); 0 passed, 1 failed"
		exit 1
	fi
	rm -f "$here/npm.log"
fi
files=("$@")
[ ${#files[@]} -eq 0 ] && files=(*.test.mjs)
tap=$(mktemp /tmp/tf-server.XXXXXX)
trap 'rm -f "$tap"' EXIT
node --test --test-reporter=spec --test-reporter-destination=stdout \
	--test-reporter=tap --test-reporter-destination="$tap" "${files[@]}"
rc=$?
pass=$(grep -E '^# pass ' "$tap" | awk '{print $3}')
fail=$(grep -E '^# fail ' "$tap" | awk '{print $3}')
echo "server: ${pass:-0} passed, ${fail:-0} failed"
[ "$rc" -eq 0 ] && [ "${fail:-1}" -eq 0 ] && [ "${pass:-0}" -gt 0 ]
