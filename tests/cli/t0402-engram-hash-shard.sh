#!/usr/bin/env bash
# Row shards: written for a rank's columns, read back by row number, the
# same rows whichever split holds them; bad rows and files refused.
. "$TF_TESTS/lib.sh"

run tf-engram-hash shard -c tiny -o whole.bin
expect_rc 0
expect_err "layer 1, rows 0..4062 of 4062"
[ "$(stat -c %s whole.bin)" -eq $((4096 + 4062 * 264)) ] || fail "whole shard size"
run tf-engram-hash shard -c tiny --layer 5 --rank 1 --world 2 -o r1.bin
expect_rc 0
expect_err "layer 5, rows 2064..4152 of 4152 \(columns 2..4\)"
tf-engram-hash shard -q -c tiny --layer 5 -o whole5.bin
# the header: magic, layer, lo, hi, total, 264
[ "$(head -c 8 r1.bin)" = DSV41EN1 ] || fail "magic"
[ "$(od -An -t u8 -j 8 -N 40 r1.bin | xargs)" = "5 2064 4152 4152 264" ] || fail "header fields"

# row 3000 of layer 5 reads the same from both splits, in every format
run tf-engram-hash rows r1.bin 3000 2064 4151
expect_rc 0
[ "$(wc -l <out)" -eq 3 ] || fail "three rows"
expect_out "^3000: "
[ "$(head -1 out | wc -w)" -eq 257 ] || fail "256 values"
tf-engram-hash rows whole5.bin 3000 2064 4151 >want
cmp out want || fail "splits disagree"
run tf-engram-hash rows -f json r1.bin 3000
expect_json 'j.row === 3000 && j.values.length === 256 && j.values.some(v => v !== 0)'
tf-engram-hash rows -f bin r1.bin 3000 >raw
[ "$(stat -c %s raw)" -eq 512 ] || fail "bin row size"

# with the thread pool instead of io_uring, the same bytes
TF_ENGRAM_URING=0 tf-engram-hash rows r1.bin 3000 2064 4151 >threads
cmp threads want || fail "thread-pool reader differs"

run tf-engram-hash rows r1.bin 2063
expect_rc 65
expect_err "outside the shard's 2064..4151"
run tf-engram-hash rows r1.bin x
expect_rc 65
head -c 5000 r1.bin >cut.bin
run tf-engram-hash rows cut.bin 2064
expect_rc 65
expect_err "cut.bin.*need"
run tf-engram-hash rows missing.bin 1
expect_rc 66

# the benchmark checks its fast hash against the naive one, and fetches
run tf-engram-hash bench -c tiny -n 5000 -f json whole.bin
expect_rc 0
expect_json 'j.hash.positions === 5000 && j.hash.rows_per_s > 0 && j.fetch.rows === 5000 && ["io_uring", "threads"].includes(j.fetch.backend)'
