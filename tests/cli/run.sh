#!/usr/bin/env bash
# run.sh [TEST...]: run the CLI tests (tests/cli/tNNNN-*.sh), each in its own
# scratch folder with the programs of $TF_BIN first on PATH; print one line
# per test and the closing "N passed, N failed" line; exit 1 on any failure.
set -u
here=$(cd "$(dirname "$0")" && pwd)
: "${TF_BIN:?set TF_BIN to the folder of the built programs}"
export PATH="$TF_BIN:$PATH" TF_TESTS="$here" LC_ALL=C.UTF-8
unset TF_LOG TF_THREADS TF_TP_RANK TF_TP_WORLD TF_TP_DEVICE
tests=()
for t in "$@"; do tests+=("$(cd "$(dirname "$t")" && pwd)/$(basename "$t")"); done
if [ ${#tests[@]} -eq 0 ]; then
	shopt -s nullglob
	tests=("$here"/t[0-9]*.sh)
fi
pass=0 fail=0 failed=()
work=$(mktemp -d /tmp/tf-cli.XXXXXX)
trap 'rm -rf "$work"' EXIT
for t in "${tests[@]}"; do
	name=$(basename "$t" .sh)
	mkdir -p "$work/$name"
	if (cd "$work/$name" && timeout 600 bash "$t") >"$work/$name.log" 2>&1; then
		pass=$((pass + 1))
		echo "PASS $name"
		# A test may report a figure on a line starting with "NOTE: ".
		sed -n 's/^NOTE: /    /p' "$work/$name.log"
	else
		fail=$((fail + 1))
		failed+=("$name")
		echo "FAIL $name"
		sed 's/^/    /' "$work/$name.log" | tail -40
	fi
done
echo "cli: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
