#!/usr/bin/env bash
# tf-serve: an option given on the command line that does not apply to the
# mode or the engine is refused (exit 64, naming it, nothing on stdout):
# --path without --once; -j, --prefix-cache, --device, --synthetic with the
# stub engine; --device with the cpu engine; --drafts N (or TF_DRAFTS) with
# the cuda engine off its --batch-invariant path (a drafted reply could
# differ from the plain one there). The same settings through their
# variables are not refused, and options that do apply pass.
. "$TF_TESTS/lib.sh"

refused() { # option-name, then the command line
	local name=$1
	shift
	run tf-serve "$@"
	expect_rc 64
	expect_err "^tf-serve: --$name "
	expect_err "Try 'tf-serve --help'"
	expect_no_out
}

refused path --engine stub --check --path /v1/completions
refused threads --engine stub --check -j 2
refused threads --engine stub --check --threads 2
refused prefix-cache --engine stub --check --prefix-cache 4
refused device --engine stub --check --device 1
refused synthetic --engine stub --check --synthetic
# the engine from its variable counts as chosen
TF_ENGINE=stub refused threads --check -j 1
tf-pack-synth -p tiny -q -o tiny
refused device --engine cpu --check --device 0 tiny
refused device --check --device 0 tiny
refused path --engine cpu --check --path /v1/completions tiny
refused drafts --engine cuda --check --drafts 3 tiny
expect_err 'needs --batch-invariant'
TF_DRAFTS=5 refused drafts --engine cuda --check tiny
# off is no draft, and the cuda engine's default off the invariant path:
# not refused (on this machine the engine then may lack its GPU: 69)
for a in "--drafts off" ""; do
	# shellcheck disable=SC2086 # $a is words
	run tf-serve --engine cuda --check $a tiny
	expect_rc_in 0 69
done

# what applies passes
echo '{"prompt":"hi","max_tokens":2}' >req.json
run tf-serve --engine stub --stub-token-ms 0 --once --path /v1/completions <req.json
expect_rc 0
expect_json 'j.object === "text_completion"'
run tf-serve --engine cpu --check -j 1 --prefix-cache 2 tiny
expect_rc 0
expect_out '^ok: engine cpu'
# variables are not refused
TF_THREADS=2 TF_PREFIX_CACHE=4 TF_DEVICE=1 run tf-serve --engine stub --check
expect_rc 0
expect_out '^ok: engine stub'
echo ok
