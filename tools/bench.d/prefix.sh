#!/usr/bin/env bash
# prefix.sh: the cpu engine's prompt (prefix) cache on the `small` pack:
# time to first token of one long prompt (completions, max_tokens 1) asked
# again on a server with the cache, against the same prompt on a server
# without it (the anchor, measured in the same run). TTFT is the engine's
# submit-to-first-token (the reply's tf.ttft_s). TF_BIN is the folder of the
# programs; TF_BENCH_PREFIX_WORDS sets the prompt length (words).
set -euo pipefail
. "$(dirname "$0")/../bench-lib.sh"
bin=${TF_BIN:?}
words=${TF_BENCH_PREFIX_WORDS:-300}
work=$(mktemp -d /tmp/tf-bench-prefix.XXXXXX)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
"$bin/tf-pack-synth" -p small -q -o "$work/small"
prompt=$(for i in $(seq "$words"); do printf 'w%d is %d; ' $((i % 97)) $((i % 13)); done)
printf '{"prompt":"%s","max_tokens":1,"temperature":0}' "$prompt" >"$work/body.json"

serve() { # serve CACHE: start a server, set port
	: >"$work/log"
	"$bin/tf-serve" --engine cpu -j 2 --port 0 --lanes 4 --prefix-cache "$1" "$work/small" \
		2>"$work/log" &
	pid=$!
	port=$(serve_port "$work/log" 60) || exit 1
}
stop() { kill "$pid"; wait "$pid" || true; pid=; }
ask() { # ask LABEL: one request, prints its prompt, cached tokens and TTFT
	curl -sf -H 'Content-Type: application/json' --data-binary @"$work/body.json" \
		"http://127.0.0.1:$port/v1/completions" |
		sed -n 's/.*"tf":{"prompt":\([0-9]*\),"cached":\([0-9]*\),.*"ttft_s":\([0-9.e-]*\),.*/\1 \2 \3/p' |
		awk -v l="$1" '{ printf "%-22s prompt %d tokens, cached %d, TTFT %.0f ms\n", l, $1, $2, $3 * 1000 }'
}
echo "-- anchor: no prompt cache (--prefix-cache 0)"
serve 0
for k in 1 2 3; do ask "no cache, ask $k"; done
stop
echo "-- prompt cache (--prefix-cache 16)"
serve 16
ask "cache, first ask"
for k in 2 3 4; do ask "cache, ask $k"; done
curl -s "http://127.0.0.1:$port/metrics" | grep -E '^tf_prefix_cache_(hits|lookups|hit_tokens)_total'
stop
