#!/usr/bin/env bash
# demo.sh BINDIR: the `make demo` pipeline. Writes the small synthetic pack
# (random weights: anything a model says from it is noise) and inspects it.
# Serving it comes with tf-serve; until then the demo stops after the pack.
set -euo pipefail
bin=${1:?usage: demo.sh BINDIR}
pack=${TF_DEMO_PACK:-build/demo/small}
echo "demo: writing the small synthetic pack to $pack"
"$bin/tf-pack-synth" -p small --seed 1 -o "$pack"
echo "demo: inspecting it"
"$bin/tf-pack-inspect" --summary "$pack"
if [ -x "$bin/tf-serve" ]; then
	echo "demo: serving $pack on http://127.0.0.1:8080 (Ctrl-C stops)"
	exec "$bin/tf-serve" "$pack" --host 127.0.0.1 --port 8080
fi
echo "demo: tf-serve is not built yet; the pack pipeline is all there is to show."
