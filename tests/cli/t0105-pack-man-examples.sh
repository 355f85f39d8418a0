#!/usr/bin/env bash
# The EXAMPLES of the pack programs' man pages run as written.
. "$TF_TESTS/lib.sh"
man="$TF_TESTS/../../man"
"$TF_TESTS/run-man-examples.sh" "$man/man1/tf-pack-synth.1" "$man/man1/tf-pack-inspect.1"
