#!/usr/bin/env bash
# tf-bench grammar: the schema set of the server tests times on a synthetic
# vocabulary of the release's size (table and --json); a missing
# --schemas is a usage error, a schema it cannot enforce exits 69 naming
# the keyword.
. "$TF_TESTS/lib.sh"

schemas="$TF_TESTS/../data/grammar/schemas.json"
run tf-bench grammar --schemas "$schemas" --vocab 129280 --steps 16 --walks 1
expect_rc 0
expect_out "^vocabulary: 129280 ids"
expect_out "^person "
expect_out "^all: [0-9]+ steps"
run tf-bench grammar --schemas "$schemas" --vocab 4096 --steps 8 --walks 1 --json
expect_rc 0
expect_out '"vocab":4096'
expect_out '"fresh_mask_us":'
run tf-bench grammar
expect_rc 64
expect_err "needs --schemas"
printf '[{"name":"bad","schema":{"not":{}}}]' >bad.json
run tf-bench grammar --schemas bad.json --vocab 1024
expect_rc 69
expect_err "'not' is not supported"
