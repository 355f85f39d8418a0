#!/usr/bin/env bash
# The EXAMPLES of tf-serve(1) run as written.
. "$TF_TESTS/lib.sh"
man="$TF_TESTS/../../man"
"$TF_TESTS/run-man-examples.sh" "$man/man1/tf-serve.1"
