#!/usr/bin/env bash
# The EXAMPLES of tf-prepare(1) run as written (tf-bench(1)'s need a GPU for
# most of theirs: t0600 runs them where one is; t0500 runs the CPU ones).
. "$TF_TESTS/lib.sh"
man=$TF_TESTS/../../man
"$TF_TESTS/run-man-examples.sh" "$man/man1/tf-prepare.1"
