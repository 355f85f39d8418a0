#!/usr/bin/env bash
# tf-prepare into a folder: write, keep what is there, list, dry run,
# damage detected and rebuilt, misuse.
. "$TF_TESTS/lib.sh"

tf-pack-synth --preset tiny --seed 3 -o tiny -q

# the man page's first example
run tf-prepare tiny -o prepared --rank 0 --world 2
expect_rc 0
dir=$(cat out)
[[ $dir =~ ^prepared/[0-9a-f]{32}/rank0of2$ ]] || fail "rank folder '$dir'"
[ "$(ls "$dir" | wc -l)" -eq 12 ] || fail "expected 9 blocks, top.bin and 2 Engram shards in $dir"
[ -f "$dir/top.bin" ] && [ -f "$dir/L8.bin" ] && [ -f "$dir/engram-l5-r0of2.bin" ] || fail "missing images"
run tf-prepare --list -o prepared tiny
expect_rc 0
expect_out "rank 0 of 2	12 files	[0-9]+ bytes	ok	matches"

# present images are kept
run tf-prepare tiny -o prepared -r 0 -w 2 -v
expect_rc 0
expect_err "0 written, 12 present"
run tf-prepare tiny -o prepared -r 0 -w 2 -n
expect_rc 0
[ "$(grep -c '	present	' out)" -eq 12 ] || fail "dry run should find 12 present"

# a flipped payload byte: found by --verify (file and entry named), rebuilt
cp "$dir/L3.bin" L3.orig
size=$(stat -c %s "$dir/L3.bin")
printf '\xff' | dd of="$dir/L3.bin" bs=1 seek=$((size * 3 / 4)) conv=notrunc status=none
run tf-prepare --list -o prepared --verify
expect_rc 1
expect_err "L3.bin'"
run tf-prepare tiny -o prepared -r 0 -w 2 --verify
expect_rc 0
expect_err "L3.bin': (entry '.*': payload digest mismatch|padding)"
expect_err "rebuilding it"
cmp -s L3.orig "$dir/L3.bin" || fail "the rebuilt image differs from the original"

# truncated, and another rank's image in this folder: rebuilt without --verify
truncate -s 4096 "$dir/L1.bin"
cp "$dir/L2.bin" L2.orig
tf-prepare tiny -o other -r 1 -w 2 -q >/dev/null
cp other/*/rank1of2/L2.bin "$dir/L2.bin"
run tf-prepare tiny -o prepared -r 0 -w 2 -v
expect_rc 0
expect_err "L1.bin': .*truncated"
expect_err "L2.bin': holds rank 1 of 2, expected rank 0 of 2"
expect_err "2 written, 10 present"
cmp -s L2.orig "$dir/L2.bin" || fail "L2.bin not rebuilt"

# --layers
run tf-prepare tiny -o some --layers 2-3,top -n
expect_rc 0
[ "$(wc -l <out)" -eq 3 ] || fail "--layers 2-3,top is three images"
expect_out "/L2.bin	write	[0-9]+"
run tf-prepare tiny -o some --layers 2-3,top -j 2
expect_rc 0
[ "$(ls some/*/rank0of1 | wc -l)" -eq 3 ] || fail "three images expected"

# misuse and bad input
run tf-prepare tiny
expect_rc 64
expect_err "missing -o DIR"
run tf-prepare tiny -o x -r 2 -w 2
expect_rc 64
run tf-prepare tiny -o x --zstd
expect_rc 64
run tf-prepare tiny -o x --layers 9-12
expect_rc 64
expect_err "--layers '9-12'"
run tf-prepare nowhere -o x
expect_rc 66
expect_err "^tf-prepare: cannot open pack 'nowhere'"
run tf-prepare tiny -o x -w 3
expect_rc 78
run tf-prepare --list -o nowhere
expect_rc 66
