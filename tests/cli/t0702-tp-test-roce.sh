#!/usr/bin/env bash
# tf-tp-test over the RoCE transport's shm wire (no GPU, no HCA): roce-host
# bit-exact plain and chunked, the suite on TF_COMM_BACKEND=roce, failfast
# in both roles and modes, the 1 MiB slot refusal and the fallback.
. "$TF_TESTS/lib.sh"
export TF_TP_PLAN_TIMEOUT=30 TF_TP_MASTER=127.0.0.1
port=$((20000 + RANDOM % 20000))

TF_LOG=info run tf-tp-test --local 2 --port $port roce-host
expect_rc 0
expect_out "^PASS rank 0: roce-host: 1000 gathers bit-exact"
expect_out "^PASS rank 1: roce-host: 1000 gathers bit-exact"
expect_out '^RESULT \{"rank":0,"op":"roce-host all-gather","bytes":4096,'
expect_err "tp roce: rank 0 shm wire: region"

TF_TP_MAILBOX_MAX_KB=16 TF_TP_ROCE_CHUNKED_KB=64 run tf-tp-test --local 2 --port $((port + 10)) roce-host
expect_rc 0
expect_out "^PASS rank 1: roce-host: 2000 gathers bit-exact \(slot 16384, chunked up to 65536\)"

export TF_COMM_BACKEND=roce TF_TP_ROCE_WIRE=shm
run tf-tp-test --local 2 --port $((port + 20)) -m 64K suite
expect_rc 0
expect_out "^INFO rank 0/2 on host, backend roce"
expect_out "^SUMMARY rank 0: [0-9]+ passed, 0 failed"
expect_out "^SUMMARY rank 1: [0-9]+ passed, 0 failed"
! grep -q '^FAIL' out || fail "a suite case failed"

port=$((port + 30))
for mode in fatal kill; do
	for victim in 0 1; do
		port=$((port + 10))
		TF_TP_FAILFAST_GRACE_S=0.3 run tf-tp-test --local 2 --port $port failfast $victim $mode
		expect_rc 0
		expect_out "^INJECT $mode rank $victim"
		expect_out "^PASS failfast $mode: rank $((1 - victim)) exit 70"
	done
done

# The RoCE slot may not pass the 1 MiB write cap: refused, never clamped.
TF_TP_MAILBOX_MAX_KB=2048 TF_TP_WORLD=2 run tf-tp-test suite
expect_rc 78
expect_err "TF_TP_MAILBOX_MAX_KB=2048: the RoCE slot would be 2097152 bytes"
TF_TP_MAILBOX_MAX_KB=1024 TF_TP_WORLD=2 TF_TP_RANK=2 run tf-tp-test suite
expect_rc 78
expect_err "TF_TP_RANK=2"
TF_TP_WORLD=3 run tf-tp-test suite
expect_rc 78
expect_err "TF_COMM_BACKEND=roce: expected TF_TP_WORLD=2"

# The verbs wire without an HCA: every rank falls back (host backend), or
# refuses with TF_TP_ROCE_FALLBACK=error.
port=$((port + 10))
TF_TP_ROCE_WIRE=verbs run tf-tp-test --local 2 --port $port -m 1K suite
expect_rc 0
expect_err "RoCE is unavailable"
expect_out "^INFO rank 0/2 on host, backend host"
port=$((port + 10))
TF_TP_ROCE_WIRE=verbs TF_TP_ROCE_FALLBACK=error run tf-tp-test --local 2 --port $port -m 1K suite
expect_rc 69
expect_err "TF_TP_ROCE_FALLBACK=error"
