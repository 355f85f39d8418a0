#!/usr/bin/env bash
# serve.sh: tf-serve under load with the stub engine on loopback (15 ms a
# decode round, prompt pieces free, so what is measured is the server):
# the anchor is one stream at a time in the same run; then 512 concurrent
# streams, three times: the latency the delivery path adds to each event
# (ADDED: from the engine's forward returning the token to the client
# reading the event, see tf-bench(1)), ITL, the engine's round interval,
# the server's CPU per event, lost or duplicated tokens (--verify: every
# reply equals the first), and the server's memory per idle stream (512
# silent @hang streams held open). The load average before each run is
# printed: the machine may be shared. TF_BIN is the folder of the
# programs; TF_BENCH_STREAMS changes 512, TF_BENCH_RUNS the 3.
set -euo pipefail
. "$(dirname "$0")/../bench-lib.sh"
bin=${TF_BIN:?}
n=${TF_BENCH_STREAMS:-512}
runs=${TF_BENCH_RUNS:-3}
log=$(mktemp /tmp/tf-serve-bench.XXXXXX)
"$bin/tf-serve" --engine stub --port 0 --lanes $((2 * n)) --connections $((4 * n)) \
	--stub-token-ms 15 --stub-piece-us 0 --keepalive 0 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
port=$(serve_port "$log" 5) || exit 1
rss() { awk '/^VmRSS/ {print $2}' "/proc/$pid/status"; }
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
rounds() { curl -s "http://127.0.0.1:$port/metrics" | awk '/^tf_engine_rounds_total/ {print $2}'; }

echo "-- anchor: one stream at a time (64 tokens each)"
"$bin/tf-bench" serve -p "$port" --requests 8 --concurrency 1 --max-tokens 64 --ignore-eos --verify --prompt '@long'
for run in $(seq "$runs"); do
	echo "-- $n concurrent streams (64 tokens each, $((2 * n)) requests), run $run, load average $(cut -d' ' -f1-3 /proc/loadavg)"
	c0=$(cpu) r0=$(rounds) t0=$(date +%s.%N)
	"$bin/tf-bench" serve -p "$port" --requests $((2 * n)) --concurrency "$n" --max-tokens 64 --ignore-eos \
		--verify --prompt '@long'
	c1=$(cpu) r1=$(rounds) t1=$(date +%s.%N)
	awk -v r=$((r1 - r0)) -v c=$((c1 - c0)) -v t0="$t0" -v t1="$t1" -v ev=$((2 * n * 64)) -v hz="$(getconf CLK_TCK)" \
		'BEGIN { printf "engine: %d rounds, %.2f ms a round; server CPU %.1f us per event\n", r, (t1 - t0) * 1000 / r, c / hz * 1e6 / ev }'
done
echo "-- memory per idle stream: $n silent streams held open for 3 s"
before=$(rss)
"$bin/tf-bench" serve -p "$port" --requests "$n" --concurrency "$n" --prompt '@hang' --hold 3 >/dev/null &
load=$!
sleep 2
during=$(rss)
wait $load
echo "server RSS: idle ${before} KiB, with $n idle streams ${during} KiB: $(((during - before) / n)) KiB per stream"
