#!/usr/bin/env bash
# run-man-examples.sh PAGE...: run every literal block of each man page's
# EXAMPLES section, in order, in the current folder (with /tmp/ mapped to
# ./tmp/ and mdoc's \e to a backslash); fail on the first block that fails.
set -euo pipefail
mkdir -p tmp
for page in "$@"; do
	awk '
		/^\.Sh EXAMPLES/ { ex = 1; next }
		/^\.Sh / { ex = 0 }
		ex && /^\.Bd -literal/ { inb = 1; n++; next }
		ex && /^\.Ed/ { inb = 0; print "#--"; next }
		ex && inb { print }
	' "$page" | sed -e "s|/tmp/|$PWD/tmp/|g" -e 's/\\e/\\/g' >examples.sh
	n=0
	block=""
	while IFS= read -r line; do
		if [ "$line" = "#--" ]; then
			n=$((n + 1))
			if ! bash -euo pipefail -c "$block" >example.out 2>&1; then
				echo "$page: example $n failed:" >&2
				echo "$block" >&2
				cat example.out >&2
				exit 1
			fi
			block=""
		else
			block+="$line"$'\n'
		fi
	done <examples.sh
	echo "$page: $n examples ran"
done
