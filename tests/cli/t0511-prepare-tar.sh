#!/usr/bin/env bash
# tf-prepare -o - | tf-prepare --import -: byte-identical images for worlds
# 1 and 2, plain and zstd; damaged and foreign streams refused.
. "$TF_TESTS/lib.sh"

tf-pack-synth --preset tiny --seed 4 -o tiny -q
for w in 1 2; do
	for ((r = 0; r < w; r++)); do
		tf-prepare tiny -o direct -r $r -w $w -q >/dev/null
		# the man page's second example, with a pipe in place of ssh
		tf-prepare tiny -o - --rank $r --world $w --zstd | tf-prepare --import - -o piped
		tf-prepare tiny -o - -r $r -w $w >plain.tar
		tf-prepare --import plain.tar -o plain
	done
done
diff -r direct piped || fail "zstd stream differs from the direct images"
diff -r direct plain || fail "plain stream differs from the direct images"
run tf-prepare --list -o piped tiny --json
expect_rc 0
expect_json 'j.length == 3 && j.every(x => x.pack == "matches" && x.files == 12 && x.damaged == 0)'

# the stream is a function of the images
tf-prepare tiny -o - -r 1 -w 2 >a.tar
tf-prepare tiny -o - -r 1 -w 2 >b.tar
cmp -s a.tar b.tar || fail "two streams of the same images differ"

# a damaged stream: refused, nothing half-kept
size=$(stat -c %s a.tar)
printf '\x01' | dd of=a.tar bs=1 seek=$((size / 2)) conv=notrunc status=none
run tf-prepare --import a.tar -o bad
expect_rc 65
mkdir -p bad
run tf-prepare --list -o bad --verify
expect_rc 0 # what was kept (the images before the damage) verifies
# another path in the stream
mkdir -p evil && echo hi >evil/x.bin && tar cf evil.tar evil/x.bin
run tf-prepare --import evil.tar -o bad2
expect_rc 65
expect_err "not a prepared image path"
[ ! -e bad2/evil ] || fail "foreign file written"
run tf-prepare --import nothing.tar -o x
expect_rc 66
