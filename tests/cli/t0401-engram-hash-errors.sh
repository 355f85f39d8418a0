#!/usr/bin/env bash
# tf-engram-hash refuses bad input with one line and the sysexits code:
# 65 for bad ids and bad files, 66 for a missing one, 64 for misuse.
. "$TF_TESTS/lib.sh"
/usr/bin/python3 "$TF_TESTS/../../tools/engram-ref.py" host host.bin

bad() { # CODE PATTERN CMD...
	local code=$1 pat=$2
	shift 2
	run "$@"
	expect_rc "$code"
	# misuse adds "Try 'tf-engram-hash --help'."; everything else is one line
	if [ "$code" -eq 64 ]; then expect_err "Try 'tf-engram-hash --help'"; else expect_one_line_err; fi
	expect_err "$pat"
	expect_no_out
}
bad 65 "line 1: 'x' is not a token id" sh -c 'printf "3 x 4\n" | tf-engram-hash --host host.bin'
# rows of the lines before a bad one are written; the bad one stops it
run sh -c 'printf "1 2\n3 x 4\n5\n" | tf-engram-hash --host host.bin'
expect_rc 65
expect_err "line 2: 'x' is not a token id"
[ "$(grep -c . out)" -eq 2 ] || fail "the two rows of line 1 come before the error"
bad 65 "'12a' is not a token id" tf-engram-hash --host host.bin 1 12a
bad 65 "token id 129280 is past the vocabulary" tf-engram-hash --host host.bin 5 129280
bad 65 "item 2 is not a token id" sh -c 'echo "[1,-2]" | tf-engram-hash --host host.bin'
bad 65 "past the vocabulary" tf-engram-hash --host host.bin --lookback 999999 5

head -c 100000 host.bin >short.bin
bad 65 "short.bin.*bytes after the header" tf-engram-hash --host short.bin 1
head -c 20 host.bin >tiny.bin
bad 65 "tiny.bin.*truncated" tf-engram-hash --host tiny.bin 1
{ printf 'GGUF0000'; tail -c +9 host.bin; } >magic.bin
bad 65 "not an Engram host file" tf-engram-hash --host magic.bin 1
{ printf 'DSV41EH2'; tail -c +9 host.bin; } >v2.bin
bad 65 "unknown version" tf-engram-hash --host v2.bin 1
bad 66 "missing.bin" tf-engram-hash --host missing.bin 1

bad 64 "needs --host" tf-engram-hash 1 2
bad 64 "not below --world" tf-engram-hash --host host.bin --rank 2 --world 2 1
bad 64 "at most 3" tf-engram-hash --host host.bin --lookback 1,2,3,4 5
bad 78 "disagree" tf-engram-hash --host host.bin -c tiny 5
