#!/usr/bin/env bash
# tf-serve --local-ranks 2 on the cpu engine and a tiny pack, a follower
# stopped (SIGSTOP) in the middle of a stream: it sends no more heartbeats,
# so rank 0 goes fail-fast and exits 70 within TF_TP_HEARTBEAT_LIMIT_S +
# TF_TP_HEARTBEAT_S + TF_TP_FAILFAST_GRACE_S (+ 0.5 s) of the stop; the
# stream ends with an error frame and [DONE], not a hang; the stopped
# follower does not outlive rank 0 (it is killed with it). Then the same
# with rank 0 stopped: the follower it started exits 70 in time by itself.
. "$TF_TESTS/lib.sh"

run tf-pack-synth -p tiny --seed 3 -q -o pack
expect_rc 0
export TF_TP_FAILFAST_GRACE_S=1 TF_TP_HEARTBEAT_S=0.1 TF_TP_HEARTBEAT_LIMIT_S=0.4
bound=2.0 # limit + period + grace + 0.5
port=$((20000 + $$ % 20000))
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }
within() { awk -v t="$1" -v b="$bound" 'BEGIN { exit !(t <= b) }'; }
# alive PID: the process exists and is not a zombie (read once: bash may
# reap a child of ours at any moment)
alive() {
	local s
	s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	[[ $s != *") Z "* ]]
}

# serve PORT: tf-serve --local-ranks 2 in the background ($srv), up and
# answering /health.
serve() {
	tf-serve -q -j 1 --local-ranks 2 -p "$1" --model tiny pack 2>srv.err &
	srv=$!
	for _ in $(seq 200); do
		curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
		kill -0 "$srv" 2>/dev/null || { cat srv.err >&2; fail "tf-serve exited at start"; }
		sleep 0.1
	done
	fail "tf-serve did not come up on port $1"
}

# stream PORT: a long streamed reply into stream.out ($cl), once it has
# sent a few frames.
stream() {
	curl -sN "http://127.0.0.1:$1/v1/chat/completions" -H 'content-type: application/json' \
		-d '{"model":"tiny","messages":[{"role":"user","content":"Say something."}],"max_tokens":3000,"ignore_eos":true,"stream":true,"reasoning_effort":"none"}' \
		>stream.out 2>/dev/null &
	cl=$!
	for _ in $(seq 300); do
		[ "$(grep -c '^data: {' stream.out 2>/dev/null)" -ge 4 ] && return 0
		sleep 0.05
	done
	fail "the stream did not start"
}

# a follower stopped mid-stream
serve "$port"
stream "$port"
fol=$(pgrep -P "$srv")
[ -n "$fol" ] || fail "no follower"
t0=$(now)
kill -STOP "$fol"
for _ in $(seq 200); do alive "$srv" || break; sleep 0.02; done
took=$(since "$t0")
if alive "$srv"; then
	kill -KILL "$srv" "$fol" "$cl" 2>/dev/null
	fail "rank 0 is still up $took s after its follower stopped"
fi
set +e; wait "$srv"; rc=$?; set -e
[ "$rc" -eq 70 ] || { cat srv.err >&2; fail "rank 0 exited $rc, expected 70"; }
echo "NOTE: a follower stopped: rank 0 exited 70 after $took s (bound $bound s)"
within "$took" || fail "rank 0 exited $took s after the stop (bound $bound s)"
grep -q 'rank 1 sent nothing on the fate channel' srv.err || { cat srv.err >&2; fail "rank 0 does not name the silent rank"; }
wait "$cl" || true
grep -q '"error"' stream.out || { tail -3 stream.out >&2; fail "the stream has no error frame"; }
[ "$(tail -n 2 stream.out | head -1)" = 'data: [DONE]' ] || { tail -3 stream.out >&2; fail "the stream does not end with [DONE]"; }
for _ in $(seq 50); do alive "$fol" || break; sleep 0.1; done
if alive "$fol"; then
	kill -KILL "$fol"
	fail "the stopped follower outlived rank 0"
fi

# rank 0 stopped mid-stream: the follower ends by itself
port=$((port + 13))
serve "$port"
stream "$port"
fol=$(pgrep -P "$srv")
t0=$(now)
kill -STOP "$srv"
for _ in $(seq 100); do alive "$fol" || break; sleep 0.05; done
took=$(since "$t0")
up=0
alive "$fol" && up=1
kill -KILL "$srv" "$cl" 2>/dev/null || true
wait "$srv" 2>/dev/null || true
[ "$up" = 0 ] || { kill -KILL "$fol" 2>/dev/null; fail "the follower of a stopped rank 0 is still up"; }
echo "NOTE: rank 0 stopped: the follower exited after $took s (bound $bound s)"
within "$took" || fail "the follower exited $took s after the stop (bound $bound s)"
grep -q 'rank 1: rank 0 sent nothing on the fate channel' srv.err || { cat srv.err >&2; fail "the follower does not name rank 0"; }
