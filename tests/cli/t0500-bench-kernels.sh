#!/usr/bin/env bash
# tf-bench kernels --backend cpu: the table, JSON and misuse (the CPU
# reference's EXL3 product beside a plain read).
. "$TF_TESTS/lib.sh"

run tf-bench kernels --backend cpu -b 4 -s 256x256 -r 1 -t 0.05 --json
expect_rc 0
expect_json 'j.length == 3 && j[0].op == "exl3-gemm" && j[1].op == "exl3-gemm-c" && j[2].op == "read"'
expect_json 'j.every(r => r.bits == 4 && r.k == 256 && r.n == 256 && r.gbps > 0 && r.threads == 1)'
expect_json 'j[0].gweights > 0 && j[2].gweights == 0'
expect_json 'j.every(r => r.cpu_us > 0 && r.gbps_per_cpu > 0)'

run tf-bench kernels --backend cpu -b 2,6 -c 3inst -s 128x384 --rows 3 -j 2 -t 0.02
expect_rc 0
expect_out '^op +bits'
expect_out '^exl3-gemm +2 3inst +128x384 +3 +2 '
expect_out '^read +6 '
[ "$(grep -c '^exl3-gemm-c ' out)" -eq 2 ] || fail "two widths, two C rows"

run tf-bench kernels --backend cpu -s 100x128
expect_rc 64
expect_err "^tf-bench: bad shape '100x128'"
expect_err "Try 'tf-bench --help'"

run tf-bench kernels --backend cpu -b 9
expect_rc 64
expect_err "^tf-bench: bad bits"

run tf-bench kernels --backend tpu
expect_rc 64
expect_err "not one of cuda\|cpu"

run tf-bench frobnicate
expect_rc 64
expect_err "unknown mode 'frobnicate'"

run tf-bench
expect_rc 64
expect_err "missing mode"

run tf-bench --help
expect_rc 0
expect_out '^Usage: tf-bench kernels'

# the CPU examples of tf-bench(1), as written there
sed -n '/^tf-bench kernels --backend cpu/p' "$TF_TESTS/../../man/man1/tf-bench.1" >examples
[ "$(wc -l <examples)" -eq 2 ] || fail "tf-bench(1) should show two CPU examples"
while read -r line; do bash -c "$line" >/dev/null || fail "example failed: $line"; done <examples
