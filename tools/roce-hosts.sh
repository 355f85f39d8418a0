#!/usr/bin/env bash
# roce-hosts.sh MASTER PEER_SSH OUT [BIN]: the two-host RoCE check, run on
# rank 0's host (MASTER is its address as the peer reaches it; PEER_SSH is
# how ssh reaches rank 1's host; BIN the folder holding tf-tp-test on both
# hosts, default build/bin). Steps:
#   pre   on both hosts: memlock unlimited, libibverbs present, no GPU
#         process, at least one RDMA device
#   T0    tf-tp-test suite on TF_COMM_BACKEND=roce (TF_TP_ROCE_FALLBACK=error;
#         host-memory collectives: the device path does not exist yet)
#   T1    failfast with rank 0 the victim (fatal), T3 with rank 1 (fatal)
# After each step it reads both hosts' kernel log since the step began and
# every HCA counter whose name has "err" in it; a log line naming the HCA
# driver, the IOMMU or a page fault, a counter that grew, an unexpected
# exit code or a FAIL line prints "STOP: <why>" and exits 1. Logs go to OUT.
#
# Not run yet: no host pair with RoCE NICs was available when it was
# written. It is the procedure, not a result.
set -u
master=${1:?usage: roce-hosts.sh MASTER PEER_SSH OUT [BIN]}
peer=${2:?usage: roce-hosts.sh MASTER PEER_SSH OUT [BIN]}
out=${3:?usage: roce-hosts.sh MASTER PEER_SSH OUT [BIN]}
bin=${4:-build/bin}
port=${TF_TP_PORT:-29500}
mkdir -p "$out" || exit 1

stop() { echo "STOP: $*" | tee -a "$out/summary.txt"; exit 1; }
on_peer() { ssh -o BatchMode=yes "$peer" "$@"; }

counters() { # print "file value" for every HCA error counter
	for f in /sys/class/infiniband/*/ports/*/counters/*err* /sys/class/infiniband/*/ports/*/hw_counters/*err*; do
		[ -r "$f" ] && printf '%s %s\n' "$f" "$(cat "$f")"
	done
}
counters_fn=$(declare -f counters)

kernel_log() { # kernel log lines since $1 (seconds since the epoch)
	journalctl -k --since "@$1" --no-pager -q 2>/dev/null || dmesg 2>/dev/null
}
kernel_fn=$(declare -f kernel_log)
bad_log='mlx5|mlx4|bnxt|irdma|infiniband|rdma|iommu|dmar|amd-vi|page fault|AER'

precheck() { # $1: where ("local" or "peer")
	local run=(bash -c)
	[ "$1" = peer ] && run=(on_peer bash -c)
	"${run[@]}" '[ "$(ulimit -l)" = unlimited ]' || stop "$1: ulimit -l is not unlimited"
	"${run[@]}" 'ldconfig -p | grep -q libibverbs.so.1' || stop "$1: libibverbs.so.1 is missing"
	"${run[@]}" 'ls /sys/class/infiniband/ >/dev/null 2>&1 && [ -n "$(ls /sys/class/infiniband/)" ]' ||
		stop "$1: no RDMA device"
	"${run[@]}" '! command -v nvidia-smi >/dev/null || [ -z "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader)" ]' ||
		stop "$1: a GPU process is running"
}

# step NAME WANT0 WANT1 ARGS...: run both ranks, then the checks.
step() {
	local name=$1 want0=$2 want1=$3
	shift 3
	local t0 env
	t0=$(date +%s)
	counters >"$out/$name.cnt0.local"
	on_peer "$counters_fn; counters" >"$out/$name.cnt0.peer"
	env="TF_COMM_BACKEND=roce TF_TP_ROCE_FALLBACK=error TF_TP_WORLD=2 TF_TP_MASTER=$master TF_TP_PORT=$port"
	env="$env TF_TP_ROCE_HCA=${TF_TP_ROCE_HCA:-} TF_TP_FAILFAST_GRACE_S=1"
	# shellcheck disable=SC2086
	on_peer "cd '$PWD' && ulimit -l unlimited && env $env TF_TP_RANK=1 timeout 900 '$bin/tf-tp-test' $*" \
		>"$out/$name.rank1.out" 2>"$out/$name.rank1.err" &
	local pid=$!
	# shellcheck disable=SC2086
	env $env TF_TP_RANK=0 timeout 900 "$bin/tf-tp-test" "$@" >"$out/$name.rank0.out" 2>"$out/$name.rank0.err"
	local rc0=$? rc1
	wait "$pid"
	rc1=$?
	echo "$name: rank 0 rc $rc0, rank 1 rc $rc1" | tee -a "$out/summary.txt"
	kernel_log "$t0" >"$out/$name.kern.local"
	on_peer "$kernel_fn; kernel_log $t0" >"$out/$name.kern.peer"
	counters >"$out/$name.cnt1.local"
	on_peer "$counters_fn; counters" >"$out/$name.cnt1.peer"
	for side in local peer; do
		grep -Eiq "$bad_log" "$out/$name.kern.$side" && stop "$name: the $side kernel log names the HCA or IOMMU (see $out/$name.kern.$side)"
		diff -q "$out/$name.cnt0.$side" "$out/$name.cnt1.$side" >/dev/null ||
			stop "$name: an HCA error counter grew on $side: $(diff "$out/$name.cnt0.$side" "$out/$name.cnt1.$side" | grep '^>' | head -3)"
	done
	[ "$rc0" = "$want0" ] || stop "$name: rank 0 exited $rc0, want $want0"
	[ "$rc1" = "$want1" ] || stop "$name: rank 1 exited $rc1, want $want1"
	grep -q '^FAIL' "$out/$name.rank0.out" "$out/$name.rank1.out" && stop "$name: a FAIL line"
	return 0
}

precheck local
precheck peer
step T0-suite 0 0 suite
grep -q '^SUMMARY rank 0: [0-9]* passed, 0 failed' "$out/T0-suite.rank0.out" || stop "T0: no clean SUMMARY"
step T1-victim0 70 70 failfast 0 fatal
grep -q '^INJECT fatal rank 0' "$out/T1-victim0.rank0.out" || stop "T1: rank 0 did not inject"
step T3-victim1 70 70 failfast 1 fatal
grep -q '^INJECT fatal rank 1' "$out/T3-victim1.rank1.out" || stop "T3: rank 1 did not inject"
echo "PASS roce-hosts: suite and both victims clean; logs in $out" | tee -a "$out/summary.txt"
