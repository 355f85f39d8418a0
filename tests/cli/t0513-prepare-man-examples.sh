#!/usr/bin/env bash
# The EXAMPLES of tf-prepare(1) and tf-bench(1) run as written.
. "$TF_TESTS/lib.sh"
man=$TF_TESTS/../../man
"$TF_TESTS/run-man-examples.sh" "$man/man1/tf-prepare.1" "$man/man1/tf-bench.1"
