#!/usr/bin/env bash
# tf-bench serve against a stub tf-serve: counts, --verify, --json keys,
# failures exit 1, usage errors, and the man page's serve example.
. "$TF_TESTS/lib.sh"
. "$TF_TESTS/../../tools/bench-lib.sh"

run tf-bench
expect_rc 64
expect_err 'missing mode'
run tf-bench nope
expect_rc 64
run tf-bench serve extra
expect_rc 64
run tf-bench serve -p 1 --requests 2
expect_rc 71
expect_err 'no connection'

tf-serve --engine stub --port 0 --stub-token-ms 1 2>serve.log &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
port=$(serve_port serve.log 30) || fail "tf-serve did not start"

run tf-bench serve -p "$port" --requests 12 --concurrency 4 --max-tokens 9 --ignore-eos --verify --json
expect_rc 0
expect_json 'j.completed === 12 && j.failed === 0 && j.mismatched === 0 && j.output_tokens === 108'
expect_json 'j.peak_concurrency === 4 && j.ttft.n === 12 && j.itl.n === 12 * 8 && j.tpot.p99_ms > 0'

run tf-bench serve -p "$port" --requests 6 --rate 200 --concurrency 0 --path /v1/completions --prompt '@short'
expect_rc 0
expect_out 'completed 6, failed 0'
expect_out '^TTFT'

# Different seeds give different replies: --verify notices.
printf 'one @sample\ntwo @sample\n' >prompts
run tf-bench serve -p "$port" --requests 4 --concurrency 1 --prompt-file prompts --temperature 1 --verify
expect_rc 1
expect_err 'replies differ from the first'

run tf-bench serve -p "$port" --requests 3 --prompt '@fail'
expect_rc 1
expect_err '3 of 3 requests failed'

run tf-bench serve -p "$port" --requests 3 --concurrency 3 --prompt '@hang' --hold 0.3
expect_rc 0
expect_out 'held 3'

# The serve example of tf-bench(1) runs as written (the kernels examples
# want a GPU).
awk '/^\.Sh EXAMPLES/ { ex = 1; next } /^\.Sh / { ex = 0 }
	ex && /^\.Bd -literal/ { inb = 1; b = ""; next }
	ex && /^\.Ed/ { inb = 0; if (b ~ /tf-bench serve/) printf "%s", b; next }
	ex && inb { b = b $0 "\n" }' "$TF_TESTS/../../man/man1/tf-bench.1" >example.sh
grep -q 'tf-bench serve' example.sh || fail "tf-bench(1) has no serve example"
bash -euo pipefail example.sh >example.out 2>&1 || { cat example.out >&2; fail "the serve example failed"; }
