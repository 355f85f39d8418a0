#!/usr/bin/env bash
# serve-slow.sh: tf-serve's normal requests under a slow-loris load, stub
# engine, loopback, default --connections (2048) and --timeout (120): the
# anchor is the same requests with no slow client, in the same run; then
# 2,100 slow clients that send their request a byte a second and connect
# again when dropped (tools/bench.d/slow-clients.mjs). Prints p50, p99 and
# max latency of the normal requests, how many failed, and what the slow
# clients were told. Also the server's peak and final RSS around one 30 MB
# /v1/tokenize. TF_BIN is the folder of the programs; TF_BENCH_SLOW changes
# 2100, TF_BENCH_SECONDS the 30 s of normal requests.
set -euo pipefail
. "$(dirname "$0")/../bench-lib.sh"
bin=${TF_BIN:?}
here=$(cd "$(dirname "$0")" && pwd)
slow=${TF_BENCH_SLOW:-2100}
secs=${TF_BENCH_SECONDS:-30}
log=$(mktemp /tmp/tf-serve-slow.XXXXXX)
"$bin/tf-serve" --engine stub --port 0 --stub-token-ms 1 --stub-piece-us 0 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
port=$(serve_port "$log" 5) || exit 1
echo "-- anchor: normal requests alone, load average $(cut -d' ' -f1-3 /proc/loadavg)"
node "$here/slow-clients.mjs" "$port" 0 "$secs"
echo "-- with $slow slow clients, load average $(cut -d' ' -f1-3 /proc/loadavg)"
node "$here/slow-clients.mjs" "$port" "$slow" "$secs"
curl -s "http://127.0.0.1:$port/metrics" | grep -E '^tf_(connections|request_timeouts)' || true
kill $pid; wait $pid 2>/dev/null || true
echo "-- one 30 MB /v1/tokenize (30,000,000 byte tokens), a fresh server"
"$bin/tf-serve" --engine stub --port 0 2>"$log" &
pid=$!
port=$(serve_port "$log" 5) || exit 1
rss() { awk "/^$1/ {print \$2}" "/proc/$pid/status"; }
before=$(rss VmRSS)
node -e 'process.stdout.write(JSON.stringify({prompt: "x".repeat(30e6)}))' |
	curl -s -o /dev/null -w 'status %{http_code}, %{size_download} bytes in %{time_total} s\n' \
		-H 'Content-Type: application/json' --data-binary @- "http://127.0.0.1:$port/v1/tokenize"
sleep 0.5
echo "server RSS: before ${before} KiB, peak $(rss VmHWM) KiB, after $(rss VmRSS) KiB"
