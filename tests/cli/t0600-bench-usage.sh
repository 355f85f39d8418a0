#!/usr/bin/env bash
# tf-bench: help, version, usage errors, and no GPU (exit 69 with a clear
# message; the driver is pointed at a file that does not exist, so this
# holds on a GPU host too). On a GPU host the man page's examples run.
. "$TF_TESTS/lib.sh"

run tf-bench --help
expect_rc 0
expect_out "^Usage: tf-bench "
expect_out "kernels"
run tf-bench --version
expect_rc 0
expect_out "^tf-bench [0-9]+\.[0-9]+\.[0-9]+ \("
run tf-bench
expect_rc 64
expect_err "missing mode"
expect_err "Try 'tf-bench --help'"
run tf-bench decode-all
expect_rc 64
expect_err "unknown mode 'decode-all'"
run tf-bench kernels --bits 9
expect_rc 64
expect_err "bad bits"
run tf-bench kernels --shapes 100x128
expect_rc 64
expect_err "bad shape '100x128'"
run tf-bench kernels --codebook foo
expect_rc 64
expect_err "bad codebook 'foo'"
run tf-bench kernels extra
expect_rc 64
expect_no_out

# An option of another mode is refused, naming it (each option's help
# names its modes).
run tf-bench kernels --draft --prepared X --requests 5
expect_rc 64
expect_err "^tf-bench: --prepared does not apply to 'kernels'"
expect_no_out
run tf-bench decode --backend cpu --preset tiny --shapes 128x128
expect_rc 64
expect_err "^tf-bench: --shapes does not apply to 'decode'"
run tf-bench serve --rows 4 -p 1
expect_rc 64
expect_err "^tf-bench: --rows does not apply to 'serve'"
run tf-bench serve --threads 2 -p 1
expect_rc 64
expect_err "^tf-bench: --threads does not apply to 'serve'"

TF_CUDA_LIBRARY=/nonexistent/libcuda.so.1 run tf-bench kernels
expect_rc 69
expect_one_line_err
expect_err "^tf-bench: cannot open CUDA device 0: cannot load the CUDA driver '/nonexistent/libcuda.so.1'"
expect_no_out

# The man page's examples, where a GPU is.
if tf-bench kernels -s 128x128 -b 2 -r 1 -n 3 --no-cublas >/dev/null 2>&1; then
	bash "$TF_TESTS/run-man-examples.sh" "$TF_TESTS/../../man/man1/tf-bench.1"
else
	echo "no GPU here: the man page's examples are not run"
fi
