#!/usr/bin/env bash
# bench.d/fabric.sh: the tensor-parallel fabric's all-reduce table on the
# host backend (two local ranks over TCP); on a GPU host (TF_BENCH_GPU=1)
# also the mailbox beside tf's NCCL path and NCCL's own ncclAllReduce
# (the nccl-direct column), and the mailbox with its inboxes in the host
# region. Copy the figures into BENCHMARKS.md.
set -euo pipefail
: "${TF_BIN:?set TF_BIN to the folder of the built programs}"
export PATH="$TF_BIN:$PATH"
port=$((20000 + RANDOM % 20000))
echo "== tf-tp-test bench, host backend, 2 local ranks"
TF_COMM_BACKEND=host tf-tp-test --local 2 --port $port -m 4M -n 20 bench
if [ "${TF_BENCH_GPU:-0}" = 1 ]; then
	echo "== tf-tp-test bench, mailbox, NCCL and nccl-direct, 2 local GPUs"
	NCCL_NVLS_ENABLE=0 TF_COMM_BACKEND=mailbox tf-tp-test --local 2 --port $((port + 10)) -m 512M -n 2000 bench
	echo "== tf-tp-test bench, mailbox with inboxes in the host region, 2 local GPUs"
	NCCL_NVLS_ENABLE=0 TF_COMM_BACKEND=mailbox TF_TP_MAILBOX_P2P=off tf-tp-test --local 2 --port $((port + 20)) \
		-m 256K -n 2000 bench
fi
