#!/usr/bin/env bash
# man-options.sh BINDIR: every long option a program's --help lists is in
# its man page (mdoc: ".It Fl o , -output" or "Fl -name"), as git holds its
# documentation against its usage. Prints each one missing; exits 1 if any.
set -u
bin=${1:?usage: man-options.sh BINDIR}
here=$(cd "$(dirname "$0")/.." && pwd)
missing=0 checked=0
for p in "$bin"/tf-*; do
	[ -f "$p" ] && [ -x "$p" ] || continue
	name=$(basename "$p")
	man="$here/man/man1/$name.1"
	[ -f "$man" ] || { echo "$name: no man page"; missing=$((missing + 1)); continue; }
	opts=$("$p" --help 2>/dev/null | grep -oE '^ +(-[a-zA-Z0-9], )?--[a-z0-9][a-z0-9-]*' |
		grep -oE -- '--[a-z0-9-]+' | sort -u)
	[ -n "$opts" ] || { echo "$name: --help lists no options"; missing=$((missing + 1)); continue; }
	for o in $opts; do
		checked=$((checked + 1))
		grep -qE "(Fl |, )-${o#--}( |,|\$)" "$man" && continue
		echo "$name: $o is not in $(basename "$man")"
		missing=$((missing + 1))
	done
done
[ "$checked" -gt 0 ] || { echo "man-options: no programs in $bin"; exit 1; }
[ "$missing" -eq 0 ] || exit 1
