#!/usr/bin/env bash
# t0001-tree-op-boundary: outside the backends (compute/cpu*.c, cuda*.c and
# ops.c), compute/ never touches a tensor's memory: a tensor's .data may be
# tested for presence, handed whole to the comm (tp.c's tf_comm_* calls:
# the backend's buffer), taken as a number (a fingerprint's word) or
# wrapped in a header (tf_tensor_make), and nothing else. The
# forward, the KV cache and DSpark then run unchanged on a device backend.
# model_load.c is left out: it builds the CPU backend's weights in host
# memory (a device model uploads through its backend instead).
set -eu
# presence tests, whole buffers to the comm, headers
allowed='tf_comm_all_(reduce|gather)\(|\(uintptr_t\)[A-Za-z_>.-]*data\b|!\s*[A-Za-z_>.-]*data\b|(if \(|&& )[A-Za-z_>.-]*data\)|\([A-Za-z_>.-]*data &&|&& [A-Za-z_>.-]*data;|tf_tensor_make\('
root=$(cd "$TF_TESTS/../.." && pwd)
cd "$root/libcore/compute"
files=
for f in ./*.c; do
	case $f in ./cpu*.c | ./cuda*.c | ./ops.c | ./model_load.c) ;; *) files="$files $f" ;; esac
done
[ -n "$files" ] || { echo "no files to check" >&2; exit 1; }
echo "$files" | grep -q forward.c || { echo "forward.c is not checked" >&2; exit 1; }
# shellcheck disable=SC2086
bad=$(grep -nE '(->|\.)data\b' $files |
	grep -vE "$allowed" || true)
if [ -n "$bad" ]; then
	echo "tensor memory touched outside a backend:" >&2
	echo "$bad" >&2
	exit 1
fi
# the check can fail: a dereference like the ones it guards against is caught
probe='	memcpy(out, (float *)t->data + 4, 16);'
if ! echo "x.c:1:$probe" | grep -E '(->|\.)data\b' |
	grep -vqE "$allowed"; then
	echo "the pattern lets a dereference through" >&2
	exit 1
fi
echo "NOTE: $(echo "$files" | wc -w) files of compute/ touch no tensor memory"
