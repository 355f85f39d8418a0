#!/usr/bin/env bash
# tf-bench decode --world W: tensor-parallel ranks on threads, loaded from
# the pack or from tf-prepare's folder (--prepared); a folder of another
# rank, or a damaged one, is refused with exit 65, a missing one with 66.
. "$TF_TESTS/lib.sh"

run tf-pack-synth -p tiny -q -o pack
expect_rc 0

for w in 2 4; do
	run tf-bench decode --backend cpu --pack pack -w "$w" -r 1,2 --ctx 8 -t 0.02 --json
	expect_rc 0
	expect_json "j.length == 2 && j.every(r => r.world == $w && r.decode_tps > 0 && r.steps >= 1)"
done

for r in 0 1; do
	run tf-prepare pack -o prep -q --rank "$r" --world 2
	expect_rc 0
done
run tf-bench decode --backend cpu --pack pack --prepared prep -w 2 -r 1 --ctx 8 -t 0.02
expect_rc 0
expect_out '^pack +1 +8 +2 '

# no folder for world 4
run tf-bench decode --backend cpu --pack pack --prepared prep -w 4 -r 1 --ctx 4 -t 0.02
expect_rc 66
expect_err "no prepared images of rank 0 of 4"

# rank 1's image in rank 0's folder, then a changed payload byte
r0=$(echo prep/*/rank0of2) r1=$(echo prep/*/rank1of2)
cp -r prep good
cp "$r1/L3.bin" "$r0/L3.bin"
run tf-bench decode --backend cpu --pack pack --prepared prep -w 2 -r 1 --ctx 4 -t 0.02
expect_rc 65
expect_err "holds rank 1 of 2, expected rank 0 of 2"
rm -rf prep && cp -r good prep
# (top.bin's header fits in its first 4 KiB: the head's trellis starts there)
printf '\x55' | dd of="$r0/top.bin" bs=1 seek=4099 conv=notrunc status=none
run tf-bench decode --backend cpu --pack pack --prepared prep -w 2 -r 1 --ctx 4 -t 0.02
expect_rc 65
expect_err "does not match its SHA-256"

run tf-bench decode --backend cpu --preset tiny --prepared prep -w 2
expect_rc 64
expect_err "needs --pack"
run tf-bench decode --backend cpu --pack pack -w 3
expect_rc 64

# the two-rank example of tf-bench(1), as written there, in a shorter run
sed -n '/^tf-pack-synth -p tiny -q -o pack$/,/^tf-bench decode -w 2/p' \
	"$TF_TESTS/../../man/man1/tf-bench.1" >examples
[ "$(wc -l <examples)" -eq 3 ] || fail "tf-bench(1) should show the two-rank example"
mkdir ex && (cd ex && bash -c "$(sed 's/-t 1$/-t 0.02/' ../examples)") >/dev/null ||
	fail "example failed"
