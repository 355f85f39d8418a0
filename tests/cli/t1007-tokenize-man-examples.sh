#!/usr/bin/env bash
# The EXAMPLES of tf-tokenize(1) run as written.
. "$TF_TESTS/lib.sh"
"$TF_TESTS/run-man-examples.sh" "$TF_TESTS/../../man/man1/tf-tokenize.1"
