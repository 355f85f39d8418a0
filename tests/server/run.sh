#!/usr/bin/env bash
# run.sh [FILE...]: the server tests. Installs the pinned SDKs (npm ci, from
# package-lock.json) into node_modules when missing or stale, then runs every
# *.test.mjs with node's built-in test runner against $TF_BIN/tf-serve (stub
# engine, loopback only; the tests that serve a synthetic pack use the cpu
# engine). Prints each test, then the closing "server: N passed, N failed"
# line; exits 1 on any failure.
#
# TF_ENGINE=cuda (make check-gpu) serves those packs with tf-serve --engine
# cuda instead (TF_DEVICE=N adds --device N) and runs only the files that
# serve a model (they take lib.mjs's modelArgs; the stub's tests exercise no
# engine). Without node the run fails, saying so. On a host that cannot
# reach the registry, a node_modules carried there is used as it is.
set -u
here=$(cd "$(dirname "$0")" && pwd)
: "${TF_BIN:?set TF_BIN to the folder of the built programs}"
export TF_BIN LC_ALL=C.UTF-8
case ${TF_ENGINE:-cpu} in
cpu | cuda) export TF_TEST_ENGINE=${TF_ENGINE:-cpu} ;;
*) echo "server: TF_ENGINE='$TF_ENGINE' is not cpu or cuda; 0 passed, 1 failed"; exit 1 ;;
esac
if [ -n "${TF_DEVICE:-}" ]; then export TF_TEST_DEVICE=$TF_DEVICE; fi
unset TF_DEVICE
if ! command -v node >/dev/null; then
	echo "server: node is missing on this host: the SDK tests did not run; 0 passed, 1 failed"
	exit 1
fi
unset TF_LOG TF_API_KEY TF_API_KEY_FILE TF_SSE_KEEPALIVE_S TF_DRAIN_S TF_PORT TF_HOST TF_ENGINE TF_DRAFTS TF_DRAFT_DEPTH
cd "$here" || exit 1
# Stale: no modules, or installed from another package-lock.json (its
# checksum, kept beside them; older installs: by modification time, which a
# copy to another host may not keep).
lock=$(cksum <package-lock.json)
stale=0
if [ ! -f node_modules/.package-lock.json ]; then
	stale=1
elif [ -f node_modules/.tf-lock-cksum ]; then
	[ "$(cat node_modules/.tf-lock-cksum)" = "$lock" ] || stale=1
elif [ package-lock.json -nt node_modules/.package-lock.json ]; then
	stale=1
else
	echo "$lock" >node_modules/.tf-lock-cksum
fi
if [ "$stale" = 1 ]; then
	if npm ci --no-audit --no-fund --loglevel=error >"$here/npm.log" 2>&1; then
		rm -f "$here/npm.log"
		echo "$lock" >node_modules/.tf-lock-cksum
	elif [ -f node_modules/openai/package.json ] && [ -f node_modules/@anthropic-ai/sdk/package.json ]; then
		echo "server: npm ci failed (see tests/server/npm.log); using the node_modules there"
	else
		tail -20 "$here/npm.log"
		echo "server: npm ci failed (see tests/server/npm.log); 0 passed, 1 failed"
		exit 1
	fi
fi
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
	if [ "$TF_TEST_ENGINE" = cuda ]; then
		mapfile -t files < <(grep -l 'modelArgs(' ./*.test.mjs | grep -v lib.mjs)
	else
		files=(*.test.mjs)
	fi
fi
echo "server: engine $TF_TEST_ENGINE${TF_TEST_DEVICE:+, device $TF_TEST_DEVICE}: ${files[*]}"
tap=$(mktemp /tmp/tf-server.XXXXXX)
trap 'rm -f "$tap"' EXIT
node --test --test-reporter=spec --test-reporter-destination=stdout \
	--test-reporter=tap --test-reporter-destination="$tap" "${files[@]}"
rc=$?
pass=$(grep -E '^# pass ' "$tap" | awk '{print $3}')
fail=$(grep -E '^# fail ' "$tap" | awk '{print $3}')
echo "server: ${pass:-0} passed, ${fail:-0} failed"
[ "$rc" -eq 0 ] && [ "${fail:-1}" -eq 0 ] && [ "${pass:-0}" -gt 0 ]
