#!/usr/bin/env bash
# Help, version, usage errors and missing input for both pack programs.
. "$TF_TESTS/lib.sh"

for p in tf-pack-synth tf-pack-inspect; do
	run "$p" --help
	expect_rc 0
	expect_out "^Usage: $p "
	run "$p" --version
	expect_rc 0
	expect_out "^$p [0-9]+\.[0-9]+\.[0-9]+ \("
	run "$p" --no-such-option
	expect_rc 64
	expect_err "unknown option"
	expect_err "Try '$p --help'"
	expect_no_out
done
run tf-pack-synth -p huge -o x
expect_rc 64
expect_err "not one of tiny\|small\|release"
run tf-pack-synth -p tiny
expect_rc 64
expect_err "no output folder"
run tf-pack-synth -p tiny --seed 12x -o x
expect_rc 64
expect_err "seed.*not a number"
run tf-pack-synth -p tiny --bits 9 -o x
expect_rc 64
run tf-pack-inspect
expect_rc 64
run tf-pack-inspect --world 2 --rank 2 x
expect_rc 64
run tf-pack-inspect /nonexistent/pack
expect_rc 66
expect_err "does not exist"
TF_TP_WORLD=3x run tf-pack-inspect x
expect_rc 78
expect_err "TF_TP_WORLD"
TF_LOG=loud run tf-pack-inspect x
expect_rc 78
# a failed write to stdout is an error (not for a closed pipe)
tf-pack-synth -p tiny -q -o p
if [ -w /dev/full ]; then
	run tf-pack-inspect p
	tf-pack-inspect p >/dev/full 2>err && fail "write to /dev/full succeeded"
	grep -q "cannot write" err || fail "no message for a failed write"
fi
(tf-pack-inspect p 2>perr | head -1 >/dev/null) || true
[ ! -s perr ] || fail "a closed pipe is reported as an error: $(cat perr)"
