#!/usr/bin/env bash
# run.sh: tf's CPU forward against the NumPy oracle (tests/oracle/README.md).
#
# First the oracle's self-tests and its cache formats against the C's
# (logits --quant, bit for bit). Then for each seed a tiny pack
# (tf-pack-synth) and prompts of several lengths: one within the 4-row
# window, the others far past it, so that the window ring, ratio-2 and
# ratio-1 compression, index selection, the candidate blocks and
# reindexing all run. The C logits (build/tests/oracle/logits) and the
# oracle's (forward.py, with its fp32 path for the noise floor) are
# compared row by row by compare.py, which fails outside its bounds. The
# first seed also runs a long prompt (where YaRN's frequencies tell), its
# short prompts in calls of 7 rows and of 1 (chunked prefill, decode), and
# the bf16 and FP4-pool cache formats. Last, mutants.py shows that the
# comparison can fail: each deliberately wrong oracle must be caught.
#
# Environment: TF_BIN (the programs), TF_ORACLE_LOGITS (the C driver),
# TF_ORACLE_SEEDS (default "1 2 3"), TF_ORACLE_LENGTHS (default "3 29 64"),
# TF_ORACLE_LONG (the first seed's long prompt, default 160; empty: none),
# TF_ORACLE_KEEP=1 keeps the scratch folder.
set -u
here=$(cd "$(dirname "$0")" && pwd)
: "${TF_BIN:?set TF_BIN to the folder of the built programs}"
: "${TF_ORACLE_LOGITS:?set TF_ORACLE_LOGITS to build/tests/oracle/logits}"
py=/usr/bin/python3
seeds=${TF_ORACLE_SEEDS:-1 2 3}
lengths=${TF_ORACLE_LENGTHS:-3 29 64}
long=${TF_ORACLE_LONG:-160}
unset TF_LOG TF_THREADS

if ! "$py" -c 'import numpy' 2>/dev/null; then
	# make check installs python3-numpy (tools/deps.sh): a missing NumPy is
	# a broken set-up, not a pass
	echo "oracle: no NumPy for $py (python3-numpy; make deps installs it)"
	exit 1
fi
work=$(mktemp -d /tmp/tf-oracle.XXXXXX)
if [ "${TF_ORACLE_KEEP:-0}" = 1 ]; then
	echo "oracle: scratch in $work"
else
	trap 'rm -rf "$work"' EXIT
fi

# ids SEED LEN: BOS, then LEN-1 ids drawn from the plain tokens (3..503).
ids() {
	"$py" -c 'import sys, numpy as np
s, n = int(sys.argv[1]), int(sys.argv[2])
r = np.random.default_rng(1000 * s + n).integers(3, 504, n - 1)
print(",".join(map(str, [0] + list(r))))' "$1" "$2"
}

fail=0
"$py" "$here/forward.py" selftest || fail=1
"$py" "$here/forward.py" formats "$TF_ORACLE_LOGITS" 128 32 || fail=1

groups=()
first=1
for s in $seeds; do
	pack=$work/tiny-$s
	"$TF_BIN/tf-pack-synth" -p tiny -s "$s" -q -o "$pack" || { fail=1; continue; }
	fmts=("fp8,fp8,fp8")
	[ $first = 1 ] && fmts+=("bf16,bf16,bf16" "fp8,fp4,fp8")
	first=0
	oargs=()
	for f in "${fmts[@]}"; do
		IFS=, read -r kv pool index <<<"$f"
		ns=$lengths
		[ "$f" = fp8,fp8,fp8 ] && [ "$s" = "${seeds%% *}" ] && ns="$ns $long"
		for n in $ns; do
			tag="seed $s $f n$n"
			base=$work/$s-$kv-$pool-$index-$n
			list=$(ids "$s" "$n")
			if ! "$TF_ORACLE_LOGITS" -j 2 --kv "$kv" --pool "$pool" --index "$index" \
				"$pack" "$list" "$base.c.npy"; then
				echo "oracle: C logits failed ($tag)"
				fail=1
				continue
			fi
			oargs+=(--ids "$list" --fmt "$f" -o "$base.npy")
			groups+=("$tag" "$base.c.npy" "$base.npy" "$base.f32.npy")
			# the first seed's prompts again in calls of 7 rows (ratio-2
			# groups straddle calls) and of 1 (decode), against the same oracle
			[ "$f" = fp8,fp8,fp8 ] && [ "$s" = "${seeds%% *}" ] && [ "$n" -le 64 ] &&
				for k in 7 1; do
					if "$TF_ORACLE_LOGITS" -j 2 --chunk $k "$pack" "$list" "$base.c$k.npy"; then
						groups+=("$tag by $k" "$base.c$k.npy" "$base.npy" -)
					else
						echo "oracle: C logits failed ($tag by $k)"
						fail=1
					fi
				done
		done
	done
	"$py" "$here/forward.py" --floor "$pack" "${oargs[@]}" || { echo "oracle: forward.py failed"; fail=1; }
done
if [ $fail = 0 ] && [ ${#groups[@]} -gt 0 ]; then
	"$py" "$here/compare.py" "${groups[@]}" || fail=1
fi
# the proof that the comparison can fail: every mutant of the oracle must
# be caught against the first seed's C logits
if [ $fail = 0 ]; then
	"$py" "$here/mutants.py" "$TF_ORACLE_LOGITS" "$work/tiny-${seeds%% *}" ||
		{ echo "oracle: a mutant went uncaught"; fail=1; }
fi
if [ $fail = 0 ]; then
	echo "oracle: C agrees with the oracle within compare.py's bounds"
else
	echo "oracle: FAILED"
fi
exit $fail
