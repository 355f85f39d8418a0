#!/usr/bin/env bash
# tf-tp-test: help, version, usage errors and bad variables (each naming
# the variable), and the kernel query.
. "$TF_TESTS/lib.sh"

run tf-tp-test --help
expect_rc 0
expect_out "^Usage: tf-tp-test "
expect_out "TF_TP_MAILBOX_MAX_KB"
run tf-tp-test --version
expect_rc 0
expect_out "^tf-tp-test [0-9]+\.[0-9]+\.[0-9]+ \("
run tf-tp-test
expect_rc 64
expect_err "missing mode"
run tf-tp-test frobnicate
expect_rc 64
expect_err "unknown mode 'frobnicate'"
run tf-tp-test failfast 0
expect_rc 64
expect_err "failfast takes VICTIM"
run tf-tp-test failfast 0 explode
expect_rc 64
expect_err "bad failure mode 'explode'"
TF_TP_MAILBOX_MAX_KB=2 run tf-tp-test suite
expect_rc 78
expect_err "TF_TP_MAILBOX_MAX_KB"
TF_TP_WORLD=2 TF_TP_RANK=2 run tf-tp-test suite
expect_rc 78
expect_err "TF_TP_RANK=2: expected a rank below TF_TP_WORLD=2"
TF_COMM_BACKEND=mailbox TF_TP_WORLD=3 run tf-tp-test suite
expect_rc 78
expect_err "TF_COMM_BACKEND=mailbox: expected TF_TP_WORLD=2"
run tf-tp-test kernel
expect_rc_in 0 1
expect_out "^mailbox kernel: (embedded|not embedded)"
