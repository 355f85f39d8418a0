#!/usr/bin/env bash
# serve.sh: tf-serve under load with the stub engine on loopback (15 ms a
# decode round): 512 concurrent streams, the time added per streamed event
# over the engine's own interval (the anchor: the same run at concurrency
# 1), lost or duplicated tokens (--verify: every reply equals the first),
# and the server's memory per idle stream (512 silent @hang streams held
# open). TF_BIN is the folder of the programs; TF_BENCH_STREAMS changes 512.
set -euo pipefail
bin=${TF_BIN:?}
n=${TF_BENCH_STREAMS:-512}
log=$(mktemp /tmp/tf-serve-bench.XXXXXX)
"$bin/tf-serve" --engine stub --port 0 --lanes $((2 * n)) --connections $((4 * n)) \
	--stub-token-ms 15 --keepalive 0 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
port=
for _ in $(seq 100); do
	port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log")
	[ -n "$port" ] && break
	sleep 0.05
done
[ -n "$port" ] || { cat "$log" >&2; exit 1; }
rss() { awk '/^VmRSS/ {print $2}' "/proc/$pid/status"; }

echo "-- anchor: one stream at a time (64 tokens each)"
"$bin/tf-bench" serve -p "$port" -n 8 -c 1 --max-tokens 64 --ignore-eos --verify --prompt '@long'
echo "-- $n concurrent streams (64 tokens each, $((2 * n)) requests)"
"$bin/tf-bench" serve -p "$port" -n $((2 * n)) -c "$n" --max-tokens 64 --ignore-eos --verify \
	--prompt '@long'
echo "-- memory per idle stream: $n silent streams held open for 3 s"
before=$(rss)
"$bin/tf-bench" serve -p "$port" -n "$n" -c "$n" --prompt '@hang' --hold 3 >/dev/null &
load=$!
sleep 2
during=$(rss)
wait $load
echo "server RSS: idle ${before} KiB, with $n idle streams ${during} KiB: $(((during - before) / n)) KiB per stream"
