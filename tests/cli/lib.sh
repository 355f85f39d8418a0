# shellcheck shell=bash
# lib.sh: helpers for CLI tests; source it first. Each helper prints what it
# expected and what it got, then fails the test.
set -eu
set -o pipefail

fail() { echo "FAIL: $*" >&2; exit 1; }

# run CMD...: run a command, keeping stdout in ./out, stderr in ./err and the
# exit code in $rc; never fails by itself.
run() {
	set +e
	"$@" >out 2>err
	rc=$?
	set -e
}

expect_rc() { [ "$rc" -eq "$1" ] || { cat err >&2; fail "exit $rc, expected $1: ${*:2}"; }; }
expect_rc_in() {
	local c
	for c in "$@"; do [ "$rc" -eq "$c" ] && return 0; done
	cat err >&2
	fail "exit $rc, expected one of: $*"
}
expect_out() { grep -qE -- "$1" out || { head -50 out >&2; fail "stdout lacks /$1/"; }; }
expect_err() { grep -qE -- "$1" err || { cat err >&2; fail "stderr lacks /$1/"; }; }
expect_no_out() { [ ! -s out ] || { head out >&2; fail "stdout should be empty"; }; }
expect_one_line_err() {
	[ "$(wc -l <err)" -eq 1 ] || { cat err >&2; fail "stderr should be one line"; }
}
# expect_json EXPR: python-free JSON check with node (EXPR over the value j).
expect_json() {
	node -e "const j=JSON.parse(require('fs').readFileSync('out','utf8')); if(!($1)){console.error(JSON.stringify(j).slice(0,2000)); process.exit(1)}" ||
		fail "JSON check failed: $1"
}
