#!/usr/bin/env bash
# tf-engram-hash against tools/engram-ref.py, an independent Python reading
# of the hash (NumPy multipliers, Python integers): the host file it writes
# is read by tf-engram-hash, and the rows must be the same, in every format,
# with a lookback, past-the-map ids and a TP split.
. "$TF_TESTS/lib.sh"
ref="$TF_TESTS/../../tools/engram-ref.py"
/usr/bin/python3 "$ref" host host.bin

# A config whose vocabulary is larger than the map: ids 129280.. are image
# positions that block.
cat >config.json <<'JSON'
{"text_config": {"vocab_size": 129408}}
JSON

check() { # IDS [--lookback L]
	/usr/bin/python3 "$ref" hash "$@" >want
	local lb=()
	if [ "$1" = --lookback ]; then lb=(--lookback "$2"); shift 2; fi
	run tf-engram-hash -c config.json --host host.bin "${lb[@]}" "$@"
	expect_rc 0
	cmp out want || fail "rows differ for: $*"
}
check 5 6 7 8
check 2 2 2 2 2
check 100 129279 129280 7 129407 9 10 11
check --lookback 129300,4,5 6 7 8
check --lookback 1 6 7 8

# stdin: one sequence per line, text or JSON arrays; a blank line after each
printf '5 6 7 8\n[2,2,2,2,2]\n' | tf-engram-hash -c config.json --host host.bin - >both
{ /usr/bin/python3 "$ref" hash 5 6 7 8; /usr/bin/python3 "$ref" hash 2 2 2 2 2; } >want
cmp both want || fail "stdin rows differ"

# rank 1 of 2 owns columns 12..23 of each layer
run tf-engram-hash -c config.json --host host.bin --rank 1 --world 2 5 6 7 8
expect_rc 0
/usr/bin/python3 "$ref" hash 5 6 7 8 | awk 'NF { print $13,$14,$15,$16,$17,$18,$19,$20,$21,$22,$23,$24,$37,$38,$39,$40,$41,$42,$43,$44,$45,$46,$47,$48; next } { print }' >want
cmp out want || fail "rank 1 of 2 columns differ"

# JSON and raw little-endian formats hold the same numbers
run tf-engram-hash -c config.json --host host.bin -f json 5 6 7 8
expect_rc 0
expect_json 'j.n === 4 && j.layers.join() === "1,14" && j.cols.join() === "0,24" && j.rows.length === 4 && j.rows[0].length === 2 && j.rows[0][1].length === 24'
node -e 'const j=JSON.parse(require("fs").readFileSync("out","utf8")); for (const p of j.rows) console.log(p.flat().join(" ")); console.log("")' >fromjson
/usr/bin/python3 "$ref" hash 5 6 7 8 >want
cmp fromjson want || fail "JSON rows differ"
tf-engram-hash -c config.json --host host.bin -f bin 5 6 7 8 >raw
[ "$(stat -c %s raw)" -eq $((4 * 48 * 8)) ] || fail "bin output size"
od -An -v -t d8 -w384 raw | awk '{ $1 = $1; print } END { print "" }' >frombin
cmp frombin want || fail "bin rows differ"

# as a coprocess: each line's rows come back before the next line is sent
# (bash unsets HASH and HASH_PID once the coprocess ends, so keep copies)
coproc HASH { tf-engram-hash -c config.json --host host.bin -f json; }
hash_pid=$HASH_PID to_hash=${HASH[1]} from_hash=${HASH[0]}
echo '5 6 7 8' >&"$to_hash"
read -r -t 20 reply <&"$from_hash" || fail "no reply from the coprocess"
echo "$reply" >out
expect_json 'j.n === 4'
exec {to_hash}>&-
wait "$hash_pid"
