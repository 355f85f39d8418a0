#!/usr/bin/env bash
# serve_ranks.sh: tf-serve --engine cuda as two tensor-parallel ranks on
# one GPU (--local-ranks 2 --devices N,N, the host collectives staged
# through pinned memory: TF_COMM_BACKEND=host) against one rank on the same
# GPU, on a tiny synthetic pack, through --once (no HTTP client needed),
# then over HTTP when curl is here:
# - a greedy completion equals the world-1 server's;
# - seeded sampled completions (4 seeds, 8 tokens): at least 3 of 4 equal
#   the world-1 server's (a reordered sum may move a draw that sits on a
#   threshold: on the CPU, worlds 1 and 2 agree on 11 of 12 such);
# - the same seeded request twice at world 2 gives the same reply;
# - the HTTP server reports world 2, both ranks up, answers the greedy
#   request alike, and SIGTERM stops both ranks with 0.
# Exit 77 without a GPU (tf-serve exits 69), 1 on a failure. TF_BIN: the
# programs (build/bin); TF_DEVICE: the GPU (0). TF_SERVE_RANKS_ENGINE=cpu
# runs the same on the cpu engine: a check of this script without a GPU.
set -u
bin=${TF_BIN:-build/bin}
dev=${TF_DEVICE:-0}
if [ "${TF_SERVE_RANKS_ENGINE:-cuda}" = cpu ]; then
	one=(--engine cpu) two=(--engine cpu)
else
	one=(--engine cuda --device "$dev") two=(--engine cuda --devices "$dev,$dev")
fi
dir=$(mktemp -d /tmp/tf-serve-ranks.XXXXXX)
trap 'rm -rf "$dir"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
choices() { sed -e 's/.*"choices":\(.*\),"usage".*/\1/' "$1"; }

"$bin/tf-pack-synth" -p tiny --seed 3 -q -o "$dir/pack" || { echo "FAIL: tf-pack-synth"; exit 1; }
ask() { # ask FILE TEMPERATURE SEED
	printf '{"messages":[{"role":"user","content":"Say something."}],"max_tokens":%s,"temperature":%s,"seed":%s,"reasoning_effort":"none"}\n' \
		"$([ "$2" = 0 ] && echo 16 || echo 8)" "$2" "$3" >"$1"
}
w1() { "$bin/tf-serve" --once -q "${one[@]}" "$dir/pack" <"$1" >"$2" 2>"$2.err"; }
w2() { TF_COMM_BACKEND=host "$bin/tf-serve" --once -q "${two[@]}" --local-ranks 2 "$dir/pack" <"$1" >"$2" 2>"$2.err"; }

ask "$dir/greedy.json" 0 1
w1 "$dir/greedy.json" "$dir/g1"
rc=$?
if [ "$rc" = 69 ]; then
	echo "skipped: no GPU ($(tail -1 "$dir/g1.err"))"
	exit 77
fi
[ "$rc" = 0 ] || { cat "$dir/g1.err"; echo "FAIL: world 1 exited $rc"; exit 1; }
w2 "$dir/greedy.json" "$dir/g2" || { cat "$dir/g2.err"; echo "FAIL: world 2 exited $?"; exit 1; }
echo "greedy, world 1: $(choices "$dir/g1")"
echo "greedy, world 2: $(choices "$dir/g2")"
[ "$(choices "$dir/g1")" = "$(choices "$dir/g2")" ] || fail "the greedy completion of world 2 differs from world 1's"

same=0
for seed in 1 2 3 4; do
	ask "$dir/s$seed.json" 0.8 "$seed"
	w1 "$dir/s$seed.json" "$dir/s$seed.1" || fail "seed $seed: world 1 exited $?"
	w2 "$dir/s$seed.json" "$dir/s$seed.2" || fail "seed $seed: world 2 exited $?"
	if [ "$(choices "$dir/s$seed.1")" = "$(choices "$dir/s$seed.2")" ]; then
		same=$((same + 1))
	else
		echo "seed $seed differs: world 1 $(choices "$dir/s$seed.1")"
		echo "                    world 2 $(choices "$dir/s$seed.2")"
	fi
done
echo "seeded: $same of 4 world-2 completions equal world 1's"
[ "$same" -ge 3 ] || fail "only $same of 4 seeded completions equal world 1's (bound: 3)"
w2 "$dir/s1.json" "$dir/s1.again" || fail "world 2 again exited $?"
[ "$(choices "$dir/s1.2")" = "$(choices "$dir/s1.again")" ] || fail "world 2 is not repeatable"

if command -v curl >/dev/null; then
	port=$((30000 + $$ % 20000))
	TF_COMM_BACKEND=host "$bin/tf-serve" -q "${two[@]}" --local-ranks 2 -p "$port" --model tiny \
		"$dir/pack" 2>"$dir/srv.err" &
	srv=$!
	up=0
	for _ in $(seq 600); do
		curl -sf "http://127.0.0.1:$port/health" >"$dir/health" 2>/dev/null && { up=1; break; }
		kill -0 "$srv" 2>/dev/null || break
		sleep 0.1
	done
	if [ "$up" = 1 ]; then
		grep -q '"world":2' "$dir/health" || fail "/health does not say world 2: $(cat "$dir/health")"
		grep -q '"rank":1,"state":"up"' "$dir/health" || fail "/health does not say rank 1 is up: $(cat "$dir/health")"
		curl -sf "http://127.0.0.1:$port/v1/chat/completions" -H 'content-type: application/json' \
			-d @"$dir/greedy.json" >"$dir/http.json" || fail "the HTTP request failed"
		[ "$(choices "$dir/http.json" | sed 's/"model":"[^"]*"//')" = "$(choices "$dir/g2" | sed 's/"model":"[^"]*"//')" ] ||
			fail "the HTTP reply differs from --once's: $(choices "$dir/http.json")"
		kill -TERM "$srv"
		wait "$srv"
		rc=$?
		[ "$rc" = 0 ] || { cat "$dir/srv.err"; fail "the server exited $rc after SIGTERM"; }
	else
		cat "$dir/srv.err"
		fail "the HTTP server did not come up"
		kill -KILL "$srv" 2>/dev/null
	fi
else
	echo "note: no curl here: the HTTP part did not run"
fi
[ "$fails" = 0 ] && echo "serve_ranks: PASS" || echo "serve_ranks: FAIL ($fails)"
[ "$fails" = 0 ]
