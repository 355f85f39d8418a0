# shellcheck shell=bash
# tools/bench-lib.sh: what the scripts of tools/bench.d share (sourced).

# serve_port LOG SECONDS: print the port tf-serve writes to LOG once it
# listens; after SECONDS without one, print LOG to stderr and fail.
serve_port() {
	local port=
	for _ in $(seq $(($2 * 10))); do
		port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$1")
		[ -n "$port" ] && { echo "$port"; return 0; }
		sleep 0.1
	done
	cat "$1" >&2
	return 1
}
