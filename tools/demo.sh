#!/usr/bin/env bash
# demo.sh BINDIR: the `make demo` pipeline. Writes the small synthetic pack
# (random weights: anything a model says from it is noise) and inspects it.
# Then serves it with tf-serve (the stub engine while the CPU forward is not
# built) and prints a curl line.
set -euo pipefail
bin=${1:?usage: demo.sh BINDIR}
pack=${TF_DEMO_PACK:-build/demo/small}
echo "demo: writing the small synthetic pack to $pack"
"$bin/tf-pack-synth" -p small --seed 1 -o "$pack"
echo "demo: inspecting it"
"$bin/tf-pack-inspect" --summary "$pack"
if [ -x "$bin/tf-serve" ]; then
	engine=cpu
	if ! "$bin/tf-serve" --check "$pack" >/dev/null 2>&1; then
		# The CPU forward is not built yet: the stub engine answers with canned
		# text through the pack's tokenizer, chat encoding and DSML reader.
		engine=stub
		echo "demo: the cpu engine is not built yet; serving the stub engine instead"
	fi
	echo "demo: serving $pack on http://127.0.0.1:8080 (Ctrl-C stops); try:"
	echo "  curl -sN http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \\"
	echo "    -d '{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":true}'"
	exec "$bin/tf-serve" --engine "$engine" "$pack" --host 127.0.0.1 --port 8080
fi
echo "demo: tf-serve is not built yet; the pack pipeline is all there is to show."
