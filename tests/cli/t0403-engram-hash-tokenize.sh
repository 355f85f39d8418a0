#!/usr/bin/env bash
# tf-engram-hash with a tokenizer: the host file built from a tokenizer.json
# (tf-pack-synth's synthetic one) holds the token map an independent Python
# reading computes (tools/engram-map-ref.py), and
# `tf-tokenize encode | tf-engram-hash --rank 1 --world 2` gives the rows
# of the ids, whether the map comes from the host file or the tokenizer.
. "$TF_TESTS/lib.sh"
root=$(cd "$TF_TESTS/../.." && pwd)
tf-pack-synth -q --preset tiny --seed 3 -o pack
tok=pack/tokenizer.json

run tf-engram-hash host -t "$tok" -c pack -o host.bin
expect_rc 0
expect_err "host.bin: [0-9]+ token ids, [0-9]+ compressed ids, 2 layers"
/usr/bin/python3 "$root/tools/engram-map-ref.py" "$tok" >ref.txt
read -r vocab compressed <ref.txt
[ "$(od -An -t u4 -j 8 -N 16 host.bin | xargs)" = "2 3 $vocab $compressed" ] ||
	fail "host header: $(od -An -t u4 -j 8 -N 16 host.bin | xargs), reference $vocab $compressed"
tail -c $((vocab * 4)) host.bin | od -An -v -t u4 -w4 | awk '{ print $1 }' >map.txt
tail -n +2 ref.txt | cmp - map.txt || fail "token map differs from the Python reference"

text='Hello, world! Engram hashes n-grams: 12345 and ÉCOLE école.'
printf '%s\n' "$text" | tf-tokenize encode -t "$tok" >ids.txt
[ "$(wc -w <ids.txt)" -gt 5 ] || fail "too few ids"
printf '%s\n' "$text" | tf-tokenize encode -t "$tok" |
	tf-engram-hash -c pack --host host.bin --rank 1 --world 2 >piped
expect_rc 0
[ "$(sed -n 1p piped | wc -w)" -eq $((2 * 2)) ] || fail "rank 1 of 2 has 2 of 4 columns per layer"
[ "$(grep -c . piped)" -eq "$(wc -w <ids.txt)" ] || fail "one line per position"
# the same from operands, from the tokenizer directly, and from JSON input
read -ra idv <ids.txt
tf-engram-hash -c pack --host host.bin -r 1 -w 2 "${idv[@]}" >args
cmp piped args || fail "operands differ from the pipe"
tf-engram-hash -c pack -t "$tok" -r 1 -w 2 <ids.txt >direct
cmp piped direct || fail "--tokenizer differs from --host"
printf '%s\n' "$text" | tf-tokenize encode --json -t "$tok" |
	tf-engram-hash -c pack --host host.bin -r 1 -w 2 >fromjson
cmp piped fromjson || fail "JSON ids differ"
# rank 0 and rank 1 together are the whole row set
tf-engram-hash -c pack --host host.bin <ids.txt >whole
tf-engram-hash -c pack --host host.bin -r 0 -w 2 <ids.txt >r0
paste -d " " r0 piped | awk 'NF { print $1, $2, $5, $6, $3, $4, $7, $8; next } { print "" }' >joined
cmp joined whole || fail "rank halves do not make the whole"
