#!/usr/bin/env bash
# tf-tp-test on the host backend between real processes over TCP: the
# suite bit-exact on 2 and 3 ranks, failfast in both roles and both modes
# (survivors exit 70 within grace + 0.5 s), and the bench table.
. "$TF_TESTS/lib.sh"
export TF_COMM_BACKEND=host TF_TP_PLAN_TIMEOUT=30 TF_TP_MASTER=127.0.0.1
port=$((20000 + RANDOM % 20000))

run tf-tp-test --local 2 --port $port -m 16K suite
expect_rc 0
expect_out "^SUMMARY rank 0: [0-9]+ passed, 0 failed"
expect_out "^SUMMARY rank 1: [0-9]+ passed, 0 failed"
expect_out "^PASS rank 1: all-reduce sum bf16 10240 B in place"
! grep -q '^FAIL' out || fail "a suite case failed"

run tf-tp-test --local 3 --port $((port + 10)) -m 1K suite
expect_rc 0
expect_out "^SUMMARY rank 2: [0-9]+ passed, 0 failed"

for mode in fatal kill; do
	for victim in 0 1; do
		port=$((port + 10))
		TF_TP_FAILFAST_GRACE_S=0.3 run tf-tp-test --local 2 --port $port failfast $victim $mode
		expect_rc 0
		expect_out "^INJECT $mode rank $victim"
		expect_out "^PASS failfast $mode: rank $((1 - victim)) exit 70"
		expect_err "tp fail-fast: rank $((1 - victim))"
	done
done

run tf-tp-test --local 2 --port $((port + 10)) -m 64K -n 3 bench
expect_rc 0
expect_out "^# all-reduce sum bf16, world 2, backend host"
expect_out "^ +10240 +5120 .* 0$"
expect_out "^# Avg bus bandwidth"
