# gpu-steps.sh: what the GPU run scripts share, sourced after they set out
# (the log folder), S (its summary file) and bin (the programs).
# step NAME LIMIT CMD...: CMD under LIMIT seconds into $out/NAME.log, and a
#   line "NAME rc=RC N s" in $S; skipped when step_on NAME fails (a script
#   may define step_on to pick steps; by default every step runs).
# serve_wait PORT SECONDS: wait for a server's /health; a line in $S.
# serve_load PORT MODEL: tf-bench serve at each concurrency of SERVE_C
#   (1 16 64; twice as many requests, 4 at 1), prompts of 400 random words,
#   64 tokens each, as steps serve-cC.
# shellcheck shell=bash disable=SC2154 # out, S and bin are the sourcing script's
declare -F step_on >/dev/null || step_on() { return 0; }
step() {
	local name=$1 limit=$2 s rc
	shift 2
	step_on "$name" || return 0
	s=$(date +%s)
	timeout "$limit" "$@" >"$out/$name.log" 2>&1
	rc=$?
	echo "$name rc=$rc $(($(date +%s) - s)) s" >>"$S"
}
serve_wait() {
	local i
	for i in $(seq 1 "$2"); do
		curl -s "localhost:$1/health" >/dev/null 2>&1 && break
		sleep 1
	done
	echo "serve up after $i s" >>"$S"
}
serve_load() {
	local c n
	for c in ${SERVE_C:-1 16 64}; do
		n=$((c * 2))
		[ "$c" = 1 ] && n=4
		step "serve-c$c" 300 "$bin/tf-bench" serve --port "$1" --model "$2" --random-words 400 \
			--max-tokens 64 --ignore-eos --concurrency "$c" --requests "$n" --json
	done
}
